//! `AppState`: everything handlers share, built once at start. Handlers never read the
//! environment or open pools.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::audit::Audit;
use crate::config::{Config, ConfigError};
use crate::events::{self, Bus};
use crate::forms::Forms;
use crate::gate::{self, Backing, Connections, Elicitations, FormValues, Gate, Limits};
use crate::identity::Identity;
use crate::identity::oidc::SignIn;
use crate::instance::InstanceNonce;
use crate::mcp::sessions::{self, Sessions};
use crate::metrics::Metrics;
use crate::providers::{OAuthClient, Providers};
use crate::public_url::PublicUrl;
use crate::rate_limit::RateLimit;
use crate::retention::{self, Periods, Retention};
use crate::store::{self, ConnectionCache, SessionCache, Store, StoreError};
use crate::tools::ToolRegistry;
use crate::upstreams::Upstreams;
use crate::vault::{KeyRing, VaultError};
use crate::web::templates::Templates;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the database: {0}")]
    Database(#[from] StoreError),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
    #[error("secrets: {0}")]
    Vault(#[from] VaultError),
}

/// The key ring: the configured keys, or on SQLite a development key file made on first start.
pub fn key_ring(config: &Config) -> Result<KeyRing, VaultError> {
    if config.secrets.keys.is_empty() {
        KeyRing::load_or_create_dev_key(&config.secrets.dev_key_file)
    } else {
        KeyRing::from_keys(&config.secrets.keys)
    }
}

/// Recording metrics with `server.metrics_bind`, labelled with the configured providers and upstreams.
fn metrics(config: &Config) -> Metrics {
    if config.server.metrics_bind.is_none() {
        return Metrics::off();
    }
    Metrics::new(
        config.providers.iter().map(|p| p.id.clone()),
        config.upstreams.iter().map(|u| u.id.clone()),
    )
}

/// Cached sessions per replica; a full cache starts over (see `SessionCache`).
const SESSION_CACHE_CAPACITY: usize = 100_000;
/// Principals whose connections are cached per replica.
const CONNECTION_CACHE_CAPACITY: usize = 100_000;

/// The `Retry-After` (seconds) of a 503 answered because the database cannot be reached.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// Everything handlers share. Every request clones it, so it is one pointer to the parts.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct Shared {
    pub config: Arc<Config>,
    pub store: Arc<dyn Store>,
    pub sessions: Arc<Sessions>,
    pub bus: Arc<Bus>,
    pub tools: Arc<ToolRegistry>,
    /// The conformance suite's resources and prompts, with `[mcp] conformance_fixtures`.
    #[cfg(feature = "conformance")]
    pub fixtures: Option<Arc<crate::mcp::fixtures::Fixtures>>,
    /// Upstream MCP servers whose tools gatehouse offers beside its own.
    pub upstreams: Arc<Upstreams>,
    /// Calls running on this replica that a client may cancel.
    pub calls: Arc<crate::mcp::RunningCalls>,
    pub identity: Arc<Identity>,
    /// The pages' OpenID Connect sign-in, in `oauth` mode.
    pub sign_in: Option<Arc<SignIn>>,
    pub gate: Arc<Gate>,
    /// Deletes what is over once its `[retention]` period has passed, on one replica at a time.
    pub retention: Arc<Retention>,
    /// The audit trail's recorder.
    pub audit: Arc<Audit>,
    pub templates: Arc<Templates>,
    /// Signs the pages' CSRF tokens (and, inside the gate, seals secrets).
    pub vault: Arc<KeyRing>,
    pub public_url: Arc<PublicUrl>,
    /// Drawn at start, served at `/healthz/instance` (see `crate::instance`).
    pub instance: InstanceNonce,
    /// What `/metrics` shows on the metrics listener; records nothing without `server.metrics_bind`.
    pub metrics: Arc<Metrics>,
    /// Page requests per client address in the last minute (`limits.page_requests_per_minute`).
    pub page_requests: RateLimit<IpAddr>,
    /// Cancelled when the server shuts down: streams end and background tasks stop.
    pub shutdown: CancellationToken,
}

