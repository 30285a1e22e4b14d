//! The fake's authorization server, back half: dynamic client registration (RFC 7591), the token
//! endpoint (authorization_code with PKCE and `resource`, rotating refresh tokens; clients
//! authenticate by their registered method) and revocation (RFC 7009).

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};
use url::Url;

use super::super::fake_oauth::{
    Failure, Params, TokenFormat, decode_pairs, form_params, parse_basic, random_token, registration_request,
    s256_challenge, token_body,
};
use super::super::unix_seconds;
use super::{
    ATTACKER_REDIRECT_URI, ATTACKER_REGISTER_URL, Inner, RegisterAnswer, RegisteredClient, Shared, TokenRequest,
};

/// The client authentication methods `/register` and `/token` know.
pub(super) use super::super::fake_oauth::AUTH_METHODS;
/// How long an authorization code may wait for its exchange.
const CODE_LIFETIME: Duration = Duration::from_secs(60);

pub(super) fn router(issuer_path: &str, shared: Shared) -> Router {
    Router::new()
        .route(&format!("{issuer_path}/register"), post(register))
        .route(&format!("{issuer_path}/token"), post(token))
        .route(&format!("{issuer_path}/revoke"), post(revoke))
        .with_state(shared)
}

/// An RFC 6749 5.2 (or RFC 7591 3.2.2) error: `invalid_client` is a 401, the rest 400s.
fn oauth_error((error, description): Failure) -> Response {
    let status = if error == "invalid_client" {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::BAD_REQUEST
    };
    token_body(
        TokenFormat::Json,
        status,
        &[("error", json!(error)), ("error_description", json!(description))],
    )
}

/// `POST /register`: 201 with the client's id (and secret, unless `token_endpoint_auth_method` is
/// `none`) and its metadata echoed, or what [`RegisterAnswer`] says.
async fn register(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    inner
        .stats
        .registrations
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    if !inner.options.registration_endpoint {
        return StatusCode::NOT_FOUND.into_response();
    }
    let answer = inner.options.register_answer;
    if answer == RegisterAnswer::RedirectElsewhere {
        return (StatusCode::FOUND, [(header::LOCATION, ATTACKER_REGISTER_URL)]).into_response();
    }
    let (mut metadata, mut client) = match registration(&headers, &body) {
        Ok(registered) => registered,
        Err(failure) => return oauth_error(failure),
    };
    if answer == RegisterAnswer::AttackerRedirectUris {
        client.redirect_uris = vec![ATTACKER_REDIRECT_URI.to_owned()];
        metadata.insert("redirect_uris".to_owned(), json!(client.redirect_uris));
    }
    metadata.insert("client_id".to_owned(), json!(client.client_id));
    metadata.insert("client_id_issued_at".to_owned(), json!(unix_seconds()));
    if let Some(secret) = &client.client_secret {
        metadata.insert("client_secret".to_owned(), json!(secret));
        metadata.insert("client_secret_expires_at".to_owned(), json!(0));
    }
    inner.clients.insert(client.client_id.clone(), client);
    (StatusCode::CREATED, axum::Json(Value::Object(metadata))).into_response()
}

/// Whether `uri` may be a redirect URI: https, or http on loopback; no fragment.
fn acceptable_redirect_uri(uri: &str) -> bool {
    Url::parse(uri).is_ok_and(|url| {
        let loopback = matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
        url.fragment().is_none() && (url.scheme() == "https" || (url.scheme() == "http" && loopback))
    })
}

/// Validates a registration request: the metadata to echo (with the effective
/// `token_endpoint_auth_method`) and the new client.
fn registration(headers: &HeaderMap, body: &[u8]) -> Result<(Map<String, Value>, RegisteredClient), Failure> {
    let request = registration_request(
        headers,
        body,
        acceptable_redirect_uri,
        "redirect_uris must be a non-empty array of https or loopback http URLs without fragment",
    )?;
    let only = |field: &str, allowed: &[&str]| {
        request.metadata.get(field).is_none_or(|values| {
            values
                .as_array()
                .is_some_and(|values| values.iter().all(|v| v.as_str().is_some_and(|v| allowed.contains(&v))))
        })
    };
    if !only("grant_types", &["authorization_code", "refresh_token"]) {
        return Err((
            "invalid_client_metadata",
            "grant_types: only authorization_code and refresh_token",
        ));
    }
    if !only("response_types", &["code"]) {
        return Err(("invalid_client_metadata", "response_types: only code"));
    }
    let client = RegisteredClient {
        client_id: random_token("client_"),
        client_secret: (request.method != "none").then(|| random_token("secret_")),
        redirect_uris: request.redirect_uris,
        token_endpoint_auth_method: request.method.to_owned(),
    };
    Ok((request.metadata, client))
}

/// `POST /token`.
async fn token(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    let pairs = decode_pairs(&body);
    inner.stats.token_requests.push(TokenRequest {
        grant_type: super::find(&pairs, "grant_type").unwrap_or_default().to_owned(),
        params: pairs,
        basic_client_id: headers
            .get(header::AUTHORIZATION)
            .and_then(parse_basic)
            .map(|(id, _)| id),
    });
    if std::mem::take(&mut inner.options.next_token_invalid_client) {
        return oauth_error(("invalid_client", "the fake was told to refuse this client"));
    }
    let result = form_params(&headers, &body).and_then(|params| {
        let client_id = authenticate(&inner, &headers, &params)?;
        match params.get("grant_type") {
            Some("authorization_code") => exchange_code(&mut inner, &params, &client_id),
            Some("refresh_token") => refresh(&mut inner, &params, &client_id),
            Some(_) => Err(("unsupported_grant_type", "only authorization_code and refresh_token")),
            None => Err(("invalid_request", "missing grant_type")),
        }
    });
    match result {
        Ok(body) => {
            let fields: Vec<(&str, Value)> = body
                .as_object()
                .map(|map| map.iter().map(|(k, v)| (k.as_str(), v.clone())).collect())
                .unwrap_or_default();
            token_body(TokenFormat::Json, StatusCode::OK, &fields)
        }
        Err(failure) => oauth_error(failure),
    }
}

