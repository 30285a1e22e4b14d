//! Upstream MCP sessions: one per (principal, upstream), opened on the first call with that
//! user's credentials, reused while those credentials stay the same, never shared between users.
//! HTTP sessions go through rmcp's Streamable HTTP client (which re-initializes a session the
//! upstream answers 404 for); stdio sessions are a process each. Both are bounded per upstream,
//! counting the sessions being opened and gatehouse's own listing session too (a place is taken
//! before a process starts): gatehouse's listing session, else the least recently used idle
//! session, closes for a new one, and idle sessions close after the upstream's `idle_timeout`.

mod stderr;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::direct::{self, Direct};
use super::failure::{OpenError, Permanent};
use super::relay::{Handler, InOrder, Relay};
use super::upstream::{Transport, Upstream};
use crate::domain::{Principal, SessionId};
use crate::events::Bus;
use crate::secret::Secret;
use crate::tools::Redactor;

/// Variables a stdio upstream inherits from gatehouse's environment; nothing else of it (which
/// holds gatehouse's own secrets) reaches the process.
const INHERITED_ENV: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER"];

/// What a session was opened with: the user's token and rendered headers or environment.
pub struct Opening {
    pub bearer: Option<Secret<String>>,
    /// Rendered `headers` (HTTP) or `env` (stdio).
    pub values: Vec<(String, Secret<String>)>,
    /// Every secret of the user's the session was opened with, as saved (a rendered value may
    /// hold one among other text): what the upstream sends is redacted of them.
    pub secrets: Vec<Secret<String>>,
}

impl Opening {
    fn fingerprint(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        if let Some(bearer) = &self.bearer {
            hash.update(bearer.expose().as_bytes());
        }
        hash.update([0]);
        for (name, value) in &self.values {
            hash.update(name.as_bytes());
            hash.update([0]);
            hash.update(value.expose().as_bytes());
            hash.update([0]);
        }
        hash.finalize().into()
    }

    fn secrets(&self) -> impl Iterator<Item = &str> {
        self.bearer
            .iter()
            .chain(self.values.iter().map(|(_, v)| v))
            .chain(&self.secrets)
            .map(|s| s.expose().as_str())
    }
}

/// One open upstream session.
pub struct Session {
    pub upstream: String,
    /// `None` for a session gatehouse opened on its own to list the tools of an upstream that
    /// needs no credentials.
    pub principal: Option<Principal>,
    pub service: RunningService<RoleClient, Handler>,
    /// Where calls are posted directly (HTTP sessions).
    pub direct: Option<Arc<Direct>>,
    pub relay: Arc<Relay>,
    /// The secrets of the user it was opened for: a listing through it is redacted of them.
    pub redactor: Redactor,
    fingerprint: [u8; 32],
    last_used: Mutex<Instant>,
}

impl Session {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().unwrap_or_else(PoisonError::into_inner).elapsed()
    }

    /// Idle: no call runs on it.
    fn is_idle(&self) -> bool {
        !self.relay.is_busy()
    }
}

type Key = (Principal, String);

/// Places taken per upstream by sessions being opened.
type Places = Arc<Mutex<HashMap<String, usize>>>;

/// One place among an upstream's bounded sessions, taken (under the pool's lock) before the
/// session opens and given back when dropped: when opening fails or is abandoned, or when the
/// session it was taken for enters the pool's (or the listers') map.
struct Place {
    places: Places,
    upstream: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut places = self.places.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(taken) = places.get_mut(&self.upstream) {
            *taken = taken.saturating_sub(1);
            if *taken == 0 {
                places.remove(&self.upstream);
            }
        }
    }
}

pub struct Pool {
    sessions: Mutex<HashMap<Key, Arc<Session>>>,
    /// gatehouse's own sessions, by upstream, for listing the tools of upstreams that need no
    /// credentials: kept open like users' sessions, so a listing never starts a process. They
    /// count within the upstream's bound, and close first when a user's session needs room.
    /// Locked after `sessions` when both are, never before.
    listers: Mutex<HashMap<String, Arc<Session>>>,
    /// Locked after `sessions` when both are, never before.
    places: Places,
    client: reqwest13::Client,
    list_changed: mpsc::Sender<String>,
    /// Where resource updates for subscribed clients go.
    bus: Arc<Bus>,
}

