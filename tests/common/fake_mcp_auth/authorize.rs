//! The fake's authorization server, front half: its metadata (RFC 8414, OpenID discovery) and the
//! authorization endpoint, which validates strictly (400s, never redirects, on a bad client,
//! redirect URI, PKCE or `resource`) and fetches Client ID Metadata Documents for URL client ids.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};
use url::Url;

use super::super::fake_oauth::{Params, decode_pairs, plain_400, random_token, valid_code_challenge};
use super::{AuthorizeOutcome, CodeRecord, Grant, IssMode, MixUp, Shared, WRONG_ISSUER, overridden};

/// How long fetching a Client ID Metadata Document may take.
const CIMD_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) fn router(issuer_path: &str, shared: Shared) -> Router {
    Router::new()
        .route(
            &format!("/.well-known/oauth-authorization-server{issuer_path}"),
            get(rfc8414),
        )
        .route(&format!("{issuer_path}/.well-known/openid-configuration"), get(openid))
        .route(&format!("{issuer_path}/authorize"), get(authorize))
        .with_state(shared)
}

async fn rfc8414(State(shared): State<Shared>, uri: Uri) -> Response {
    metadata(&shared, &uri, false)
}

async fn openid(State(shared): State<Shared>, uri: Uri) -> Response {
    metadata(&shared, &uri, true)
}

/// The AS metadata document (the same at both addresses), or 404 where switched off.
fn metadata(shared: &Shared, uri: &Uri, openid: bool) -> Response {
    let mut inner = shared.lock();
    inner.stats.discovery_requests.push(uri.path().to_owned());
    let options = &inner.options;
    let served = if openid {
        options.openid_configuration
    } else {
        options.rfc8414
    };
    if !served {
        return StatusCode::NOT_FOUND.into_response();
    }
    let issuer = &inner.issuer;
    let mut document = Map::new();
    let mut field = |name: &str, value: Value| {
        document.insert(name.to_owned(), value);
    };
    field("issuer", json!(issuer));
    field("authorization_endpoint", json!(format!("{issuer}/authorize")));
    field("token_endpoint", json!(format!("{issuer}/token")));
    if options.registration_endpoint {
        field("registration_endpoint", json!(format!("{issuer}/register")));
    }
    field("revocation_endpoint", json!(format!("{issuer}/revoke")));
    field("response_types_supported", json!(["code"]));
    field("grant_types_supported", json!(["authorization_code", "refresh_token"]));
    field("code_challenge_methods_supported", json!(["S256"]));
    field(
        "token_endpoint_auth_methods_supported",
        json!(options.token_endpoint_auth_methods),
    );
    field("scopes_supported", json!(options.scopes_supported));
    field("authorization_response_iss_parameter_supported", json!(true));
    field("client_id_metadata_document_supported", json!(options.cimd_supported));
    if openid {
        field("subject_types_supported", json!(["public"]));
        field("id_token_signing_alg_values_supported", json!(["RS256"]));
        field("jwks_uri", json!(format!("{issuer}/jwks")));
    }
    axum::Json(overridden(document, &options.as_metadata_overrides)).into_response()
}