/// The `authorization_code` grant: code, client, redirect URI, PKCE verifier and `resource` checked.
fn exchange_code(inner: &mut Inner, params: &Params, client_id: &str) -> Result<Value, Failure> {
    let code = params.get("code").ok_or(("invalid_request", "missing code"))?;
    let verifier = params
        .get("code_verifier")
        .ok_or(("invalid_request", "missing code_verifier"))?;
    let record = inner
        .codes
        .get_mut(code)
        .ok_or(("invalid_grant", "unknown authorization code"))?;
    if record.used || record.issued_at.elapsed() > CODE_LIFETIME {
        return Err(("invalid_grant", "authorization code used or expired"));
    }
    record.used = true;
    if record.grant.client_id != client_id {
        return Err(("invalid_grant", "code issued to another client"));
    }
    if params.get("redirect_uri") != Some(record.redirect_uri.as_str()) {
        return Err(("invalid_grant", "redirect_uri differs from the authorization request"));
    }
    if s256_challenge(verifier) != record.code_challenge {
        return Err(("invalid_grant", "code_verifier does not match the code_challenge"));
    }
    if params.get("resource") != Some(record.grant.resource.as_str()) {
        return Err((
            "invalid_target",
            "resource missing or differs from the authorization request",
        ));
    }
    let grant = record.grant.clone();
    Ok(inner.token_response(&grant))
}

/// The `refresh_token` grant: the refresh token rotates; `resource`, when given, must be the grant's.
fn refresh(inner: &mut Inner, params: &Params, client_id: &str) -> Result<Value, Failure> {
    let token = params
        .get("refresh_token")
        .ok_or(("invalid_request", "missing refresh_token"))?;
    let record = inner
        .refresh_tokens
        .get_mut(token)
        .filter(|record| !record.revoked)
        .ok_or(("invalid_grant", "unknown or revoked refresh token"))?;
    if record.grant.client_id != client_id {
        return Err(("invalid_grant", "refresh token issued to another client"));
    }
    if params.get("resource").is_some_and(|r| r != record.grant.resource) {
        return Err(("invalid_target", "resource differs from the grant's"));
    }
    record.revoked = true;
    let grant = record.grant.clone();
    Ok(inner.token_response(&grant))
}

/// Authenticates the client by its registered method (CIMD clients are public); its id.
fn authenticate(inner: &Inner, headers: &HeaderMap, params: &Params) -> Result<String, Failure> {
    let authorization = headers.get(header::AUTHORIZATION);
    let body_id = params.get("client_id");
    let body_secret = params.get("client_secret");
    if authorization.is_some() && body_secret.is_some() {
        return Err(("invalid_request", "more than one client authentication method"));
    }
    let basic = match authorization {
        Some(value) => Some(parse_basic(value).ok_or(("invalid_client", "malformed Basic authorization"))?),
        None => None,
    };
    let id = match (&basic, body_id) {
        (Some((id, _)), Some(body_id)) if id != body_id => {
            return Err(("invalid_client", "client_id in body differs from Basic"));
        }
        (Some((id, _)), _) => id.clone(),
        (None, Some(id)) => id.to_owned(),
        (None, None) => return Err(("invalid_client", "client authentication required")),
    };
    if inner.cimd_clients.contains(&id) {
        return match (&basic, body_secret) {
            (None, None) => Ok(id),
            _ => Err(("invalid_client", "a metadata-document client is public: no secret")),
        };
    }
    let client = inner.clients.get(&id).ok_or(("invalid_client", "unknown client"))?;
    let expected = client.client_secret.as_deref();
    let ok = match (client.token_endpoint_auth_method.as_str(), &basic, body_secret) {
        ("client_secret_basic", Some((_, secret)), None) => Some(secret.as_str()) == expected,
        ("client_secret_post", None, Some(secret)) => Some(secret) == expected,
        ("none", None, None) => true,
        _ => false,
    };
    if ok {
        Ok(id)
    } else {
        Err((
            "invalid_client",
            "wrong credentials or not the registered authentication method",
        ))
    }
}

/// `POST /revoke` (RFC 7009): an authenticated client's token is revoked (unknown ones too: 200).
async fn revoke(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    let params = match form_params(&headers, &body) {
        Ok(params) => params,
        Err(failure) => return oauth_error(failure),
    };
    let client_id = match authenticate(&inner, &headers, &params) {
        Ok(client_id) => client_id,
        Err(failure) => return oauth_error(failure),
    };
    let Some(token) = params.get("token").map(str::to_owned) else {
        return oauth_error(("invalid_request", "missing token"));
    };
    inner.stats.revoked_tokens.push(token.clone());
    if let Some(record) = inner
        .access_tokens
        .get_mut(&token)
        .filter(|r| r.grant.client_id == client_id)
    {
        record.revoked = true;
    }
    if let Some(record) = inner
        .refresh_tokens
        .get_mut(&token)
        .filter(|r| r.grant.client_id == client_id)
    {
        record.revoked = true;
    }
    let mut response = StatusCode::OK.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
