//! gatehouse as a client of a remote MCP server's authorization server: its Client ID Metadata
//! Document (the JSON served at a stable URL under `public_url`, one per authorization server,
//! whose URL is the client id there), and Dynamic Client Registration (RFC 7591) where the server
//! offers it. Each lists that server's own redirect URI alone; a registration's answer is refused
//! unless it names that redirect URI only, and a redirect is never followed.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::config::ClientAuth;
use crate::outbound::read_bounded;
use crate::secret::Secret;

const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_ANSWER: usize = 64 * 1024;
/// What gatehouse calls itself to the people who approve it at an authorization server.
pub const CLIENT_NAME: &str = "gatehouse";

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    Basic,
    Post,
    /// A public client: its id alone, with PKCE.
    None,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Basic => "client_secret_basic",
            AuthMethod::Post => "client_secret_post",
            AuthMethod::None => "none",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "client_secret_basic" => Some(AuthMethod::Basic),
            "client_secret_post" => Some(AuthMethod::Post),
            "none" => Some(AuthMethod::None),
            _ => None,
        }
    }

    /// How a client with a secret sends it (a public client sends its id in the body).
    pub fn client_auth(self) -> ClientAuth {
        match self {
            AuthMethod::Basic => ClientAuth::Basic,
            AuthMethod::Post | AuthMethod::None => ClientAuth::Post,
        }
    }

    /// What to register with, given what the server lists: RFC 8414's default (basic) when it
    /// lists nothing, else basic, post, then none, in that order of preference.
    pub fn preferred(supported: Option<&[String]>) -> Self {
        let Some(supported) = supported else {
            return AuthMethod::Basic;
        };
        [AuthMethod::Basic, AuthMethod::Post, AuthMethod::None]
            .into_iter()
            .find(|m| supported.iter().any(|s| s == m.as_str()))
            .unwrap_or(AuthMethod::Basic)
    }
}

/// A client at an authorization server.
#[derive(Debug, Clone)]
pub struct Registered {
    pub client_id: String,
    pub client_secret: Option<Secret<String>>,
    pub method: AuthMethod,
}

/// gatehouse's Client ID Metadata Document for one authorization server, served at
/// `document_url`, which is its client id there, listing that server's `redirect_uri` alone.
pub fn client_metadata_document(document_url: &str, redirect_uri: &str) -> Value {
    json!({
        "client_id": document_url,
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

#[derive(Deserialize)]
struct RegistrationAnswer {
    client_id: String,
    client_secret: Option<String>,
    redirect_uris: Option<Vec<String>>,
    token_endpoint_auth_method: Option<String>,
}

/// RFC 7591: registers gatehouse at `endpoint` with its one redirect URI, asking for `scopes`.
pub async fn register(
    http: &reqwest::Client,
    endpoint: &Url,
    redirect_uri: &str,
    scopes: &[String],
    method: AuthMethod,
) -> Result<Registered, String> {
    let mut request = json!({
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method.as_str(),
    });
    if !scopes.is_empty() {
        request["scope"] = Value::String(scopes.join(" "));
    }
    let response = http
        .post(endpoint.clone())
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/json")
        .body(request.to_string())
        .timeout(REGISTRATION_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("registration at {endpoint} failed: {e}"))?;
    let status = response.status();
    if status.is_redirection() {
        return Err(format!(
            "registration at {endpoint} answered a redirect ({status}), which gatehouse does not follow"
        ));
    }
    let body = read_bounded(response, MAX_ANSWER)
        .await
        .map_err(|e| format!("registration at {endpoint}: {e}"))?;
    if !status.is_success() {
        let error = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| status.to_string());
        return Err(format!("registration at {endpoint} was refused: {error}"));
    }
    let answer: RegistrationAnswer = serde_json::from_slice(&body)
        .map_err(|e| format!("registration at {endpoint} answered what is not a registration: {e}"))?;
    if answer.client_id.trim().is_empty() {
        return Err(format!("registration at {endpoint} answered an empty client_id"));
    }
    if let Some(uris) = &answer.redirect_uris
        && uris.iter().any(|uri| uri != redirect_uri)
    {
        return Err(format!(
            "registration at {endpoint} answered redirect URIs other than gatehouse's own ({uris:?}); refused"
        ));
    }
    let method = match answer.token_endpoint_auth_method.as_deref() {
        None => method,
        Some(text) => AuthMethod::parse(text).ok_or_else(|| {
            format!(
                "registration at {endpoint} answered token_endpoint_auth_method {text:?}, which gatehouse does not use"
            )
        })?,
    };
    let client_secret = answer.client_secret.filter(|s| !s.is_empty()).map(Secret::new);
    if method != AuthMethod::None && client_secret.is_none() {
        return Err(format!(
            "registration at {endpoint} answered no client_secret for {}",
            method.as_str()
        ));
    }
    Ok(Registered {
        client_id: answer.client_id,
        client_secret: if method == AuthMethod::None {
            None
        } else {
            client_secret
        },
        method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_follows_what_the_server_lists() {
        let list = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(AuthMethod::preferred(None), AuthMethod::Basic);
        assert_eq!(
            AuthMethod::preferred(Some(&list(&["client_secret_post", "none"]))),
            AuthMethod::Post
        );
        assert_eq!(AuthMethod::preferred(Some(&list(&["none"]))), AuthMethod::None);
        assert_eq!(
            AuthMethod::preferred(Some(&list(&["private_key_jwt"]))),
            AuthMethod::Basic
        );
        for method in [AuthMethod::Basic, AuthMethod::Post, AuthMethod::None] {
            assert_eq!(AuthMethod::parse(method.as_str()), Some(method));
        }
    }

    #[test]
    fn the_document_names_itself_and_the_one_redirect_uri() {
        let document = client_metadata_document(
            "https://gh.example.com/oauth/client-metadata/linear",
            "https://gh.example.com/oauth/callback/linear",
        );
        assert_eq!(
            document["client_id"],
            "https://gh.example.com/oauth/client-metadata/linear"
        );
        assert_eq!(
            document["redirect_uris"],
            json!(["https://gh.example.com/oauth/callback/linear"])
        );
        assert_eq!(document["token_endpoint_auth_method"], "none");
    }
}
