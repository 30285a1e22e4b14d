//! Finding a remote MCP server's authorization server, as the MCP authorization specification
//! says: the `resource_metadata` of its 401 challenge, else its well-known Protected Resource
//! Metadata (RFC 9728), whose `resource` must name the server; then the authorization server's
//! metadata (RFC 8414, then OpenID discovery, with the specification's path rules), whose
//! `issuer` must be the one named and which must offer PKCE S256. Every URL the server names is
//! held to its reach (`reach`): a public server cannot send gatehouse to a private address.
//!
//! rmcp's `AuthorizationManager` does this for one user of one client, but keeps the resource it
//! found to itself, falls back to made-up endpoints when nothing is found, and follows redirects
//! when registering; gatehouse needs the parts, shared by every user, and stricter.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use serde::Deserialize;
use url::Url;

use crate::outbound::reach::Reach;
use crate::outbound::{Guarded, read_bounded};

/// Time allowed for one request, and the largest document read.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_DOCUMENT: usize = 256 * 1024;

/// What discovery found: everything a sign-in at the server's authorization server needs but a
/// client.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The protected resource, as its metadata names it: sent as `resource` (RFC 8707).
    pub resource: Url,
    /// What to ask for when the operator configured no scopes: the challenge's `scope`, else the
    /// metadata's `scopes_supported`.
    pub scopes: Vec<String>,
    pub server: ServerMetadata,
}

/// The parts of the authorization server's metadata gatehouse uses.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: Url,
    pub token_endpoint: Url,
    pub registration_endpoint: Option<Url>,
    pub revocation_endpoint: Option<Url>,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

/// The parts of a `WWW-Authenticate: Bearer ...` challenge discovery reads.
#[derive(Debug, Default, PartialEq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
}

impl Challenge {
    /// The Bearer challenge's `resource_metadata` and `scope` parameters (RFC 6750 3, RFC 9728
    /// 5.1), quoted or not; other schemes' parameters are ignored.
    pub fn parse(header: &str) -> Self {
        let mut challenge = Challenge::default();
        let mut in_bearer = false;
        let mut rest = header.trim();
        while !rest.is_empty() {
            let (token, after) = split_token(rest);
            rest = after.trim_start();
            if let Some(value_part) = rest.strip_prefix('=') {
                let (value, after) = parameter_value(value_part.trim_start());
                rest = after.trim_start().trim_start_matches(',').trim_start();
                if in_bearer {
                    match token.to_ascii_lowercase().as_str() {
                        "resource_metadata" => challenge.resource_metadata = Some(value),
                        "scope" => challenge.scope = Some(value),
                        _ => {}
                    }
                }
            } else {
                // A scheme name starts a challenge.
                in_bearer = token.eq_ignore_ascii_case("bearer");
                rest = rest.trim_start_matches(',').trim_start();
            }
        }
        challenge
    }
}

fn split_token(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| c.is_whitespace() || c == '=' || c == ',')
        .unwrap_or(text.len());
    (&text[..end], &text[end..])
}

/// A quoted string (with `\` escapes) or a token, and the text after it.
fn parameter_value(text: &str) -> (String, &str) {
    let Some(quoted) = text.strip_prefix('"') else {
        let (token, rest) = split_token(text);
        return (token.to_owned(), rest);
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '"' => return (value, &quoted[i + 1..]),
            c => value.push(c),
        }
    }
    (value, "")
}

/// Fetches documents for discovery within the bounds, from URLs no more internal than the server.
pub struct Discovery<'a> {
    /// The MCP server as configured.
    upstream: &'a Url,
    reach: Reach,
    guarded: &'a Guarded,
    http: reqwest::Client,
}

impl<'a> Discovery<'a> {
    pub async fn new(upstream: &'a Url, guarded: &'a Guarded) -> Result<Self, String> {
        let reach = guarded.reach_of(upstream).await?;
        let http = guarded.client(reach).clone();
        Ok(Self {
            upstream,
            reach,
            guarded,
            http,
        })
    }

    /// How internal the server is: every later request on its say is held to it.
    pub fn reach(&self) -> Reach {
        self.reach
    }

    /// The client for further requests on the server's say (registration): it reaches nothing
    /// more internal than the server.
    pub fn client(&self) -> &reqwest::Client {
        &self.http
    }

