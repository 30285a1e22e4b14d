//! The demo sign-in provider: a tiny OAuth 2 authorization server (authorize page with a button,
//! token endpoint with PKCE S256) and the API its token opens, served on gatehouse's own address
//! in demo mode only, so the OAuth path (connect page, callback, completion, retry) can be seen
//! without registering an app. It signs in one made-up user; codes and tokens live in memory,
//! bounded, so a restart shows a refused token leading to a new sign-in. It redirects only to
//! gatehouse's own callback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Form, Query, State};
use axum::http::header::{ORIGIN, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use oauth2::{PkceCodeChallenge, PkceCodeVerifier};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::gate::random_token;
use crate::public_url::PublicUrl;
use crate::routes;
use crate::web::templates::{Page, RenderError, Templates};

/// The client id the demo provider knows: gatehouse's, in `demo.toml`.
const CLIENT_ID: &str = "gatehouse-demo";
/// How long a code may wait for its exchange.
const CODE_TTL: Duration = Duration::from_secs(60);
/// How long a token opens the demo API (gatehouse then asks for a new sign-in: no refresh tokens).
const TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Codes and tokens held at once; beyond them the provider refuses until some expire.
const MAX_CODES: usize = 100;
const MAX_TOKENS: usize = 1000;
/// The longest `state`, code challenge or scope list accepted.
const MAX_PARAMETER_CHARS: usize = 512;

/// What the demo provider answers when it refuses.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    #[error("Demo sign-in: {0}")]
    BadRequest(&'static str),
    #[error("Demo sign-in: only gatehouse's own page may press its button")]
    OtherOrigin,
    #[error("Demo sign-in: too many sign-ins at once; try again in a minute")]
    Full,
    #[error("invalid_grant")]
    InvalidGrant,
    #[error("Demo API: no valid token; sign in again")]
    Unauthorized,
    #[error("Demo sign-in: the page cannot be shown")]
    Page(#[from] RenderError),
}

impl IntoResponse for DemoError {
    fn into_response(self) -> Response {
        match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, self.to_string()).into_response(),
            Self::OtherOrigin => (StatusCode::FORBIDDEN, self.to_string()).into_response(),
            Self::Full => (StatusCode::SERVICE_UNAVAILABLE, self.to_string()).into_response(),
            Self::InvalidGrant => (StatusCode::BAD_REQUEST, Json(json!({"error": "invalid_grant"}))).into_response(),
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [(WWW_AUTHENTICATE, "Bearer")],
                Json(json!({"error": self.to_string()})),
            )
                .into_response(),
            Self::Page(ref error) => {
                tracing::error!(%error, "cannot render the demo sign-in page");
                (StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
            }
        }
    }
}

/// The provider: where it sends browsers back, and what it has issued.
struct Issuer {
    origin: String,
    /// The public URL's path prefix, for the links of the page's frame (`base.html`).
    prefix: String,
    callback: String,
    action: String,
    issued: Mutex<Issued>,
}

#[derive(Default)]
struct Issued {
    codes: HashMap<String, Code>,
    tokens: HashMap<String, Instant>,
}

struct Code {
    challenge: String,
    scope: String,
    expires: Instant,
}

/// The demo provider's routes: [`routes::DEMO_AUTHORIZE`], [`routes::DEMO_TOKEN`] and the API,
/// [`routes::DEMO_PROFILE`].
pub fn router(public_url: &PublicUrl) -> Router {
    let issuer = Arc::new(Issuer {
        origin: public_url.origin().to_owned(),
        prefix: public_url.prefix().to_owned(),
        callback: public_url.at(routes::OAUTH_CALLBACK),
        action: public_url.at(routes::DEMO_AUTHORIZE),
        issued: Mutex::default(),
    });
    Router::new()
        .route(routes::DEMO_AUTHORIZE, get(authorize).post(decide))
        .route(routes::DEMO_TOKEN, axum::routing::post(token))
        .route(routes::DEMO_PROFILE, get(profile))
        .with_state(issuer)
}

#[derive(Deserialize)]
struct AuthorizeRequest {
    response_type: String,
    client_id: String,
    redirect_uri: String,
    state: String,
    code_challenge: String,
    code_challenge_method: String,
    #[serde(default)]
    scope: String,
}

#[derive(Serialize)]
struct SignInPage<'a> {
    action: &'a str,
    state: &'a str,
    code_challenge: &'a str,
    scope: &'a str,
}

impl Page for SignInPage<'_> {
    const NAME: &'static str = "demo_sign_in.html";
}

