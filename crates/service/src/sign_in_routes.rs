//! The sign-in's routes (`/auth/...`, public): the dashboard's and the terminal's way through the
//! identity provider (`sign_in`), and the person's token made at the end. Each client address has
//! its own rate; nothing a route keeps lives in this process (cookies sealed for the browser, rows of
//! the service database for terminals), so any replica answers any step.

use super::common::AppStateRef;
use super::operator::SignInRules;
use super::sign_in::{
    chosen_org, cookie_of, esc, page, page_with, random_code, DeviceRef, Issued, Membership, Pending, SignIn, COOKIE,
    DEVICE_CODES_IN_ALL, DEVICE_CODES_PER_CLIENT, DEVICE_CODE_FOR, PENDING_FOR, SESSION_COOKIE,
};
use super::sign_in_seal::{grant_purpose, Seal, KEY_NAME};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Query, State};
use axum::http::{header, Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use tao_slurm_engine::client::records::{DeviceRefused, DeviceSignIn, DeviceState, Grant};

/// How long a confirmation page's form stays good, and the dashboard's token waits to be taken.
const CONFIRM_SECS: i64 = 300;
const HANDOFF_SECS: i64 = 60;
/// A terminal's code: letters no one mistakes for another (no vowels: no words), 8 of them.
const USER_CODE_LETTERS: &[u8] = b"BCDFGHJKLMNPQRSTVWXZ";

fn now() -> i64 {
    tao_slurm_engine::client::now_secs()
}

/// Who a public request is for its limits: its peer's address (an IPv6 one by its /64, what one
/// host is usually given).
fn client_of(ext: &Extensions) -> String {
    match ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()) {
        Some(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Some(IpAddr::V6(v6)) => v6.to_ipv4_mapped().map(|v4| v4.to_string()).unwrap_or_default(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        None => "unknown".into(),
    }
}

/// The sign-in, if the operator set one up, and the request within its address's rate.
fn sign_in_for<'a>(state: &'a AppStateRef, ext: &Extensions) -> Result<&'a SignIn, Box<Response>> {
    let Some(s) = state.sign_in.as_deref() else { return Err(Box::new(not_set_up())) };
    s.limits.check(&client_of(ext)).map_err(|e| Box::new(e.into_response()))?;
    Ok(s)
}

/// The key that seals what browsers keep and the persons' grants (the service database's, read once).
pub(super) fn seal_of<'a>(state: &AppStateRef, s: &'a SignIn) -> Result<&'a Seal, String> {
    if let Some(seal) = s.seal.get() {
        return Ok(seal);
    }
    let key = state.records.sign_ins().service_key(KEY_NAME)?;
    let _ = s.seal.set(Seal::new(&key)?);
    Ok(s.seal.get().expect("set"))
}

fn unavailable(what: &str, e: &str) -> Response {
    tracing::warn!(error = %e, "{what}");
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Cannot sign in now",
        "The service cannot reach its database; try again in a minute.",
    )
}

/// Run `f` on the records off the async runtime.
async fn records<T: Send + 'static>(
    state: &AppStateRef,
    f: impl FnOnce(&tao_slurm_engine::client::records::ServiceRecords) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let st = state.clone();
    tokio::task::spawn_blocking(move || f(&st.records)).await.unwrap_or_else(|e| Err(e.to_string()))
}

/// The person's name, bound to the provider's subject for good (their first sign-in's).
async fn bound(state: &AppStateRef, rules: &SignInRules, mut m: Membership) -> Result<Membership, String> {
    let (issuer, subject, person) = (rules.issuer.clone(), m.subject.clone(), m.person.clone());
    m.person = records(state, move |r| r.sign_ins().bind_person(&issuer, &subject, &person, now())).await?;
    Ok(m)
}

