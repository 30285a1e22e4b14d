//! What the catalogues and calls of every upstream share (`Core`): the configured upstreams, the
//! session pool, the catalogues and their listing, reload, adoption of another replica's catalogue
//! and announcement of a changed list to the clients. `Upstreams` (the face, in `mod.rs`) holds it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::catalogue::{self, Catalogue, Changes, Listing};
use super::parked::ParkedCalls;
use super::pool::{self, Pool};
use super::{REFRESH_AFTER, RELIST_INTERVAL, Upstream, exchanged, offers, status, tool};
use crate::events::Bus;
use crate::forms::Forms;
use crate::jsonrpc;
use crate::metrics::{ListingOutcome, Metrics};
use crate::store::{CatalogueRecord, Store};

/// What the catalogues and calls share.
pub struct Core {
    pub(super) this: std::sync::Weak<Core>,
    pub(super) upstreams: Vec<Arc<Upstream>>,
    pub(super) pool: Pool,
    /// Tokens exchanged for `auth = "token_exchange"` upstreams, per user.
    pub(super) exchanges: exchanged::Exchanges,
    pub(super) catalogues: RwLock<HashMap<String, Arc<Catalogue>>>,
    /// When this replica last listed each upstream.
    pub(super) listed_at: Mutex<HashMap<String, Instant>>,
    /// The last error of each upstream on this replica, for the operator pages.
    pub(super) faults: status::Faults,
    pub(super) refresh: mpsc::Sender<String>,
    pub(super) forms: Arc<Forms>,
    /// Names of gatehouse's own tools, which upstream tools may not shadow.
    pub(super) own_tools: HashSet<String>,
    pub(super) store: Arc<dyn Store>,
    pub(super) bus: Arc<Bus>,
    /// Counts forwarded calls by upstream and outcome.
    pub(super) metrics: Arc<Metrics>,
    /// The 2026-07-28 calls parked here on an upstream's request to their client.
    pub(super) parked: Arc<ParkedCalls>,
}

/// The listed tools that may be shared with every user: a definition that holds a secret of the
/// user whose session listed it is left out (and logged without it).
fn shareable(session: &pool::Session, tools: Vec<Value>) -> Vec<Value> {
    tools
        .into_iter()
        .filter(|tool| {
            let redacted = session.redactor.value(tool.clone());
            let clean = &redacted == tool;
            if !clean {
                tracing::warn!(upstream = %session.upstream, principal = ?session.principal, tool = ?redacted.get("name"), "left out a tool whose definition holds a secret of the user it was listed through");
            }
            clean
        })
        .collect()
}

/// The listed resources, templates and prompts that may be shared with every user, as
/// [`shareable`] decides for tools.
fn shareable_offers(session: &pool::Session, mut offers: Value) -> Value {
    for list in ["resources", "resourceTemplates", "prompts"] {
        if let Some(entries) = offers.get_mut(list).and_then(Value::as_array_mut) {
            let kept = shareable(session, std::mem::take(entries));
            *entries = kept;
        }
    }
    offers
}

/// Pages of `tools/list` read from one upstream, at most.
const MAX_LIST_PAGES: usize = 100;

