//! Key rotation over what the gate stored: every sealed value (connection tokens, PKCE verifiers,
//! form secrets, call-scoped answers and approval requests' arguments) re-sealed under the key ring's first key, and counted by
//! the key that sealed it. It lives in the gate because the contexts the values are bound to are
//! the gate's; the walk itself is the store's (`store::sealed`).
//!
//! Rotation is safe beside serving replicas: tables are walked in batches in primary-key order,
//! rows already under the first key are skipped by the database, and each row is replaced by a
//! compare-and-swap on the ciphertexts read. A row a replica changed meanwhile is read again and
//! re-sealed from its new values, so no write is lost; a run stopped at any point leaves every row
//! either as it was or re-sealed, and the next run carries on with what is left.

use std::time::Duration;

use super::binding::arguments_context;
use super::connections::{access_context, refresh_context, registration_context, verifier_context};
use super::form_values::{answer_context, user_form_context};
use crate::secret::Secret;
use crate::store::{SealedRow, SealedRowKey, SealedTable, Store, StoreError};
use crate::vault::{KeyId, KeyRing, STAMP_LEN};

/// How a rotation goes.
#[derive(Debug, Clone, Copy)]
pub struct RotateOptions {
    /// Rows read (and re-sealed) per batch.
    pub batch_size: usize,
    /// A pause after each batch, to spread the load on the database.
    pub pause: Duration,
}

/// How often a row that keeps changing under the rotation is read again before it is left for the
/// next run.
const MAX_REREADS: usize = 100;

/// What one batch did (a progress line), or a whole rotation (the totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Rows re-sealed under the first key.
    pub resealed: u64,
    /// Times a row had changed since it was read, and was read again.
    pub reread: u64,
    /// Rows with a value no key of the ring opens (left as they are).
    pub unopened: u64,
    /// Rows that kept changing and were left for the next run.
    pub busy: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.resealed += other.resealed;
        self.reread += other.reread;
        self.unopened += other.unopened;
        self.busy += other.busy;
    }
}

/// Re-seals every stored value under the ring's first key; `progress` hears of each batch.
/// Returns the totals. Only a database error stops it; values no key opens are counted and left.
pub async fn rotate(
    store: &dyn Store,
    vault: &KeyRing,
    options: RotateOptions,
    mut progress: impl FnMut(SealedTable, &Tally),
) -> Result<Tally, StoreError> {
    let stamp = vault.stamp();
    let batch_size = options.batch_size.max(1);
    let mut total = Tally::default();
    for table in SealedTable::ALL {
        let mut after: Option<SealedRowKey> = None;
        loop {
            let rows = store.sealed_batch(table, &stamp, after.as_ref(), batch_size).await?;
            let Some(last) = rows.last() else {
                break;
            };
            let mut batch = Tally::default();
            let mut before = after.clone();
            for row in &rows {
                batch.add(rotate_row(store, vault, &stamp, before.as_ref(), row.clone()).await?);
                before = Some(row.key.clone());
            }
            progress(table, &batch);
            total.add(batch);
            if rows.len() < batch_size {
                break;
            }
            after = Some(last.key.clone());
            if !options.pause.is_zero() {
                tokio::time::sleep(options.pause).await;
            }
        }
    }
    Ok(total)
}

/// Re-seals one row by compare-and-swap; when the row changed since it was read, reads it again
/// (the first stale row after `before`, its predecessor in the walk) and retries.
async fn rotate_row(
    store: &dyn Store,
    vault: &KeyRing,
    stamp: &[u8],
    before: Option<&SealedRowKey>,
    mut row: SealedRow,
) -> Result<Tally, StoreError> {
    let mut tally = Tally::default();
    for _ in 0..MAX_REREADS {
        let Some(values) = resealed(vault, stamp, &row) else {
            tally.unopened = 1;
            return Ok(tally);
        };
        if store.reseal(&row, &values).await? {
            tally.resealed = 1;
            return Ok(tally);
        }
        tally.reread += 1;
        let again = store.sealed_batch(row.key.table(), stamp, before, 1).await?;
        match again.into_iter().next() {
            Some(fresh) if fresh.key == row.key => row = fresh,
            // Gone, or re-sealed by a replica (it writes with the first key too): nothing to do.
            _ => return Ok(tally),
        }
    }
    tracing::warn!(
        table = row.key.table().name(),
        "keys: a row kept changing; left for the next run"
    );
    tally.busy = 1;
    Ok(tally)
}

