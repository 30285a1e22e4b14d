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
}

impl SealedTable {
    pub const ALL: [SealedTable; 4] = [
        SealedTable::Connections,
        SealedTable::OAuthFlows,
        SealedTable::FormValues,
        SealedTable::FormAnswers,
    ];

    /// The table's name in both backends.
    pub fn name(self) -> &'static str {
        match self {
            SealedTable::Connections => "connections",
            SealedTable::OAuthFlows => "oauth_flows",
            SealedTable::FormValues => "form_values",
            SealedTable::FormAnswers => "form_answers",
        }
    }

    /// The primary key's columns, all text, in the order rows are walked.
    pub(super) fn key_columns(self) -> &'static [&'static str] {
        match self {
            SealedTable::Connections => &["principal", "provider"],
            SealedTable::OAuthFlows => &["state_hash"],
            SealedTable::FormValues => &["principal", "form"],
            SealedTable::FormAnswers => &["elicitation_id"],
        }
    }

    /// The sealed columns, in the order of [`SealedRow::values`].
    pub(super) fn sealed_columns(self) -> &'static [&'static str] {
        match self {
            SealedTable::Connections => &["access_token", "refresh_token"],
            SealedTable::OAuthFlows => &["pkce_verifier"],
            SealedTable::FormValues | SealedTable::FormAnswers => &["secrets"],
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
}

impl SealedRowKey {
    pub fn table(&self) -> SealedTable {
        match self {
            SealedRowKey::Connection { .. } => SealedTable::Connections,
            SealedRowKey::Flow { .. } => SealedTable::OAuthFlows,
            SealedRowKey::FormValues { .. } => SealedTable::FormValues,
            SealedRowKey::FormAnswer { .. } => SealedTable::FormAnswers,
        }
    }

    /// The primary key's values as stored, in [`SealedTable::key_columns`] order.
    pub(super) fn parts(&self) -> Vec<String> {
        match self {
            SealedRowKey::Connection { principal, provider } => vec![principal.to_string(), provider.clone()],
            SealedRowKey::Flow { state_hash } => vec![state_hash.clone()],
            SealedRowKey::FormValues { principal, form } => vec![principal.to_string(), form.clone()],
            SealedRowKey::FormAnswer { elicitation } => vec![elicitation.to_string()],
        }
    }

    /// The key of a row of `table` from its key columns as read.
    pub(super) fn read(table: SealedTable, parts: Vec<String>) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("{}: unexpected primary key", table.name()));
        let principal = |text: &str| Principal::parse(text).map_err(|e| StoreError::Corrupt(format!("principal: {e}")));
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
            SealedTable::FormAnswers => {
                let text = next()?;
                SealedRowKey::FormAnswer {
                    elicitation: text
                        .parse()
                        .map_err(|_| StoreError::Corrupt(format!("elicitation id {text:?} is malformed")))?,
                }
            }
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

/// What the backends write differently in these statements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Syntax {
    /// Before a parameter's number: `$` (PostgreSQL) or `?` (SQLite).
    pub placeholder: char,
    /// Equality that holds between two NULLs: `IS NOT DISTINCT FROM` or `IS`.
    pub same_as: &'static str,
}

impl Syntax {
    /// `column <op> <placeholder n>` for each column, numbered from `first`.
    fn numbered(self, columns: &[&str], first: usize, op: &str) -> Vec<String> {
        columns
            .iter()
            .enumerate()
            .map(|(i, column)| format!("{column} {op} {}{}", self.placeholder, first + i))
            .collect()
    }
}

