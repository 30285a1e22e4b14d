//! The fake identity provider's HTTP endpoints: discovery, JWKS, authorization, token,
//! registration, introspection, userinfo and logout, each validating its request the way a strict
//! real provider does and answering errors in the form its RFC prescribes.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use url::Url;

use super::super::fake_oauth::{
    AUTH_METHODS, Failure, Params, TokenFormat, decode_pairs, form_params, parse_basic, plain_400, random_token,
    registration_request, s256_challenge, token_body, valid_code_challenge,
};
use super::super::unix_seconds;
use super::{CodeRecord, ExchangeMisbehaviour, FakeIdpOptions, Grant, Inner, JwksFault, Shared, TestClient};

/// How long an authorization code may wait for its exchange.
const CODE_LIFETIME: Duration = Duration::from_secs(60);

const AUTHORIZE: &str = "/authorize";
const TOKEN: &str = "/token";
const JWKS: &str = "/protocol/openid-connect/certs";
const REGISTER: &str = "/register";
const INTROSPECT: &str = "/introspect";
const USERINFO: &str = "/userinfo";
const LOGOUT: &str = "/logout";

const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The routes, under the issuer's path; the discovery documents only when switched on.
pub(super) fn router(options: &FakeIdpOptions, shared: Shared) -> Router {
    let realm = &options.realm_path;
    let mut router = Router::new()
        .route(&format!("{realm}{AUTHORIZE}"), get(authorize))
        .route(&format!("{realm}{TOKEN}"), post(token))
        .route(&format!("{realm}{JWKS}"), get(jwks))
        .route(&format!("{realm}{REGISTER}"), post(register))
        .route(&format!("{realm}{INTROSPECT}"), post(introspect))
        .route(&format!("{realm}{USERINFO}"), get(userinfo))
        .route(&format!("{realm}{LOGOUT}"), get(logout));
    if options.rfc8414 {
        router = router.route(
            &format!("/.well-known/oauth-authorization-server{realm}"),
            get(metadata),
        );
    }
    if options.openid_configuration {
        router = router.route(&format!("{realm}/.well-known/openid-configuration"), get(metadata));
    }
    router.with_state(shared)
}

/// Both discovery documents: RFC 8414 metadata, which OpenID discovery extends.
async fn metadata(State(shared): State<Shared>) -> Response {
    let mut inner = shared.lock();
    inner.stats.metadata_fetches += 1;
    let issuer = &inner.issuer;
    axum::Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}{AUTHORIZE}"),
        "token_endpoint": format!("{issuer}{TOKEN}"),
        "jwks_uri": format!("{issuer}{JWKS}"),
        "registration_endpoint": format!("{issuer}{REGISTER}"),
        "introspection_endpoint": format!("{issuer}{INTROSPECT}"),
        "userinfo_endpoint": format!("{issuer}{USERINFO}"),
        "end_session_endpoint": format!("{issuer}{LOGOUT}"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", TOKEN_EXCHANGE],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": AUTH_METHODS,
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": ["openid", "profile", "email", "mcp", "offline_access"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        "authorization_response_iss_parameter_supported": true,
    }))
    .into_response()
}

/// `GET {realm}/protocol/openid-connect/certs`: the key set, or the fault a test set.
async fn jwks(State(shared): State<Shared>) -> Response {
    let mut inner = shared.lock();
    inner.stats.jwks_fetches += 1;
    match inner.jwks_fault {
        None => axum::Json(inner.keys.jwks()).into_response(),
        Some(JwksFault::Unavailable) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Some(JwksFault::Garbage) => {
            ([(header::CONTENT_TYPE, "application/json")], "<html>maintenance</html>").into_response()
        }
        Some(JwksFault::NoKeys) => axum::Json(json!({"keys": []})).into_response(),
    }
}

