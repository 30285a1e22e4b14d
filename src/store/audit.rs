//! The audit trail's rows: what happened to a principal's access, when, and from where. Rows are
//! only ever appended and listed; no secret is ever part of one (the recorder in `crate::audit`
//! decides what goes in, this module only stores it).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::StoreError;
use super::rows::{Native, parse_principal};
use crate::domain::Principal;

/// What happened: a fixed set, stored as its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    ConnectionCreated,
    ConnectionRefreshed,
    ConnectionBroken,
    ConnectionRevoked,
    FormSaved,
    FormReplaced,
    FormDeleted,
    ElicitationCreated,
    ElicitationCompleted,
    ElicitationDeclined,
    ElicitationExpired,
    ElicitationFailed,
    CallAllowed,
    CallRefused,
    /// An operator's command (what it did is in the detail).
    Admin,
    /// An approver approved or denied a request (the subject is the approval's id).
    ApprovalDecided,
}

impl AuditAction {
    pub const ALL: [AuditAction; 16] = [
        AuditAction::ConnectionCreated,
        AuditAction::ConnectionRefreshed,
        AuditAction::ConnectionBroken,
        AuditAction::ConnectionRevoked,
        AuditAction::FormSaved,
        AuditAction::FormReplaced,
        AuditAction::FormDeleted,
        AuditAction::ElicitationCreated,
        AuditAction::ElicitationCompleted,
        AuditAction::ElicitationDeclined,
        AuditAction::ElicitationExpired,
        AuditAction::ElicitationFailed,
        AuditAction::CallAllowed,
        AuditAction::CallRefused,
        AuditAction::Admin,
        AuditAction::ApprovalDecided,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::ConnectionCreated => "connection.created",
            AuditAction::ConnectionRefreshed => "connection.refreshed",
            AuditAction::ConnectionBroken => "connection.broken",
            AuditAction::ConnectionRevoked => "connection.revoked",
            AuditAction::FormSaved => "form.saved",
            AuditAction::FormReplaced => "form.replaced",
            AuditAction::FormDeleted => "form.deleted",
            AuditAction::ElicitationCreated => "elicitation.created",
            AuditAction::ElicitationCompleted => "elicitation.completed",
            AuditAction::ElicitationDeclined => "elicitation.declined",
            AuditAction::ElicitationExpired => "elicitation.expired",
            AuditAction::ElicitationFailed => "elicitation.failed",
            AuditAction::CallAllowed => "call.allowed",
            AuditAction::CallRefused => "call.refused",
            AuditAction::Admin => "admin",
            AuditAction::ApprovalDecided => "approval.decided",
        }
    }

    /// The action named `text`, as [`Self::as_str`] writes it.
    pub fn named(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|action| action.as_str() == text)
    }

    pub(super) fn parse(text: &str) -> Result<Self, StoreError> {
        Self::ALL
            .into_iter()
            .find(|action| action.as_str() == text)
            .ok_or_else(|| StoreError::Corrupt(format!("audit action {text:?}")))
    }
}

/// One thing that happened, as appended.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub at: DateTime<Utc>,
    pub principal: Principal,
    pub action: AuditAction,
    /// A provider, form id, elicitation id, tool or upstream: never a secret.
    pub subject: String,
    /// The client's address, after trusted proxies.
    pub client_address: Option<String>,
    /// The MCP client's name, from its session's `clientInfo`.
    pub client_name: Option<String>,
    /// A small JSON object, never a secret.
    pub detail: Value,
}

/// A stored entry with its number (ascending in the order rows were appended).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: i64,
    pub entry: AuditEntry,
}

/// Which entries to list: newest first, at most `limit`.
#[derive(Debug, Clone)]
pub struct AuditQuery {
    pub principal: Option<Principal>,
    pub since: Option<DateTime<Utc>>,
    pub limit: usize,
}

/// A page of the trail as the operator pages filter it: newest first, `offset` entries skipped,
/// at most `limit`. `since` is inclusive, `until` exclusive.
#[derive(Debug, Clone, Default)]
pub struct AuditSearch {
    pub principal: Option<Principal>,
    pub action: Option<AuditAction>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub offset: usize,
    pub limit: usize,
}

/// The audit trail: appended to, listed, never changed.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends `entries` in one transaction: all of them, or none.
    async fn append_audit(&self, entries: &[AuditEntry]) -> Result<(), StoreError>;

    /// The entries matching `query`, newest first.
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;

    /// The entries matching `search`, newest first.
    async fn search_audit(&self, search: &AuditSearch) -> Result<Vec<AuditRecord>, StoreError>;
}

/// A stored row as the backend returns it.
pub(super) type AuditRow<N> = (
    i64,
    <N as Native>::Time,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    <N as Native>::Json,
);

/// Reads a stored row back.
pub(super) fn read_row<N: Native>(row: AuditRow<N>) -> Result<AuditRecord, StoreError> {
    let (id, at, principal, action, subject, client_address, client_name, detail) = row;
    Ok(AuditRecord {
        id,
        entry: AuditEntry {
            at: N::time(at)?,
            principal: parse_principal(&principal)?,
            action: AuditAction::parse(&action)?,
            subject,
            client_address,
            client_name,
            detail: N::json(detail, "audit detail")?,
        },
    })
}

/// The columns in the order [`read_row`] reads them.
pub(super) const AUDIT_COLUMNS: &str = "id, at, principal, action, subject, client_address, client_name, detail";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_as_itself() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()).expect("parse"), action);
        }
        assert!(AuditAction::parse("connection.stolen").is_err());
    }
}
