//! The requests `tests/fake_mcp_auth.rs` makes of the fake, as a client would: registration,
//! authorization, token and MCP requests, and a Client ID Metadata Document served on loopback.

use reqwest::StatusCode;
use serde_json::{Value, json};
use url::Url;

use super::common::fake_mcp_auth::FakeMcpAuth;
use super::common::fake_oauth::{bind_local, s256_challenge};

pub const REDIRECT: &str = "http://127.0.0.1:9/oauth/callback";
pub const VERIFIER: &str = "a-code-verifier-of-forty-three-or-more-characters";

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

pub async fn get_json(url: &str) -> Value {
    let response = http().get(url).send().await.expect("GET");
    assert_eq!(response.status(), StatusCode::OK, "GET {url}");
    response.json().await.expect("a JSON body")
}

/// `POST {issuer}/register` with `metadata`: status and body.
pub async fn register(fake: &FakeMcpAuth, metadata: &Value) -> reqwest::Response {
    http()
        .post(format!("{}/register", fake.issuer()))
        .json(metadata)
        .send()
        .await
        .expect("POST /register")
}

/// `/authorize` with a valid request for `client_id`, `overrides` replacing or (empty value)
/// removing parameters.
pub async fn authorize(fake: &FakeMcpAuth, client_id: &str, overrides: &[(&str, &str)]) -> reqwest::Response {
    let challenge = s256_challenge(VERIFIER);
    let resource = fake.mcp_url();
    let mut params: Vec<(&str, &str)> = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("state", "st4te"),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("resource", &resource),
        ("scope", "mcp"),
    ];
    for (name, value) in overrides {
        params.retain(|(key, _)| key != name);
        if !value.is_empty() {
            params.push((name, value));
        }
    }
    let mut url = Url::parse(&format!("{}/authorize", fake.issuer())).expect("URL");
    url.query_pairs_mut().extend_pairs(params);
    http().get(url).send().await.expect("GET /authorize")
}

/// The query of an `/authorize` redirect (asserting it is one, to [`REDIRECT`]).
pub async fn redirect_query(response: reqwest::Response) -> Vec<(String, String)> {
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.unwrap_or_default();
    assert_eq!(status, StatusCode::FOUND, "/authorize: {body}");
    let location = Url::parse(&location.expect("a Location")).expect("an absolute Location");
    assert!(location.as_str().starts_with(REDIRECT), "{location}");
    location.query_pairs().into_owned().collect()
}

/// `POST {issuer}/token` with `form`, Basic credentials when given.
pub async fn token(fake: &FakeMcpAuth, form: &[(&str, &str)], basic: Option<(&str, &str)>) -> (StatusCode, Value) {
    let mut request = http().post(format!("{}/token", fake.issuer())).form(form);
    if let Some((id, secret)) = basic {
        request = request.basic_auth(id, Some(secret));
    }
    let response = request.send().await.expect("POST /token");
    let status = response.status();
    (status, response.json().await.expect("a JSON token answer"))
}

/// The code exchange for `code` by a public client.
pub async fn exchange(fake: &FakeMcpAuth, client_id: &str, code: &str) -> (StatusCode, Value) {
    let resource = fake.mcp_url();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
        ("resource", &resource),
        ("client_id", client_id),
    ];
    token(fake, &form, None).await
}

/// One JSON-RPC request to the fake's `/mcp` with `token`.
pub async fn mcp(fake: &FakeMcpAuth, token: Option<&str>, method: &str, params: Value) -> reqwest::Response {
    let mut request = http()
        .post(fake.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("POST /mcp")
}

pub fn www_authenticate(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The text of a `tools/call` result.
pub async fn tool_text(response: reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("JSON-RPC");
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content: {body}"))
        .to_owned()
}

/// Serves `document` at `/oauth/client-metadata.json` on a loopback port; its URL.
pub async fn serve_document(document: impl FnOnce(&str) -> Value) -> String {
    let (listener, port) = bind_local("client metadata document").await;
    let url = format!("http://127.0.0.1:{port}/oauth/client-metadata.json");
    let body = document(&url);
    let app = axum::Router::new().route(
        "/oauth/client-metadata.json",
        axum::routing::get(move || {
            let body = body.clone();
            async move { axum::Json(body) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}