/// `GET /authorize`.
async fn authorize(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let pairs = decode_pairs(query.unwrap_or_default().as_bytes());
    let (cimd_supported, mix_up) = {
        let mut inner = shared.lock();
        inner.stats.authorize_requests.push(pairs.clone());
        (inner.options.cimd_supported, inner.options.mix_up.clone())
    };
    if let Some(mix_up) = mix_up {
        return forward(&pairs, &mix_up);
    }
    let params = match Params::parse(&pairs) {
        Ok(params) => params,
        Err(key) => return plain_400(format!("parameter {key} given more than once")),
    };
    let Some(client_id) = params.get("client_id") else {
        return plain_400("missing client_id");
    };
    let Some(redirect_uri) = params.get("redirect_uri") else {
        return plain_400("missing redirect_uri");
    };
    // A URL client id is a Client ID Metadata Document, fetched without holding the lock.
    let is_url = client_id.starts_with("https://") || client_id.starts_with("http://");
    let cimd = if is_url && cimd_supported {
        shared.lock().stats.cimd_fetches.push(client_id.to_owned());
        match fetch_client_metadata(client_id, redirect_uri).await {
            Ok(()) => true,
            Err(why) => return plain_400(format!("client metadata document {client_id}: {why}")),
        }
    } else {
        false
    };

    let mut inner = shared.lock();
    if cimd {
        inner.cimd_clients.insert(client_id.to_owned());
    } else {
        match inner.clients.get(client_id) {
            None => return plain_400(format!("unknown client_id {client_id:?}")),
            Some(client) if !client.redirect_uris.iter().any(|uri| uri == redirect_uri) => {
                return plain_400(format!(
                    "redirect_uri {redirect_uri:?} is not registered for this client"
                ));
            }
            Some(_) => {}
        }
    }
    let Ok(mut redirect) = Url::parse(redirect_uri) else {
        return plain_400("redirect_uri is not a URL");
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
    let expected = inner.resource();
    match params.get("resource") {
        None => return plain_400("missing resource (RFC 8707)"),
        Some(resource) if resource != expected => {
            return plain_400(format!("resource {resource:?} is not {expected:?}"));
        }
        Some(_) => {}
    }

    let options = inner.options.clone();
    {
        let mut out = redirect.query_pairs_mut();
        match options.authorize_outcome {
            AuthorizeOutcome::Approve => {
                let requested: Vec<String> = params
                    .get("scope")
                    .unwrap_or_default()
                    .split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                let code = random_token("mcp_code_");
                let record = CodeRecord {
                    grant: Grant {
                        user: inner.next_user.clone(),
                        client_id: client_id.to_owned(),
                        resource: expected,
                        scopes: options.granted_scopes.unwrap_or(requested),
                    },
                    redirect_uri: redirect_uri.to_owned(),
                    code_challenge: challenge.to_owned(),
                    issued_at: Instant::now(),
                    used: false,
                };
                inner.codes.insert(code.clone(), record);
                inner.stats.issued_codes.push(code.clone());
                out.append_pair("code", &code);
            }
            AuthorizeOutcome::Deny => {
                out.append_pair("error", "access_denied");
                out.append_pair("error_description", "The user denied the request");
            }
            AuthorizeOutcome::Fail => {
                out.append_pair("error", "server_error");
                out.append_pair("error_description", "The fake authorization server was told to fail");
            }
        }
        out.append_pair("state", state);
        match options.iss {
            IssMode::Correct => {
                out.append_pair("iss", &inner.issuer);
            }
            IssMode::Wrong => {
                out.append_pair("iss", WRONG_ISSUER);
            }
            IssMode::Omitted => {}
        }
    }
    (StatusCode::FOUND, [(header::LOCATION, redirect.to_string())]).into_response()
}

/// [`MixUp`]: a 302 to the other server's authorization endpoint with this request's parameters,
/// its `resource` (and the client id and redirect URI when set) replaced.
fn forward(pairs: &[(String, String)], mix_up: &MixUp) -> Response {
    let Ok(mut target) = Url::parse(&mix_up.authorize_url) else {
        return plain_400("the mix-up's authorize_url is not a URL");
    };
    {
        let mut out = target.query_pairs_mut();
        for (name, value) in pairs {
            let value = match name.as_str() {
                "resource" => &mix_up.resource,
                "client_id" => mix_up.client_id.as_ref().unwrap_or(value),
                "redirect_uri" => mix_up.redirect_uri.as_ref().unwrap_or(value),
                _ => value,
            };
            out.append_pair(name, value);
        }
    }
    (StatusCode::FOUND, [(header::LOCATION, target.to_string())]).into_response()
}

/// Fetches the Client ID Metadata Document at `client_id` (https, or http on loopback; no
/// redirects) and checks it names itself and lists `redirect_uri`.
async fn fetch_client_metadata(client_id: &str, redirect_uri: &str) -> Result<(), String> {
    let url = Url::parse(client_id).map_err(|e| format!("not a URL: {e}"))?;
    let loopback = matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    if !(url.scheme() == "https" || (url.scheme() == "http" && loopback)) {
        return Err("must be https (or http on loopback)".to_owned());
    }
    if url.path() == "/" || url.fragment().is_some() {
        return Err("must have a path and no fragment".to_owned());
    }
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(CIMD_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let response = http
        .get(url)
        .header(header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("fetch: {e}"))?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("answered {}", response.status()));
    }
    let document: Value = response.json().await.map_err(|e| format!("not JSON: {e}"))?;
    if document["client_id"].as_str() != Some(client_id) {
        return Err(format!("its client_id is {}, not the URL", document["client_id"]));
    }
    let listed = document["redirect_uris"]
        .as_array()
        .is_some_and(|uris| uris.iter().any(|uri| uri.as_str() == Some(redirect_uri)));
    if !listed {
        return Err(format!("redirect_uris do not list {redirect_uri:?}"));
    }
    match document["token_endpoint_auth_method"].as_str() {
        None | Some("none") => Ok(()),
        Some(other) => Err(format!("token_endpoint_auth_method {other:?}: only none is supported")),
    }
}
