//! How records are read back, once for both backends: each table's column list, the row a query
//! of those columns decodes into (a tuple in the list's order: sqlx decodes tuples without its
//! derive macros, whose build compiles both drivers twice), and that row's conversion to the
//! public record. Values the backends store in different native types (times, JSON) are read as
//! the backend's [`Native`] types and converted by it.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    BoundCall, BrowserSessionRecord, CatalogueRecord, ConnectionRecord, ConnectionStatus, ElicitationRecord,
    ElicitationStatus, FormAnswerRecord, FormValuesRecord, OAuthFlowRecord, RegistrationRecord, SessionRecord,
    StoreError, VoteRecord,
};
use crate::domain::{ElicitationId, LogLevel, Principal, ProtocolVersion, SessionId};

/// A backend's own types for the values the backends store differently.
pub trait Native {
    /// A point in time: `timestamptz` on PostgreSQL, Unix milliseconds on SQLite.
    type Time;
    /// A JSON document: `jsonb` on PostgreSQL, text on SQLite.
    type Json;

    fn time(stored: Self::Time) -> Result<DateTime<Utc>, StoreError>;

    /// `what` names the document in the error when it is not JSON.
    fn json(stored: Self::Json, what: &str) -> Result<Value, StoreError>;
}

/// A record, and the row a query of its table's columns decodes into.
pub(super) trait Stored: Sized {
    type Row<N: Native>;

    fn read<N: Native>(row: Self::Row<N>) -> Result<Self, StoreError>;
}

fn optional_time<N: Native>(stored: Option<N::Time>) -> Result<Option<DateTime<Utc>>, StoreError> {
    stored.map(N::time).transpose()
}

pub(super) const SESSION_COLUMNS: &str =
    "id, principal, protocol_version, client_info, client_capabilities, log_level, created_at";

pub(super) type SessionRow<N> = (
    String,
    String,
    String,
    <N as Native>::Json,
    <N as Native>::Json,
    Option<String>,
    <N as Native>::Time,
);

impl Stored for SessionRecord {
    type Row<N: Native> = SessionRow<N>;

    fn read<N: Native>(row: SessionRow<N>) -> Result<Self, StoreError> {
        let (id, principal, protocol_version, client_info, client_capabilities, log_level, created_at) = row;
        Ok(SessionRecord {
            id: parse_session_id(&id)?,
            principal: parse_principal(&principal)?,
            protocol_version: ProtocolVersion::new(protocol_version),
            client_info: N::json(client_info, "client_info")?,
            client_capabilities: N::json(client_capabilities, "client_capabilities")?,
            log_level: log_level
                .map(|level| level.parse::<LogLevel>().map_err(StoreError::Corrupt))
                .transpose()?,
            created_at: N::time(created_at)?,
        })
    }
}

pub(super) const ELICITATION_COLUMNS: &str = "id, principal, session_id, requirement, status, message, url, client_name, created_at, expires_at, completed_at, call_key, detail, oauth_client, call_arguments";

pub(super) type ElicitationRow<N> = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    <N as Native>::Time,
    <N as Native>::Time,
    Option<<N as Native>::Time>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<Vec<u8>>,
);

impl Stored for ElicitationRecord {
    type Row<N: Native> = ElicitationRow<N>;

    fn read<N: Native>(row: ElicitationRow<N>) -> Result<Self, StoreError> {
        let (
            id,
            principal,
            session_id,
            requirement,
            status,
            message,
            url,
            client_name,
            created_at,
            expires_at,
            completed_at,
            call_key,
            detail,
            oauth_client,
            call_arguments,
        ) = row;
        Ok(ElicitationRecord {
            id: parse_elicitation_id(&id)?,
            principal: parse_principal(&principal)?,
            session_id: parse_session_id(&session_id)?,
            requirement,
            status: ElicitationStatus::parse(&status)?,
            message,
            url,
            client_name,
            created_at: N::time(created_at)?,
            expires_at: N::time(expires_at)?,
            completed_at: optional_time::<N>(completed_at)?,
            call_key,
            detail,
            bound: call_arguments.map(|sealed_arguments| BoundCall {
                client: oauth_client,
                sealed_arguments,
            }),
        })
    }
}

