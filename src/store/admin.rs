//! What the operator's `gatehouse admin` and `/admin` pages list: every principal's connections,
//! elicitations and sessions, in a chosen order, a page at a time, always bounded. Changes go
//! through the gate and the sessions like any other; only these reads across principals are the
//! operator's own.

use async_trait::async_trait;

use super::{ConnectionRecord, ElicitationRecord, SessionRecord, StoreError};
use crate::domain::{Principal, SessionId, SessionPrefix};

/// The orders connections are listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionOrder {
    /// By principal, then provider.
    #[default]
    Principal,
    /// By provider, then principal.
    Provider,
    /// Most recently changed (created, refreshed, broken) first.
    Updated,
}

impl ConnectionOrder {
    pub const ALL: [ConnectionOrder; 3] = [
        ConnectionOrder::Principal,
        ConnectionOrder::Provider,
        ConnectionOrder::Updated,
    ];

    /// Its name in a query string (`?sort=provider`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionOrder::Principal => "principal",
            ConnectionOrder::Provider => "provider",
            ConnectionOrder::Updated => "updated",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|order| order.as_str() == text)
    }
}

/// Which rows of a list: skip `offset`, then at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub offset: usize,
    pub limit: usize,
}

impl Window {
    /// The first `limit` rows.
    pub fn first(limit: usize) -> Self {
        Self { offset: 0, limit }
    }
}

/// Lists across principals, for the operator.
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// Connections, of one principal or all, in `order`.
    async fn list_connections(
        &self,
        principal: Option<&Principal>,
        order: ConnectionOrder,
        window: Window,
    ) -> Result<Vec<ConnectionRecord>, StoreError>;

    /// Elicitations, only the pending ones or all, newest first.
    async fn list_elicitations(&self, pending_only: bool, window: Window)
    -> Result<Vec<ElicitationRecord>, StoreError>;

    /// Live sessions, of one principal or all, newest first.
    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        window: Window,
    ) -> Result<Vec<SessionRecord>, StoreError>;

    /// The ids of the sessions whose id starts with `prefix`; at most `limit`.
    async fn sessions_with_prefix(&self, prefix: &SessionPrefix, limit: usize) -> Result<Vec<SessionId>, StoreError>;
}
