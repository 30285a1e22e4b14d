//! The identity provider's authorization server metadata: RFC 8414 first, else OpenID Connect
//! discovery, at the URLs the MCP specification gives (`providers::discovery`); fetched when
//! first needed, kept for an hour, and after a failure asked again at most once per retry
//! interval (see `Refreshed`).

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::outbound::read_bounded;
use crate::providers::discovery::server_metadata_urls;
use crate::refreshed::Refreshed;

/// How long fetched metadata is used before it is fetched again.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Time allowed for one request to the provider, and the largest answer read.
pub(super) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const MAX_ANSWER: usize = 512 * 1024;

/// The parts of the metadata gatehouse uses.
#[derive(Debug, Deserialize)]
pub struct AuthServerMetadata {
    /// Exactly as the provider spells it: what `iss` must equal.
    pub issuer: String,
    pub jwks_uri: Option<Url>,
    pub introspection_endpoint: Option<Url>,
    pub authorization_endpoint: Option<Url>,
    pub token_endpoint: Option<Url>,
}

pub struct Discovery {
    issuer: Url,
    http: reqwest::Client,
    metadata: Refreshed<AuthServerMetadata>,
}

impl Discovery {
    pub fn new(issuer: Url, http: reqwest::Client, retry_interval: Duration) -> Self {
        Self {
            issuer,
            http,
            metadata: Refreshed::new(METADATA_TTL, retry_interval),
        }
    }

    /// The metadata, fetched when missing or stale; stale metadata is used while the provider
    /// cannot be reached.
    pub async fn metadata(&self) -> Result<Arc<AuthServerMetadata>, String> {
        self.metadata
            .get(
                None,
                || async {
                    self.fetch().await.inspect_err(|error| {
                        tracing::warn!(issuer = %self.issuer, %error, "cannot fetch the identity provider's metadata");
                    })
                },
                || "the identity provider's metadata could not be fetched recently".to_owned(),
            )
            .await
    }

    async fn fetch(&self) -> Result<AuthServerMetadata, String> {
        let mut reasons = Vec::new();
        for url in server_metadata_urls(&self.issuer) {
            match self.fetch_one(&url).await {
                Ok(metadata) => return Ok(metadata),
                Err(reason) => reasons.push(format!("{url}: {reason}")),
            }
        }
        Err(reasons.join("; "))
    }

    async fn fetch_one(&self, url: &Url) -> Result<AuthServerMetadata, String> {
        let body = get_json(&self.http, url).await?;
        let metadata: AuthServerMetadata =
            serde_json::from_slice(&body).map_err(|e| format!("not authorization server metadata: {e}"))?;
        // RFC 8414 3.3 and OpenID Discovery 4.3: the document must name the issuer it was asked for.
        if metadata.issuer.trim_end_matches('/') != self.issuer.as_str().trim_end_matches('/') {
            return Err(format!("it names another issuer, {}", metadata.issuer));
        }
        Ok(metadata)
    }
}

/// A JSON document, within the size and time bounds.
pub(super) async fn get_json(http: &reqwest::Client, url: &Url) -> Result<Vec<u8>, String> {
    let request = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(FETCH_TIMEOUT)
        .build()
        .map_err(|e| format!("unreachable: {e}"))?;
    let response = crate::telemetry::execute(http, request, "identity.metadata", "identity")
        .await
        .map_err(|e| format!("unreachable: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    read_bounded(response, MAX_ANSWER).await.map_err(|e| e.to_string())
}