pub(super) const FLOW_COLUMNS: &str = "state_hash, elicitation_id, principal, provider, scopes, pkce_verifier, browser_hash, created_at, expires_at, used_at, issuer";

pub(super) type FlowRow<N> = (
    String,
    String,
    String,
    String,
    String,
    Vec<u8>,
    String,
    <N as Native>::Time,
    <N as Native>::Time,
    Option<<N as Native>::Time>,
    Option<String>,
);

impl Stored for OAuthFlowRecord {
    type Row<N: Native> = FlowRow<N>;

    fn read<N: Native>(row: FlowRow<N>) -> Result<Self, StoreError> {
        let (
            state_hash,
            elicitation_id,
            principal,
            provider,
            scopes,
            pkce_verifier,
            browser_hash,
            created_at,
            expires_at,
            used_at,
            issuer,
        ) = row;
        Ok(OAuthFlowRecord {
            state_hash,
            elicitation_id: parse_elicitation_id(&elicitation_id)?,
            principal: parse_principal(&principal)?,
            provider,
            issuer,
            scopes: split_scopes(&scopes),
            pkce_verifier,
            browser_hash,
            created_at: N::time(created_at)?,
            expires_at: N::time(expires_at)?,
            used_at: optional_time::<N>(used_at)?,
        })
    }
}

pub(super) const CONNECTION_COLUMNS: &str = "principal, provider, access_token, refresh_token, expires_at, scopes, account_label, status, created_at, updated_at, issuer";

pub(super) type ConnectionRow<N> = (
    String,
    String,
    Vec<u8>,
    Option<Vec<u8>>,
    Option<<N as Native>::Time>,
    String,
    Option<String>,
    String,
    <N as Native>::Time,
    <N as Native>::Time,
    Option<String>,
);

impl Stored for ConnectionRecord {
    type Row<N: Native> = ConnectionRow<N>;

    fn read<N: Native>(row: ConnectionRow<N>) -> Result<Self, StoreError> {
        let (
            principal,
            provider,
            access_token,
            refresh_token,
            expires_at,
            scopes,
            account_label,
            status,
            created_at,
            updated_at,
            issuer,
        ) = row;
        Ok(ConnectionRecord {
            principal: parse_principal(&principal)?,
            provider,
            issuer,
            access_token,
            refresh_token,
            expires_at: optional_time::<N>(expires_at)?,
            scopes: split_scopes(&scopes),
            account_label,
            status: parse_connection_status(&status)?,
            created_at: N::time(created_at)?,
            updated_at: N::time(updated_at)?,
        })
    }
}

pub(super) const FORM_VALUES_COLUMNS: &str = "principal, form, fields, secrets, created_at, updated_at";

pub(super) type FormValuesRow<N> = (
    String,
    String,
    <N as Native>::Json,
    Option<Vec<u8>>,
    <N as Native>::Time,
    <N as Native>::Time,
);

impl Stored for FormValuesRecord {
    type Row<N: Native> = FormValuesRow<N>;

    fn read<N: Native>(row: FormValuesRow<N>) -> Result<Self, StoreError> {
        let (principal, form, fields, secrets, created_at, updated_at) = row;
        Ok(FormValuesRecord {
            principal: parse_principal(&principal)?,
            form,
            fields: N::json(fields, "form fields")?,
            secrets,
            created_at: N::time(created_at)?,
            updated_at: N::time(updated_at)?,
        })
    }
}

pub(super) const FORM_ANSWER_COLUMNS: &str = "elicitation_id, fields, secrets, created_at";

pub(super) type FormAnswerRow<N> = (String, <N as Native>::Json, Option<Vec<u8>>, <N as Native>::Time);

impl Stored for FormAnswerRecord {
    type Row<N: Native> = FormAnswerRow<N>;

    fn read<N: Native>(row: FormAnswerRow<N>) -> Result<Self, StoreError> {
        let (elicitation_id, fields, secrets, created_at) = row;
        Ok(FormAnswerRecord {
            elicitation_id: parse_elicitation_id(&elicitation_id)?,
            fields: N::json(fields, "form answer fields")?,
            secrets,
            created_at: N::time(created_at)?,
        })
    }
}

