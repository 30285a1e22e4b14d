//! MCP sessions as the store keeps them: the record written at `initialize` and the messages
//! queued on a session's event log. The operations on them are the [`Store`](super::Store) trait's.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::{LogLevel, Principal, ProtocolVersion, SessionId};

/// An MCP session as persisted at `initialize`.
#[derive(Debug, Clone)]
pub struct SessionRecord {
    pub id: SessionId,
    pub principal: Principal,
    pub protocol_version: ProtocolVersion,
    pub client_info: Value,
    pub client_capabilities: Value,
    pub log_level: Option<LogLevel>,
    pub created_at: DateTime<Utc>,
}

/// One message queued for a session's standalone SSE stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub message: Value,
    /// When it was appended (for an elicitation's completion: when it completed).
    pub created_at: DateTime<Utc>,
}

/// What a stream's read of its session's log took: the events after its cursor, oldest first, and
/// whether they are now this stream's to write (the delivered mark was at the cursor and moved to
/// the last of them). Nothing is claimed when there are no events.
#[derive(Debug, Clone, PartialEq)]
pub struct TakenEvents {
    pub events: Vec<StoredEvent>,
    pub claimed: bool,
}
