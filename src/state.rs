//! `AppState`: the domain's parts every handler shares (store, bus, gate, vault, tools,
//! upstreams, identity, metrics, audit...), built once at start, and `Core`, the gate's wiring
//! that an operator's command shares with it. No protocol or page parts: the MCP endpoint and the
//! pages keep theirs in their own router states. Handlers never read the environment or open pools.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::config::{Config, ConfigError};
use crate::events::{self, Bus};
use crate::forms::Forms;
use crate::gate::{self, Approvals, Backing, Connections, Elicitations, FormValues, Gate, Limits};
use crate::identity::Identity;
use crate::instance::InstanceNonce;
use crate::metrics::Metrics;
use crate::outbound::Guarded;
use crate::providers::{OAuthClient, Providers};
use crate::public_url::PublicUrl;
use crate::retention::{self, Periods, Retention};
use crate::store::{self, ConnectionCache, Database, SessionCache, Store, StoreError};
use crate::tools::{Tool, ToolRegistry};
use crate::upstreams::{Services, Upstreams};
use crate::vault::{KeyRing, VaultError};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the database: {0}")]
    Database(#[from] StoreError),
    #[error(
        "the database is not migrated ({0}): run `gatehouse migrate` first, or set database.migrate_on_start = true"
    )]
    NotMigrated(String),
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
    // An `auth = "mcp"` or `"token_exchange"` upstream's connections are named by its id.
    let remote = config
        .upstreams
        .iter()
        .filter(|u| u.auth.is_some())
        .map(|u| u.id.clone());
    Metrics::new(
        config.providers.iter().map(|p| p.id.clone()).chain(remote),
        config.upstreams.iter().map(|u| u.id.clone()),
    )
}

/// Sessions and principals whose connections are cached per replica; a full cache starts over
/// (see `SessionCache`).
const CACHE_CAPACITY: usize = 100_000;

/// Tools a layer above adds to the configured ones (the conformance fixtures), and the
/// configuration key a clash of names is reported under.
#[derive(Default)]
pub struct ExtraTools {
    pub tools: Vec<Arc<dyn Tool>>,
    pub key: &'static str,
}

/// Everything handlers share: the domain's parts, built once at start. Every request clones it,
/// so it is one pointer to the parts. The MCP endpoint's and the pages' own parts live in their
/// router states, beside it.
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
    pub bus: Arc<Bus>,
    /// The sessions this replica has cached, which the bus keeps fresh.
    pub session_cache: Arc<SessionCache>,
    pub tools: Arc<ToolRegistry>,
    /// Upstream MCP servers whose tools gatehouse offers beside its own.
    pub upstreams: Arc<Upstreams>,
    pub identity: Arc<Identity>,
    pub gate: Arc<Gate>,
    /// Deletes what is over once its `[retention]` period has passed, on one replica at a time.
    pub retention: Arc<Retention>,
    /// The audit trail's recorder.
    pub audit: Arc<Audit>,
    /// Signs the pages' CSRF tokens (and, inside the gate, seals secrets).
    pub vault: Arc<KeyRing>,
    pub public_url: Arc<PublicUrl>,
    /// Drawn at start, served at `/healthz/instance` (see `crate::instance`).
    pub instance: InstanceNonce,
    /// What `/metrics` shows on the metrics listener; records nothing without `server.metrics_bind`.
    pub metrics: Arc<Metrics>,
    /// The client of every outbound request (providers, identity provider, HTTP tools): one pool.
    pub outbound: reqwest::Client,
    /// Cancelled when the server shuts down: streams end and background tasks stop.
    pub shutdown: CancellationToken,
}

/// What the gate is built from besides the database: the configuration's providers and forms,
/// the key ring, and the client of outbound requests.
pub struct Parsed {
    pub providers: Arc<Providers>,
    pub forms: Arc<Forms>,
    pub vault: Arc<KeyRing>,
    pub outbound: reqwest::Client,
    /// The client of requests to URLs remote servers name.
    pub guarded: Arc<Guarded>,
}

impl Parsed {
    pub fn from_config(config: &Config) -> Result<Self, StartError> {
        let providers = Arc::new(Providers::from_config(config)?);
        let forms = Arc::new(Forms::from_config(&config.forms)?);
        let vault = Arc::new(key_ring(config)?);
        Ok(Self {
            providers,
            forms,
            vault,
            outbound: crate::outbound::client()?,
            guarded: Arc::new(Guarded::new(
                crate::outbound::system_resolver(),
                config.outbound.proxy.as_ref(),
            )?),
        })
    }
}

/// The gate's rooms and what they stand on, wired over an open database as every replica wires
/// them, with nothing started but the audit trail's writer: what [`AppState::build`] serves with,
/// and what an operator's command (`gatehouse admin`) acts through.
pub struct Core {
    pub store: Arc<dyn Store>,
    pub bus: Arc<Bus>,
    pub session_cache: Arc<SessionCache>,
    pub audit: Arc<Audit>,
    pub elicitations: Arc<Elicitations>,
    pub connections: Arc<Connections>,
    pub form_values: Arc<FormValues>,
    pub gate: Arc<Gate>,
}