pub(super) const CATALOGUE_COLUMNS: &str = "upstream, tools, offers, digest, listed_by, listed_at";

pub(super) type CatalogueRow<N> = (
    String,
    <N as Native>::Json,
    <N as Native>::Json,
    String,
    Option<String>,
    <N as Native>::Time,
);

impl Stored for CatalogueRecord {
    type Row<N: Native> = CatalogueRow<N>;

    fn read<N: Native>(row: CatalogueRow<N>) -> Result<Self, StoreError> {
        let (upstream, tools, offers, digest, listed_by, listed_at) = row;
        Ok(CatalogueRecord {
            upstream,
            tools: N::json(tools, "upstream tools")?,
            offers: N::json(offers, "upstream offers")?,
            digest,
            listed_by: listed_by.as_deref().map(parse_principal).transpose()?,
            listed_at: N::time(listed_at)?,
        })
    }
}

pub(super) const BROWSER_SESSION_COLUMNS: &str = "id, principal, claims, created_at, expires_at";

pub(super) type BrowserSessionRow<N> = (
    String,
    String,
    <N as Native>::Json,
    <N as Native>::Time,
    <N as Native>::Time,
);

impl Stored for BrowserSessionRecord {
    type Row<N: Native> = BrowserSessionRow<N>;

    fn read<N: Native>(row: BrowserSessionRow<N>) -> Result<Self, StoreError> {
        let (id, principal, claims, created_at, expires_at) = row;
        Ok(BrowserSessionRecord {
            id,
            principal: parse_principal(&principal)?,
            claims: N::json(claims, "browser session claims")?,
            created_at: N::time(created_at)?,
            expires_at: N::time(expires_at)?,
        })
    }
}

pub(super) fn parse_session_id(text: &str) -> Result<SessionId, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("session id {text:?} is malformed")))
}

fn parse_elicitation_id(text: &str) -> Result<ElicitationId, StoreError> {
    text.parse()
        .map_err(|_| StoreError::Corrupt(format!("elicitation id {text:?} is malformed")))
}

pub(super) const REGISTRATION_COLUMNS: &str =
    "issuer, redirect_uri, client_id, client_secret, auth_method, registered_at";

pub(super) type RegistrationRow<N> = (String, String, String, Option<Vec<u8>>, String, <N as Native>::Time);

impl Stored for RegistrationRecord {
    type Row<N: Native> = RegistrationRow<N>;

    fn read<N: Native>(row: RegistrationRow<N>) -> Result<Self, StoreError> {
        let (issuer, redirect_uri, client_id, client_secret, auth_method, registered_at) = row;
        Ok(RegistrationRecord {
            issuer,
            redirect_uri,
            client_id,
            client_secret,
            auth_method,
            registered_at: N::time(registered_at)?,
        })
    }
}

pub(super) const VOTE_COLUMNS: &str = "elicitation_id, approver, approve, reason, decided_at";

pub(super) type VoteRow<N> = (String, String, bool, String, <N as Native>::Time);

impl Stored for VoteRecord {
    type Row<N: Native> = VoteRow<N>;

    fn read<N: Native>(row: VoteRow<N>) -> Result<Self, StoreError> {
        let (elicitation_id, approver, approve, reason, decided_at) = row;
        Ok(VoteRecord {
            elicitation_id: parse_elicitation_id(&elicitation_id)?,
            approver: parse_principal(&approver)?,
            approve,
            reason,
            decided_at: N::time(decided_at)?,
        })
    }
}

pub(super) fn parse_principal(text: &str) -> Result<Principal, StoreError> {
    Principal::parse(text).map_err(|e| StoreError::Corrupt(format!("principal: {e}")))
}

fn parse_connection_status(text: &str) -> Result<ConnectionStatus, StoreError> {
    match text {
        "active" => Ok(ConnectionStatus::Active),
        "broken" => Ok(ConnectionStatus::Broken),
        other => Err(StoreError::Corrupt(format!("connection status {other:?}"))),
    }
}

fn split_scopes(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}