/// Make the person's token (shown once) in the service's records, and have the service accept it.
fn issue(state: &AppStateRef, rules: &SignInRules, person: &str, org: &str, admin: bool) -> Result<Issued, String> {
    let now = now();
    let tokens = state.records.tokens();
    let (rec, token) = tokens.create(org, "sign-in", Some(person), Some(rules.token_secs), now)?;
    if admin {
        tokens.make_admin(&rec.id)?;
    }
    state.reload_tokens_now()?;
    tracing::info!(%org, %person, token = %rec.id, admin, "signed in");
    Ok(Issued {
        token,
        org: org.to_string(),
        person: person.to_string(),
        admin,
        expires_at: rec.expires_at.unwrap_or(now),
    })
}

/// [`issue`] on a blocking thread (the records are a database).
async fn issue_off_runtime(state: &AppStateRef, s: &SignIn, who: Who) -> Result<Issued, String> {
    let (st, rules) = (state.clone(), s.rules.clone());
    tokio::task::spawn_blocking(move || issue(&st, &rules, &who.person, &who.org, who.admin))
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
}

fn not_set_up() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Sign-in is not set up",
        "The operator named no identity provider ([sign_in] in clusters.toml); ask them for a token.",
    )
}

/// A cookie of the sign-in's: HttpOnly, `Secure` when the service is reached over HTTPS.
fn cookie(
    s: &SignIn,
    name: &str,
    value: &str,
    path: &str,
    same_site: &str,
    max_age: i64,
) -> (header::HeaderName, String) {
    let secure = if s.base().starts_with("https://") { "; Secure" } else { "" };
    (
        header::SET_COOKIE,
        format!("{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{secure}"),
    )
}

/// To the provider, the browser keeping `pending` sealed in its cookie.
fn to_provider(state: &AppStateRef, s: &SignIn, url: String, pending: Pending) -> Response {
    let sealed = match seal_of(state, s)
        .and_then(|seal| seal.seal("pending", &pending, pending.started + PENDING_FOR.as_secs() as i64))
    {
        Ok(v) => v,
        Err(e) => return unavailable("cannot seal a sign-in", &e),
    };
    let headers = [
        (header::LOCATION, url),
        (header::CACHE_CONTROL, "no-store".into()),
        cookie(s, COOKIE, &sealed, "/auth", "Lax", PENDING_FOR.as_secs() as i64),
    ];
    (StatusCode::FOUND, headers).into_response()
}

fn provider_unreachable(e: &str) -> Response {
    tracing::warn!(error = %e, "cannot start a sign-in");
    page(
        StatusCode::BAD_GATEWAY,
        "Cannot sign in now",
        "The identity provider cannot be reached; the operator finds why in the service's log.",
    )
}

#[derive(Deserialize)]
pub struct LoginQuery {
    org: Option<String>,
    /// A terminal's code in a link: no longer taken (the person types it, `/auth/device`).
    device: Option<String>,
}

/// `GET /auth/login`: the dashboard's sign-in, to the identity provider.
pub async fn login(State(state): State<AppStateRef>, ext: Extensions, Query(q): Query<LoginQuery>) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if q.device.is_some() {
        return page(
            StatusCode::BAD_REQUEST,
            "Type the terminal's code",
            "A terminal is signed in only with the code it shows, typed on the service's own page: open /auth/device and type it there.",
        );
    }
    match s.start(None, q.org, now()).await {
        Ok((url, pending)) => to_provider(&state, s, url, pending),
        Err(e) => provider_unreachable(&e),
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// Who a sign-in makes of the person, in the org they signed in to.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Who {
    person: String,
    org: String,
    admin: bool,
}