/// `GET /authorize`: a 400 page for an unknown client or a redirect URI it did not register,
/// otherwise a redirect carrying a code or an error, with `state` and `iss`.
async fn authorize(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let mut inner = shared.lock();
    inner.stats.authorizations += 1;
    let params = match Params::parse(&decode_pairs(query.unwrap_or_default().as_bytes())) {
        Ok(params) => params,
        Err(key) => return plain_400(format!("parameter {key} given more than once")),
    };
    let Some(client) = params.get("client_id").and_then(|id| inner.clients.get(id)) else {
        return plain_400("unknown or missing client_id");
    };
    let client_id = client.id.clone();
    let registered = params
        .get("redirect_uri")
        .filter(|uri| client.redirect_uris.iter().any(|r| r == uri));
    let Some(mut redirect) = registered.and_then(|uri| Url::parse(uri).ok()) else {
        return plain_400("redirect_uri missing or not registered for this client");
    };
    let outcome = consent(&mut inner, &params, &client_id);
    {
        let mut out = redirect.query_pairs_mut();
        match &outcome {
            Ok(code) => out.append_pair("code", code),
            Err((error, description)) => out
                .append_pair("error", error)
                .append_pair("error_description", description),
        };
        if let Some(state) = params.get("state") {
            out.append_pair("state", state);
        }
        out.append_pair("iss", &inner.issuer);
    }
    (StatusCode::FOUND, [(header::LOCATION, redirect.to_string())]).into_response()
}

/// The rest of `/authorize` once client and redirect URI are known: a code for the signed-in
/// user, or the error to redirect with.
fn consent(inner: &mut Inner, params: &Params, client_id: &str) -> Result<String, Failure> {
    if params.get("response_type") != Some("code") {
        return Err(("unsupported_response_type", "response_type must be code"));
    }
    if params.get("code_challenge_method") != Some("S256") {
        return Err(("invalid_request", "code_challenge_method must be S256"));
    }
    let challenge = params.get("code_challenge").unwrap_or_default();
    if !valid_code_challenge(challenge) {
        return Err((
            "invalid_request",
            "code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]",
        ));
    }
    let resource = params.get("resource");
    if resource.is_some_and(|r| Url::parse(r).map_or(true, |url| url.fragment().is_some())) {
        return Err(("invalid_target", "resource must be an absolute URI without fragment"));
    }
    let user = inner
        .signed_in
        .as_ref()
        .and_then(|sub| inner.users.get(sub))
        .ok_or(("login_required", "nobody is signed in"))?;
    let grant = Grant {
        client_id: client_id.to_owned(),
        user: user.clone(),
        scope: params.get("scope").unwrap_or_default().to_owned(),
        resource: resource.map(str::to_owned),
        nonce: params.get("nonce").map(str::to_owned),
        auth_time: unix_seconds(),
    };
    let code = random_token("code_");
    inner.codes.insert(
        code.clone(),
        CodeRecord {
            grant,
            redirect_uri: params.get("redirect_uri").unwrap_or_default().to_owned(),
            code_challenge: challenge.to_owned(),
            issued_at: std::time::Instant::now(),
            used: false,
        },
    );
    Ok(code)
}

/// `POST /token`.
async fn token(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    inner.stats.token_requests += 1;
    inner.last_token_request = Some(decode_pairs(&body));
    let answer = form_params(&headers, &body).and_then(|params| {
        let client_id = authenticate(&inner, &headers, &params, true)?;
        match params.get("grant_type") {
            Some("authorization_code") => exchange_code(&mut inner, &params, &client_id),
            Some("refresh_token") => refresh(&mut inner, &params, &client_id),
            Some(TOKEN_EXCHANGE) => exchange_token(&mut inner, &params, &client_id),
            Some(_) => Err((
                "unsupported_grant_type",
                "only authorization_code, refresh_token and token exchange",
            )),
            None => Err(("invalid_request", "missing grant_type")),
        }
    });
    match answer {
        Ok(fields) => token_body(TokenFormat::Json, StatusCode::OK, &fields),
        Err(failure) => oauth_error(failure),
    }
}