impl Pool {
    pub fn new(client: reqwest13::Client, list_changed: mpsc::Sender<String>, bus: Arc<Bus>) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            listers: Mutex::new(HashMap::new()),
            places: Arc::default(),
            client,
            list_changed,
            bus,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn listers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.listers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sessions open now.
    pub fn open_count(&self) -> usize {
        self.lock().len() + self.listers().len()
    }

    /// Sessions open now with `upstream` (users' and gatehouse's own).
    pub fn open_of(&self, upstream: &str) -> usize {
        let users = self.lock().keys().filter(|key| key.1 == upstream).count();
        users + usize::from(self.listers().contains_key(upstream))
    }

    /// The principal's session with the upstream, opened (or reopened, when the credentials
    /// changed or the old one closed) with `opening`. The bool says whether it is new.
    pub async fn session(
        &self,
        upstream: &Upstream,
        principal: &Principal,
        opening: Opening,
    ) -> Result<(Arc<Session>, bool), OpenError> {
        let key = (principal.clone(), upstream.id.clone());
        let fingerprint = opening.fingerprint();
        let stale = {
            let mut sessions = self.lock();
            match sessions.get(&key) {
                Some(session) if session.fingerprint == fingerprint && !session.service.is_closed() => {
                    session.touch();
                    return Ok((session.clone(), false));
                }
                Some(_) => sessions.remove(&key),
                None => None,
            }
        };
        if let Some(stale) = stale {
            close(stale);
        }
        let place = self.make_room(upstream)?;
        let session = Arc::new(self.open(upstream, Some(principal), opening, fingerprint).await?);
        let replaced = {
            let mut sessions = self.lock();
            let replaced = sessions.insert(key, session.clone());
            // Counted by its entry from now on.
            drop(place);
            replaced
        };
        if let Some(replaced) = replaced {
            // Another call of the same user opened one meanwhile; the newer one stays.
            close(replaced);
        }
        Ok((session, true))
    }

    /// Closes the session after the upstream refused its credentials, so the next call opens
    /// a new one.
    pub fn forget(&self, session: &Arc<Session>) {
        let Some(principal) = &session.principal else { return };
        let key = (principal.clone(), session.upstream.clone());
        let removed = {
            let mut sessions = self.lock();
            match sessions.get(&key) {
                Some(current) if Arc::ptr_eq(current, session) => sessions.remove(&key),
                _ => None,
            }
        };
        if let Some(removed) = removed {
            close(removed);
        }
    }

    /// A place for one more session of the upstream, within its bound: the sessions in the pool
    /// and those being opened or held outside it count, and the least recently used idle session
    /// closes if need be. Taken under the lock, so sessions opening at once cannot all see room.
    fn make_room(&self, upstream: &Upstream) -> Result<Place, OpenError> {
        let limit = match &upstream.transport {
            Transport::Http { max_sessions, .. } => *max_sessions,
            Transport::Stdio { max_processes, .. } => *max_processes,
        };
        let evicted = {
            let mut sessions = self.lock();
            let mut listers = self.listers();
            let mut places = self.places.lock().unwrap_or_else(PoisonError::into_inner);
            let elsewhere =
                places.get(&upstream.id).copied().unwrap_or(0) + usize::from(listers.contains_key(&upstream.id));
            let open: Vec<(&Key, &Arc<Session>)> = sessions.iter().filter(|(k, _)| k.1 == upstream.id).collect();
            let evicted = if open.len() + elsewhere < limit {
                None
            } else if let Some(lister) = listers.remove(&upstream.id) {
                // gatehouse's own listing session goes first: it opens again when needed.
                Some(lister)
            } else {
                let oldest = open
                    .iter()
                    .filter(|(_, s)| s.is_idle())
                    .max_by_key(|(_, s)| s.idle_for())
                    .map(|(k, _)| (*k).clone());
                match oldest {
                    Some(key) => sessions.remove(&key),
                    None => return Err(OpenError::Full(limit)),
                }
            };
            *places.entry(upstream.id.clone()).or_default() += 1;
            evicted
        };
        if let Some(evicted) = evicted {
            tracing::info!(upstream = %upstream.id, principal = ?evicted.principal, "closed the least recently used upstream session to open another");
            close(evicted);
        }
        Ok(Place {
            places: self.places.clone(),
            upstream: upstream.id.clone(),
        })
    }

