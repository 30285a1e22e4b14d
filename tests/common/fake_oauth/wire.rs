//! What the fake OAuth provider's requests and answers look like: form and query parameters
//! (repeats refused), client authentication, PKCE, tokens, and error bodies in the configured
//! format.

use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::form_urlencoded;

use super::{ClientAuth, Dialect, FakeOptions, TokenFormat, fake_slack};

/// `prefix` + 32 random bytes, base64url without padding.
pub(crate) fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// A stable, JavaScript-safe numeric id for a login (FNV-1a).
pub(super) fn user_id(login: &str) -> u64 {
    let hash = login.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    1_000_000 + hash % 1_000_000_000
}

/// Form or query parameters, refusing repeats (RFC 6749 3.1, 3.2). Empty values count as absent.
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    /// Parses `application/x-www-form-urlencoded`; `Err` names a repeated parameter.
    pub(crate) fn parse(pairs: &[(String, String)]) -> Result<Params, String> {
        let mut map = HashMap::new();
        for (key, value) in pairs {
            if map.insert(key.clone(), value.clone()).is_some() {
                return Err(key.clone());
            }
        }
        Ok(Params(map))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}

pub(crate) fn decode_pairs(raw: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(raw).into_owned().collect()
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space); `None` when
/// malformed (bad `%` escape or not UTF-8).
fn form_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Splits a requested `scope` on spaces and on the configured separator.
pub(super) fn split_scopes(scope: Option<&str>, separator: char) -> Vec<String> {
    scope
        .unwrap_or_default()
        .split([' ', separator])
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(crate) fn plain_400(reason: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        reason.into(),
    )
        .into_response()
}

