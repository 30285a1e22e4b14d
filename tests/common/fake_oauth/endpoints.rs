//! The fake OAuth provider's HTTP endpoints: `/authorize`, `/token` (code exchanges and refreshes),
//! the protected resources and `/revoke`, each validating its request as a strict provider does.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use url::Url;

use super::wire::{
    Params, authenticated_form, decode_pairs, oauth_error, plain_400, random_token, s256_challenge, split_scopes,
    token_body, user_id, valid_code_challenge,
};
use super::{AuthorizeOutcome, CODE_LIFETIME, CodeRecord, Dialect, FakeOptions, Shared, fake_slack};

/// The routes, relative to [`FakeProvider::base_url`](super::FakeProvider::base_url).
pub(super) fn router(shared: Shared) -> Router {
    Router::new()
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/userinfo", get(protected_resource))
        .route("/api/me", get(protected_resource))
        .route("/api/auth.test", get(protected_resource))
        .route("/api/chat.postMessage", post(protected_resource))
        .route("/revoke", post(revoke))
        .with_state(shared)
}

/// `GET /authorize`: validates like a real provider (400 without redirecting on a bad client or
/// redirect URI), then redirects per the configured [`AuthorizeOutcome`].
async fn authorize(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let pairs = decode_pairs(query.unwrap_or_default().as_bytes());
    let mut inner = shared.lock();
    inner.stats.authorize_requests += 1;
    inner.stats.last_authorize_query = pairs.clone();
    let params = match Params::parse(&pairs) {
        Ok(params) => params,
        Err(key) => return plain_400(format!("parameter {key} given more than once")),
    };
    match params.get("client_id") {
        None => return plain_400("missing client_id"),
        Some(id) if id != inner.options.client_id => return plain_400(format!("unknown client_id {id:?}")),
        Some(_) => {}
    }
    let Some(redirect_uri) = params.get("redirect_uri") else {
        return plain_400("missing redirect_uri");
    };
    let mut redirect = match Url::parse(redirect_uri) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() && url.fragment().is_none() => url,
        _ => {
            return plain_400(format!(
                "redirect_uri {redirect_uri:?} is not an absolute http(s) URL without fragment"
            ));
        }
    };
    if params.get("response_type") != Some("code") {
        return plain_400("response_type must be code");
    }
    let Some(state) = params.get("state") else {
        return plain_400("missing state");
    };
    if params.get("code_challenge_method") != Some("S256") {
        return plain_400("code_challenge_method must be S256");
    }
    let challenge = params.get("code_challenge").unwrap_or_default();
    if !valid_code_challenge(challenge) {
        return plain_400("code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]");
    }

    {
        let mut out = redirect.query_pairs_mut();
        match inner.outcome {
            AuthorizeOutcome::Approve => {
                let code = random_token("code_");
                let scope_param = match inner.options.dialect {
                    Dialect::Rfc6749 => "scope",
                    Dialect::Slack => "user_scope",
                };
                let requested = split_scopes(params.get(scope_param), inner.options.scope_separator);
                let scopes = inner.options.granted_scopes.clone().unwrap_or(requested);
                let grant = inner.next_grant;
                inner.next_grant += 1;
                let record = CodeRecord {
                    grant,
                    client_id: inner.options.client_id.clone(),
                    redirect_uri: redirect_uri.to_owned(),
                    code_challenge: challenge.to_owned(),
                    scopes,
                    user: inner.next_user.clone(),
                    issued_at: Instant::now(),
                    used: false,
                };
                inner.codes.insert(code.clone(), record);
                out.append_pair("code", &code);
            }
            AuthorizeOutcome::Deny => {
                out.append_pair("error", "access_denied");
                out.append_pair("error_description", "The user denied the request");
            }
            AuthorizeOutcome::Fail => {
                out.append_pair("error", "server_error");
                out.append_pair("error_description", "The fake provider was told to fail");
            }
        }
        out.append_pair("state", state);
        if let Some(issuer) = &inner.options.issuer {
            out.append_pair("iss", issuer);
        }
    }
    (StatusCode::FOUND, [(header::LOCATION, redirect.to_string())]).into_response()
}

/// `POST /token`.
async fn token(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let options = shared.lock().options.clone();
    let (params, client_id) = match authenticated_form(&options, &headers, &body) {
        Ok(ok) => ok,
        Err((error, description)) => return oauth_error(&options, error, description),
    };
    match params.get("grant_type") {
        Some("authorization_code") => {
            let hold = shared.lock().hold.clone();
            if let Some(hold) = hold {
                hold.pass().await;
            }
            exchange_code(&shared, &options, &params, &client_id)
        }
        Some("refresh_token") => refresh(&shared, &params, &client_id).await,
        Some(_) => oauth_error(
            &options,
            "unsupported_grant_type",
            "only authorization_code and refresh_token",
        ),
        None => oauth_error(&options, "invalid_request", "missing grant_type"),
    }
}

