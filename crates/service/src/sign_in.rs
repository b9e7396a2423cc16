//! People sign in to the service through the team's OpenID Connect provider (`[sign_in]` in
//! clusters.toml): the authorization-code flow with PKCE, the service being the provider's client. The
//! dashboard starts it at `/auth/login`; a terminal (`tao-slurm login --service URL`) asks for a device
//! code at `POST /auth/device`, and the person types the code it shows on the service's own page
//! (`/auth/device`), signs in again at the provider, and confirms the terminal (its address and time
//! shown). At the callback the ID token is verified (signature, issuer, audience, expiry, nonce) and
//! the provider's userinfo read. A person is the provider's issuer and subject: the name their first
//! sign-in bound to them (`[sign_in.people]`, else the username claim; an `email` only when the
//! provider says it is verified), kept for good; no system user is ever one. Their groups give their
//! org (and admin role) by the operator's map, and they get a service token of their own that lasts
//! `token_lifetime`. The provider's refresh token is kept, sealed (`grants`): the service asks the
//! provider again every few seconds, and a person who left the org's group (or whose grant the
//! provider refuses) loses their access within a minute.
//!
//! The service keeps no sign-in in memory: a browser's is sealed in its cookie (`sign_in_seal`), a
//! terminal's is a row of the service database, bounded per client; every replica finishes what
//! another started, and a flood of starts jams no one. The routes are in `sign_in_routes`.

use super::operator::SignInRules;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreProviderMetadata};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken,
    RequestTokenError, Scope, SubjectIdentifier, TokenResponse,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that holds the service's client secret at the provider (never a file
/// the operator's other tools read, never the command line); unset: a public client (PKCE alone).
pub const CLIENT_SECRET_VAR: &str = "TAO_SLURM_OIDC_CLIENT_SECRET";
/// How long a sign-in may take from its start to the provider's answer.
pub(super) const PENDING_FOR: Duration = Duration::from_secs(600);
/// How long a terminal's code may wait for its person: minutes, and good once.
pub(super) const DEVICE_CODE_FOR: Duration = Duration::from_secs(300);
/// Terminals' sign-ins under way from one client address, and in all (the routes are public).
pub(super) const DEVICE_CODES_PER_CLIENT: usize = 5;
pub(super) const DEVICE_CODES_IN_ALL: usize = 10_000;

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

/// What a person's claims make of them: the provider's subject, their name and, per org they
/// belong to, whether they admin it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The provider's `sub`: with its issuer, who the person is.
    pub subject: String,
    pub person: String,
    pub orgs: BTreeMap<String, bool>,
}

/// Whether a claim says yes (a boolean, or the text "true" some providers send).
fn says_yes(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true))) || matches!(v, Some(Value::String(s)) if s == "true")
}

/// The person and orgs of a set of claims, by the operator's rules; Err says why not, in words for
/// the person. Pure. The name is `[sign_in.people]`'s for the subject, else the username claim (an
/// `email` claim only when `email_verified`); a name that is a system user's is refused here, before
/// anything is made for it.
pub fn membership(claims: &serde_json::Map<String, Value>, rules: &SignInRules) -> Result<Membership, String> {
    let subject = match claims.get("sub") {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 255 && !s.chars().any(char::is_control) => {
            s.clone()
        }
        _ => return Err("the identity provider sent no subject (sub) for you".into()),
    };
    let person = match rules.people.get(&subject) {
        Some(mapped) => mapped.clone(),
        None => {
            let claimed = match claims.get(&rules.username_claim) {
                Some(Value::String(p)) if !p.trim().is_empty() => p.clone(),
                _ => return Err(format!("the identity provider sent no {} for you", rules.username_claim)),
            };
            if rules.username_claim == "email" && !says_yes(claims.get("email_verified")) {
                return Err(format!(
                    "the identity provider has not verified your e-mail {claimed}; verify it there, or ask the operator to map you ([sign_in.people])"
                ));
            }
            claimed
        }
    };
    tao_slurm_engine::client::records::check_person(&person)?;
    if super::certificates::check_unix_user(&person).is_err_and(|m| m.contains("user of the system")) {
        return Err(format!("{person:?} is a user of the system, not a person: the service signs no one in as it"));
    }
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
    Ok(Membership { subject, person, orgs })
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

/// A browser's sign-in under way, sealed in its cookie until the provider answers.
#[derive(Serialize, Deserialize)]
pub(super) struct Pending {
    /// OAuth's `state`: the callback's must be this one.
    pub(super) state: String,
    pub(super) verifier: String,
    pub(super) nonce: String,
    /// The terminal's sign-in this one confirms (None: the dashboard's).
    pub(super) device: Option<DeviceRef>,
    pub(super) org: Option<String>,
    /// Unix seconds: when the person was sent to the provider (a terminal's needs a sign-in since).
    pub(super) started: i64,
}

/// A terminal's sign-in as its person's browser carries it: what the confirmation shows them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct DeviceRef {
    /// Its device code's SHA-256 (the code itself is the terminal's alone).
    pub(super) code_sha256: String,
    pub(super) user_code: String,
    /// The address that asked for it, and when (Unix seconds).
    pub(super) client: String,
    pub(super) at: i64,
}