/// `GET /auth/callback`: the provider's answer; a terminal's confirmation, or the dashboard's token.
pub async fn callback(
    State(state): State<AppStateRef>,
    ext: Extensions,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let seal = match seal_of(&state, s) {
        Ok(seal) => seal,
        Err(e) => return unavailable("cannot open a sign-in", &e),
    };
    // Only the browser that started this sign-in may finish it: its sealed cookie names the state.
    let pending: Option<Pending> = cookie_of(&headers, COOKIE).and_then(|c| seal.open("pending", &c, now()));
    let Some(p) = pending.filter(|p| q.state.as_deref() == Some(p.state.as_str())) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Sign-in not started here",
            "This answer belongs to a sign-in this browser did not start, or one too old; start again.",
        );
    };
    let outcome = match (q.code, q.error) {
        (Some(code), None) => s.finish(code, &p).await,
        (_, e) => {
            // The error code is the URL's, so anyone's: kept to OAuth's characters, and short.
            let code: String = e
                .unwrap_or_else(|| "no code".into())
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "_- ".contains(*c))
                .take(64)
                .collect();
            Err(format!("the identity provider did not sign you in ({code})"))
        }
    };
    let (outcome, refresh) = match outcome {
        Ok((m, refresh)) => (bound(&state, &s.rules, m).await, refresh),
        Err(e) => (Err(e), None),
    };
    let who = match outcome.and_then(|m| {
        chosen_org(&m, p.org.as_deref()).map(|(org, admin)| (m.subject, Who { person: m.person, org, admin }))
    }) {
        Ok((subject, who)) => keep_grant(&state, s, seal, subject, &who, refresh).await.map(|()| who),
        Err(e) => Err(e),
    };
    if let Err(e) = &who {
        tracing::warn!(error = %e, "a sign-in was refused");
    }
    let mut reply = match p.device {
        Some(d) => confirm_page(&state, seal, d, who).await,
        None => dashboards(&state, s, seal, who).await,
    };
    // The sign-in is over, whichever way it went: the browser forgets its state.
    let (name, forget) = cookie(s, COOKIE, "", "/auth", "Lax", 0);
    if let Ok(v) = forget.parse() {
        reply.headers_mut().append(name, v);
    }
    reply
}

/// Keep the person's grant at the provider for the org (their refresh token sealed), which the
/// service checks again while it lasts (`grants`). A sign-in whose grant cannot be kept is refused: a
/// person the service could not check again would keep their access past their removal.
async fn keep_grant(
    state: &AppStateRef,
    s: &SignIn,
    seal: &Seal,
    subject: String,
    who: &Who,
    refresh: Option<String>,
) -> Result<(), String> {
    let issuer = s.rules.issuer.clone();
    let refresh_sealed = match refresh {
        Some(r) => Some(seal.seal(&grant_purpose(&issuer, &subject, &who.org), r, i64::MAX)?),
        None => {
            tracing::warn!(person = %who.person, org = %who.org, "the identity provider issued no refresh token: this person's removal from the group ends their access only when their token expires (token_lifetime)");
            None
        }
    };
    let g = Grant {
        issuer,
        subject,
        org: who.org.clone(),
        person: who.person.clone(),
        admin: who.admin,
        refresh_sealed,
        generation: 0,
        signed_in_at: now(),
        checked_at: None,
        ended_at: None,
        ended_why: None,
    };
    records(state, move |r| r.sign_ins().keep_grant(&g)).await.map_err(|e| {
        tracing::warn!(error = %e, "cannot keep a signed-in person's grant");
        "the service cannot record your sign-in now; try again in a minute".to_string()
    })
}

/// A terminal's sign-in, the person signed in at the provider: they confirm it, seeing where and
/// when it was asked for (a link or a code someone else sent must not sign their terminal in).
async fn confirm_page(state: &AppStateRef, seal: &Seal, d: DeviceRef, who: Result<Who, String>) -> Response {
    let who = match who {
        Ok(w) => w,
        Err(e) => {
            let refused = serde_json::json!({ "refused": e }).to_string();
            let code = d.code_sha256.clone();
            if let Err(db) = records(state, move |r| r.sign_ins().settle_device(&code, &refused, now())).await {
                return unavailable("cannot record a refused sign-in", &db);
            }
            return page(StatusCode::FORBIDDEN, "Not signed in", &e);
        }
    };
    let until = now() + CONFIRM_SECS;
    let confirm = match seal.seal("confirm", (&d.code_sha256, &who), until) {
        Ok(c) => c,
        Err(e) => return unavailable("cannot seal a confirmation", &e),
    };
    let text = format!(
        "Signed in as {} in org {}. A terminal asked to sign in as you: from the address {}, at {} (UTC), showing the code {}. Sign it in only if you ran `tao-slurm login` there just now and it shows this code; anyone who sent you here cannot use it otherwise.",
        who.person,
        who.org,
        d.client,
        tao_slurm_engine::client::rfc3339(d.at),
        d.user_code
    );
    let form = format!(
        "<form method=post action=\"/auth/device/confirm\"><input type=hidden name=confirm value=\"{}\"><button type=submit>Sign the terminal in</button></form>",
        esc(&confirm)
    );
    page_with(StatusCode::OK, "Sign a terminal in?", &text, &form)
}