/// The upstream's tools (all pages, up to [`catalogue::MAX_TOOLS`] tools and [`MAX_LIST_PAGES`]
/// pages), within `timeout`. Written here rather than with rmcp's `list_all_tools`, which follows
/// cursors without bound and without a deadline.
async fn list_tools(session: &pool::Session, timeout: Duration) -> Result<Vec<Value>, String> {
    let peer = session.service.peer();
    let listing = async {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let page = peer.list_tools(Some(params)).await.map_err(|e| e.to_string())?;
            tools.extend(page.tools.iter().filter_map(|t| serde_json::to_value(t).ok()));
            if tools.len() >= catalogue::MAX_TOOLS {
                tools.truncate(catalogue::MAX_TOOLS);
                break;
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    };
    tokio::time::timeout(timeout, listing)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {}", humantime::format_duration(timeout))))
}

impl Core {
    pub(super) fn upstream(&self, id: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.id == id)
    }

    /// When the upstream may be listed next: [`RELIST_INTERVAL`] after the last listing began.
    pub(super) fn next_listing(&self, upstream: &str) -> Instant {
        let listed_at = self.listed_at.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        listed_at
            .get(upstream)
            .map_or(now, |at| (*at + RELIST_INTERVAL).max(now))
    }

    pub(super) fn is_stale(&self, upstream: &str) -> bool {
        let listed_at = self.listed_at.lock().unwrap_or_else(PoisonError::into_inner);
        listed_at.get(upstream).is_none_or(|at| at.elapsed() >= REFRESH_AFTER)
    }

    /// A user's session with the upstream just opened: list through it if the catalogue is stale.
    pub(super) fn listed_through(&self, upstream: &str) {
        if self.is_stale(upstream) {
            // A full queue holds refreshes already; this one adds nothing.
            let _ = self.refresh.try_send(upstream.to_owned());
        }
    }

    /// Lists the upstream's tools through the most recently used open session (or, when it needs
    /// no credentials, a session of its own) and saves the catalogue. Returns the tools offered
    /// afterwards.
    pub(super) async fn refresh(&self, id: &str) -> Vec<Arc<tool::UpstreamTool>> {
        self.list(id).await;
        let catalogues = self.catalogues.read().unwrap_or_else(PoisonError::into_inner);
        catalogues.get(id).map(|c| c.tools.clone()).unwrap_or_default()
    }

    pub(super) async fn list(&self, id: &str) {
        let Some(upstream) = self.upstream(id) else { return };
        self.listed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), Instant::now());
        let session = match self.pool.newest_of(id) {
            Some(session) => session,
            None if !upstream.needs_credentials() => match self.pool.lister(upstream).await {
                Ok(session) => session,
                Err(error) => {
                    tracing::warn!(upstream = %id, %error, "could not list the upstream's tools");
                    self.faults.record(id, format_args!("listing its tools: {error}"));
                    self.metrics.upstream_listing(id, ListingOutcome::Failed);
                    return;
                }
            },
            None => return,
        };
        let tools = match list_tools(&session, upstream.timeout).await {
            Ok(tools) => shareable(&session, tools),
            Err(error) => {
                tracing::warn!(upstream = %id, %error, "could not list the upstream's tools");
                self.faults.record(id, format_args!("listing its tools: {error}"));
                self.metrics.upstream_listing(id, ListingOutcome::Failed);
                return;
            }
        };
        let offers = match offers::list(&session, upstream.timeout).await {
            Ok(offers) => shareable_offers(&session, offers),
            Err(error) => {
                tracing::warn!(upstream = %id, %error, "could not list the upstream's resources and prompts");
                self.faults
                    .record(id, format_args!("listing its resources and prompts: {error}"));
                self.metrics.upstream_listing(id, ListingOutcome::Failed);
                return;
            }
        };
        let tools = Value::Array(tools);
        let record = CatalogueRecord {
            upstream: id.to_owned(),
            digest: CatalogueRecord::digest_of_listing(&tools, &offers),
            tools,
            offers,
            listed_by: session.principal.clone(),
            listed_at: Utc::now(),
        };
        match self.store.save_catalogue(&record).await {
            Ok(_) => {
                let changes = self.adopt(&record);
                if changes.any() {
                    self.metrics.upstream_listing(id, ListingOutcome::Changed);
                    self.bus.catalogue_changed(id);
                    tracing::info!(upstream = %id, tools = self.tool_count(id), "the upstream's catalogue changed");
                    self.announce(changes).await;
                } else {
                    self.metrics.upstream_listing(id, ListingOutcome::Unchanged);
                }
            }
            Err(error) => {
                self.metrics.upstream_listing(id, ListingOutcome::Failed);
                tracing::warn!(upstream = %id, %error, "could not store the upstream's catalogue");
            }
        }
    }

    pub(super) fn tool_count(&self, upstream: &str) -> usize {
        let catalogues = self.catalogues.read().unwrap_or_else(PoisonError::into_inner);
        catalogues.get(upstream).map_or(0, |c| c.tools.len())
    }

    /// Another replica stored a new catalogue.
    pub(super) async fn reload(&self, id: &str) {
        match self.store.catalogue(id).await {
            Ok(Some(record)) => {
                let changes = self.adopt(&record);
                if changes.any() {
                    self.announce(changes).await;
                }
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(upstream = %id, %error, "could not read the upstream's catalogue"),
        }
    }

    /// Offers the stored catalogue's tools, resources and prompts; which lists changed (none
    /// when it is offered already). Every catalogue is built again: a name this one takes now, or
    /// gives up, may change which tool of a later upstream has it.
    pub(super) fn adopt(&self, record: &CatalogueRecord) -> Changes {
        if self.upstream(&record.upstream).is_none() {
            return Changes::default();
        }
        let mut catalogues = self.catalogues.write().unwrap_or_else(PoisonError::into_inner);
        let before = catalogues.get(&record.upstream).and_then(|c| c.listing());
        if before.as_ref().is_some_and(|b| b.digest == record.digest) {
            return Changes::default();
        }
        let changes = Changes::between(before.as_ref(), record);
        let adopted = Listing {
            tools: Arc::new(record.tools.clone()),
            offers: Arc::new(record.offers.clone()),
            digest: record.digest.clone(),
        };
        let rebuilt = catalogue::assign(&self.upstreams, &self.own_tools, &self.forms, &self.this, |upstream| {
            if upstream.id == record.upstream {
                Some(Listing {
                    tools: adopted.tools.clone(),
                    offers: adopted.offers.clone(),
                    digest: adopted.digest.clone(),
                })
            } else {
                catalogues.get(&upstream.id).and_then(|c| c.listing())
            }
        });
        *catalogues = rebuilt;
        changes
    }

    /// Tells every client with a stream open here which lists changed.
    pub(super) async fn announce(&self, changes: Changes) {
        for (changed, method) in [
            (changes.tools, "notifications/tools/list_changed"),
            (changes.resources, "notifications/resources/list_changed"),
            (changes.prompts, "notifications/prompts/list_changed"),
        ] {
            if !changed {
                continue;
            }
            let message = jsonrpc::notification(method, json!({}));
            for session in self.bus.sessions_with_streams() {
                if let Err(error) = self.bus.publish(&session, &message).await {
                    tracing::warn!(%error, method, "could not tell a client that a list changed");
                }
            }
        }
    }
}
