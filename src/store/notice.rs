//! The bus's wire format: what replicas tell each other through PostgreSQL NOTIFY on
//! [`NOTIFY_CHANNEL`], encoded by [`Notice::encode`] and read back by [`Notice::parse`], the only
//! writer and reader of these payloads.
//!
//! A payload is a one-letter kind, a space, and the kind's fields:
//!
//! | payload                    | notice                         | sent when                                 |
//! |----------------------------|--------------------------------|-------------------------------------------|
//! | `e <session>`              | [`Notice::Appended`]           | an event was appended to the session's log |
//! | `s <session>`              | [`Notice::Changed`]            | the session changed or ended              |
//! | `c <principal>`            | [`Notice::ConnectionsChanged`] | the principal's connections changed       |
//! | `a <elicitation> <action>` | [`Notice::Answered`]           | a client answered an in-call elicitation  |
//! | `r <session> <stream>`     | [`Notice::Resumed`]            | a client resumed the session's stream     |
//! | `t <upstream>`             | [`Notice::CatalogueChanged`]   | an upstream's tool catalogue changed      |
//! | `x <session> <id>`         | [`Notice::CallCancelled`]      | a client cancelled its request `id` (JSON) |
//! | `y <session> <relay> <answer>` | [`Notice::RelayAnswered`]  | a client answered a relayed request (JSON) |
//! | `p <json>`                 | [`Notice::ParkedResume`]       | a retry brings answers for a parked call  |
//! | `o <json>`                 | [`Notice::ParkedOutcome`]      | a parked call's outcome, for its retry    |
//!
//! A principal may contain spaces, so it is the whole rest of its payload. After a session, further
//! fields are ignored: replicas of earlier versions sent the event's sequence number after it. An
//! upstream id is an identifier (ASCII letters, digits, `-`, `_`); a payload naming anything else
//! is not read.
//!
//! Where a statement notifies for rows only the database knows (the sessions an idle sweep deletes,
//! the session of the elicitation a statement completes), the payload is built in SQL by the SQL
//! twins of the encoder below ([`Notice::appended_sql`], [`Notice::changed_sql`]).

use crate::domain::{ElicitationId, Principal, SessionId, StreamId};

/// The channel every replica LISTENs on.
pub const NOTIFY_CHANNEL: &str = "gatehouse";

const APPENDED: &str = "e";
const CHANGED: &str = "s";
const CONNECTIONS_CHANGED: &str = "c";
const ANSWERED: &str = "a";
const RESUMED: &str = "r";
const CATALOGUE_CHANGED: &str = "t";
const CALL_CANCELLED: &str = "x";
const RELAY_ANSWERED: &str = "y";
const PARKED_RESUME: &str = "p";
const PARKED_OUTCOME: &str = "o";

/// What a replica learns from the bus.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// An event was appended to the session's log.
    Appended(SessionId),
    /// The session changed or ended: cached copies are stale.
    Changed(SessionId),
    /// The principal's connections changed: cached copies are stale.
    ConnectionsChanged(Principal),
    /// A client answered an in-call `elicitation/create`; the replica whose call waits for it
    /// takes it from here.
    Answered(ElicitationId, ClientAction),
    /// A client resumed the session's events (`Last-Event-ID`) on the named stream: the
    /// session's older streams end, on every replica.
    Resumed(SessionId, StreamId),
    /// The named upstream's stored tool catalogue changed: replicas reload it.
    CatalogueChanged(String),
    /// A client cancelled the request whose id is this JSON text; the replica running it stops it.
    CallCancelled(SessionId, String),
    /// A client answered the relayed request named (an id without spaces) with this JSON text
    /// (`{"result": ...}` or `{"error": ...}`); the replica whose call waits takes it from here.
    RelayAnswered(SessionId, String, String),
    /// A 2026-07-28 retry brings the client's answers for an upstream call parked on another
    /// replica (JSON: that replica, the call, its principal, the answers, and the reply key).
    ParkedResume(String),
    /// A parked call's outcome (JSON, with the reply key), for the replica whose retry waits.
    ParkedOutcome(String),
}

/// A client's answer to `elicitation/create` in URL mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    /// The user agreed to open the URL (the interaction is not finished yet).
    Accept,
    Decline,
    Cancel,
}

impl ClientAction {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "accept" => Some(ClientAction::Accept),
            "decline" => Some(ClientAction::Decline),
            "cancel" => Some(ClientAction::Cancel),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClientAction::Accept => "accept",
            ClientAction::Decline => "decline",
            ClientAction::Cancel => "cancel",
        }
    }
}