/// The row's values with each one not under the first key opened and sealed again (with a fresh
/// nonce, bound to the same context). `None` when some value cannot be opened.
fn resealed(vault: &KeyRing, stamp: &[u8], row: &SealedRow) -> Option<Vec<Option<Vec<u8>>>> {
    let contexts = contexts(&row.key);
    if contexts.len() != row.values.len() {
        return None;
    }
    row.values
        .iter()
        .zip(&contexts)
        .map(|(value, context)| match value {
            None => Some(None),
            Some(sealed) if sealed.starts_with(stamp) => Some(Some(sealed.clone())),
            Some(sealed) => match vault.decrypt(sealed, context) {
                Ok(plaintext) => {
                    let plaintext = Secret::new(plaintext);
                    Some(Some(vault.encrypt(plaintext.expose(), context)))
                }
                Err(error) => {
                    let key = KeyId::of(sealed).map_or_else(|| "unknown format".to_owned(), |id| id.to_string());
                    tracing::warn!(table = row.key.table().name(), %key, %error, "keys: a stored value cannot be opened");
                    None
                }
            },
        })
        .collect()
}

/// What each sealed column of the row is bound to, as the rooms that sealed it bind it.
fn contexts(key: &SealedRowKey) -> Vec<String> {
    match key {
        SealedRowKey::Connection { principal, provider } => vec![
            access_context(principal, provider),
            refresh_context(principal, provider),
        ],
        SealedRowKey::Flow { state_hash } => vec![verifier_context(state_hash)],
        SealedRowKey::FormValues { principal, form } => vec![user_form_context(principal, form)],
        SealedRowKey::FormAnswer { elicitation } => vec![answer_context(elicitation)],
        SealedRowKey::Registration { issuer, redirect_uri } => vec![registration_context(issuer, redirect_uri)],
        SealedRowKey::Elicitation { elicitation } => vec![arguments_context(elicitation)],
    }
}

/// Who sealed a group of stored values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sealer {
    /// The key with this id: `Some(i)` when it is `[secrets] keys[i]`, `None` when no configured
    /// key has it (the values cannot be opened).
    Key(KeyId, Option<usize>),
    /// Not a ciphertext format this version writes.
    UnknownFormat,
}

/// How many rows of each table each sealer protects: one entry per configured key (zero rows
/// included), then the others found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    pub sealers: Vec<(Sealer, Vec<(SealedTable, u64)>)>,
}

/// Counts the stored values by the key that sealed them, per table.
pub async fn status(store: &dyn Store, vault: &KeyRing) -> Result<KeyStatus, StoreError> {
    let ring = vault.key_ids();
    let mut sealers: Vec<(Sealer, Vec<(SealedTable, u64)>)> = ring
        .iter()
        .enumerate()
        .map(|(index, id)| (Sealer::Key(*id, Some(index)), zeros()))
        .collect();
    for table in SealedTable::ALL {
        for count in store.count_stamps(table, STAMP_LEN).await? {
            let sealer = match KeyId::of(&count.stamp) {
                Some(id) => Sealer::Key(id, ring.iter().position(|known| *known == id)),
                None => Sealer::UnknownFormat,
            };
            if !sealers.iter().any(|(known, _)| *known == sealer) {
                sealers.push((sealer, zeros()));
            }
            let counted = sealers
                .iter_mut()
                .filter(|(known, _)| *known == sealer)
                .flat_map(|(_, rows)| rows.iter_mut())
                .find(|(t, _)| *t == table);
            if let Some((_, rows)) = counted {
                *rows += count.rows;
            }
        }
    }
    Ok(KeyStatus { sealers })
}

fn zeros() -> Vec<(SealedTable, u64)> {
    SealedTable::ALL.iter().map(|table| (*table, 0)).collect()
}

#[cfg(test)]
mod tests;