/// The dashboard's sign-in: its token made, handed to the dashboard through a cookie only this
/// browser's own page can take (never in the URL: a link cannot replace anyone's session).
async fn dashboards(state: &AppStateRef, s: &SignIn, seal: &Seal, who: Result<Who, String>) -> Response {
    let issued = match who {
        Ok(w) => issue_off_runtime(state, s, w).await,
        Err(e) => return page(StatusCode::FORBIDDEN, "Not signed in", &e),
    };
    let i = match issued {
        Ok(i) => i,
        Err(e) => return unavailable("cannot make a signed-in person's token", &e),
    };
    let handoff = serde_json::json!({"org": i.org, "token": i.token, "person": i.person});
    let sealed = match seal.seal("session", handoff, now() + HANDOFF_SECS) {
        Ok(v) => v,
        Err(e) => return unavailable("cannot seal a session", &e),
    };
    let headers = [
        (header::LOCATION, "/#signed-in".to_string()),
        (header::CACHE_CONTROL, "no-store".into()),
        cookie(s, SESSION_COOKIE, &sealed, "/auth/session", "Strict", HANDOFF_SECS),
    ];
    (StatusCode::FOUND, headers).into_response()
}

/// `POST /auth/session`: the dashboard takes the token its own sign-in left (once).
pub async fn session(State(state): State<AppStateRef>, ext: Extensions, headers: HeaderMap) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let taken: Option<serde_json::Value> = match seal_of(&state, s) {
        Ok(seal) => cookie_of(&headers, SESSION_COOKIE).and_then(|c| seal.open("session", &c, now())),
        Err(e) => return unavailable("cannot open a session", &e),
    };
    let forget = cookie(s, SESSION_COOKIE, "", "/auth/session", "Strict", 0);
    match taken {
        Some(v) => (StatusCode::OK, [(header::CACHE_CONTROL, "no-store".to_string()), forget], Json(v)).into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [forget],
            Json(serde_json::json!({"error": "no_sign_in", "error_description": "no sign-in of this browser to take; sign in again"})),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
pub struct ConfirmForm {
    confirm: String,
}

/// `POST /auth/device/confirm`: the person signs their terminal in; the terminal collects its token.
pub async fn confirm(
    State(state): State<AppStateRef>,
    ext: Extensions,
    axum::Form(f): axum::Form<ConfirmForm>,
) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let opened: Option<(String, Who)> = match seal_of(&state, s) {
        Ok(seal) => seal.open("confirm", &f.confirm, now()),
        Err(e) => return unavailable("cannot open a confirmation", &e),
    };
    let Some((code, who)) = opened else {
        return page(
            StatusCode::BAD_REQUEST,
            "Nothing to confirm",
            "This confirmation is unknown or too old; run `tao-slurm login` again.",
        );
    };
    let outcome = serde_json::json!({ "ok": who }).to_string();
    match records(&state, move |r| r.sign_ins().settle_device(&code, &outcome, now())).await {
        Ok(true) => page(
            StatusCode::OK,
            "Signed in",
            &format!("Your terminal is signed in as {} in org {}.", who.person, who.org),
        ),
        Ok(false) => page(
            StatusCode::BAD_REQUEST,
            "Nothing to confirm",
            "This terminal's sign-in was used or expired; run `tao-slurm login` again.",
        ),
        Err(e) => unavailable("cannot record a confirmed sign-in", &e),
    }
}

#[derive(Deserialize, Default)]
pub struct DeviceAsk {
    org: Option<String>,
}