    /// Everything a sign-in needs but a client.
    pub async fn run(&self) -> Result<Discovered, String> {
        let reach = self.reach;
        let challenge = self.challenge().await?;
        let (document_url, metadata) = match &challenge.resource_metadata {
            Some(advertised) => {
                let url = self.upstream.join(advertised).map_err(|e| {
                    format!("its challenge names resource metadata at {advertised:?}, which is not a URL: {e}")
                })?;
                let metadata = self
                    .resource_metadata(&url, reach)
                    .await?
                    .ok_or_else(|| format!("its challenge names resource metadata at {url}, which answered 404"))?;
                (url, metadata)
            }
            None => self.well_known_resource_metadata(reach).await?,
        };
        if !covers(&metadata.resource, self.upstream) {
            return Err(format!(
                "its resource metadata ({document_url}) is for {:?}, not for {}",
                metadata.resource, self.upstream
            ));
        }
        let resource = Url::parse(&metadata.resource)
            .map_err(|e| format!("its resource metadata names resource {:?}: {e}", metadata.resource))?;
        let Some(issuer) = metadata.authorization_servers.first() else {
            return Err(format!(
                "its resource metadata ({document_url}) names no authorization server"
            ));
        };
        let server = self.server_metadata(issuer, reach, true).await?;
        let challenged: Vec<String> = challenge
            .scope
            .as_deref()
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let scopes = if challenged.is_empty() {
            metadata.scopes_supported
        } else {
            challenged
        };
        Ok(Discovered {
            resource,
            scopes,
            server,
        })
    }

    /// The server's answer to a request without credentials: the parameters of its 401's Bearer
    /// challenge, or none when it asked for nothing.
    async fn challenge(&self) -> Result<Challenge, String> {
        let response = self
            .http
            .post(self.upstream.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(r#"{"jsonrpc":"2.0","id":"gatehouse-discovery","method":"ping"}"#)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("it cannot be reached: {e}"))?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(Challenge::default());
        }
        Ok(response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .map(Challenge::parse)
            .find(|challenge| challenge.resource_metadata.is_some() || challenge.scope.is_some())
            .unwrap_or_default())
    }

    /// RFC 9728 3.1: the well-known URI with the server's path, then the root one.
    async fn well_known_resource_metadata(&self, reach: Reach) -> Result<(Url, ResourceMetadata), String> {
        let path = self.upstream.path().trim_end_matches('/');
        let mut candidates = Vec::new();
        for well_known in [
            format!("/.well-known/oauth-protected-resource{path}"),
            "/.well-known/oauth-protected-resource".to_owned(),
        ] {
            let mut url = self.upstream.clone();
            url.set_path(&well_known);
            url.set_query(None);
            url.set_fragment(None);
            if !candidates.contains(&url) {
                candidates.push(url);
            }
        }
        for url in candidates {
            if let Some(metadata) = self.resource_metadata(&url, reach).await? {
                return Ok((url, metadata));
            }
        }
        Err("it publishes no protected resource metadata (no `resource_metadata` in its 401, none at the well-known URIs)".into())
    }

    /// The metadata of the authorization server `issuer` named by the operator (the identity
    /// provider), held to the same checks but one: an identity provider that does not list its
    /// PKCE methods (Microsoft Entra ID's metadata does not) is taken at its word elsewhere.
    pub async fn authorization_server(&self, issuer: &str) -> Result<ServerMetadata, String> {
        self.server_metadata(issuer, self.reach, false).await
    }

    /// The Protected Resource Metadata at `url`, or None when it answered 404.
    async fn resource_metadata(&self, url: &Url, reach: Reach) -> Result<Option<ResourceMetadata>, String> {
        let Some(body) = self.document(url, reach).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| format!("{url} is not protected resource metadata: {e}"))
    }

    /// The authorization server `issuer`'s metadata, from the first well-known URI that has it;
    /// with `pkce_listed`, it must list S256 (the MCP specification's rule for its servers).
    async fn server_metadata(&self, issuer: &str, reach: Reach, pkce_listed: bool) -> Result<ServerMetadata, String> {
        let issuer_url =
            Url::parse(issuer).map_err(|e| format!("its authorization server {issuer:?} is not a URL: {e}"))?;
        let mut reasons = Vec::new();
        for url in server_metadata_urls(&issuer_url) {
            let body = match self.document(&url, reach).await {
                Ok(Some(body)) => body,
                Ok(None) => {
                    reasons.push(format!("{url}: 404"));
                    continue;
                }
                Err(reason) => {
                    reasons.push(reason);
                    continue;
                }
            };
            let metadata: ServerMetadata = serde_json::from_slice(&body)
                .map_err(|e| format!("{url} is not authorization server metadata: {e}"))?;
            self.check_server(&metadata, issuer, reach, pkce_listed).await?;
            return Ok(metadata);
        }
        Err(format!(
            "the authorization server {issuer} publishes no metadata ({})",
            reasons.join("; ")
        ))
    }

