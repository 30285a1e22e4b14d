//! Upstream MCP servers: gatehouse lists their tools beside its own and forwards gated calls to
//! them on each user's own session, with that user's credentials.
//!
//! - `shared`: what every upstream's catalogue and calls share (`Core`): listing, reload, announce;
//! - `upstream`: one configured upstream, parsed once;
//! - `catalogue`: its tools as offered (prefixed, filtered, bounded);
//! - `offers`: its resources, templates and prompts as offered (namespaced, bounded);
//! - `tool`: one of them as a gatehouse tool, forwarding a call;
//! - `request`: the other requests forwarded (reading a resource, getting a prompt, ...);
//! - `forwarded`: one forwarded call, from its request to its outcome;
//! - `parked`: the 2026-07-28 calls waiting for their client's answers to an upstream's request;
//! - `pool`: the sessions per (user, upstream), HTTP or a process each;
//! - `relay`: what the upstream sends while a call runs, passed to that call's client;
//! - `crossing`: what crosses from an upstream to a client or to storage, redacted and marked;
//! - `exchanged`: the tokens of `auth = "token_exchange"` upstreams, exchanged and held per user;
//! - `failure`: what an upstream's failure means for the call;
//! - `command`: where a stdio upstream's program is found, as `check-config` and `doctor` check;
//! - `status`: what the operator pages show of each upstream, and its last error here;
//! - `traced`: the HTTP client of upstreams, which carries a call's trace (`traceparent`).
//!
//! Catalogues are persisted (shared by replicas, kept across restarts) and refreshed when a user's
//! session opens and the stored one is older than [`REFRESH_AFTER`], when the upstream says its
//! list changed, and, for upstreams that need no credentials, periodically. Refreshes of one
//! upstream are coalesced: at most one listing every [`RELIST_INTERVAL`], however often it says
//! its list changed. A listing goes through the most recently used user's session, or, for an
//! upstream that needs no credentials, through gatehouse's own session with it, kept open. A
//! listed tool whose definition holds a secret of the user it was listed through is left out (it
//! would be shown to every user). A changed catalogue is announced to the other replicas through
//! the store and to every client with a stream open as `notifications/tools/list_changed` (and
//! `resources/list_changed`, `prompts/list_changed` for those lists).

mod catalogue;
pub mod command;
mod crossing;
mod direct;
mod exchanged;
mod failure;
mod forwarded;
mod offered;
mod offers;
mod parked;
mod pool;
mod relay;
mod request;
mod shared;
mod status;
mod tool;
mod traced;
mod upstream;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::domain::Principal;
use crate::events::{Bus, EVERY_UPSTREAM};
use crate::forms::Forms;
use crate::identity::Identity;
use crate::instance::InstanceNonce;
use crate::metrics::Metrics;
use crate::providers::Providers;
use crate::store::{Store, StoreError};
use crate::tools::{Offering, Offerings, Tool};

use catalogue::Changes;
pub use offered::{Forwarded, List, Owner, Request};
pub use offers::Declared;
use parked::ParkedCalls;
use pool::Pool;
pub use shared::Core;
pub use status::{Fault, UpstreamStatus};
pub use upstream::Upstream;

/// A stored catalogue older than this is listed again when a user's session opens.
pub const REFRESH_AFTER: Duration = Duration::from_secs(600);
/// The shortest time between two listings of one upstream: what it notifies meanwhile leads to
/// one listing once this has passed.
pub const RELIST_INTERVAL: Duration = Duration::from_secs(5);
/// How often idle sessions close and catalogues needing no credentials are listed again.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(30);
/// How long shutdown waits for upstream sessions to close.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);
/// Refreshes waiting at once; more are dropped (one waiting already covers them).
const REFRESH_QUEUE: usize = 64;

/// What the upstreams use of the rest of gatehouse.
pub struct Services<'a> {
    pub store: Arc<dyn Store>,
    pub bus: Arc<Bus>,
    /// Counts forwarded calls and listings.
    pub metrics: Arc<Metrics>,
    /// This replica, which holds the calls parked here.
    pub replica: &'a InstanceNonce,
    /// Exchanges callers' tokens for token-exchange upstreams.
    pub identity: Arc<Identity>,
}