    /// Closes the sessions of `upstreams` that have been idle longer than their idle timeout.
    pub fn close_idle(&self, upstreams: &[Arc<Upstream>]) {
        let idle_listers: Vec<Arc<Session>> = {
            let mut listers = self.listers();
            let ids: Vec<String> = listers
                .iter()
                .filter(|(id, session)| {
                    let timeout = upstreams.iter().find(|u| &u.id == *id).map(|u| u.idle_timeout);
                    session.service.is_closed() || timeout.is_none_or(|t| session.idle_for() >= t)
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| listers.remove(id)).collect()
        };
        for session in idle_listers {
            close(session);
        }
        let idle: Vec<Arc<Session>> = {
            let mut sessions = self.lock();
            let keys: Vec<Key> = sessions
                .iter()
                .filter(|(key, session)| {
                    let timeout = upstreams.iter().find(|u| u.id == key.1).map(|u| u.idle_timeout);
                    session.service.is_closed()
                        || (session.is_idle() && timeout.is_some_and(|t| session.idle_for() >= t))
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter().filter_map(|key| sessions.remove(key)).collect()
        };
        for session in idle {
            tracing::debug!(upstream = %session.upstream, principal = ?session.principal, "closing an idle upstream session");
            close(session);
        }
    }

    /// At shutdown: ends every session (HTTP sessions deleted at the upstream, processes stopped),
    /// waiting at most `wait` for them.
    pub async fn close_everything(&self, wait: Duration) {
        let mut sessions: Vec<Arc<Session>> = self.lock().drain().map(|(_, session)| session).collect();
        sessions.extend(self.listers().drain().map(|(_, session)| session));
        let closing = sessions
            .into_iter()
            .filter_map(Arc::into_inner)
            .map(|session| async move {
                let _ = session.service.cancel().await;
            });
        if tokio::time::timeout(wait, futures::future::join_all(closing))
            .await
            .is_err()
        {
            tracing::warn!("some upstream sessions did not close in time");
        }
    }

    /// Closes every session of `principal` (their credentials are gone).
    pub fn close_all_of(&self, principal: &Principal) {
        let closed: Vec<Arc<Session>> = {
            let mut sessions = self.lock();
            let keys: Vec<Key> = sessions.keys().filter(|k| &k.0 == principal).cloned().collect();
            keys.iter().filter_map(|key| sessions.remove(key)).collect()
        };
        for session in closed {
            close(session);
        }
    }

    /// Forgets the subscriptions `subscriber` (a gatehouse session that ended) made through any
    /// upstream session here, so they hold none open.
    pub fn forget_subscriber(&self, subscriber: &SessionId) {
        for session in self.lock().values() {
            session.relay.forget_subscriber(subscriber);
        }
    }

    /// The most recently used open session with the upstream.
    pub fn newest_of(&self, upstream: &str) -> Option<Arc<Session>> {
        self.lock()
            .iter()
            .filter(|(key, session)| key.1 == upstream && !session.service.is_closed())
            .min_by_key(|(_, session)| session.idle_for())
            .map(|(_, session)| session.clone())
    }

    /// gatehouse's own session with `upstream` (which needs no credentials), for listing its
    /// tools: the open one, else a new one, within the upstream's bound.
    pub async fn lister(&self, upstream: &Upstream) -> Result<Arc<Session>, OpenError> {
        if let Some(session) = self.listers().get(&upstream.id).filter(|s| !s.service.is_closed()) {
            session.touch();
            return Ok(session.clone());
        }
        let place = self.make_room(upstream)?;
        let opening = Opening {
            bearer: None,
            values: Vec::new(),
            secrets: Vec::new(),
        };
        let fingerprint = opening.fingerprint();
        let session = Arc::new(self.open(upstream, None, opening, fingerprint).await?);
        let replaced = {
            let mut listers = self.listers();
            let replaced = listers.insert(upstream.id.clone(), session.clone());
            // Counted by its entry from now on.
            drop(place);
            replaced
        };
        if let Some(replaced) = replaced {
            close(replaced);
        }
        Ok(session)
    }

    async fn open(
        &self,
        upstream: &Upstream,
        principal: Option<&Principal>,
        opening: Opening,
        fingerprint: [u8; 32],
    ) -> Result<Session, OpenError> {
        let relay = Relay::new(
            upstream,
            self.list_changed.clone(),
            self.bus.clone(),
            Redactor::new(opening.secrets()),
        );
        let redactor = Redactor::new(opening.secrets());
        let handler = Handler(relay.clone());
        let (service, direct) = match &upstream.transport {
            Transport::Http { url, .. } => {
                let (service, direct) =
                    direct::serve(self.client.clone(), upstream, url, &opening, handler, &relay).await?;
                (service, Some(direct))
            }
            Transport::Stdio { program, args, .. } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).env_clear().kill_on_drop(true);
                for name in INHERITED_ENV {
                    if let Some(value) = std::env::var_os(name) {
                        command.env(name, value);
                    }
                }
                for (name, value) in &opening.values {
                    command.env(name, value.expose());
                }
                let (process, stderr) = TokioChildProcess::builder(command)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| {
                        let why = format!("cannot start `{program}`: {e}");
                        match Permanent::of_spawn(&e) {
                            Some(fault) => OpenError::Broken { fault, why },
                            None => OpenError::Failed(why),
                        }
                    })?;
                if let Some(stderr) = stderr {
                    let redactor = Redactor::new(opening.secrets());
                    tokio::spawn(stderr::log(stderr, redactor, upstream.id.clone(), principal.cloned()));
                }
                let service = timed(handler.serve(InOrder::new(process, relay.clone())), upstream.timeout).await?;
                (service, None)
            }
        };
        tracing::info!(upstream = %upstream.id, ?principal, "opened an upstream session");
        Ok(Session {
            upstream: upstream.id.clone(),
            principal: principal.cloned(),
            service,
            direct,
            relay,
            redactor,
            fingerprint,
            last_used: Mutex::new(Instant::now()),
        })
    }
}

