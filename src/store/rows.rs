//! How records are read back, once for both backends: each table's column list, the row a query
//! of those columns decodes into, and that row's conversion to the public record. Values the
//! backends store in different native types (times, JSON) are read as the backend's [`Native`]
//! types and converted by it.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    BoundCall, BrowserSessionRecord, CatalogueRecord, ConnectionRecord, ConnectionStatus, ElicitationRecord,
    ElicitationStatus, FormAnswerRecord, FormValuesRecord, OAuthFlowRecord, RegistrationRecord, SessionRecord,
    StoreError, VoteRecord,
};
use crate::domain::{ElicitationId, LogLevel, Principal, SessionId};

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

#[derive(sqlx::FromRow)]
pub(super) struct SessionRow<N: Native> {
    id: String,
    principal: String,
    protocol_version: String,
    client_info: N::Json,
    client_capabilities: N::Json,
    log_level: Option<String>,
    created_at: N::Time,
}

impl Stored for SessionRecord {
    type Row<N: Native> = SessionRow<N>;

    fn read<N: Native>(row: SessionRow<N>) -> Result<Self, StoreError> {
        Ok(SessionRecord {
            id: parse_session_id(&row.id)?,
            principal: parse_principal(&row.principal)?,
            protocol_version: row.protocol_version,
            client_info: N::json(row.client_info, "client_info")?,
            client_capabilities: N::json(row.client_capabilities, "client_capabilities")?,
            log_level: row
                .log_level
                .map(|level| level.parse::<LogLevel>().map_err(StoreError::Corrupt))
                .transpose()?,
            created_at: N::time(row.created_at)?,
        })
    }
}

pub(super) const ELICITATION_COLUMNS: &str = "id, principal, session_id, requirement, status, message, url, client_name, created_at, expires_at, completed_at, call_key, detail, oauth_client, call_arguments";

#[derive(sqlx::FromRow)]
pub(super) struct ElicitationRow<N: Native> {
    id: String,
    principal: String,
    session_id: String,
    requirement: String,
    status: String,
    message: String,
    url: String,
    client_name: String,
    created_at: N::Time,
    expires_at: N::Time,
    completed_at: Option<N::Time>,
    call_key: Option<String>,
    detail: Option<String>,
    oauth_client: Option<String>,
    call_arguments: Option<Vec<u8>>,
}

impl Stored for ElicitationRecord {
    type Row<N: Native> = ElicitationRow<N>;

    fn read<N: Native>(row: ElicitationRow<N>) -> Result<Self, StoreError> {
        Ok(ElicitationRecord {
            id: parse_elicitation_id(&row.id)?,
            principal: parse_principal(&row.principal)?,
            session_id: parse_session_id(&row.session_id)?,
            requirement: row.requirement,
            status: ElicitationStatus::parse(&row.status)?,
            message: row.message,
            url: row.url,
            client_name: row.client_name,
            created_at: N::time(row.created_at)?,
            expires_at: N::time(row.expires_at)?,
            completed_at: optional_time::<N>(row.completed_at)?,
            call_key: row.call_key,
            detail: row.detail,
            bound: row.call_arguments.map(|sealed_arguments| BoundCall {
                client: row.oauth_client,
                sealed_arguments,
            }),
        })
    }
}

pub(super) const FLOW_COLUMNS: &str = "state_hash, elicitation_id, principal, provider, scopes, pkce_verifier, browser_hash, created_at, expires_at, used_at, issuer";

#[derive(sqlx::FromRow)]
pub(super) struct FlowRow<N: Native> {
    state_hash: String,
    elicitation_id: String,
    principal: String,
    provider: String,
    scopes: String,
    pkce_verifier: Vec<u8>,
    browser_hash: String,
    created_at: N::Time,
    expires_at: N::Time,
    used_at: Option<N::Time>,
    issuer: Option<String>,
}

impl Stored for OAuthFlowRecord {
    type Row<N: Native> = FlowRow<N>;

    fn read<N: Native>(row: FlowRow<N>) -> Result<Self, StoreError> {
        Ok(OAuthFlowRecord {
            state_hash: row.state_hash,
            elicitation_id: parse_elicitation_id(&row.elicitation_id)?,
            principal: parse_principal(&row.principal)?,
            provider: row.provider,
            issuer: row.issuer,
            scopes: split_scopes(&row.scopes),
            pkce_verifier: row.pkce_verifier,
            browser_hash: row.browser_hash,
            created_at: N::time(row.created_at)?,
            expires_at: N::time(row.expires_at)?,
            used_at: optional_time::<N>(row.used_at)?,
        })
    }
}

pub(super) const CONNECTION_COLUMNS: &str = "principal, provider, access_token, refresh_token, expires_at, scopes, account_label, status, created_at, updated_at, issuer";

#[derive(sqlx::FromRow)]
pub(super) struct ConnectionRow<N: Native> {
    principal: String,
    provider: String,
    access_token: Vec<u8>,
    refresh_token: Option<Vec<u8>>,
    expires_at: Option<N::Time>,
    scopes: String,
    account_label: Option<String>,
    status: String,
    created_at: N::Time,
    updated_at: N::Time,
    issuer: Option<String>,
}

impl Stored for ConnectionRecord {
    type Row<N: Native> = ConnectionRow<N>;