    /// RFC 8414 3.3: the document names the issuer it was asked for; the MCP specification: it
    /// offers PKCE S256; and every endpoint is within reach.
    async fn check_server(
        &self,
        metadata: &ServerMetadata,
        issuer: &str,
        reach: Reach,
        pkce_listed: bool,
    ) -> Result<(), String> {
        if metadata.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(format!(
                "the authorization server's metadata names the issuer {:?}, not {issuer:?} as the resource metadata says",
                metadata.issuer
            ));
        }
        let listed = &metadata.code_challenge_methods_supported;
        if !listed.iter().any(|m| m == "S256") && (pkce_listed || !listed.is_empty()) {
            return Err(format!(
                "the authorization server {issuer} does not offer PKCE with S256 (code_challenge_methods_supported)"
            ));
        }
        let endpoints = [
            Some(&metadata.authorization_endpoint),
            Some(&metadata.token_endpoint),
            metadata.registration_endpoint.as_ref(),
            metadata.revocation_endpoint.as_ref(),
        ];
        for url in endpoints.into_iter().flatten() {
            self.within_reach(url, reach).await?;
        }
        Ok(())
    }

    /// A URL the server named may be fetched: https (or http when the server itself is), and no
    /// more internal than the server.
    async fn within_reach(&self, url: &Url, reach: Reach) -> Result<(), String> {
        let plain_allowed = self.upstream.scheme() == "http";
        if !(url.scheme() == "https" || (url.scheme() == "http" && plain_allowed)) {
            return Err(format!("{url} is not an https URL"));
        }
        self.guarded.within(url, reach).await
    }

    /// A JSON document, or None on 404; redirects are not followed.
    async fn document(&self, url: &Url, reach: Reach) -> Result<Option<Vec<u8>>, String> {
        self.within_reach(url, reach).await?;
        let response = self
            .http
            .get(url.clone())
            .header(ACCEPT, "application/json")
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("{url} cannot be reached: {e}"))?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => read_bounded(response, MAX_DOCUMENT)
                .await
                .map(Some)
                .map_err(|e| format!("{url}: {e}")),
            status => Err(format!("{url} answered {status}")),
        }
    }
}

/// Whether the resource a metadata document names covers the configured server: the same
/// origin, and a path the server's path is within (at a segment boundary).
fn covers(resource: &str, upstream: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.origin() != upstream.origin() || resource.query().is_some() || resource.fragment().is_some() {
        return false;
    }
    let base = resource.path().trim_end_matches('/');
    let path = upstream.path();
    path == base || path.trim_end_matches('/') == base || path.starts_with(&format!("{base}/"))
}

/// The MCP specification's order: for an issuer with a path, RFC 8414 with the path after the
/// well-known segment, OpenID discovery the same way, then OpenID discovery after the path; for
/// one without, RFC 8414 then OpenID discovery.
pub fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |path: String| {
        let mut url = issuer.clone();
        url.set_path(&path);
        url.set_query(None);
        url.set_fragment(None);
        url
    };
    let mut urls = vec![
        at(format!("/.well-known/oauth-authorization-server{path}")),
        at(format!("/.well-known/openid-configuration{path}")),
    ];
    if !path.is_empty() {
        urls.push(at(format!("{path}/.well-known/openid-configuration")));
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_quoted_or_not_and_only_from_bearer() {
        let header = r#"Bearer realm="mcp", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="read write""#;
        assert_eq!(
            Challenge::parse(header),
            Challenge {
                resource_metadata: Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp".into()),
                scope: Some("read write".into()),
            }
        );
        let other = r#"Basic resource_metadata="https://evil.example/x", Bearer scope=files"#;
        assert_eq!(
            Challenge::parse(other),
            Challenge {
                resource_metadata: None,
                scope: Some("files".into())
            }
        );
        assert_eq!(
            Challenge::parse(r#"Bearer error="invalid_token", scope="a\"b""#)
                .scope
                .as_deref(),
            Some("a\"b")
        );
        assert_eq!(Challenge::parse(""), Challenge::default());
        assert_eq!(
            Challenge::parse("Bearer resource_metadata=\"unterminated")
                .resource_metadata
                .as_deref(),
            Some("unterminated")
        );
    }

    #[test]
    fn a_resource_covers_the_server_at_or_below_its_path_on_its_origin() {
        let upstream = Url::parse("https://mcp.example.com/v1/mcp").expect("url");
        assert!(covers("https://mcp.example.com/v1/mcp", &upstream));
        assert!(covers("https://mcp.example.com/v1/mcp/", &upstream));
        assert!(covers("https://mcp.example.com/", &upstream));
        assert!(covers("https://mcp.example.com", &upstream));
        assert!(covers("https://mcp.example.com/v1", &upstream));
        assert!(!covers("https://mcp.example.com/v", &upstream));
        assert!(!covers("https://mcp.example.com/v1/mcp/other", &upstream));
        assert!(!covers("https://other.example.com/v1/mcp", &upstream));
        assert!(!covers("http://mcp.example.com/v1/mcp", &upstream));
        assert!(!covers("https://mcp.example.com:8443/v1/mcp", &upstream));
        assert!(!covers("https://mcp.example.com/v1/mcp?tenant=a", &upstream));
        assert!(!covers("not a url", &upstream));
    }

    #[test]
    fn server_metadata_is_looked_for_where_the_mcp_specification_says() {
        let urls = |issuer: &str| -> Vec<String> {
            server_metadata_urls(&Url::parse(issuer).expect("url"))
                .iter()
                .map(Url::to_string)
                .collect()
        };
        assert_eq!(
            urls("https://auth.example.com/tenant1"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            urls("https://auth.example.com/"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
    }
}
