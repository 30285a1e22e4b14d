//! [`SealedStore`] for both backends: the statements that walk, re-seal and count a table's
//! sealed columns, built from the table's key and sealed columns, and the code that runs them. No
//! notice is sent: a re-sealed value opens to the same plaintext, so a replica's cached copy
//! (sealed by a key it still holds) stays good.

use crate::store::{SealedRow, SealedRowKey, SealedStore, SealedTable, StampCount, StoreError};

/// `column <op> $n` for each column, numbered from `first`.
fn numbered(columns: &[&str], first: usize, op: &str) -> Vec<String> {
    columns
        .iter()
        .enumerate()
        .map(|(i, column)| format!("{column} {op} ${}", first + i))
        .collect()
}

/// A batch of [`SealedStore::sealed_batch`]: the stamp is parameter 1, the limit 2, and with
/// `after` the previous row's key from 3 on.
fn batch_sql(table: SealedTable, stamp_len: usize, after: bool) -> String {
    let stale = table
        .sealed_columns()
        .iter()
        .map(|c| format!("({c} IS NOT NULL AND substr({c}, 1, {stamp_len}) <> $1)"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let keys = table.key_columns();
    let from = if after {
        let parameters: Vec<String> = (3..3 + keys.len()).map(|n| format!("${n}")).collect();
        format!("AND ({}) > ({})", keys.join(", "), parameters.join(", "))
    } else {
        String::new()
    };
    let selected: Vec<&str> = keys.iter().chain(table.sealed_columns()).copied().collect();
    format!(
        "SELECT {} FROM {} WHERE ({stale}) {from} ORDER BY {} LIMIT $2",
        selected.join(", "),
        table.name(),
        keys.join(", ")
    )
}

/// The compare-and-swap of [`SealedStore::reseal`]: the new values, then the key, then the values
/// read, as parameters from 1 on.
fn reseal_sql(table: SealedTable) -> String {
    let sealed = table.sealed_columns();
    let keys = table.key_columns();
    let set = numbered(sealed, 1, "=").join(", ");
    let key_match = numbered(keys, 1 + sealed.len(), "=");
    // `IS NOT DISTINCT FROM`: equality that holds between two NULLs.
    let unchanged = numbered(sealed, 1 + sealed.len() + keys.len(), "IS NOT DISTINCT FROM");
    let condition: Vec<String> = key_match.into_iter().chain(unchanged).collect();
    format!("UPDATE {} SET {set} WHERE {}", table.name(), condition.join(" AND "))
}

/// The counts of [`SealedStore::count_stamps`]: (stamp, rows), in stamp order.
fn count_sql(table: SealedTable, stamp_len: usize) -> String {
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
fn check_reseal(row: &SealedRow, values: &[Option<Vec<u8>>]) -> Result<(), StoreError> {
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
fn read_row<R: sqlx::Row>(table: SealedTable, row: &R) -> Result<SealedRow, StoreError>
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
fn stamp_counts(counts: Vec<(Vec<u8>, i64)>) -> Vec<StampCount> {
    counts
        .into_iter()
        .map(|(stamp, rows)| StampCount {
            stamp,
            rows: u64::try_from(rows).unwrap_or(0),
        })
        .collect()
}

shared! {
    impl SealedStore {
        async fn sealed_batch(
            &self,
            table: SealedTable,
            stamp: &[u8],
            after: Option<&SealedRowKey>,
            most: usize,
        ) -> Result<Vec<SealedRow>, StoreError> {
            let sql = batch_sql(table, stamp.len(), after.is_some());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(stamp)
                .bind(crate::store::sql_count(most));
            for part in after.map(SealedRowKey::parts).unwrap_or_default() {
                query = query.bind(part);
            }
            let rows = query.fetch_all(&self.pool).await?;
            rows.iter().map(|row| read_row(table, row)).collect()
        }

        async fn reseal(&self, row: &SealedRow, values: &[Option<Vec<u8>>]) -> Result<bool, StoreError> {
            check_reseal(row, values)?;
            let mut query = sqlx::query(sqlx::AssertSqlSafe(reseal_sql(row.key.table())));
            for value in values {
                query = query.bind(value.clone());
            }
            for part in row.key.parts() {
                query = query.bind(part);
            }
            for value in &row.values {
                query = query.bind(value.clone());
            }
            let result = query.execute(&self.pool).await?;
            Ok(D::rows_affected(&result) == 1)
        }

        async fn count_stamps(&self, table: SealedTable, stamp_len: usize) -> Result<Vec<StampCount>, StoreError> {
            let counts = sqlx::query_as(sqlx::AssertSqlSafe(count_sql(table, stamp_len)))
                .fetch_all(&self.pool)
                .await?;
            Ok(stamp_counts(counts))
        }
    }
}