/// A terminal's code: 8 of [`USER_CODE_LETTERS`], as `XXXX-XXXX`.
fn user_code() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the system's random generator");
    let letters: String = b.iter().map(|x| USER_CODE_LETTERS[*x as usize % USER_CODE_LETTERS.len()] as char).collect();
    format!("{}-{}", &letters[..4], &letters[4..])
}

/// A typed code as [`user_code`] writes it (case, spaces and dashes as the person typed them).
fn normal_user_code(typed: &str) -> Option<String> {
    let letters: String = typed.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_uppercase()).collect();
    (letters.len() == 8).then(|| format!("{}-{}", &letters[..4], &letters[4..]))
}

fn device_refusal(status: StatusCode, error: &str, description: String) -> Response {
    (status, Json(serde_json::json!({"error": error, "error_description": description}))).into_response()
}

/// `POST /auth/device`: a terminal's sign-in: a code for its person to type on the service's page.
pub async fn device(State(state): State<AppStateRef>, ext: Extensions, body: Option<Json<DeviceAsk>>) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let device_code = random_code(32);
    let d = DeviceSignIn {
        code_sha256: tao_slurm_engine::client::records::token_hash(&device_code),
        user_code: user_code(),
        client: client_of(&ext),
        org: body.and_then(|b| b.0.org),
        created_at: now(),
    };
    let user = d.user_code.clone();
    let until = d.created_at + DEVICE_CODE_FOR.as_secs() as i64;
    let started =
        records(&state, move |r| r.sign_ins().start_device(&d, until, DEVICE_CODES_PER_CLIENT, DEVICE_CODES_IN_ALL))
            .await;
    match started {
        Ok(Ok(())) => {}
        Ok(Err(DeviceRefused::ClientBusy(n))) => {
            return device_refusal(
                StatusCode::TOO_MANY_REQUESTS,
                "slow_down",
                format!(
                    "{n} sign-ins from this address are waiting for their person; finish one, or wait {} minutes",
                    DEVICE_CODE_FOR.as_secs() / 60
                ),
            )
        }
        Ok(Err(DeviceRefused::Full)) => {
            return device_refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "slow_down",
                "too many sign-ins are waiting; try again in a minute".into(),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot record a terminal's sign-in");
            return device_refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the service cannot reach its database".into(),
            );
        }
    }
    Json(serde_json::json!({
        "device_code": device_code,
        "user_code": user,
        "verification_uri": format!("{}/auth/device", s.base()),
        "expires_in": DEVICE_CODE_FOR.as_secs(),
        "interval": 1,
    }))
    .into_response()
}

/// `GET /auth/device`: where the person types the code their terminal shows.
pub async fn device_page(State(state): State<AppStateRef>, ext: Extensions) -> Response {
    if let Err(r) = sign_in_for(&state, &ext) {
        return *r;
    }
    page_with(
        StatusCode::OK,
        "Sign a terminal in",
        "Type the code your terminal shows (`tao-slurm login`). You will sign in at your identity provider, then see where the request came from before you confirm it.",
        "<form method=post action=\"/auth/device/verify\"><input name=user_code autocomplete=off autocapitalize=characters spellcheck=false maxlength=16 placeholder=\"XXXX-XXXX\" required> <button type=submit>Continue</button></form>",
    )
}

#[derive(Deserialize)]
pub struct VerifyForm {
    user_code: String,
}

/// `POST /auth/device/verify`: the typed code's terminal sign-in, on to the provider for a fresh
/// sign-in.
pub async fn verify(
    State(state): State<AppStateRef>,
    ext: Extensions,
    axum::Form(f): axum::Form<VerifyForm>,
) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let unknown = || {
        page(
            StatusCode::BAD_REQUEST,
            "Unknown code",
            "No terminal is waiting with this code (it expired, was used, or was mistyped); check it, or run `tao-slurm login` again.",
        )
    };
    let Some(code) = normal_user_code(&f.user_code) else { return unknown() };
    let found = match records(&state, move |r| r.sign_ins().device_by_user_code(&code, now())).await {
        Ok(Some(d)) => d,
        Ok(None) => return unknown(),
        Err(e) => return unavailable("cannot look a terminal's sign-in up", &e),
    };
    let d = DeviceRef {
        code_sha256: found.code_sha256,
        user_code: found.user_code,
        client: found.client,
        at: found.created_at,
    };
    match s.start(Some(d), found.org, now()).await {
        Ok((url, pending)) => to_provider(&state, s, url, pending),
        Err(e) => provider_unreachable(&e),
    }
}