    fn read<N: Native>(row: ConnectionRow<N>) -> Result<Self, StoreError> {
        Ok(ConnectionRecord {
            principal: parse_principal(&row.principal)?,
            provider: row.provider,
            issuer: row.issuer,
            access_token: row.access_token,
            refresh_token: row.refresh_token,
            expires_at: optional_time::<N>(row.expires_at)?,
            scopes: split_scopes(&row.scopes),
            account_label: row.account_label,
            status: parse_connection_status(&row.status)?,
            created_at: N::time(row.created_at)?,
            updated_at: N::time(row.updated_at)?,
        })
    }
}

pub(super) const FORM_VALUES_COLUMNS: &str = "principal, form, fields, secrets, created_at, updated_at";

#[derive(sqlx::FromRow)]
pub(super) struct FormValuesRow<N: Native> {
    principal: String,
    form: String,
    fields: N::Json,
    secrets: Option<Vec<u8>>,
    created_at: N::Time,
    updated_at: N::Time,
}

impl Stored for FormValuesRecord {
    type Row<N: Native> = FormValuesRow<N>;

    fn read<N: Native>(row: FormValuesRow<N>) -> Result<Self, StoreError> {
        Ok(FormValuesRecord {
            principal: parse_principal(&row.principal)?,
            form: row.form,
            fields: N::json(row.fields, "form fields")?,
            secrets: row.secrets,
            created_at: N::time(row.created_at)?,
            updated_at: N::time(row.updated_at)?,
        })
    }
}

pub(super) const FORM_ANSWER_COLUMNS: &str = "elicitation_id, fields, secrets, created_at";

#[derive(sqlx::FromRow)]
pub(super) struct FormAnswerRow<N: Native> {
    elicitation_id: String,
    fields: N::Json,
    secrets: Option<Vec<u8>>,
    created_at: N::Time,
}

impl Stored for FormAnswerRecord {
    type Row<N: Native> = FormAnswerRow<N>;

    fn read<N: Native>(row: FormAnswerRow<N>) -> Result<Self, StoreError> {
        Ok(FormAnswerRecord {
            elicitation_id: parse_elicitation_id(&row.elicitation_id)?,
            fields: N::json(row.fields, "form answer fields")?,
            secrets: row.secrets,
            created_at: N::time(row.created_at)?,
        })
    }
}

pub(super) const CATALOGUE_COLUMNS: &str = "upstream, tools, offers, digest, listed_by, listed_at";

#[derive(sqlx::FromRow)]
pub(super) struct CatalogueRow<N: Native> {
    upstream: String,
    tools: N::Json,
    offers: N::Json,
    digest: String,
    listed_by: Option<String>,
    listed_at: N::Time,
}

impl Stored for CatalogueRecord {
    type Row<N: Native> = CatalogueRow<N>;

    fn read<N: Native>(row: CatalogueRow<N>) -> Result<Self, StoreError> {
        Ok(CatalogueRecord {
            upstream: row.upstream,
            tools: N::json(row.tools, "upstream tools")?,
            offers: N::json(row.offers, "upstream offers")?,
            digest: row.digest,
            listed_by: row.listed_by.as_deref().map(parse_principal).transpose()?,
            listed_at: N::time(row.listed_at)?,
        })
    }
}

pub(super) const BROWSER_SESSION_COLUMNS: &str = "id, principal, claims, created_at, expires_at";

#[derive(sqlx::FromRow)]
pub(super) struct BrowserSessionRow<N: Native> {
    id: String,
    principal: String,
    claims: N::Json,
    created_at: N::Time,
    expires_at: N::Time,
}

impl Stored for BrowserSessionRecord {
    type Row<N: Native> = BrowserSessionRow<N>;

    fn read<N: Native>(row: BrowserSessionRow<N>) -> Result<Self, StoreError> {
        Ok(BrowserSessionRecord {
            id: row.id,
            principal: parse_principal(&row.principal)?,
            claims: N::json(row.claims, "browser session claims")?,
            created_at: N::time(row.created_at)?,
            expires_at: N::time(row.expires_at)?,
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

#[derive(sqlx::FromRow)]
pub(super) struct RegistrationRow<N: Native> {
    issuer: String,
    redirect_uri: String,
    client_id: String,
    client_secret: Option<Vec<u8>>,
    auth_method: String,
    registered_at: N::Time,
}

impl Stored for RegistrationRecord {
    type Row<N: Native> = RegistrationRow<N>;

    fn read<N: Native>(row: RegistrationRow<N>) -> Result<Self, StoreError> {
        Ok(RegistrationRecord {
            issuer: row.issuer,
            redirect_uri: row.redirect_uri,
            client_id: row.client_id,
            client_secret: row.client_secret,
            auth_method: row.auth_method,
            registered_at: N::time(row.registered_at)?,
        })
    }
}

pub(super) const VOTE_COLUMNS: &str = "elicitation_id, approver, approve, reason, decided_at";

#[derive(sqlx::FromRow)]
pub(super) struct VoteRow<N: Native> {
    elicitation_id: String,
    approver: String,
    approve: bool,
    reason: String,
    decided_at: N::Time,
}

impl Stored for VoteRecord {
    type Row<N: Native> = VoteRow<N>;

    fn read<N: Native>(row: VoteRow<N>) -> Result<Self, StoreError> {
        Ok(VoteRecord {
            elicitation_id: parse_elicitation_id(&row.elicitation_id)?,
            approver: parse_principal(&row.approver)?,
            approve: row.approve,
            reason: row.reason,
            decided_at: N::time(row.decided_at)?,
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
