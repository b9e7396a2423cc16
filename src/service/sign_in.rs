//! People sign in through the team's OpenID Connect provider (`[sign_in]` in clusters.toml): the
//! authorization-code flow with PKCE, the service being the provider's client. The dashboard starts
//! it at `/auth/login`; a terminal (`tao-slurm login --service URL`) asks for a device code at
//! `POST /auth/device`, has the person open the link it prints, and collects the token at
//! `POST /auth/device/token`. At the callback the ID token is verified (signature, issuer, audience,
//! expiry, nonce) and the provider's userinfo read: its username claim names the person, its groups
//! claim gives their org (and admin role) by the operator's map. The person then gets a service token
//! of their own that lasts `token_lifetime`: leaving the org's group takes effect at the next sign-in,
//! within that time. The routes are in `sign_in_routes`.

use super::operator::SignInRules;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreProviderMetadata};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable that holds the service's client secret at the provider (never a file
/// the operator's other tools read, never the command line); unset: a public client (PKCE alone).
pub const CLIENT_SECRET_VAR: &str = "TAO_SLURM_OIDC_CLIENT_SECRET";
/// How long a sign-in may take from its start to the provider's answer, and a device code may wait.
pub(super) const PENDING_FOR: Duration = Duration::from_secs(600);
/// Sign-ins under way at most (the routes are public: a flood cannot grow memory without bound).
pub(super) const MAX_PENDING: usize = 1000;

/// Every claim the provider sends, by name: the operator says which name the person and the groups.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AnyClaims {
    #[serde(flatten)]
    all: serde_json::Map<String, Value>,
}
impl AdditionalClaims for AnyClaims {}

/// The provider's client as discovery makes it: authorization URL set, token and userinfo URLs if
/// the provider has them.
type ProviderClient =
    CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// What a person's claims make of them: their name and, per org they belong to, whether they admin it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub person: String,
    pub orgs: BTreeMap<String, bool>,
}

/// The person and orgs of a set of claims, by the operator's rules; Err says why not, in words for
/// the person. Pure.
pub fn membership(claims: &serde_json::Map<String, Value>, rules: &SignInRules) -> Result<Membership, String> {
    let person = match claims.get(&rules.username_claim) {
        Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
        _ => return Err(format!("the identity provider sent no {} for you", rules.username_claim)),
    };
    crate::client::records::check_person(&person)?;
    let groups: Vec<&str> = match claims.get(&rules.groups_claim) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(one)) => vec![one.as_str()],
        _ => Vec::new(),
    };
    let mut orgs = BTreeMap::new();
    for (org, group) in &rules.orgs {
        let admin = rules.admins.get(org).is_some_and(|g| groups.contains(&g.as_str()));
        if admin || groups.contains(&group.as_str()) {
            orgs.insert(org.clone(), admin);
        }
    }
    if orgs.is_empty() {
        return Err(format!("{person} is in none of the groups that give access to this service; ask the org's admin"));
    }
    Ok(Membership { person, orgs })
}

/// A signed-in person's service token, as the dashboard and `tao-slurm login` receive it.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    pub token: String,
    pub org: String,
    pub person: String,
    pub admin: bool,
    /// Unix seconds.
    pub expires_at: i64,
}

pub(super) struct Pending {
    pub(super) verifier: String,
    pub(super) nonce: String,
    /// The device code this sign-in completes (None: the dashboard's).
    pub(super) device: Option<String>,
    pub(super) org: Option<String>,
    pub(super) at: Instant,
}

pub(super) struct Device {
    pub(super) user_code: String,
    pub(super) org: Option<String>,
    pub(super) at: Instant,
    /// Signed in at the provider, waiting for the person to confirm the terminal: (the one-time code
    /// of the confirmation form, who, org, admin).
    pub(super) confirm: Option<(String, Membership, String, bool)>,
    pub(super) outcome: Option<Result<Issued, String>>,
}

/// The cookie that ties a sign-in's answer to the browser that started it (no one else's browser can
/// be signed in with an answer an attacker started: login CSRF).
pub(super) const COOKIE: &str = "tao_sign_in";