/// A batch of [`SealedStore::sealed_batch`]: the stamp is parameter 1, the limit 2, and with
/// `after` the previous row's key from 3 on.
pub(super) fn batch_sql(table: SealedTable, stamp_len: usize, after: bool, syntax: Syntax) -> String {
    let p = syntax.placeholder;
    let stale = table
        .sealed_columns()
        .iter()
        .map(|c| format!("({c} IS NOT NULL AND substr({c}, 1, {stamp_len}) <> {p}1)"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let keys = table.key_columns();
    let from = if after {
        let parameters: Vec<String> = (3..3 + keys.len()).map(|n| format!("{p}{n}")).collect();
        format!("AND ({}) > ({})", keys.join(", "), parameters.join(", "))
    } else {
        String::new()
    };
    let selected: Vec<&str> = keys.iter().chain(table.sealed_columns()).copied().collect();
    format!(
        "SELECT {} FROM {} WHERE ({stale}) {from} ORDER BY {} LIMIT {p}2",
        selected.join(", "),
        table.name(),
        keys.join(", ")
    )
}

/// The compare-and-swap of [`SealedStore::reseal`]: the new values, then the key, then the values
/// read, as parameters from 1 on.
pub(super) fn reseal_sql(table: SealedTable, syntax: Syntax) -> String {
    let sealed = table.sealed_columns();
    let keys = table.key_columns();
    let set = syntax.numbered(sealed, 1, "=").join(", ");
    let key_match = syntax.numbered(keys, 1 + sealed.len(), "=");
    let unchanged = syntax.numbered(sealed, 1 + sealed.len() + keys.len(), syntax.same_as);
    let condition: Vec<String> = key_match.into_iter().chain(unchanged).collect();
    format!("UPDATE {} SET {set} WHERE {}", table.name(), condition.join(" AND "))
}

/// The counts of [`SealedStore::count_stamps`]: (stamp, rows), in stamp order.
pub(super) fn count_sql(table: SealedTable, stamp_len: usize) -> String {
    let keys = table.key_columns().join(", ");
    let stamped = table
        .sealed_columns()
        .iter()
        .map(|c| {
            format!(
                "SELECT {keys}, substr({c}, 1, {stamp_len}) AS stamp FROM {} WHERE {c} IS NOT NULL",
                table.name()
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ");
    format!("SELECT stamp, COUNT(*) FROM ({stamped}) AS stamped GROUP BY stamp ORDER BY stamp")
}

/// Refuses a re-seal whose values do not fit the table (a caller's mistake, not the data's).
pub(super) fn check_reseal(row: &SealedRow, values: &[Option<Vec<u8>>]) -> Result<(), StoreError> {
    let table = row.key.table();
    let columns = table.sealed_columns().len();
    if values.len() == columns && row.values.len() == columns {
        Ok(())
    } else {
        Err(StoreError::Corrupt(format!(
            "{}: {} sealed values given for {columns} columns",
            table.name(),
            values.len()
        )))
    }
}

/// A row of a batch: key columns, then sealed columns.
pub(super) fn read_row<R: sqlx::Row>(table: SealedTable, row: &R) -> Result<SealedRow, StoreError>
where
    usize: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<Vec<u8>>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let keys = table.key_columns().len();
    let parts = (0..keys)
        .map(|i| row.try_get::<String, _>(i))
        .collect::<Result<Vec<_>, _>>()?;
    let values = (keys..keys + table.sealed_columns().len())
        .map(|i| row.try_get::<Option<Vec<u8>>, _>(i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SealedRow {
        key: SealedRowKey::read(table, parts)?,
        values,
    })
}

/// Counts as read, negative ones (impossible) as zero.
pub(super) fn stamp_counts(counts: Vec<(Vec<u8>, i64)>) -> Vec<StampCount> {
    counts
        .into_iter()
        .map(|(stamp, rows)| StampCount {
            stamp,
            rows: u64::try_from(rows).unwrap_or(0),
        })
        .collect()
}

/// Implements [`SealedStore`] for a backend whose pool is `self.pool`, with its [`Syntax`]. The
/// statements are the same in both backends but for what `Syntax` says; this writes the code that
/// runs them once. No notice is sent: a re-sealed value opens to the same plaintext, so a
/// replica's cached copy (sealed by a key it still holds) stays good.
macro_rules! sealed_store {
    ($store:ty, $syntax:expr) => {
        #[async_trait::async_trait]
        impl $crate::store::sealed::SealedStore for $store {
            async fn sealed_batch(
                &self,
                table: $crate::store::sealed::SealedTable,
                stamp: &[u8],
                after: Option<&$crate::store::sealed::SealedRowKey>,
                limit: usize,
            ) -> Result<Vec<$crate::store::sealed::SealedRow>, StoreError> {
                use $crate::store::sealed::{SealedRowKey, batch_sql, read_row};
                let sql = batch_sql(table, stamp.len(), after.is_some(), $syntax);
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(stamp)
                    .bind($crate::store::sql_count(limit));
                for part in after.map(SealedRowKey::parts).unwrap_or_default() {
                    query = query.bind(part);
                }
                let rows = query.fetch_all(&self.pool).await?;
                rows.iter().map(|row| read_row(table, row)).collect()
            }

            async fn reseal(
                &self,
                row: &$crate::store::sealed::SealedRow,
                values: &[Option<Vec<u8>>],
            ) -> Result<bool, StoreError> {
                use $crate::store::sealed::{check_reseal, reseal_sql};
                check_reseal(row, values)?;
                let mut query = sqlx::query(sqlx::AssertSqlSafe(reseal_sql(row.key.table(), $syntax)));
                for value in values {
                    query = query.bind(value.clone());
                }
                for part in row.key.parts() {
                    query = query.bind(part);
                }
                for value in &row.values {
                    query = query.bind(value.clone());
                }
                Ok(query.execute(&self.pool).await?.rows_affected() == 1)
            }

            async fn count_stamps(
                &self,
                table: $crate::store::sealed::SealedTable,
                stamp_len: usize,
            ) -> Result<Vec<$crate::store::sealed::StampCount>, StoreError> {
                use $crate::store::sealed::{count_sql, stamp_counts};
                let counts = sqlx::query_as(sqlx::AssertSqlSafe(count_sql(table, stamp_len)))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(stamp_counts(counts))
            }
        }
    };
}
