//! The ground the gate's unit tests stand on: an in-memory SQLite store (migrated), an in-process
//! bus, a key ring, the loopback public URL, a gate built from a configuration snippet, and the
//! steps the rooms' tests all take (a user's session, a submission, an elicitation as stored).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use url::Url;

use super::connections::access_context;
use super::{Approvals, Ask, Backing, Connections, Elicitations, FormValues, Gate, Limits, Requirement};
use crate::audit::Origin;
use crate::config::Config;
use crate::domain::{Principal, ProtocolVersion, SessionId};
use crate::events::Bus;
use crate::forms::{Forms, Submission};
use crate::metrics::Metrics;
use crate::providers::{OAuthClient, Providers};
use crate::public_url::PublicUrl;
use crate::secret::Secret;
use crate::store::{
    ConnectionCache, ConnectionRecord, ConnectionStatus, ElicitationRecord, SessionCache, SessionRecord, SqliteStore,
    Store,
};
use crate::vault::KeyRing;

const KEY: &str = "dW5pdC10ZXN0LWtleS1mb3ItdGhlLWdhdGUtMzJieXQ=";

/// The providers (`acme`, `initech`, `globex`) and forms (`key`, `confirm`) the tests configure.
pub const CONFIG: &str = include_str!("testdata/gate.toml");

/// What a user is asked for `requirement`.
pub fn ask(requirement: &str) -> Ask {
    Ask {
        requirement: Requirement::parse(requirement).expect("requirement"),
        message: "Please sign in.".into(),
        call_key: None,
        detail: None,
        ttl: None,
        binding: None,
    }
}

pub fn principal(name: &str) -> Principal {
    Principal::parse(name).expect("principal")
}

/// What a user submits: `values` (an object) and these secrets.
pub fn submission(values: Value, secrets: &[(&str, &str)]) -> Submission {
    let Value::Object(values) = values else {
        panic!("values must be an object")
    };
    Submission {
        values,
        secrets: secrets
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Secret::new((*v).to_owned())))
            .collect(),
    }
}

/// A fixture, its gate for [`CONFIG`], and a stored session of alice's: where most tests start.
pub async fn alice() -> (Fixture, Gate, SessionRecord) {
    let fixture = Fixture::new().await;
    let gate = fixture.gate(CONFIG);
    let session = fixture.session("alice").await;
    (fixture, gate, session)
}

/// Elicitation `asked` as it is stored now.
pub async fn stored(gate: &Gate, asked: &ElicitationRecord) -> ElicitationRecord {
    gate.elicitations().get(&asked.id).await.expect("get").expect("stored")
}

pub struct Fixture {
    pub backing: Backing,
    pub cache: Arc<ConnectionCache>,
}

impl Fixture {
    pub async fn new() -> Self {
        // One connection: every connection to `:memory:` is a database of its own.
        let store = SqliteStore::connect("sqlite::memory:", 1)
            .await
            .expect("in-memory SQLite");
        store.migrate().await.expect("migrations");
        let store: Arc<dyn Store> = Arc::new(store);
        let cache = Arc::new(ConnectionCache::new(16));
        let bus = Arc::new(Bus::new(
            store.clone(),
            Arc::new(SessionCache::new(16)),
            cache.clone(),
            true,
        ));
        let vault = KeyRing::from_keys(&[Secret::new(KEY.to_owned())]).expect("key ring");
        let public_url = PublicUrl::new(&Url::parse("http://127.0.0.1:8080").expect("url"));
        Self {
            backing: Backing {
                audit: Arc::new(crate::audit::Audit::start(store.clone(), Default::default()).0),
                store,
                bus,
                vault: Arc::new(vault),
                public_url: Arc::new(public_url),
                metrics: Arc::new(Metrics::off()),
            },
            cache,
        }
    }

    pub fn elicitations(&self) -> Elicitations {
        Elicitations::new(
            self.backing.clone(),
            Limits {
                ttl: Duration::from_secs(600),
                max_pending: 32,
                per_minute: 0,
            },
        )
    }

    /// A session of `principal`'s, stored.
    pub async fn session(&self, principal_name: &str) -> SessionRecord {
        let session = SessionRecord {
            id: SessionId::generate(),
            principal: principal(principal_name),
            protocol_version: ProtocolVersion::new("2025-11-25"),
            client_info: json!({"name": "test-client", "title": "Test Client"}),
            client_capabilities: json!({"elicitation": {"url": {}}}),
            log_level: None,
            created_at: Utc::now(),
        };
        self.backing.store.create_session(&session, 64).await.expect("session");
        session
    }

    /// The events queued for a session's stream.
    pub async fn events(&self, session: &SessionRecord) -> Vec<crate::store::StoredEvent> {
        self.backing
            .store
            .events_after(&session.id, 0, 100)
            .await
            .expect("events")
            .expect("the session")
    }

    /// The gate for a configuration snippet (`[[providers]]`, `[[forms]]`).
    pub fn gate(&self, config: &str) -> Gate {
        let config: Config = toml::from_str(config).expect("test configuration");
        let providers = Arc::new(Providers::from_config(&config).expect("providers"));
        let forms = Arc::new(Forms::from_config(&config.forms).expect("forms"));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("HTTP client");
        let elicitations = Arc::new(self.elicitations());
        let connections = Arc::new(Connections::new(
            self.backing.clone(),
            elicitations.clone(),
            providers,
            OAuthClient::new(
                client.clone(),
                Arc::new(crate::outbound::Guarded::new(crate::outbound::system_resolver(), None).expect("HTTP client")),
            ),
            self.cache.clone(),
        ));
        let form_values = Arc::new(FormValues::new(self.backing.clone(), elicitations.clone(), forms));
        let approvals = Arc::new(Approvals::from_config(
            &config.approvals,
            self.backing.clone(),
            elicitations.clone(),
            client,
        ));
        Gate::new(
            self.backing.store.clone(),
            elicitations,
            connections,
            form_values,
            approvals,
        )
    }

    /// The elicitation of the session's principal for `requirement`.
    pub async fn ask(
        &self,
        elicitations: &Elicitations,
        session: &SessionRecord,
        requirement: &str,
    ) -> ElicitationRecord {
        elicitations
            .ask(&session.principal, session, &ask(requirement), &Origin::unknown())
            .await
            .expect("elicitation")
            .0
    }

    /// Stores a connection of the session's principal to `acme` with these scopes, as a completed
    /// sign-in would, and returns it as stored.
    pub async fn connect(
        &self,
        gate: &Gate,
        session: &SessionRecord,
        scopes: &[&str],
        expires_at: Option<DateTime<Utc>>,
    ) -> ConnectionRecord {
        let principal = &session.principal;
        let now = Utc::now();
        let connection = ConnectionRecord {
            principal: principal.clone(),
            provider: "acme".into(),
            issuer: None,
            access_token: self
                .backing
                .vault
                .encrypt_str("access-token-1", &access_context(principal, "acme")),
            refresh_token: None,
            expires_at,
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            account_label: Some("alice@acme".into()),
            status: ConnectionStatus::Active,
            created_at: now,
            updated_at: now,
        };
        let asked = self.ask(gate.elicitations(), session, "acme").await;
        let store = &self.backing.store;
        store
            .save_connection(&connection, &asked.id, &json!({}), now)
            .await
            .expect("save");
        self.backing.bus.connections_changed(principal);
        store.connection(principal, "acme").await.expect("load").expect("saved")
    }
}