pub struct Upstreams {
    core: Arc<Core>,
    refresh: Mutex<Option<mpsc::Receiver<String>>>,
    /// Other replicas' changed catalogues, subscribed to from the start: a change announced
    /// between the first `load` and `maintain` is not lost.
    changes: Mutex<Option<broadcast::Receiver<String>>>,
}

impl Upstreams {
    /// Parses and checks `[[upstreams]]`.
    pub fn parse(config: &Config, providers: &Providers, forms: &Forms) -> Result<Vec<Upstream>, ConfigError> {
        let mut upstreams: Vec<Upstream> = Vec::new();
        for (i, upstream) in config.upstreams.iter().enumerate() {
            let key = format!("upstreams[{i}]");
            if upstreams.iter().any(|u| u.id == upstream.id) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!("an upstream named `{}` exists already", upstream.id),
                ));
            }
            let parsed = Upstream::from_config(upstream, &key, config, providers, forms)?;
            if let Some(other) = upstreams.iter().find(|u| u.tag == parsed.tag) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!(
                        "`{}` and `{}` would give their resources the same URIs (`{}+...`): two ids may not differ only in case, or by a `u` before a first character that is not a letter",
                        other.id, parsed.id, parsed.tag
                    ),
                ));
            }
            upstreams.push(parsed);
        }
        Ok(upstreams)
    }

    pub fn new(
        upstreams: Vec<Upstream>,
        forms: Arc<Forms>,
        own_tools: HashSet<String>,
        services: Services<'_>,
    ) -> Result<Self, ConfigError> {
        let Services {
            store,
            bus,
            metrics,
            replica,
            identity,
        } = services;
        for upstream in upstreams.iter().filter(|u| u.allow.is_none() && u.needs_credentials()) {
            tracing::warn!(upstream = %upstream.id, "lists no tools until a user has called one of them; set `tools` to list them from the start");
        }
        let upstreams: Vec<Arc<Upstream>> = upstreams.into_iter().map(Arc::new).collect();
        let client = traced::http_client()?;
        let (refresh, receiver) = mpsc::channel(REFRESH_QUEUE);
        let faults = status::Faults::new(upstreams.iter().map(|u| u.id.clone()));
        let core = Arc::new_cyclic(|weak| {
            let catalogues = catalogue::assign(&upstreams, &own_tools, &forms, weak, |_| None);
            Core {
                this: weak.clone(),
                upstreams,
                pool: Pool::new(client, refresh.clone(), bus.clone()),
                exchanges: exchanged::Exchanges::new(identity),
                catalogues: RwLock::new(catalogues),
                listed_at: Mutex::new(HashMap::new()),
                faults,
                refresh,
                forms,
                own_tools,
                store,
                bus,
                metrics,
                parked: Arc::new(ParkedCalls::new(replica.as_str().to_owned())),
            }
        });
        let changes = core.bus.subscribe_catalogues();
        Ok(Self {
            core,
            refresh: Mutex::new(Some(receiver)),
            changes: Mutex::new(Some(changes)),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.core.upstreams.is_empty()
    }

    /// Every upstream tool on offer, in configuration order.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let catalogues = self.core.catalogues.read().unwrap_or_else(PoisonError::into_inner);
        self.core
            .upstreams
            .iter()
            .filter_map(|u| catalogues.get(&u.id))
            .flat_map(|c| c.tools.iter().map(|t| t.clone() as Arc<dyn Tool>))
            .collect()
    }

    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let catalogues = self.core.catalogues.read().unwrap_or_else(PoisonError::into_inner);
        self.core
            .upstreams
            .iter()
            .filter_map(|u| catalogues.get(&u.id))
            .find_map(|c| c.get(name))
            .map(|t| t.clone() as Arc<dyn Tool>)
    }

    /// The configured upstreams, for pages and `whoami`.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.core.upstreams
    }

    /// How many tools each upstream offers now.
    pub fn tool_count(&self, upstream: &str) -> usize {
        self.core.tool_count(upstream)
    }

    /// Upstream sessions open on this replica.
    pub fn open_sessions(&self) -> usize {
        self.core.pool.open_count()
    }

    /// Each configured upstream as the operator pages show it, in configuration order: the
    /// stored catalogues' ages, and what this replica holds open and last met.
    pub async fn status(&self) -> Result<Vec<UpstreamStatus>, StoreError> {
        let stored = self.core.store.catalogues().await?;
        Ok(self
            .core
            .upstreams
            .iter()
            .map(|upstream| {
                let sessions = self.core.pool.open_of(&upstream.id);
                let stdio = matches!(upstream.transport, upstream::Transport::Stdio { .. });
                UpstreamStatus {
                    id: upstream.id.clone(),
                    transport: if stdio { "stdio" } else { "http" },
                    tools: self.core.tool_count(&upstream.id),
                    listed_at: stored.iter().find(|r| r.upstream == upstream.id).map(|r| r.listed_at),
                    sessions,
                    processes: if stdio { sessions } else { 0 },
                    last_error: self.core.faults.last(&upstream.id),
                }
            })
            .collect())
    }

    /// Reads the stored catalogues, which replace the allow-lists' stand-ins; true when one of
    /// them was new here.
    pub async fn load(&self) -> Result<bool, StoreError> {
        let mut adopted = Changes::default();
        for record in self.core.store.catalogues().await? {
            adopted = adopted | self.core.adopt(&record);
        }
        Ok(adopted.any())
    }

    /// Refreshes catalogues and closes idle sessions until shutdown.
    pub async fn maintain(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(mut refresh) = self.refresh.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        let Some(mut changes) = self.changes.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        tokio::spawn(self.core.parked.clone().listen(self.core.bus.clone(), shutdown.clone()));
        let mut tick = tokio::time::interval(MAINTENANCE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Refreshes asked for, by upstream, and when each may run.
        let mut due: HashMap<String, Instant> = HashMap::new();
        loop {
            let next = due.values().min().copied();
            tokio::select! {
                () = shutdown.cancelled() => {
                    self.core.pool.close_everything(SHUTDOWN_WAIT).await;
                    return;
                }
                Some(upstream) = refresh.recv() => {
                    let at = self.core.next_listing(&upstream);
                    due.entry(upstream).and_modify(|t| *t = (*t).min(at)).or_insert(at);
                }
                () = clock_until(next), if next.is_some() => {
                    let now = Instant::now();
                    let ready: Vec<String> = due.iter().filter(|(_, at)| **at <= now).map(|(id, _)| id.clone()).collect();
                    for upstream in ready {
                        due.remove(&upstream);
                        self.core.list(&upstream).await;
                    }
                }
                change = changes.recv() => match change {
                    Ok(upstream) if upstream != EVERY_UPSTREAM => self.core.reload(&upstream).await,
                    // After a gap (this replica's LISTEN re-opened, or it fell behind): read them all,
                    // and tell the clients here when one was new.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => match self.load().await {
                        Ok(true) => self.core.announce(Changes::ALL).await,
                        Ok(false) => {}
                        Err(error) => tracing::warn!(%error, "could not reload the upstream catalogues"),
                    },
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    self.core.pool.close_idle(&self.core.upstreams);
                    for upstream in self.core.upstreams.iter().filter(|u| !u.needs_credentials()) {
                        if self.core.is_stale(&upstream.id) {
                            self.core.list(&upstream.id).await;
                        }
                    }
                }
            }
        }
    }
}

impl Offerings for Upstreams {
    fn offerings(&self) -> Vec<Offering> {
        self.core
            .upstreams
            .iter()
            .map(|u| Offering {
                id: u.id.clone(),
                tools: self.tool_count(&u.id),
                requires: u.requires.clone(),
            })
            .collect()
    }

    fn end_sessions_of(&self, principal: &Principal) {
        self.core.pool.close_all_of(principal);
    }
}

/// Until `at` (never when `None`).
async fn clock_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