/// `grant_type=authorization_code`: the code is spent by any attempt.
fn exchange_code(inner: &mut Inner, params: &Params, client_id: &str) -> Result<Vec<(&'static str, Value)>, Failure> {
    let code = params.get("code").ok_or(("invalid_request", "missing code"))?;
    let record = inner.codes.get_mut(code).ok_or(("invalid_grant", "unknown code"))?;
    if record.used {
        return Err(("invalid_grant", "code already used"));
    }
    record.used = true;
    if record.issued_at.elapsed() > CODE_LIFETIME {
        return Err(("invalid_grant", "code expired"));
    }
    if record.grant.client_id != client_id {
        return Err(("invalid_grant", "code was issued to another client"));
    }
    if params.get("redirect_uri") != Some(record.redirect_uri.as_str()) {
        return Err(("invalid_grant", "redirect_uri differs from the authorization request"));
    }
    if s256_challenge(params.get("code_verifier").unwrap_or_default()) != record.code_challenge {
        return Err(("invalid_grant", "code_verifier does not match code_challenge"));
    }
    if params
        .get("resource")
        .is_some_and(|r| record.grant.resource.as_deref() != Some(r))
    {
        return Err(("invalid_target", "resource differs from the authorization request"));
    }
    let grant = record.grant.clone();
    Ok(inner.issue(&grant, &grant.scope, grant.nonce.as_deref()))
}

/// `grant_type=refresh_token`: refresh tokens rotate; `scope` may narrow the new access token.
fn refresh(inner: &mut Inner, params: &Params, client_id: &str) -> Result<Vec<(&'static str, Value)>, Failure> {
    let token = params
        .get("refresh_token")
        .ok_or(("invalid_request", "missing refresh_token"))?;
    let record = inner
        .refresh_tokens
        .get_mut(token)
        .ok_or(("invalid_grant", "unknown refresh token"))?;
    if record.used {
        return Err(("invalid_grant", "refresh token already used"));
    }
    if record.grant.client_id != client_id {
        return Err(("invalid_grant", "refresh token was issued to another client"));
    }
    let granted: Vec<&str> = record.grant.scope.split(' ').collect();
    let scope = params.get("scope").unwrap_or(record.grant.scope.as_str()).to_owned();
    if !scope.split(' ').all(|s| granted.contains(&s)) {
        return Err(("invalid_scope", "scope exceeds the original grant"));
    }
    if params
        .get("resource")
        .is_some_and(|r| record.grant.resource.as_deref() != Some(r))
    {
        return Err(("invalid_target", "resource differs from the grant's"));
    }
    record.used = true;
    let grant = record.grant.clone();
    Ok(inner.issue(&grant, &scope, None))
}