/// A token-endpoint style body (`/token` responses, `/revoke` errors) in the configured format.
pub(crate) fn token_body(format: TokenFormat, status: StatusCode, fields: &[(&str, Value)]) -> Response {
    let (content_type, body) = match format {
        TokenFormat::Json => {
            let map: serde_json::Map<String, Value> =
                fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            ("application/json", Value::Object(map).to_string())
        }
        TokenFormat::Form => {
            let mut serializer = form_urlencoded::Serializer::new(String::new());
            for (key, value) in fields {
                match value {
                    Value::String(s) => serializer.append_pair(key, s),
                    other => serializer.append_pair(key, &other.to_string()),
                };
            }
            ("application/x-www-form-urlencoded", serializer.finish())
        }
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// An RFC 6749 5.2 error response; `invalid_client` is a 401, everything else a 400 (Slack: 200).
pub(super) fn oauth_error(options: &FakeOptions, error: &str, description: &str) -> Response {
    if options.dialect == Dialect::Slack {
        return fake_slack::error(error, description);
    }
    let status = if error == "invalid_client" {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut response = token_body(
        options.token_format,
        status,
        &[("error", json!(error)), ("error_description", json!(description))],
    );
    if error == "invalid_client" && options.client_auth == ClientAuth::Basic {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"fake-oauth\""),
        );
    }
    response
}

/// A PKCE `code_challenge` of the right form: 43 to 128 characters of `[A-Za-z0-9-._~]`.
pub(crate) fn valid_code_challenge(challenge: &str) -> bool {
    (43..=128).contains(&challenge.len())
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// The PKCE S256 `code_challenge` of a `code_verifier` (RFC 7636 4.2).
pub(crate) fn s256_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A token-endpoint failure: the RFC 6749 5.2 error code and a description.
pub(crate) type Failure = (&'static str, &'static str);

/// Authenticates the client per [`FakeOptions::client_auth`]; returns its id.
pub(super) fn authenticate_client(
    options: &FakeOptions,
    headers: &HeaderMap,
    params: &Params,
) -> Result<String, Failure> {
    let authorization = headers.get(header::AUTHORIZATION);
    let body_secret = params.get("client_secret");
    if authorization.is_some() && body_secret.is_some() {
        return Err(("invalid_request", "more than one client authentication method"));
    }
    let (id, secret) = match options.client_auth {
        ClientAuth::Basic => {
            let value = authorization.ok_or(("invalid_client", "client_secret_basic authentication required"))?;
            let (id, secret) = parse_basic(value).ok_or(("invalid_client", "malformed Basic authorization"))?;
            if params.get("client_id").is_some_and(|body_id| body_id != id) {
                return Err(("invalid_client", "client_id in body differs from Basic"));
            }
            (id, secret)
        }
        ClientAuth::Post => match (authorization, params.get("client_id"), body_secret) {
            (Some(_), _, _) => return Err(("invalid_client", "client_secret_post authentication required")),
            (None, Some(id), Some(secret)) => (id.to_owned(), secret.to_owned()),
            _ => return Err(("invalid_client", "client_id and client_secret required")),
        },
    };
    if id != options.client_id || secret != options.client_secret {
        return Err(("invalid_client", "unknown client or wrong secret"));
    }
    Ok(id)
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))` → `(id, secret)`.
pub(crate) fn parse_basic(value: &HeaderValue) -> Option<(String, String)> {
    let (scheme, credentials) = value.to_str().ok()?.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(credentials.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id)?, form_decode(secret)?))
}

/// Reads a form body after checking its media type; repeated parameters are refused.
pub(crate) fn form_params(headers: &HeaderMap, body: &[u8]) -> Result<Params, Failure> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(("invalid_request", "body must be application/x-www-form-urlencoded"));
    }
    Params::parse(&decode_pairs(body)).map_err(|_| ("invalid_request", "repeated parameter"))
}

/// Reads a form body, then authenticates the client: the common front half of `/token` and
/// `/revoke`. Returns the parameters and the client id.
pub(super) fn authenticated_form(
    options: &FakeOptions,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Params, String), Failure> {
    let params = form_params(headers, body)?;
    let client_id = authenticate_client(options, headers, &params)?;
    Ok((params, client_id))
}

/// The client authentication methods the fakes take at their token endpoints.
pub(crate) const AUTH_METHODS: [&str; 3] = ["client_secret_basic", "client_secret_post", "none"];

/// An RFC 7591 registration request, read: its metadata (with the effective
/// `token_endpoint_auth_method` set), its redirect URIs, and that method.
pub(crate) struct RegistrationRequest {
    pub metadata: serde_json::Map<String, Value>,
    pub redirect_uris: Vec<String>,
    pub method: &'static str,
}

/// Reads a registration request whose redirect URIs must each pass `acceptable` (`described` in
/// the error otherwise).
pub(crate) fn registration_request(
    headers: &HeaderMap,
    body: &[u8],
    acceptable: impl Fn(&str) -> bool,
    described: &'static str,
) -> Result<RegistrationRequest, Failure> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("application/json"));
    if !is_json {
        return Err(("invalid_client_metadata", "body must be application/json"));
    }
    let Ok(Value::Object(mut metadata)) = serde_json::from_slice(body) else {
        return Err(("invalid_client_metadata", "body must be a JSON object"));
    };
    let redirect_uris: Option<Vec<String>> = metadata
        .get("redirect_uris")
        .and_then(Value::as_array)
        .and_then(|uris| {
            uris.iter()
                .map(|uri| uri.as_str().filter(|uri| acceptable(uri)).map(str::to_owned))
                .collect()
        });
    let redirect_uris = redirect_uris
        .filter(|uris| !uris.is_empty())
        .ok_or(("invalid_redirect_uri", described))?;
    let method = match metadata.get("token_endpoint_auth_method") {
        None => "client_secret_basic",
        Some(method) => method
            .as_str()
            .and_then(|m| AUTH_METHODS.into_iter().find(|known| *known == m))
            .ok_or((
                "invalid_client_metadata",
                "token_endpoint_auth_method must be client_secret_basic, client_secret_post or none",
            ))?,
    };
    metadata.insert("token_endpoint_auth_method".to_owned(), json!(method));
    Ok(RegistrationRequest {
        metadata,
        redirect_uris,
        method,
    })
}