pub(super) fn cookie_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(&format!("{COOKIE}=")).map(str::to_string))
}

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub struct SignIn {
    pub(super) rules: SignInRules,
    secret: Option<String>,
    /// The service's address as browsers reach it (set once it listens, unless the operator set it).
    public_url: OnceLock<String>,
    http: openidconnect::reqwest::Client,
    provider: tokio::sync::Mutex<Option<CoreProviderMetadata>>,
    pub(super) pending: Mutex<HashMap<String, Pending>>,
    pub(super) devices: Mutex<HashMap<String, Device>>,
}

pub(super) fn random_code(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).expect("the system's random generator");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn page(status: StatusCode, title: &str, text: &str) -> Response {
    page_with(status, title, text, "")
}

/// A page of the sign-in: its words escaped, `extra` (already HTML) after them.
pub(super) fn page_with(status: StatusCode, title: &str, text: &str, extra: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>{t}</title><body><h1>{t}</h1><p id=said>{x}</p>{extra}",
        t = esc(title),
        x = esc(text)
    );
    let headers = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::CONTENT_SECURITY_POLICY, "default-src 'none'; form-action 'self'; frame-ancestors 'none'"),
    ];
    (status, headers, body).into_response()
}

impl SignIn {
    pub fn new(rules: SignInRules, secret: Option<String>) -> Result<SignIn, String> {
        let http = openidconnect::reqwest::ClientBuilder::new()
            // The provider's redirects are not followed (SSRF), as openidconnect asks of its client.
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| e.to_string())?;
        let public_url = OnceLock::new();
        if let Some(u) = &rules.public_url {
            let _ = public_url.set(u.clone());
        }
        Ok(SignIn {
            rules,
            secret,
            public_url,
            http,
            provider: Default::default(),
            pending: Default::default(),
            devices: Default::default(),
        })
    }

    /// The address the service listens on, as the redirect URI's base unless the operator set one.
    pub fn listening_at(&self, url: &str) {
        let _ = self.public_url.set(url.trim_end_matches('/').to_string());
    }

    pub(super) fn base(&self) -> String {
        self.public_url.get().cloned().unwrap_or_default()
    }

    /// The provider's client, discovered on first use (the provider may start after the service).
    async fn client(&self) -> Result<ProviderClient, String> {
        let mut known = self.provider.lock().await;
        if known.is_none() {
            let issuer = IssuerUrl::new(self.rules.issuer.clone()).map_err(|e| e.to_string())?;
            let metadata = CoreProviderMetadata::discover_async(issuer, &self.http)
                .await
                .map_err(|e| format!("cannot read the identity provider's configuration: {e}"))?;
            *known = Some(metadata);
        }
        let metadata = known.clone().expect("discovered");
        let redirect = RedirectUrl::new(format!("{}/auth/callback", self.base())).map_err(|e| e.to_string())?;
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.rules.client_id.clone()),
            self.secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect);
        Ok(client)
    }

    pub(super) fn forget_stale(&self) {
        let now = Instant::now();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, p| now - p.at < PENDING_FOR);
        self.devices.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, d| now - d.at < PENDING_FOR);
    }

    /// Where to send the person's browser: the provider's authorization URL (PKCE, state, nonce),
    /// and the state, for the browser's cookie.
    pub(super) async fn start(&self, device: Option<String>, org: Option<String>) -> Result<(String, String), String> {
        self.forget_stale();
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request =
            client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
        for scope in ["profile", "email", "groups"] {
            request = request.add_scope(Scope::new(scope.into()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING {
            return Err("too many sign-ins under way; try again in a minute".into());
        }
        let p = Pending {
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
            device,
            org,
            at: Instant::now(),
        };
        pending.insert(state.secret().clone(), p);
        Ok((url.to_string(), state.secret().clone()))
    }

    /// The provider's answer: the person's membership, verified.
    pub(super) async fn finish(&self, code: String, p: &Pending) -> Result<Membership, String> {
        let client = self.client().await?;
        let token = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|e| e.to_string())?
            .set_pkce_verifier(PkceCodeVerifier::new(p.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| format!("the identity provider refused the sign-in: {e}"))?;
        let id_token = token.id_token().ok_or("the identity provider sent no ID token")?;
        let claims = id_token
            .claims(&client.id_token_verifier(), &Nonce::new(p.nonce.clone()))
            .map_err(|e| format!("the identity provider's ID token does not hold: {e}"))?;
        let info: openidconnect::UserInfoClaims<AnyClaims, CoreGenderClaim> = client
            .user_info(token.access_token().clone(), Some(claims.subject().clone()))
            .map_err(|e| e.to_string())?
            .request_async(&self.http)
            .await
            .map_err(|e| format!("cannot read your claims from the identity provider: {e}"))?;
        // The standard claims and the others, by name, as the operator's rules name them.
        let mut all = match serde_json::to_value(&info).map_err(|e| e.to_string())? {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        all.extend(info.additional_claims().all.clone());
        membership(&all, &self.rules)
    }
}

/// The org a person signs in to: the one asked for (if theirs), else their only one.
pub(super) fn chosen_org(m: &Membership, asked: Option<&str>) -> Result<(String, bool), String> {
    match asked {
        Some(org) => m
            .orgs
            .get(org)
            .map(|admin| (org.to_string(), *admin))
            .ok_or_else(|| format!("{} is not in org {org}'s group", m.person)),
        None if m.orgs.len() == 1 => Ok(m.orgs.iter().next().map(|(o, a)| (o.clone(), *a)).expect("one")),
        None => Err(format!(
            "{} belongs to several orgs ({}): sign in again naming one (`?org=` / `--org`)",
            m.person,
            m.orgs.keys().cloned().collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> SignInRules {
        SignInRules {
            issuer: "https://idp".into(),
            client_id: "c".into(),
            public_url: None,
            username_claim: "preferred_username".into(),
            groups_claim: "groups".into(),
            orgs: [("team-a".to_string(), "tao-a".to_string()), ("team-b".to_string(), "tao-b".to_string())].into(),
            admins: [("team-a".to_string(), "tao-a-admins".to_string())].into(),
            token_secs: 3600,
        }
    }

    fn claims(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn groups_make_orgs_and_admins_and_the_username_claim_the_person() {
        let m =
            membership(&claims(serde_json::json!({"preferred_username": "ada", "groups": ["tao-a", "x"]})), &rules())
                .unwrap();
        assert_eq!((m.person.as_str(), m.orgs.clone()), ("ada", [("team-a".to_string(), false)].into()));
        let m = membership(
            &claims(serde_json::json!({"preferred_username": "bo", "groups": ["tao-a-admins", "tao-b"]})),
            &rules(),
        )
        .unwrap();
        assert_eq!(m.orgs, [("team-a".to_string(), true), ("team-b".to_string(), false)].into());
        assert!(chosen_org(&m, None).unwrap_err().contains("several orgs"));
        assert_eq!(chosen_org(&m, Some("team-a")).unwrap(), ("team-a".to_string(), true));
        assert!(chosen_org(&m, Some("team-c")).is_err());
        let one =
            membership(&claims(serde_json::json!({"preferred_username": "cy", "groups": "tao-b"})), &rules()).unwrap();
        assert_eq!(chosen_org(&one, None).unwrap(), ("team-b".to_string(), false));
    }

    #[test]
    fn no_group_no_name_or_a_name_that_is_no_line_is_refused() {
        for (c, want) in [
            (serde_json::json!({"preferred_username": "ada", "groups": ["other"]}), "none of the groups"),
            (serde_json::json!({"preferred_username": "ada"}), "none of the groups"),
            (serde_json::json!({"groups": ["tao-a"]}), "no preferred_username"),
            (serde_json::json!({"preferred_username": "", "groups": ["tao-a"]}), "no preferred_username"),
            (serde_json::json!({"preferred_username": "a\nb", "groups": ["tao-a"]}), "not a person's name"),
        ] {
            let e = membership(&claims(c.clone()), &rules()).unwrap_err();
            assert!(e.contains(want), "{c}: {e}");
        }
    }
}