/// The authorize page: only gatehouse's own requests (its client id, its callback, PKCE S256).
async fn authorize(
    State(issuer): State<Arc<Issuer>>,
    Query(request): Query<AuthorizeRequest>,
) -> Result<Html<String>, DemoError> {
    if request.response_type != "code" || request.client_id != CLIENT_ID || request.redirect_uri != issuer.callback {
        return Err(DemoError::BadRequest("only gatehouse's own sign-in is served here"));
    }
    if request.code_challenge_method != "S256" {
        return Err(DemoError::BadRequest("PKCE S256 is required"));
    }
    bounded(&[&request.state, &request.code_challenge, &request.scope])?;
    let page = SignInPage {
        action: &issuer.action,
        state: &request.state,
        code_challenge: &request.code_challenge,
        scope: &request.scope,
    };
    Ok(Html(Templates::render_built_in(&page, &issuer.prefix)?))
}

#[derive(Deserialize)]
struct Decision {
    state: String,
    code_challenge: String,
    #[serde(default)]
    scope: String,
    action: String,
}

/// The button: back to gatehouse's callback with a code, or with `access_denied`. A post from
/// another site's page (its `Origin`) is refused.
async fn decide(
    State(issuer): State<Arc<Issuer>>,
    headers: HeaderMap,
    Form(decision): Form<Decision>,
) -> Result<Redirect, DemoError> {
    let origin = headers.get(ORIGIN).and_then(|value| value.to_str().ok());
    if origin.is_some_and(|origin| origin != issuer.origin) {
        return Err(DemoError::OtherOrigin);
    }
    bounded(&[&decision.state, &decision.code_challenge, &decision.scope])?;
    let answer: Vec<(&str, String)> = match decision.action.as_str() {
        "allow" => {
            let code = random_token();
            let now = Instant::now();
            let mut issued = issuer.issued.lock().unwrap_or_else(PoisonError::into_inner);
            issued.codes.retain(|_, code| code.expires > now);
            if issued.codes.len() >= MAX_CODES {
                return Err(DemoError::Full);
            }
            issued.codes.insert(
                code.clone(),
                Code {
                    challenge: decision.code_challenge,
                    scope: decision.scope,
                    expires: now + CODE_TTL,
                },
            );
            vec![("code", code), ("state", decision.state)]
        }
        "deny" => vec![("error", "access_denied".to_owned()), ("state", decision.state)],
        _ => return Err(DemoError::BadRequest("unknown action")),
    };
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(answer)
        .finish();
    Ok(Redirect::to(&format!("{}?{query}", issuer.callback)))
}

#[derive(Deserialize)]
struct TokenRequest {
    grant_type: String,
    code: String,
    redirect_uri: String,
    code_verifier: String,
}

/// The code exchange: once per code, before it expires, with the verifier of its challenge.
async fn token(
    State(issuer): State<Arc<Issuer>>,
    Form(request): Form<TokenRequest>,
) -> Result<Json<serde_json::Value>, DemoError> {
    if request.grant_type != "authorization_code" || request.redirect_uri != issuer.callback {
        return Err(DemoError::InvalidGrant);
    }
    let now = Instant::now();
    let mut issued = issuer.issued.lock().unwrap_or_else(PoisonError::into_inner);
    let code = issued
        .codes
        .remove(&request.code)
        .filter(|code| code.expires > now)
        .ok_or(DemoError::InvalidGrant)?;
    let challenge = PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(request.code_verifier));
    if challenge.as_str() != code.challenge {
        return Err(DemoError::InvalidGrant);
    }
    issued.tokens.retain(|_, expires| *expires > now);
    if issued.tokens.len() >= MAX_TOKENS {
        return Err(DemoError::Full);
    }
    let token = random_token();
    issued.tokens.insert(token.clone(), now + TOKEN_TTL);
    Ok(Json(json!({
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": TOKEN_TTL.as_secs(),
        "scope": code.scope,
    })))
}

/// The demo API: the made-up user's profile, for a token it issued that has not expired.
async fn profile(State(issuer): State<Arc<Issuer>>, headers: HeaderMap) -> Result<Json<serde_json::Value>, DemoError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or(DemoError::Unauthorized)?;
    let now = Instant::now();
    let issued = issuer.issued.lock().unwrap_or_else(PoisonError::into_inner);
    if issued.tokens.get(token).is_none_or(|expires| *expires <= now) {
        return Err(DemoError::Unauthorized);
    }
    Ok(Json(json!({
        "login": "demo-user",
        "name": "Demo User",
        "note": "Demo: gatehouse called this API with the token from the demo sign-in; the token never reached the model.",
    })))
}

/// Refuses parameters longer than [`MAX_PARAMETER_CHARS`].
fn bounded(values: &[&str]) -> Result<(), DemoError> {
    if values.iter().any(|value| value.chars().count() > MAX_PARAMETER_CHARS) {
        return Err(DemoError::BadRequest("a parameter is too long"));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<crate::web::templates::Sample> {
    vec![crate::web::templates::Sample::of(SignInPage {
        action: "http://127.0.0.1:8080/demo/authorize",
        state: "st<a>te",
        code_challenge: "c0de-ch4llenge_",
        scope: "read \"all\"",
    })]
}
