//! Announcing a new approval request to its approvers: a JSON POST to the approval's webhook with
//! a Slack-compatible `text` and the link to the request's page, signed with HMAC-SHA256 over the
//! timestamp and the body (`X-Gatehouse-Timestamp`, `X-Gatehouse-Signature: sha256=…`), retried
//! with backoff in the background. It never fails or delays the call; its argument values go out
//! only with `notify.arguments = true`.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::CONTENT_TYPE;
use serde_json::{Map, Value, json};
use sha2::Sha256;

use super::Approval;
use crate::config::NotifyConfig;
use crate::metrics::Metrics;
use crate::secret::Secret;
use crate::store::ElicitationRecord;

/// Attempts per announcement, and the wait before the second (each next one waits four times
/// longer).
const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const TIMEOUT: Duration = Duration::from_secs(10);

/// An approval's webhook.
pub(super) struct Webhook {
    url: String,
    secret: Option<Secret<String>>,
    arguments: bool,
}

impl Webhook {
    pub(super) fn from_config(config: &NotifyConfig) -> Option<Self> {
        Some(Self {
            url: config.webhook.clone()?,
            secret: config.secret.clone(),
            arguments: config.arguments,
        })
    }
}

pub struct Notifier {
    http: reqwest::Client,
    metrics: Arc<Metrics>,
}

impl Notifier {
    pub(super) fn new(http: reqwest::Client, metrics: Arc<Metrics>) -> Self {
        Self { http, metrics }
    }

    /// Posts the announcement of `request` (its page at `page`) in the background.
    pub(super) fn announce(
        &self,
        webhook: &Webhook,
        approval: &Approval,
        request: &ElicitationRecord,
        page: &str,
        arguments: &Map<String, Value>,
    ) {
        let tool = request_tool(request);
        let mut body = json!({
            "text": announcement(&request.principal.to_string(), &approval.title, &tool, page),
            "approval": approval.id,
            "title": approval.title,
            "caller": request.principal.to_string(),
            "client": request.client_name,
            "tool": tool,
            "url": page,
            "expires_at": request.expires_at.to_rfc3339(),
        });
        if webhook.arguments {
            body["arguments"] = Value::Object(arguments.clone());
        }
        let body = body.to_string();
        let (http, metrics) = (self.http.clone(), self.metrics.clone());
        let (url, secret) = (webhook.url.clone(), webhook.secret.clone());
        let id = request.id;
        tokio::spawn(async move {
            let mut backoff = FIRST_BACKOFF;
            for attempt in 1..=ATTEMPTS {
                match post(&http, &url, secret.as_ref(), &body).await {
                    Ok(()) => {
                        metrics.approval_notification(true);
                        return;
                    }
                    Err(why) => {
                        tracing::warn!(elicitation = %id, attempt, %why, "the approval webhook failed");
                    }
                }
                if attempt < ATTEMPTS {
                    tokio::time::sleep(backoff).await;
                    backoff *= 4;
                }
            }
            metrics.approval_notification(false);
        });
    }
}

/// The Slack-style `text` announcing a request: every string in it escaped as Slack's rules say
/// (`&`, `<`, `>`), so what the caller chose (its principal's name, the tool, a resource's URI)
/// can neither make a link nor mention a channel; the one link is the request's page, under
/// `public_url`, with text of gatehouse's own.
fn announcement(principal: &str, title: &str, tool: &str, page: &str) -> String {
    format!(
        "{} asks for approval ({}) of {}: <{}|Open the request>",
        slack_escaped(principal),
        slack_escaped(title),
        slack_escaped(tool),
        slack_escaped(page)
    )
}

/// `text` with Slack's three control characters written as the entities Slack shows as them.
fn slack_escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The tool a request is for, from its stored detail (see `decision`).
pub(crate) fn request_tool(request: &ElicitationRecord) -> String {
    request
        .detail
        .as_deref()
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .and_then(|d| d.get("tool").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

/// The signature of `body` sent at `timestamp`: hex HMAC-SHA256 of `timestamp.body`.
pub fn webhook_signature(secret: &str, timestamp: &str, body: &str) -> String {
    // HMAC takes a key of any length; the error is for fixed-size MACs only.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

async fn post(http: &reqwest::Client, url: &str, secret: Option<&Secret<String>>, body: &str) -> Result<(), String> {
    let mut request = http
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .timeout(TIMEOUT)
        .body(body.to_owned());
    if let Some(secret) = secret {
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let signed = webhook_signature(secret.expose(), &timestamp, body);
        request = request
            .header("X-Gatehouse-Timestamp", timestamp)
            .header("X-Gatehouse-Signature", format!("sha256={signed}"));
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", response.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_the_body() {
        // Computed independently with Python's hmac module.
        assert_eq!(
            webhook_signature("key", "1700000000", "{}"),
            "9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae"
        );
        assert_ne!(
            webhook_signature("key", "1700000000", "{}"),
            webhook_signature("key", "1700000001", "{}")
        );
        assert_eq!(webhook_signature("key", "1", "x").len(), 64);
    }

    #[test]
    fn what_the_caller_chose_can_neither_link_nor_mention() {
        let text = announcement(
            "mallory<!here>",
            "Payments & refunds",
            "resources/read <https://phish.example|Approve now> <!channel>",
            "https://gatehouse.example/approvals/0190",
        );
        assert_eq!(
            text,
            "mallory&lt;!here&gt; asks for approval (Payments &amp; refunds) of resources/read \
             &lt;https://phish.example|Approve now&gt; &lt;!channel&gt;: \
             <https://gatehouse.example/approvals/0190|Open the request>"
        );
        // The only `<` left opens gatehouse's own link.
        assert_eq!(text.matches('<').count(), 1);
    }
}