impl AppState {
    /// Checks the configuration, opens the database (migrating it when configured to) and starts
    /// the background tasks, which stop when `shutdown` is cancelled.
    pub async fn build(config: Config, shutdown: CancellationToken) -> Result<(Self, Vec<JoinHandle<()>>), StartError> {
        let client = crate::outbound::client()?;
        let identity = Arc::new(Identity::from_config(&config, client.clone())?);
        let sign_in = SignIn::from_config(&config, identity.clone(), client.clone())?.map(Arc::new);
        let providers = Arc::new(Providers::from_config(&config)?);
        let forms = Arc::new(Forms::from_config(&config.forms)?);
        let templates = Arc::new(Templates::load(config.server.template_dir.as_deref())?);
        let tools = ToolRegistry::from_config(&config, &providers, &forms, client.clone())?;
        #[cfg(feature = "conformance")]
        let (tools, fixtures) = crate::mcp::fixtures::install(&config, tools)?;
        let upstreams = Upstreams::parse(&config, &providers, &forms)?;
        let vault = Arc::new(key_ring(&config)?);
        let public_url = Arc::new(PublicUrl::new(&config.public_url()));
        let metrics = Arc::new(metrics(&config));
        let database = store::connect(config.database.url.expose(), config.database.max_connections).await?;
        if config.database.migrate_on_start {
            database.store.migrate().await?;
        }
        database.store.check_ready().await?;

        let session_cache = Arc::new(SessionCache::new(SESSION_CACHE_CAPACITY));
        let connection_cache = Arc::new(ConnectionCache::new(CONNECTION_CACHE_CAPACITY));
        let bus = Arc::new(Bus::new(
            database.store.clone(),
            session_cache.clone(),
            connection_cache.clone(),
            database.postgres.is_none(),
        ));
        let sessions = Arc::new(Sessions::new(
            database.store.clone(),
            session_cache,
            bus.clone(),
            config.sessions_per_principal(),
        ));

        let mut tasks = Vec::new();
        if let Some(pool) = database.postgres {
            tasks.push(tokio::spawn(events::listen_postgres(
                pool,
                bus.clone(),
                metrics.clone(),
                shutdown.clone(),
            )));
        }
        tasks.push(tokio::spawn(sessions::maintain(
            sessions.clone(),
            bus.clone(),
            metrics.clone(),
            config.mcp.session_idle_timeout,
            shutdown.clone(),
        )));

        let (audit, writer) = Audit::start(database.store.clone(), shutdown.clone());
        let audit = Arc::new(audit);
        tasks.push(writer);
        let backing = Backing {
            store: database.store.clone(),
            bus: bus.clone(),
            vault: vault.clone(),
            public_url: public_url.clone(),
            metrics: metrics.clone(),
            audit: audit.clone(),
        };
        let elicitations = Arc::new(Elicitations::new(backing.clone(), Limits::from_config(&config)));
        let connections = Arc::new(Connections::new(
            backing.clone(),
            elicitations.clone(),
            providers,
            OAuthClient::new(client),
            connection_cache,
        ));
        let forms_for_upstreams = forms.clone();
        let form_values = Arc::new(FormValues::new(backing, elicitations.clone(), forms));
        let gate = Arc::new(Gate::new(
            database.store.clone(),
            elicitations,
            connections,
            form_values,
        ));
        tasks.push(tokio::spawn(gate::sweep_periodically(gate.clone(), shutdown.clone())));
        let instance = InstanceNonce::random();
        let retention = Arc::new(Retention::new(
            database.store.clone(),
            Periods {
                events: config.retention.events,
                finished_elicitations: config.finished_elicitations_retention(),
                audit: config.retention.audit,
            },
            instance.as_str().to_owned(),
        ));
        tasks.push(tokio::spawn(retention::sweep_periodically(
            retention.clone(),
            shutdown.clone(),
        )));
        let upstreams = Arc::new(Upstreams::new(
            upstreams,
            forms_for_upstreams,
            tools.names(),
            database.store.clone(),
            bus.clone(),
            metrics.clone(),
        )?);
        upstreams.load().await?;
        tasks.push(tokio::spawn(upstreams.clone().maintain(shutdown.clone())));
        let calls = Arc::new(crate::mcp::RunningCalls::default());
        tasks.push(tokio::spawn(crate::mcp::listen_for_calls(
            calls.clone(),
            bus.clone(),
            shutdown.clone(),
        )));
        let page_requests = RateLimit::per_minute(config.limits.page_requests_per_minute);
        let state = Self(Arc::new(Shared {
            config: Arc::new(config),
            store: database.store,
            sessions,
            bus,
            tools: Arc::new(tools),
            #[cfg(feature = "conformance")]
            fixtures,
            upstreams,
            calls,
            identity,
            sign_in,
            gate,
            retention,
            audit,
            templates,
            vault,
            public_url,
            instance,
            metrics,
            page_requests,
            shutdown,
        }));
        Ok((state, tasks))
    }

    /// The client's address, after trusted proxies.
    pub fn client_address(&self, headers: &axum::http::HeaderMap, peer: std::net::SocketAddr) -> std::net::IpAddr {
        crate::identity::client_address(&self.config.server.trusted_proxies, headers, peer)
    }

    pub fn bound_to_loopback(&self) -> bool {
        self.config.server.bind.ip().is_loopback()
    }

    /// The public origin, the configured extra origins, and, when both the public origin and the
    /// bound address are loopback, the same port under another loopback name (`localhost` for
    /// `127.0.0.1`). One rule for `/mcp` and the pages' form posts.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        if origin == self.public_url.origin() || self.config.server.allowed_origins.iter().any(|o| o == origin) {
            return true;
        }
        let public_on_loopback =
            Url::parse(self.public_url.origin()).is_ok_and(|public| is_loopback_name(public.host_str().unwrap_or("")));
        public_on_loopback
            && self.bound_to_loopback()
            && Url::parse(origin).is_ok_and(|url| {
                url.path() == "/"
                    && is_loopback_name(url.host_str().unwrap_or(""))
                    && url.port_or_known_default() == Some(self.config.server.bind.port())
            })
    }

    /// A `Host` header naming this server: a loopback name, or the public host.
    pub fn host_allowed(&self, host: &str) -> bool {
        if host.eq_ignore_ascii_case(self.public_url.host()) {
            return true;
        }
        let name = match host.strip_prefix('[') {
            Some(rest) => rest.split(']').next().map(|h| format!("[{h}]")).unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned(),
        };
        is_loopback_name(&name)
    }
}

fn is_loopback_name(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