/// The cookie that ties a sign-in's answer to the browser that started it (no one else's browser can
/// be signed in with an answer an attacker started: login CSRF).
pub(super) const COOKIE: &str = "tao_sign_in";

/// The cookie that hands a signed-in browser's token to the dashboard, once, from the callback.
pub(super) const SESSION_COOKIE: &str = "tao_session";

/// The value of the cookie `name` the request carries.
pub(super) fn cookie_of(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(&format!("{name}=")).map(str::to_string))
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
    /// The provider's configuration and keys: discovered on first use, again when a token is signed
    /// with a key it did not list (the provider rotated its keys).
    provider: tokio::sync::Mutex<Option<CoreProviderMetadata>>,
    /// What seals a browser's sign-in (its key from the service database, read once).
    pub(super) seal: OnceLock<super::sign_in_seal::Seal>,
    /// Each client address's rate on the public routes.
    pub(super) limits: super::limits::RateLimits,
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
            seal: OnceLock::new(),
            // 10 a second, in bursts of 60: a person signing in makes a handful.
            limits: super::limits::RateLimits::per_address("sign-in requests", 10, 60),
        })
    }

    /// The address the service listens on, as the redirect URI's base unless the operator set one.
    pub fn listening_at(&self, url: &str) {
        let _ = self.public_url.set(url.trim_end_matches('/').to_string());
    }

    pub(super) fn base(&self) -> String {
        self.public_url.get().cloned().unwrap_or_default()
    }

    /// The provider's client, discovered on first use (the provider may start after the service), or
    /// again when `rediscover` (a token signed with a key the provider did not list before).
    async fn client(&self, rediscover: bool) -> Result<ProviderClient, String> {
        let mut known = self.provider.lock().await;
        if known.is_none() || rediscover {
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

    /// Where to send the person's browser (the provider's authorization URL: PKCE, state, nonce; for
    /// a terminal's sign-in, a fresh sign-in at the provider), and what the browser keeps meanwhile.
    pub(super) async fn start(
        &self,
        device: Option<DeviceRef>,
        org: Option<String>,
        now: i64,
    ) -> Result<(String, Pending), String> {
        let client = self.client(false).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request =
            client.authorize_url(CoreAuthenticationFlow::AuthorizationCode, CsrfToken::new_random, Nonce::new_random);
        for scope in ["profile", "email", "groups"] {
            request = request.add_scope(Scope::new(scope.into()));
        }
        if device.is_some() {
            // A terminal is signed in only by a person who signs in now, not by a session that stayed
            // open in their browser.
            request = request.add_prompt(openidconnect::core::CoreAuthPrompt::Login).set_max_age(Duration::ZERO);
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let pending = Pending {
            state: state.secret().clone(),
            verifier: verifier.secret().clone(),
            nonce: nonce.secret().clone(),
            device,
            org,
            started: now,
        };
        Ok((url.to_string(), pending))
    }

    /// The provider's answer: the person's membership, verified, and the provider's refresh token
    /// if it issued one (kept sealed, for [`SignIn::recheck`]).
    pub(super) async fn finish(&self, code: String, p: &Pending) -> Result<(Membership, Option<String>), String> {
        let client = self.client(false).await?;
        let token = client
            .exchange_code(AuthorizationCode::new(code))
            .map_err(|e| e.to_string())?
            .set_pkce_verifier(PkceCodeVerifier::new(p.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| format!("the identity provider refused the sign-in: {e}"))?;
        let id_token = token.id_token().ok_or("the identity provider sent no ID token")?;
        let nonce = Nonce::new(p.nonce.clone());
        let verified = id_token.claims(&client.id_token_verifier(), &nonce).cloned();
        let (client, claims) = match verified {
            Ok(c) => (client, c),
            Err(first) => {
                // Signed with a key the provider did not list when it was read: read its keys again,
                // once (a rotation); the token is checked again, never taken unchecked.
                tracing::info!(error = %first, "the ID token does not verify with the provider's known keys; reading them again");
                let fresh = self.client(true).await?;
                let claims = id_token
                    .claims(&fresh.id_token_verifier(), &nonce)
                    .map_err(|e| format!("the identity provider's ID token does not hold: {e}"))?
                    .clone();
                (fresh, claims)
            }
        };
        if p.device.is_some() {
            // The fresh sign-in a terminal's needs (`max_age=0`): when the provider says when.
            if let Some(at) = claims.auth_time() {
                if at.timestamp() + 60 < p.started {
                    return Err(
                        "the identity provider did not ask you to sign in again; sign in at the provider and retry"
                            .into(),
                    );
                }
            }
        }
        let all = self.claims_of(&client, token.access_token().clone(), claims.subject().clone()).await?;
        let refresh = token.refresh_token().map(|r| r.secret().clone());
        Ok((membership(&all, &self.rules)?, refresh))
    }

    /// The person's claims from the provider's userinfo, with `subject` (the verified one: userinfo's
    /// must match it, as openidconnect checks).
    async fn claims_of(
        &self,
        client: &ProviderClient,
        access: openidconnect::AccessToken,
        subject: SubjectIdentifier,
    ) -> Result<serde_json::Map<String, Value>, String> {
        let info: openidconnect::UserInfoClaims<AnyClaims, CoreGenderClaim> = client
            .user_info(access, Some(subject.clone()))
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
        all.insert("sub".into(), Value::String(subject.to_string()));
        Ok(all)
    }

    /// Ask the provider again about the person `subject` signed in with `refresh`: the refresh
    /// token exchanged for a new grant, their claims read again. Within [`RECHECK_WITHIN`].
    pub(super) async fn recheck(&self, subject: &str, refresh: &str) -> Recheck {
        match tokio::time::timeout(RECHECK_WITHIN, self.recheck_now(subject, refresh)).await {
            Ok(r) => r,
            Err(_) => Recheck::Unknown(format!("the identity provider did not answer within {RECHECK_WITHIN:?}")),
        }
    }

    async fn recheck_now(&self, subject: &str, refresh: &str) -> Recheck {
        let client = match self.client(false).await {
            Ok(c) => c,
            Err(e) => return Recheck::Unknown(e),
        };
        let refresh_token = RefreshToken::new(refresh.to_string());
        let asked = match client.exchange_refresh_token(&refresh_token) {
            Ok(r) => r.request_async(&self.http).await,
            Err(e) => return Recheck::Unknown(format!("the identity provider has no token endpoint: {e}")),
        };
        let token = match asked {
            Ok(t) => t,
            // The provider's own word that the grant is gone (revoked, expired, the person disabled).
            Err(RequestTokenError::ServerResponse(r))
                if *r.error() == openidconnect::core::CoreErrorResponseType::InvalidGrant =>
            {
                return Recheck::Refused(format!("the identity provider refused the person's grant ({})", r.error()))
            }
            Err(e) => return Recheck::Unknown(format!("cannot refresh the grant at the identity provider: {e}")),
        };
        let claims =
            match self.claims_of(&client, token.access_token().clone(), SubjectIdentifier::new(subject.into())).await {
                Ok(c) => c,
                Err(e) => return Recheck::Unknown(e),
            };
        let rotated = token.refresh_token().map(|r| r.secret().clone()).filter(|r| r != refresh);
        Recheck::Claims { membership: membership(&claims, &self.rules), rotated }
    }
}

/// How long one person's check at the provider may take (the token exchange and the userinfo read).
pub const RECHECK_WITHIN: Duration = Duration::from_secs(15);

/// What the provider said when asked again about a signed-in person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    /// It refused the grant (`invalid_grant`): the person's access ends.
    Refused(String),
    /// No answer that says anything of the person (unreachable, slow, a server error): nothing changes.
    Unknown(String),
    /// Their claims as sign-in would read them now, and the provider's new refresh token if it sent one.
    Claims { membership: Result<Membership, String>, rotated: Option<String> },
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
            people: Default::default(),
        }
    }

    /// Claims with a subject (`sub-<name>`) unless they carry one.
    fn claims(v: Value) -> serde_json::Map<String, Value> {
        let mut m = v.as_object().unwrap().clone();
        if !m.contains_key("sub") {
            let name: String = m
                .get("preferred_username")
                .and_then(Value::as_str)
                .unwrap_or("x")
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect();
            m.insert("sub".into(), Value::String(format!("sub-{name}")));
        }
        m
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
            (serde_json::json!({"preferred_username": "root", "groups": ["tao-a"]}), "user of the system"),
            (serde_json::json!({"preferred_username": "slurm", "groups": ["tao-a"]}), "user of the system"),
            (serde_json::json!({"preferred_username": "daemon", "groups": ["tao-a"]}), "user of the system"),
            (serde_json::json!({"sub": "", "preferred_username": "ada", "groups": ["tao-a"]}), "no subject"),
        ] {
            let e = membership(&claims(c.clone()), &rules()).unwrap_err();
            assert!(e.contains(want), "{c}: {e}");
        }
    }

    #[test]
    fn an_email_names_a_person_only_when_verified_and_the_operators_map_wins() {
        let mut r = rules();
        r.username_claim = "email".into();
        let c = |verified: Value| {
            claims(
                serde_json::json!({"sub": "s1", "email": "ada@example.org", "email_verified": verified, "groups": ["tao-a"]}),
            )
        };
        assert_eq!(membership(&c(Value::Bool(true)), &r).unwrap().person, "ada@example.org");
        assert_eq!(membership(&c(Value::String("true".into())), &r).unwrap().person, "ada@example.org");
        for unverified in [Value::Bool(false), Value::Null, Value::String("yes".into())] {
            let e = membership(&c(unverified.clone()), &r).unwrap_err();
            assert!(e.contains("not verified"), "{unverified}: {e}");
        }
        // The operator's map names the subject's person, whatever the claims say.
        r.people.insert("s1".into(), "ada".into());
        let m = membership(&c(Value::Bool(false)), &r).unwrap();
        assert_eq!((m.subject.as_str(), m.person.as_str()), ("s1", "ada"));
    }
}