/// `grant_type=urn:ietf:params:oauth:grant-type:token-exchange` (RFC 8693), confidential clients
/// only: a live access token this provider issued, for one whose `aud` is `audience` (else
/// `resource`) and whose scope is `scope` (else the subject token's), living
/// [`FakeIdpOptions::exchanged_token_lifetime`].
fn exchange_token(inner: &mut Inner, params: &Params, client_id: &str) -> Result<Vec<(&'static str, Value)>, Failure> {
    inner.stats.token_exchanges += 1;
    if inner.clients.get(client_id).is_none_or(|c| c.secret.is_none()) {
        return Err(("unauthorized_client", "public clients may not exchange tokens"));
    }
    if let Some(error) = inner.exchange_refusal {
        return Err((error, "the test says no"));
    }
    if params.get("subject_token_type") != Some(ACCESS_TOKEN_TYPE) {
        return Err(("invalid_request", "subject_token_type must be an access token's"));
    }
    if params
        .get("requested_token_type")
        .is_some_and(|t| t != ACCESS_TOKEN_TYPE)
    {
        return Err(("invalid_request", "only access tokens are issued"));
    }
    let subject = params
        .get("subject_token")
        .ok_or(("invalid_request", "missing subject_token"))?;
    let claims = inner
        .live_access_token(subject)
        .ok_or(("invalid_grant", "the subject_token is unknown or expired"))?
        .clone();
    let audience = params
        .get("audience")
        .or_else(|| params.get("resource"))
        .ok_or(("invalid_target", "missing audience and resource"))?
        .to_owned();
    let scope = params
        .get("scope")
        .or_else(|| claims["scope"].as_str())
        .unwrap_or_default()
        .to_owned();
    let user = claims["sub"]
        .as_str()
        .and_then(|sub| inner.users.get(sub))
        .ok_or(("invalid_grant", "the subject_token names nobody known"))?
        .clone();
    let lifetime = inner.options.exchanged_token_lifetime.as_secs();
    let mut exchanged = inner.access_claims(&user, &audience, &scope, client_id);
    exchanged["exp"] = json!(unix_seconds() + lifetime);
    let misbehaviour = inner.exchange_misbehaviour.clone();
    if let Some(ExchangeMisbehaviour::Audience(aud)) = &misbehaviour {
        exchanged["aud"] = aud.clone();
    }
    let access_token = match misbehaviour {
        Some(ExchangeMisbehaviour::EchoSubject) => subject.to_owned(),
        _ => inner.mint_access_token(exchanged),
    };
    let (mut issued_token_type, mut token_type) = (ACCESS_TOKEN_TYPE, "Bearer");
    match misbehaviour {
        Some(ExchangeMisbehaviour::IssuedTokenType(kind)) => issued_token_type = kind,
        Some(ExchangeMisbehaviour::TokenType(kind)) => token_type = kind,
        _ => {}
    }
    Ok(vec![
        ("access_token", json!(access_token)),
        ("issued_token_type", json!(issued_token_type)),
        ("token_type", json!(token_type)),
        ("expires_in", json!(lifetime)),
        ("scope", json!(scope)),
    ])
}

/// Authenticates the client of a `/token` or `/introspect` request: `client_secret_basic`,
/// `client_secret_post`, or (public clients, when `allow_public`) just a `client_id`.
fn authenticate(inner: &Inner, headers: &HeaderMap, params: &Params, allow_public: bool) -> Result<String, Failure> {
    let body_id = params.get("client_id");
    let body_secret = params.get("client_secret");
    let (id, secret) = match headers.get(header::AUTHORIZATION) {
        Some(_) if body_secret.is_some() => {
            return Err(("invalid_request", "more than one client authentication method"));
        }
        Some(value) => {
            let (id, secret) = parse_basic(value).ok_or(("invalid_client", "malformed Basic authorization"))?;
            if body_id.is_some_and(|body_id| body_id != id) {
                return Err(("invalid_client", "client_id in body differs from Basic"));
            }
            (id, Some(secret))
        }
        None => (
            body_id
                .ok_or(("invalid_client", "client authentication required"))?
                .to_owned(),
            body_secret.map(str::to_owned),
        ),
    };
    let client = inner.clients.get(&id).ok_or(("invalid_client", "unknown client"))?;
    match (&client.secret, secret) {
        (Some(expected), Some(given)) if *expected == given => Ok(id),
        (None, None) if allow_public => Ok(id),
        (None, None) => Err(("invalid_client", "public clients cannot use this endpoint")),
        _ => Err(("invalid_client", "wrong client credentials")),
    }
}

/// An RFC 6749 5.2 error: `invalid_client` is a 401 with a Basic challenge, the rest 400s.
fn oauth_error((error, description): Failure) -> Response {
    let status = if error == "invalid_client" {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut response = token_body(
        TokenFormat::Json,
        status,
        &[("error", json!(error)), ("error_description", json!(description))],
    );
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"fake-idp\""),
        );
    }
    response
}