/// Opening a session (connecting, starting a process, `initialize`) within the upstream's timeout.
pub(super) async fn timed<F, E>(opening: F, timeout: Duration) -> Result<RunningService<RoleClient, Handler>, OpenError>
where
    F: Future<Output = Result<RunningService<RoleClient, Handler>, E>>,
    E: Into<rmcp::service::ClientInitializeError>,
{
    match tokio::time::timeout(timeout, opening).await {
        Err(_) => Err(OpenError::Failed(format!(
            "did not finish initializing within {}",
            humantime::format_duration(timeout)
        ))),
        Ok(Ok(service)) => Ok(service),
        Ok(Err(error)) => {
            let error: rmcp::service::ClientInitializeError = error.into();
            if let Some((status, challenge)) = super::failure::refusal(&error) {
                return Err(OpenError::Refused { challenge, status });
            }
            let why = error.to_string();
            match super::failure::initialize_fault(&error) {
                Some(fault) => Err(OpenError::Broken { fault, why }),
                None => Err(OpenError::Failed(why)),
            }
        }
    }
}

/// Ends a session in the background: an HTTP session is deleted at the upstream, a process stops.
pub fn close(session: Arc<Session>) {
    tokio::spawn(async move {
        if let Some(session) = Arc::into_inner(session) {
            let _ = session.service.cancel().await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio upstream whose process never answers `initialize`, one process at most.
    fn silent_upstream() -> Upstream {
        Upstream {
            id: "silent".to_owned(),
            tag: "silent".to_owned(),
            prefix: String::new(),
            transport: Transport::Stdio {
                program: "sleep".to_owned(),
                args: vec!["60".to_owned()],
                env: Vec::new(),
                max_processes: 1,
            },
            requires: Vec::new(),
            bearer: None,
            exchange: None,
            allow: None,
            access: None,
            timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(600),
            overrides: HashMap::new(),
            elicit_timeout: Duration::from_secs(60),
            elicitation_origins: None,
        }
    }

    fn nothing() -> Opening {
        Opening {
            bearer: None,
            values: Vec::new(),
            secrets: Vec::new(),
        }
    }

    #[tokio::test]
    async fn gatehouses_own_listing_session_holds_its_place_while_it_opens_until_abandoned() {
        let (list_changed, _) = mpsc::channel(1);
        let bus = crate::gate::testing::Fixture::new().await.backing.bus;
        let pool = Pool::new(super::super::traced::http_client().expect("client"), list_changed, bus);
        let upstream = silent_upstream();
        let principal = Principal::parse("alice").expect("principal");

        let mut listing = Box::pin(pool.lister(&upstream));
        // Its process started; it waits for `initialize` to be answered.
        assert!(futures::poll!(&mut listing).is_pending());
        let full = pool.session(&upstream, &principal, nothing()).await;
        assert!(matches!(full, Err(OpenError::Full(1))), "{:?}", full.err());

        // Abandoned (as when its caller goes away): the place is free again, and an opening that
        // fails gives it back too.
        drop(listing);
        let failed = pool.session(&upstream, &principal, nothing()).await;
        assert!(matches!(failed, Err(OpenError::Failed(_))), "{:?}", failed.err());
        assert!(pool.places.lock().expect("places").is_empty());
    }

    #[tokio::test]
    async fn subscriptions_hold_a_session_until_their_clients_unsubscribe_or_end_and_are_bounded() {
        let (list_changed, _) = mpsc::channel(1);
        let bus = crate::gate::testing::Fixture::new().await.backing.bus;
        let relay = Relay::new(&silent_upstream(), list_changed, bus, Redactor::new([]));
        let (one, two) = (SessionId::generate(), SessionId::generate());
        assert!(!relay.is_busy());
        relay.subscribe("demo://a", &one).expect("room");
        relay.subscribe("demo://a", &two).expect("room");
        assert!(relay.is_busy(), "subscribed clients keep the session open");
        assert!(!relay.unsubscribe("demo://a", &one), "two still wants its updates");
        relay.forget_subscriber(&two);
        assert!(!relay.is_busy(), "an ended client's subscriptions are gone");

        for i in 0..super::super::relay::MAX_SUBSCRIPTIONS {
            relay.subscribe(&format!("demo://{i}"), &one).expect("room");
        }
        assert_eq!(
            relay.subscribe("demo://one-more", &one),
            Err(super::super::relay::MAX_SUBSCRIPTIONS)
        );
        relay
            .subscribe("demo://0", &one)
            .expect("subscribing again takes no more room");
    }

    #[tokio::test]
    async fn an_upstream_flooding_resource_updates_gets_a_bounded_number_stored() {
        let fixture = crate::gate::testing::Fixture::new().await;
        let subscriber = fixture.session("alice").await.id;
        let (list_changed, _) = mpsc::channel(1);
        let relay = Relay::new(
            &silent_upstream(),
            list_changed,
            fixture.backing.bus.clone(),
            Redactor::new([]),
        );
        relay.subscribe("demo://a", &subscriber).expect("room");
        let params = rmcp::model::ResourceUpdatedNotificationParam::new("demo://a");
        for _ in 0..500 {
            relay.updated(&params).await;
        }
        let stored = fixture
            .backing
            .store
            .events_after(&subscriber, 0, 1000)
            .await
            .expect("events")
            .expect("the session");
        assert_eq!(stored.len(), super::super::relay::UPDATES_PER_MINUTE as usize);
    }
}
