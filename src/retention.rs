//! Retention (`[retention]`): deletes what is over once its period has passed — events written to
//! a stream, elicitations that ended (with their flows and answers), audit rows — on one replica
//! at a time and in bounded batches. The replica that sweeps holds the `retention` lease in the
//! database, renewed before every batch, so a replica that stalls or dies hands the sweep on once
//! its lease runs out. What a pending flow needs is never due: a pending elicitation with its flow
//! and answers, and an event no stream has been written yet.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::clock::{after, before, every};
use crate::store::{Lease, Store, StoreError};

/// The lease's name in the `leases` table.
pub const LEASE_NAME: &str = "retention";
/// How long a batch may take before another replica may take the sweep over.
const LEASE: Duration = Duration::from_secs(60);
/// Rows one statement deletes at most.
pub const BATCH: usize = 1000;
/// How often each replica tries to sweep.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long each kind of row is kept once it is over.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// Events written to a stream, after they were appended.
    pub events: Duration,
    /// Finished and expired elicitations, after they ended.
    pub finished_elicitations: Duration,
    /// Audit rows, after they were recorded.
    pub audit: Duration,
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub events: u64,
    pub elicitations: u64,
    pub audit: u64,
}

pub struct Retention {
    store: Arc<dyn Store>,
    periods: Periods,
    /// Who this replica is in the `leases` table (its instance nonce).
    holder: String,
}

impl Retention {
    pub fn new(store: Arc<dyn Store>, periods: Periods, holder: String) -> Self {
        Self { store, periods, holder }
    }

    /// One sweep, when this replica gets the lease: everything due at the start is deleted, batch
    /// by batch, unless the lease is lost on the way. `None`, and nothing deleted, while another
    /// replica holds it.
    pub async fn sweep(&self) -> Result<Option<Swept>, StoreError> {
        if !self.hold().await? {
            return Ok(None);
        }
        let swept = self.delete_due(Utc::now()).await;
        if let Err(error) = self.store.release_lease(LEASE_NAME, &self.holder).await {
            tracing::warn!(%error, "could not release the retention lease; it runs out by itself");
        }
        swept.map(Some)
    }

    /// Takes or renews the lease for another [`LEASE`]; false when another replica holds it.
    async fn hold(&self) -> Result<bool, StoreError> {
        let now = Utc::now();
        self.store
            .take_lease(Lease {
                name: LEASE_NAME,
                holder: &self.holder,
                now,
                until: after(now, LEASE),
            })
            .await
    }

    async fn delete_due(&self, now: DateTime<Utc>) -> Result<Swept, StoreError> {
        let mut held = true;
        let events = self
            .in_batches(&mut held, Due::Events, before(now, self.periods.events))
            .await?;
        let elicitations = self
            .in_batches(
                &mut held,
                Due::Elicitations,
                before(now, self.periods.finished_elicitations),
            )
            .await?;
        let audit = self
            .in_batches(&mut held, Due::Audit, before(now, self.periods.audit))
            .await?;
        Ok(Swept {
            events,
            elicitations,
            audit,
        })
    }

    /// Deletes what of `due` is older than `cutoff`, [`BATCH`] rows at a time until a batch
    /// deletes fewer, renewing the lease before each batch after the first; `held` turns false,
    /// and nothing more runs, once the lease is lost.
    async fn in_batches(&self, held: &mut bool, due: Due, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut total = 0;
        while *held {
            let deleted = match due {
                Due::Events => self.store.delete_delivered_events(cutoff, BATCH).await?,
                Due::Elicitations => self.store.delete_ended_elicitations(cutoff, BATCH).await?,
                Due::Audit => self.store.delete_audit_before(cutoff, BATCH).await?,
            };
            total += deleted;
            if deleted < BATCH as u64 {
                break;
            }
            *held = self.hold().await?;
        }
        Ok(total)
    }
}

/// What a sweep deletes, one kind after the other.
#[derive(Debug, Clone, Copy)]
enum Due {
    Events,
    Elicitations,
    Audit,
}

/// Sweeps every [`SWEEP_INTERVAL`] until shutdown (whichever replica gets the lease).
pub async fn sweep_periodically(retention: Arc<Retention>, shutdown: CancellationToken) {
    every(SWEEP_INTERVAL, shutdown, || async {
        match retention.sweep().await {
            Ok(Some(swept)) if swept != Swept::default() => tracing::info!(
                events = swept.events,
                elicitations = swept.elicitations,
                audit = swept.audit,
                "retention: deleted delivered events, ended elicitations and audit rows past their period"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "retention sweep failed"),
        }
    })
    .await;
}