/// `POST /register` (RFC 7591): a JSON body with `redirect_uris`; 201 with the client's id (and
/// secret, unless `token_endpoint_auth_method` is `none`) and its metadata echoed.
async fn register(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    inner.stats.registrations += 1;
    match registration(&headers, &body) {
        Ok((mut metadata, client)) => {
            metadata.insert("client_id".to_owned(), json!(client.id));
            metadata.insert("client_id_issued_at".to_owned(), json!(unix_seconds()));
            if let Some(secret) = &client.secret {
                metadata.insert("client_secret".to_owned(), json!(secret));
                metadata.insert("client_secret_expires_at".to_owned(), json!(0));
            }
            inner.clients.insert(client.id.clone(), client);
            (StatusCode::CREATED, axum::Json(Value::Object(metadata))).into_response()
        }
        Err((error, description)) => token_body(
            TokenFormat::Json,
            StatusCode::BAD_REQUEST,
            &[("error", json!(error)), ("error_description", json!(description))],
        ),
    }
}

/// Validates a registration request; the metadata to echo (with the effective
/// `token_endpoint_auth_method`) and the new client.
fn registration(headers: &HeaderMap, body: &[u8]) -> Result<(Map<String, Value>, TestClient), Failure> {
    let request = registration_request(
        headers,
        body,
        |uri| Url::parse(uri).is_ok_and(|url| url.fragment().is_none()),
        "redirect_uris must be a non-empty array of absolute URIs without fragment",
    )?;
    let client = TestClient {
        id: random_token("client_"),
        secret: (request.method != "none").then(|| random_token("secret_")),
        redirect_uris: request.redirect_uris,
    };
    Ok((request.metadata, client))
}

/// `POST /introspect` (RFC 7662): for a confidential client, the claims of a live access token
/// this provider issued with `active: true`, else just `active: false`.
async fn introspect(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let mut inner = shared.lock();
    inner.stats.introspections += 1;
    let answer = form_params(&headers, &body).and_then(|params| {
        authenticate(&inner, &headers, &params, false)?;
        params
            .get("token")
            .map(str::to_owned)
            .ok_or(("invalid_request", "missing token"))
    });
    let token = match answer {
        Ok(token) => token,
        Err(failure) => return oauth_error(failure),
    };
    let fields: Vec<(&str, Value)> = match inner.live_access_token(&token).and_then(Value::as_object) {
        Some(claims) => [("active", json!(true)), ("token_type", json!("Bearer"))]
            .into_iter()
            .chain(claims.iter().map(|(name, value)| (name.as_str(), value.clone())))
            .collect(),
        None => vec![("active", json!(false))],
    };
    token_body(TokenFormat::Json, StatusCode::OK, &fields)
}

/// `GET /userinfo`: the profile of the user a live bearer access token was issued for.
async fn userinfo(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let mut inner = shared.lock();
    inner.stats.userinfo_requests += 1;
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match token.and_then(|token| inner.live_access_token(token)) {
        Some(claims) => axum::Json(json!({
            "sub": claims["sub"],
            "name": claims["name"],
            "email": claims["email"],
            "groups": claims["groups"],
        }))
        .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"fake-idp\", error=\"invalid_token\"",
            )],
        )
            .into_response(),
    }
}

/// `GET /logout` (OpenID RP-initiated logout): signs the user out (the next `/authorize` answers
/// `login_required` until a test signs someone in), then redirects to `post_logout_redirect_uri`
/// with `state`, or shows a small page.
async fn logout(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let mut inner = shared.lock();
    inner.stats.logouts += 1;
    let params = match Params::parse(&decode_pairs(query.unwrap_or_default().as_bytes())) {
        Ok(params) => params,
        Err(key) => return plain_400(format!("parameter {key} given more than once")),
    };
    let target = params.get("post_logout_redirect_uri").map(Url::parse);
    let mut redirect = match target {
        None => {
            inner.signed_in = None;
            return Html("<!doctype html><title>Signed out</title><p>You are signed out.</p>").into_response();
        }
        Some(Ok(url)) if matches!(url.scheme(), "http" | "https") && url.fragment().is_none() => url,
        Some(_) => return plain_400("post_logout_redirect_uri must be an absolute http(s) URL without fragment"),
    };
    inner.signed_in = None;
    if let Some(state) = params.get("state") {
        redirect.query_pairs_mut().append_pair("state", state);
    }
    (StatusCode::FOUND, [(header::LOCATION, redirect.to_string())]).into_response()
}