impl Core {
    /// Wires the gate over `database`, its caches holding up to `cache_capacity` entries each.
    /// The audit writer (returned) stops when `shutdown` is cancelled.
    pub fn wire(
        config: &Config,
        parsed: &Parsed,
        database: &Database,
        public_url: Arc<PublicUrl>,
        metrics: Arc<Metrics>,
        cache_capacity: usize,
        shutdown: CancellationToken,
    ) -> (Self, JoinHandle<()>) {
        let store = database.store.clone();
        let session_cache = Arc::new(SessionCache::new(cache_capacity));
        let connection_cache = Arc::new(ConnectionCache::new(cache_capacity));
        // On PostgreSQL the store's NOTIFYs tell every replica what changed.
        let bus = Arc::new(Bus::new(
            store.clone(),
            session_cache.clone(),
            connection_cache.clone(),
            database.postgres.is_none(),
        ));
        let (audit, writer) = Audit::start(store.clone(), shutdown);
        let audit = Arc::new(audit);
        let backing = Backing {
            store: store.clone(),
            bus: bus.clone(),
            vault: parsed.vault.clone(),
            public_url,
            metrics,
            audit: audit.clone(),
        };
        let elicitations = Arc::new(Elicitations::new(backing.clone(), Limits::from_config(config)));
        let connections = Arc::new(Connections::new(
            backing.clone(),
            elicitations.clone(),
            parsed.providers.clone(),
            OAuthClient::new(parsed.outbound.clone(), parsed.guarded.clone()),
            connection_cache,
        ));
        let form_values = Arc::new(FormValues::new(
            backing.clone(),
            elicitations.clone(),
            parsed.forms.clone(),
        ));
        let approvals = Arc::new(Approvals::from_config(
            &config.approvals,
            backing,
            elicitations.clone(),
            parsed.outbound.clone(),
        ));
        let gate = Arc::new(Gate::new(
            store.clone(),
            elicitations.clone(),
            connections.clone(),
            form_values.clone(),
            approvals,
        ));
        let core = Self {
            store,
            bus,
            session_cache,
            audit,
            elicitations,
            connections,
            form_values,
            gate,
        };
        (core, writer)
    }
}

impl AppState {
    /// Checks the configuration, opens the database (migrating it when configured to) and starts
    /// the domain's background tasks, which stop when `shutdown` is cancelled. `extra` tools are
    /// offered beside the configured ones.
    pub async fn build(
        config: Config,
        extra: ExtraTools,
        resolver: Arc<dyn reqwest::dns::Resolve>,
        shutdown: CancellationToken,
    ) -> Result<(Self, Vec<JoinHandle<()>>), StartError> {
        let outbound = crate::outbound::client_resolving(resolver.clone())?;
        let guarded = Arc::new(Guarded::new(resolver, config.outbound.proxy.as_ref())?);
        let identity = Arc::new(Identity::from_config(&config, outbound.clone())?);
        let providers = Arc::new(Providers::from_config(&config)?);
        let forms = Arc::new(Forms::from_config(&config.forms)?);
        let tools =
            ToolRegistry::from_config(&config, &providers, &forms, outbound.clone())?.with(extra.tools, extra.key)?;
        let upstreams = Upstreams::parse(&config, &providers, &forms)?;
        let parsed = Parsed {
            providers,
            forms,
            vault: Arc::new(key_ring(&config)?),
            outbound,
            guarded,
        };
        let public_url = Arc::new(PublicUrl::new(&config.public_url()));
        let metrics = Arc::new(metrics(&config));
        let database = store::connect(config.database.url.expose(), config.database.max_connections).await?;
        if config.database.migrate_on_start {
            store::principals::migrate(&*database.store, config.identity.mode.principal_form()).await?;
        }
        database.store.check_ready().await.map_err(|e| match e {
            StoreError::NotReady(reason) if !config.database.migrate_on_start => StartError::NotMigrated(reason),
            other => other.into(),
        })?;

        let (core, writer) = Core::wire(
            &config,
            &parsed,
            &database,
            public_url.clone(),
            metrics.clone(),
            CACHE_CAPACITY,
            shutdown.clone(),
        );
        let mut tasks = vec![writer];
        if let Some(pool) = database.postgres {
            tasks.push(tokio::spawn(events::listen_postgres(
                pool,
                core.bus.clone(),
                metrics.clone(),
                shutdown.clone(),
            )));
        }
        tasks.push(tokio::spawn(gate::sweep_periodically(
            core.gate.clone(),
            shutdown.clone(),
        )));
        let instance = InstanceNonce::random();
        let retention = Arc::new(Retention::new(
            core.store.clone(),
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
            parsed.forms.clone(),
            tools.names(),
            Services {
                store: core.store.clone(),
                bus: core.bus.clone(),
                metrics: metrics.clone(),
                replica: &instance,
                identity: identity.clone(),
            },
        )?);
        upstreams.load().await?;
        tasks.push(tokio::spawn(upstreams.clone().maintain(shutdown.clone())));
        let state = Self(Arc::new(Shared {
            config: Arc::new(config),
            store: core.store,
            bus: core.bus,
            session_cache: core.session_cache,
            tools: Arc::new(tools),
            upstreams,
            identity,
            gate: core.gate,
            retention,
            audit: core.audit,
            vault: parsed.vault,
            public_url,
            instance,
            metrics,
            outbound: parsed.outbound,
            shutdown,
        }));
        Ok((state, tasks))
    }
}