/// `grant_type=authorization_code`. A code is spent by any exchange attempt; presenting a spent
/// code again also revokes every token issued from it (RFC 6749 4.1.2).
fn exchange_code(shared: &Shared, options: &FakeOptions, params: &Params, client_id: &str) -> Response {
    let mut inner = shared.lock();
    inner.stats.code_exchanges += 1;
    let Some(code) = params.get("code") else {
        return oauth_error(options, "invalid_request", "missing code");
    };
    let Some(record) = inner.codes.get_mut(code) else {
        return oauth_error(options, "invalid_grant", "unknown code");
    };
    if record.used {
        let grant = record.grant;
        inner.revoke_grant(grant);
        return oauth_error(options, "invalid_grant", "code already used");
    }
    record.used = true;
    if record.issued_at.elapsed() > CODE_LIFETIME {
        return oauth_error(options, "invalid_grant", "code expired");
    }
    if record.client_id != client_id {
        return oauth_error(options, "invalid_grant", "code was issued to another client");
    }
    if params.get("redirect_uri") != Some(record.redirect_uri.as_str()) {
        return oauth_error(
            options,
            "invalid_grant",
            "redirect_uri differs from the authorization request",
        );
    }
    let verifier = params.get("code_verifier").unwrap_or_default();
    if s256_challenge(verifier) != record.code_challenge {
        return oauth_error(options, "invalid_grant", "code_verifier does not match code_challenge");
    }
    let (grant, user, scopes) = (record.grant, record.user.clone(), record.scopes.clone());
    let refresh_scopes = inner.options.refresh_tokens.then_some(scopes.as_slice());
    let fields = inner.issue(grant, client_id, &user, &scopes, refresh_scopes);
    match options.dialect {
        Dialect::Rfc6749 => token_body(options.token_format, StatusCode::OK, &fields),
        Dialect::Slack => fake_slack::exchange_answer(&user, &fields),
    }
}

/// Decrements the in-flight refresh count however the request ends (even if the client hangs up
/// during the delay and the handler future is dropped).
struct InFlight(Shared);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().refreshes_in_flight -= 1;
    }
}

/// `grant_type=refresh_token`. The token is checked after [`FakeOptions::refresh_delay_ms`], so
/// racing refreshes of one rotating token see exactly one winner.
async fn refresh(shared: &Shared, params: &Params, client_id: &str) -> Response {
    let delay = {
        let mut inner = shared.lock();
        inner.stats.refreshes += 1;
        inner.refreshes_in_flight += 1;
        inner.stats.concurrent_refresh_peak = inner.stats.concurrent_refresh_peak.max(inner.refreshes_in_flight);
        inner.options.refresh_delay_ms
    };
    let in_flight = InFlight(shared.clone());
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    drop(in_flight);

    let mut inner = shared.lock();
    let options = inner.options.clone();
    let Some(refresh_token) = params.get("refresh_token") else {
        return oauth_error(&options, "invalid_request", "missing refresh_token");
    };
    let Some(record) = inner.refresh_tokens.get_mut(refresh_token) else {
        return oauth_error(&options, "invalid_grant", "unknown refresh token");
    };
    if record.revoked {
        return oauth_error(&options, "invalid_grant", "refresh token revoked");
    }
    if record.client_id != client_id {
        return oauth_error(&options, "invalid_grant", "refresh token was issued to another client");
    }
    let mut scopes = record.scopes.clone();
    if let Some(requested) = params.get("scope") {
        let requested = split_scopes(Some(requested), options.scope_separator);
        if !requested.iter().all(|s| scopes.contains(s)) {
            return oauth_error(&options, "invalid_scope", "scope exceeds the original grant");
        }
        scopes = requested;
    }
    let (grant, user, original) = (record.grant, record.user.clone(), record.scopes.clone());
    // Rotation: the old refresh token dies; the new one keeps the grant's full scopes even when
    // this refresh asked for fewer.
    let rotated = options.rotate_refresh_tokens.then_some(original);
    if rotated.is_some() {
        record.revoked = true;
    }
    let fields = inner.issue(grant, client_id, &user, &scopes, rotated.as_deref());
    match options.dialect {
        Dialect::Rfc6749 => token_body(options.token_format, StatusCode::OK, &fields),
        Dialect::Slack => fake_slack::refresh_answer(&fields),
    }
}

/// `GET /userinfo` and `GET /api/me` (and the Slack Web API's methods): the signed-in account, for
/// a valid bearer token.
async fn protected_resource(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ').unwrap_or((v.trim(), ""));
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
        });
    let mut inner = shared.lock();
    let Some(token) = presented else {
        // RFC 6750 3.1: no error code when the request carries no credentials at all.
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"fake-oauth\"")],
        )
            .into_response();
    };
    inner.stats.api_bearer_tokens.push(token.clone());
    let valid = inner.access_tokens.get(&token).filter(|t| t.is_valid(Instant::now()));
    if inner.options.dialect == Dialect::Slack {
        return fake_slack::api_answer(valid.map(|record| record.user.as_str()));
    }
    match valid {
        Some(record) => axum::Json(json!({
            "login": record.user,
            "id": user_id(&record.user),
            "sub": user_id(&record.user).to_string(),
            "email": format!("{}@example.test", record.user),
            "scopes": record.scopes,
        }))
        .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"fake-oauth\", error=\"invalid_token\"",
            )],
        )
            .into_response(),
    }
}

/// `POST /revoke` (RFC 7009): revokes an access token, or a refresh token together with every
/// token of its grant. Unknown tokens are fine (200); `token_type_hint` is ignored.
async fn revoke(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let options = shared.lock().options.clone();
    let (params, client_id) = match authenticated_form(&options, &headers, &body) {
        Ok(ok) => ok,
        Err((error, description)) => return oauth_error(&options, error, description),
    };
    let Some(token) = params.get("token") else {
        return oauth_error(&options, "invalid_request", "missing token");
    };
    let mut inner = shared.lock();
    inner.stats.revocations += 1;
    if let Some(record) = inner.access_tokens.get_mut(token).filter(|t| t.client_id == client_id) {
        record.revoked = true;
    } else if let Some(grant) = inner
        .refresh_tokens
        .get(token)
        .filter(|t| t.client_id == client_id)
        .map(|t| t.grant)
    {
        inner.revoke_grant(grant);
    }
    StatusCode::OK.into_response()
}