#[derive(Deserialize)]
pub struct DeviceTokenAsk {
    device_code: String,
}

/// `POST /auth/device/token`: the terminal's token once its person confirmed it (RFC 8628's answers).
pub async fn device_token(
    State(state): State<AppStateRef>,
    ext: Extensions,
    Json(ask): Json<DeviceTokenAsk>,
) -> Response {
    let s = match sign_in_for(&state, &ext) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let refuse = |error: &str, description: String| device_refusal(StatusCode::BAD_REQUEST, error, description);
    let code = tao_slurm_engine::client::records::token_hash(&ask.device_code);
    let outcome = match records(&state, move |r| r.sign_ins().take_device(&code, now())).await {
        Ok(DeviceState::Gone) => {
            return refuse("expired_token", "this code is unknown, expired or used; run `tao-slurm login` again".into())
        }
        Ok(DeviceState::Pending) => {
            return refuse("authorization_pending", "type the code on the service's page and sign in".into())
        }
        Ok(DeviceState::Settled(o)) => o,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a terminal's sign-in");
            return device_refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the service cannot reach its database".into(),
            );
        }
    };
    #[derive(Deserialize)]
    enum Outcome {
        #[serde(rename = "ok")]
        Ok(Who),
        #[serde(rename = "refused")]
        Refused(String),
    }
    match serde_json::from_str::<Outcome>(&outcome) {
        Ok(Outcome::Ok(who)) => match issue_off_runtime(&state, s, who).await {
            Ok(issued) => Json(issued).into_response(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot make a signed-in person's token");
                device_refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "the service could not record your token; run `tao-slurm login` again".into(),
                )
            }
        },
        Ok(Outcome::Refused(e)) => refuse("access_denied", e),
        Err(e) => {
            tracing::warn!(error = %e, "a terminal's sign-in outcome does not read");
            refuse("access_denied", "the sign-in's outcome was lost; run `tao-slurm login` again".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminals_code_is_eight_unambiguous_letters_and_read_as_typed() {
        let c = user_code();
        assert_eq!(c.len(), 9, "{c}");
        assert!(
            c.chars().enumerate().all(|(i, ch)| if i == 4 {
                ch == '-'
            } else {
                USER_CODE_LETTERS.contains(&(ch as u8))
            }),
            "{c}"
        );
        assert_ne!(user_code(), user_code());
        assert_eq!(normal_user_code("bcdf ghjk").as_deref(), Some("BCDF-GHJK"));
        assert_eq!(normal_user_code(" BCDF-GHJK\n").as_deref(), Some("BCDF-GHJK"));
        assert_eq!(normal_user_code("BCDF-GHJ"), None);
        assert_eq!(normal_user_code("BCDF-GHJKL"), None);
    }

    #[test]
    fn a_client_is_its_address_and_an_ipv6_host_its_64() {
        let with = |a: &str| {
            let mut e = Extensions::new();
            e.insert(ConnectInfo::<SocketAddr>(a.parse().unwrap()));
            client_of(&e)
        };
        assert_eq!(with("127.0.0.2:5000"), "127.0.0.2");
        assert_eq!(with("[2001:db8:1:2:aaaa::1]:5000"), with("[2001:db8:1:2:bbbb::9]:6000"));
        assert_ne!(with("[2001:db8:1:2::1]:5000"), with("[2001:db8:1:3::1]:5000"));
        assert_eq!(with("[::ffff:10.0.0.1]:1"), "10.0.0.1");
        assert_eq!(client_of(&Extensions::new()), "unknown");
    }
}
