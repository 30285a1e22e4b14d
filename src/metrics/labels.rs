//! The label values metrics may carry, each from a fixed list or from configuration: a method,
//! outcome or kind is one of the words below, a provider or upstream one of the configured ids.
//! Nothing a client, a user or a request chooses (a principal, an id, a URL, an argument) can
//! become a label value, so every metric has a bounded number of series.

use std::collections::HashSet;

use prometheus_client::encoding::EncodeLabelSet;

use crate::jsonrpc::{OFFERED_METHODS, OWN_METHODS};

/// The value of a label whose value is not on its list.
pub const OTHER: &str = "other";

/// `method` when it is an MCP method gatehouse answers (its own or the upstreams' it offers), else
/// [`OTHER`].
pub fn method(method: &str) -> &'static str {
    OWN_METHODS
        .iter()
        .chain(OFFERED_METHODS.iter())
        .find(|known| **known == method)
        .copied()
        .unwrap_or(OTHER)
}

/// How an MCP request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpOutcome {
    /// A result.
    Ok,
    /// A tool result with `isError` (what the model is told: a failure, a link to open).
    ToolError,
    /// Error -32042: the user must finish something in a browser first.
    ElicitationRequired,
    /// A 2026-07-28 `input_required` result.
    InputRequired,
    /// An error the request caused (bad params, unknown method, a refused header).
    ClientError,
    /// The database could not be reached (503).
    Unavailable,
    /// Every database connection was busy (503): an overload, not an outage.
    Busy,
    /// An internal error.
    ServerError,
}

impl McpOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            McpOutcome::Ok => "ok",
            McpOutcome::ToolError => "tool_error",
            McpOutcome::ElicitationRequired => "elicitation_required",
            McpOutcome::InputRequired => "input_required",
            McpOutcome::ClientError => "client_error",
            McpOutcome::Unavailable => "unavailable",
            McpOutcome::Busy => "busy",
            McpOutcome::ServerError => "server_error",
        }
    }
}

/// What an elicitation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitationKind {
    /// A sign-in at a provider.
    Connection,
    /// A hosted form.
    Form,
    /// Another person's approval of a call.
    Approval,
}

impl ElicitationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ElicitationKind::Connection => "connection",
            ElicitationKind::Form => "form",
            ElicitationKind::Approval => "approval",
        }
    }
}

/// What happened to an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitationOutcome {
    Created,
    Completed,
    Declined,
    Expired,
    /// Ended as failed, or a sign-in the provider failed (the elicitation stays open for another try).
    Failed,
}

impl ElicitationOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ElicitationOutcome::Created => "created",
            ElicitationOutcome::Completed => "completed",
            ElicitationOutcome::Declined => "declined",
            ElicitationOutcome::Expired => "expired",
            ElicitationOutcome::Failed => "failed",
        }
    }
}

/// How a token refresh at a provider ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshOutcome {
    Refreshed,
    /// The provider refused the refresh token: the connection is broken.
    Refused,
    /// The provider could not be reached; nothing changed.
    Unavailable,
}

impl RefreshOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RefreshOutcome::Refreshed => "refreshed",
            RefreshOutcome::Refused => "refused",
            RefreshOutcome::Unavailable => "unavailable",
        }
    }
}

/// How a tool call forwarded to an upstream MCP server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamOutcome {
    Ok,
    /// A tool result with `isError`: the upstream's, or gatehouse's when it could not reach it.
    Error,
    /// The upstream (or the gate before it) wants the user in a browser first.
    ElicitationRequired,
    /// The upstream refused the user's credentials.
    Refused,
}

impl UpstreamOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamOutcome::Ok => "ok",
            UpstreamOutcome::Error => "error",
            UpstreamOutcome::ElicitationRequired => "elicitation_required",
            UpstreamOutcome::Refused => "refused",
        }
    }
}

/// How listing an upstream's tools ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListingOutcome {
    /// A catalogue other than the one offered.
    Changed,
    Unchanged,
    Failed,
}

impl ListingOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ListingOutcome::Changed => "changed",
            ListingOutcome::Unchanged => "unchanged",
            ListingOutcome::Failed => "failed",
        }
    }
}

/// Names taken from configuration (provider or upstream ids); anything else is [`OTHER`].
#[derive(Debug, Default)]
pub struct Configured(HashSet<String>);

impl Configured {
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self(names.into_iter().collect())
    }

    pub fn label(&self, name: &str) -> String {
        if self.0.contains(name) {
            name.to_owned()
        } else {
            OTHER.to_owned()
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MethodOutcome {
    pub method: &'static str,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Method {
    pub method: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindOutcome {
    pub kind: &'static str,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProviderOutcome {
    pub provider: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Outcome {
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Provider {
    pub provider: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub upstream: String,
    pub outcome: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_methods_and_configured_names_become_label_values() {
        assert_eq!(method("tools/call"), "tools/call");
        assert_eq!(method("tools/call2"), OTHER);
        assert_eq!(method("alice@example.com"), OTHER);
        let providers = Configured::new(["github".to_owned()]);
        assert_eq!(providers.label("github"), "github");
        assert_eq!(providers.label("https://evil.example/"), OTHER);
    }
}