impl Notice {
    /// The NOTIFY payload announcing this notice.
    pub fn encode(&self) -> String {
        match self {
            Notice::Appended(session) => format!("{APPENDED} {session}"),
            Notice::Changed(session) => format!("{CHANGED} {session}"),
            Notice::ConnectionsChanged(principal) => format!("{CONNECTIONS_CHANGED} {principal}"),
            Notice::Answered(elicitation, action) => format!("{ANSWERED} {elicitation} {}", action.as_str()),
            Notice::Resumed(session, stream) => format!("{RESUMED} {session} {stream}"),
            Notice::CatalogueChanged(upstream) => format!("{CATALOGUE_CHANGED} {upstream}"),
            Notice::CallCancelled(session, id) => format!("{CALL_CANCELLED} {session} {id}"),
            Notice::RelayAnswered(session, relay, answer) => format!("{RELAY_ANSWERED} {session} {relay} {answer}"),
            Notice::ParkedResume(json) => format!("{PARKED_RESUME} {json}"),
            Notice::ParkedOutcome(json) => format!("{PARKED_OUTCOME} {json}"),
        }
    }

    /// Reads a NOTIFY payload; `None` when it is none of the payloads above.
    pub fn parse(payload: &str) -> Option<Self> {
        let (kind, fields) = payload.split_once(' ')?;
        match kind {
            APPENDED => Some(Notice::Appended(first_field(fields).parse().ok()?)),
            CHANGED => Some(Notice::Changed(first_field(fields).parse().ok()?)),
            CONNECTIONS_CHANGED => Principal::parse(fields).ok().map(Notice::ConnectionsChanged),
            ANSWERED => {
                let (id, action) = fields.split_once(' ')?;
                Some(Notice::Answered(id.parse().ok()?, ClientAction::parse(action)?))
            }
            RESUMED => {
                let (session, stream) = fields.split_once(' ')?;
                Some(Notice::Resumed(session.parse().ok()?, stream.parse().ok()?))
            }
            CATALOGUE_CHANGED => is_upstream_id(fields).then(|| Notice::CatalogueChanged(fields.to_owned())),
            CALL_CANCELLED => {
                let (session, id) = fields.split_once(' ')?;
                Some(Notice::CallCancelled(session.parse().ok()?, id.to_owned()))
            }
            RELAY_ANSWERED => {
                let (session, rest) = fields.split_once(' ')?;
                let (relay, answer) = rest.split_once(' ')?;
                Some(Notice::RelayAnswered(
                    session.parse().ok()?,
                    relay.to_owned(),
                    answer.to_owned(),
                ))
            }
            PARKED_RESUME => Some(Notice::ParkedResume(fields.to_owned())),
            PARKED_OUTCOME => Some(Notice::ParkedOutcome(fields.to_owned())),
            _ => None,
        }
    }

    /// The SQL twin of `encode` for [`Notice::Appended`]: an SQL expression for the payload
    /// announcing an event in the session whose id is the SQL expression `session`.
    pub(super) fn appended_sql(session: &str) -> String {
        prefixed_sql(APPENDED, session)
    }

    /// The SQL twin of `encode` for [`Notice::Changed`], like [`Notice::appended_sql`].
    pub(super) fn changed_sql(session: &str) -> String {
        prefixed_sql(CHANGED, session)
    }

    /// The SQL twin of `encode` for [`Notice::ConnectionsChanged`], like [`Notice::appended_sql`].
    pub(super) fn connections_changed_sql(principal: &str) -> String {
        prefixed_sql(CONNECTIONS_CHANGED, principal)
    }

    /// The SQL twin of `encode` for [`Notice::CatalogueChanged`], like [`Notice::appended_sql`].
    pub(super) fn catalogue_changed_sql(upstream: &str) -> String {
        prefixed_sql(CATALOGUE_CHANGED, upstream)
    }
}

/// A payload of one field, the SQL expression `field`, after `kind`.
fn prefixed_sql(kind: &str, field: &str) -> String {
    format!("'{kind} ' || {field}")
}

fn first_field(fields: &str) -> &str {
    fields.split(' ').next().unwrap_or(fields)
}

/// Whether `text` can be an upstream's id: a non-empty identifier of ASCII letters, digits, `-`
/// and `_`.
fn is_upstream_id(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests;
