//! Every stored value the key ring sealed, table by table, for re-sealing under a new key: rows
//! read in batches in primary-key order, each row replaced by a compare-and-swap on the values
//! read, and rows counted by the leading bytes (the "stamp") that name the key that sealed them.
//! The store knows nothing of keys: callers pass the stamp and its length.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::{ElicitationId, Principal};

/// A table with sealed columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SealedTable {
    /// Access and refresh tokens.
    Connections,
    /// PKCE verifiers of OAuth flows.
    OAuthFlows,
    /// A user-scoped form's secret fields.
    FormValues,
    /// A call-scoped form answer's secret fields.
    FormAnswers,
    /// Secrets of clients registered at remote MCP servers' authorization servers.
    Registrations,
    /// The arguments of the calls approval requests are bound to.
    Elicitations,
}

impl SealedTable {
    pub const ALL: [SealedTable; 6] = [
        SealedTable::Connections,
        SealedTable::OAuthFlows,
        SealedTable::FormValues,
        SealedTable::FormAnswers,
        SealedTable::Registrations,
        SealedTable::Elicitations,
    ];

    /// The table's name in both backends.
    pub fn name(self) -> &'static str {
        match self {
            SealedTable::Connections => "connections",
            SealedTable::OAuthFlows => "oauth_flows",
            SealedTable::FormValues => "form_values",
            SealedTable::FormAnswers => "form_answers",
            SealedTable::Registrations => "oauth_registrations",
            SealedTable::Elicitations => "elicitations",
        }
    }

    /// The primary key's columns, all text, in the order rows are walked.
    pub(super) fn key_columns(self) -> &'static [&'static str] {
        match self {
            SealedTable::Connections => &["principal", "provider"],
            SealedTable::OAuthFlows => &["state_hash"],
            SealedTable::FormValues => &["principal", "form"],
            SealedTable::FormAnswers => &["elicitation_id"],
            SealedTable::Elicitations => &["id"],
            SealedTable::Registrations => &["issuer", "redirect_uri"],
        }
    }

    /// The sealed columns, in the order of [`SealedRow::values`].
    pub(super) fn sealed_columns(self) -> &'static [&'static str] {
        match self {
            SealedTable::Connections => &["access_token", "refresh_token"],
            SealedTable::OAuthFlows => &["pkce_verifier"],
            SealedTable::FormValues | SealedTable::FormAnswers => &["secrets"],
            SealedTable::Registrations => &["client_secret"],
            SealedTable::Elicitations => &["call_arguments"],
        }
    }
}

/// Which row: its table and primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealedRowKey {
    Connection { principal: Principal, provider: String },
    Flow { state_hash: String },
    FormValues { principal: Principal, form: String },
    FormAnswer { elicitation: ElicitationId },
    Registration { issuer: String, redirect_uri: String },
    Elicitation { elicitation: ElicitationId },
}

impl SealedRowKey {
    pub fn table(&self) -> SealedTable {
        match self {
            SealedRowKey::Connection { .. } => SealedTable::Connections,
            SealedRowKey::Flow { .. } => SealedTable::OAuthFlows,
            SealedRowKey::FormValues { .. } => SealedTable::FormValues,
            SealedRowKey::FormAnswer { .. } => SealedTable::FormAnswers,
            SealedRowKey::Registration { .. } => SealedTable::Registrations,
            SealedRowKey::Elicitation { .. } => SealedTable::Elicitations,
        }
    }

    /// The primary key's values as stored, in [`SealedTable::key_columns`] order.
    pub(super) fn parts(&self) -> Vec<String> {
        match self {
            SealedRowKey::Connection { principal, provider } => vec![principal.to_string(), provider.clone()],
            SealedRowKey::Flow { state_hash } => vec![state_hash.clone()],
            SealedRowKey::FormValues { principal, form } => vec![principal.to_string(), form.clone()],
            SealedRowKey::FormAnswer { elicitation } | SealedRowKey::Elicitation { elicitation } => {
                vec![elicitation.to_string()]
            }
            SealedRowKey::Registration { issuer, redirect_uri } => vec![issuer.clone(), redirect_uri.clone()],
        }
    }

    /// The key of a row of `table` from its key columns as read.
    pub(super) fn read(table: SealedTable, parts: Vec<String>) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("{}: unexpected primary key", table.name()));
        let principal = |text: &str| Principal::parse(text).map_err(|e| StoreError::Corrupt(format!("principal: {e}")));
        let elicitation = |text: &str| {
            text.parse::<ElicitationId>()
                .map_err(|_| StoreError::Corrupt(format!("elicitation id {text:?} is malformed")))
        };
        let mut parts = parts.into_iter();
        let mut next = || parts.next().ok_or_else(corrupt);
        Ok(match table {
            SealedTable::Connections => SealedRowKey::Connection {
                principal: principal(&next()?)?,
                provider: next()?,
            },
            SealedTable::OAuthFlows => SealedRowKey::Flow { state_hash: next()? },
            SealedTable::FormValues => SealedRowKey::FormValues {
                principal: principal(&next()?)?,
                form: next()?,
            },
            SealedTable::FormAnswers => SealedRowKey::FormAnswer {
                elicitation: elicitation(&next()?)?,
            },
            SealedTable::Elicitations => SealedRowKey::Elicitation {
                elicitation: elicitation(&next()?)?,
            },
            SealedTable::Registrations => SealedRowKey::Registration {
                issuer: next()?,
                redirect_uri: next()?,
            },
        })
    }
}

/// One row's sealed values as read.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedRow {
    pub key: SealedRowKey,
    /// Each sealed column's ciphertext (`None`: NULL), in [`SealedTable::sealed_columns`] order.
    pub values: Vec<Option<Vec<u8>>>,
}

/// Ciphertexts are not secret, but there is no reason to print them.
impl std::fmt::Debug for SealedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedRow")
            .field("key", &self.key)
            .field("values", &self.values.len())
            .finish()
    }
}

/// How many rows of a table hold a value whose first bytes are `stamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampCount {
    pub stamp: Vec<u8>,
    pub rows: u64,
}

/// The sealed columns, walked for re-sealing and counted by stamp.
#[async_trait]
pub trait SealedStore: Send + Sync {
    /// Up to `limit` rows of `table` after the row `after` (primary-key order; `None`: from the
    /// start) holding a value that does not start with `stamp`. Rows whose values all start with
    /// it are skipped in the database.
    async fn sealed_batch(
        &self,
        table: SealedTable,
        stamp: &[u8],
        after: Option<&SealedRowKey>,
        limit: usize,
    ) -> Result<Vec<SealedRow>, StoreError>;

    /// Replaces the row's sealed values with `values` when they are still exactly `row.values`
    /// (a compare-and-swap: nothing else in the row changes). False when the row changed since
    /// it was read, or is gone; then nothing was written.
    async fn reseal(&self, row: &SealedRow, values: &[Option<Vec<u8>>]) -> Result<bool, StoreError>;

    /// For each distinct stamp (the first `stamp_len` bytes of a value) in `table`'s sealed
    /// columns, how many rows hold a value with it; a row with two values under one key counts once.
    async fn count_stamps(&self, table: SealedTable, stamp_len: usize) -> Result<Vec<StampCount>, StoreError>;
}
