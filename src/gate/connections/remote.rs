//! The providers of remote MCP servers (`auth = "mcp"` upstreams), found when first needed and
//! kept like the identity provider's metadata (`Refreshed`): discovery, then the client to sign
//! in with, in the MCP specification's order: one configured beforehand; else gatehouse's Client
//! ID Metadata Document for that server, when it takes them, says it sends `iss` (RFC 9207) and
//! `public_url` can serve it; else a registration, stored once per authorization server and
//! redirect URI (its secret sealed), shared by replicas, and renewed when the server no longer
//! knows it (`invalid_client`). Each upstream has its own redirect URI, and its own metadata
//! document listing that URI alone (RFC 9700 4.4.2.2).
//!
//! A metadata document's URL is a client id anyone may name at any authorization server, so
//! only `iss` can tell which server answered: gatehouse signs in with one only where the server
//! says it sends `iss` (then required), and serves it only while it signs in with it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;

use crate::gate::{Backing, GateError};
use crate::outbound::Guarded;
use crate::providers::discovery::{Discovered, Discovery};
use crate::providers::registration::{AuthMethod, Registered, register};
use crate::providers::{Provider, RemoteKind, RemoteSpec};
use crate::refreshed::Refreshed;
use crate::routes;
use crate::store::RegistrationRecord;

/// How long what was found is used before it is looked for again, and how soon after a failure.
const FOUND_TTL: Duration = Duration::from_secs(3600);
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

pub(in crate::gate) fn registration_context(issuer: &str, redirect_uri: &str) -> String {
    format!("registration:{issuer}:{redirect_uri}:secret")
}

struct Remote {
    spec: RemoteSpec,
    found: Refreshed<Provider>,
    /// Why the last search failed, for the calls that come before the next may be tried.
    failure: Mutex<String>,
}

pub(super) struct RemoteProviders {
    remotes: Vec<Remote>,
    backing: Backing,
    /// Every request to what a remote server names goes through it.
    guarded: Arc<Guarded>,
}

impl RemoteProviders {
    pub(super) fn new(specs: &[RemoteSpec], backing: Backing, guarded: Arc<Guarded>) -> Self {
        let remotes = specs
            .iter()
            .map(|spec| Remote {
                spec: spec.clone(),
                found: Refreshed::new(FOUND_TTL, RETRY_INTERVAL),
                failure: Mutex::new(String::new()),
            })
            .collect();
        Self {
            remotes,
            backing,
            guarded,
        }
    }

    pub(super) fn knows(&self, id: &str) -> bool {
        self.remotes.iter().any(|r| r.spec.id == id)
    }

    /// The provider of the remote server `id` (None: no such remote server), found anew when
    /// `wanting` is the one kept.
    pub(super) async fn get(
        &self,
        id: &str,
        wanting: Option<&Arc<Provider>>,
    ) -> Option<Result<Arc<Provider>, GateError>> {
        let remote = self.remotes.iter().find(|r| r.spec.id == id)?;
        let unavailable = |reason: String| GateError::ProviderUnavailable {
            provider: id.to_owned(),
            reason,
        };
        Some(
            remote
                .found
                .get(
                    wanting,
                    || async {
                        self.find(&remote.spec).await.inspect_err(|error| {
                            let reason = match error {
                                GateError::ProviderUnavailable { reason, .. } => reason.clone(),
                                other => other.to_string(),
                            };
                            tracing::warn!(upstream = id, %reason, "cannot find the MCP server's authorization server");
                            *remote.failure.lock().unwrap_or_else(PoisonError::into_inner) = reason;
                        })
                    },
                    || {
                        let failure = remote.failure.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        unavailable(format!("{failure} (tried a moment ago; it is tried again shortly)"))
                    },
                )
                .await,
        )
    }

    /// The authorization server refused `provider`'s client: a stored registration is forgotten
    /// and the next sign-in finds the server and registers anew.
    pub(super) async fn client_refused(&self, provider: &Arc<Provider>) -> Result<(), GateError> {
        let (Some(remote), Some(issuer)) = (self.remotes.iter().find(|r| r.spec.id == provider.id), &provider.issuer)
        else {
            return Ok(());
        };
        remote.found.expire(provider);
        let redirect_uri = self.redirect_uri(&remote.spec);
        if self
            .backing
            .store
            .forget_registration(issuer, &redirect_uri, &provider.client_id)
            .await?
        {
            tracing::warn!(upstream = %provider.id, %issuer, "the authorization server no longer knows gatehouse's client; it registers again");
        }
        Ok(())
    }

    /// The redirect URI of `spec`'s authorization server, its own.
    fn redirect_uri(&self, spec: &RemoteSpec) -> String {
        self.backing.public_url.at(&routes::remote_callback(&spec.id))
    }

    /// The redirect URI gatehouse's metadata document for upstream `id` lists, while gatehouse
    /// signs in at its authorization server with that document and requires `iss` there; None
    /// otherwise (then nobody may sign in with it).
    pub(super) async fn metadata_document(&self, id: &str) -> Option<(String, String)> {
        let remote = self.remotes.iter().find(|r| r.spec.id == id)?;
        if !matches!(remote.spec.kind, RemoteKind::Mcp) || !self.backing.public_url.can_name_a_client() {
            return None;
        }
        let provider = self.get(id, None).await?.ok()?;
        let document_url = self.backing.public_url.at(&routes::client_metadata(id));
        (provider.client_id == document_url && provider.require_iss)
            .then(|| (document_url, self.redirect_uri(&remote.spec)))
    }

    async fn find(&self, spec: &RemoteSpec) -> Result<Provider, GateError> {
        let unavailable = |reason: String| GateError::ProviderUnavailable {
            provider: spec.id.clone(),
            reason,
        };
        let (found, client, reach) = match &spec.kind {
            RemoteKind::Mcp => {
                let discovery = Discovery::new(&spec.url, &self.guarded).await.map_err(unavailable)?;
                let found = discovery.run().await.map_err(unavailable)?;
                let client = self.client(spec, &found, discovery.client()).await?;
                (found, client, discovery.reach())
            }
            RemoteKind::Identity { issuer, .. } => {
                let discovery = Discovery::new(issuer, &self.guarded).await.map_err(unavailable)?;
                let server = discovery
                    .authorization_server(issuer.as_str())
                    .await
                    .map_err(unavailable)?;
                let found = Discovered {
                    resource: spec.url.clone(),
                    scopes: Vec::new(),
                    server,
                };
                let client = spec
                    .client
                    .clone()
                    .ok_or_else(|| unavailable("no client is configured".into()))?;
                (found, client, discovery.reach())
            }
        };
        tracing::info!(upstream = %spec.id, issuer = %found.server.issuer, client_id = %client.client_id, "found the MCP server's authorization server");
        // Its code exchanges, refreshes and revocations are held to the server's reach.
        let mut provider = Provider::remote(spec, &found, &client);
        provider.reach = Some(reach);
        Ok(provider)
    }

    /// The client to sign in with, in the specification's order.
    async fn client(
        &self,
        spec: &RemoteSpec,
        found: &Discovered,
        http: &reqwest::Client,
    ) -> Result<Registered, GateError> {
        if let Some(client) = &spec.client {
            return Ok(client.clone());
        }
        let public_url = &self.backing.public_url;
        let server = &found.server;
        if server.client_id_metadata_document_supported
            && server.authorization_response_iss_parameter_supported
            && public_url.can_name_a_client()
        {
            return Ok(Registered {
                client_id: public_url.at(&routes::client_metadata(&spec.id)),
                client_secret: None,
                method: AuthMethod::None,
            });
        }
        let (store, vault) = (&self.backing.store, &self.backing.vault);
        let issuer = &found.server.issuer;
        let redirect_uri = self.redirect_uri(spec);
        let record = match store.registration(issuer, &redirect_uri).await? {
            Some(stored) => stored,
            None => {
                let Some(endpoint) = &found.server.registration_endpoint else {
                    return Err(GateError::ProviderUnavailable {
                        provider: spec.id.clone(),
                        reason: format!(
                            "its authorization server {issuer} offers no dynamic registration, and no client ID metadata \
                             documents an https public_url could serve (with `iss` in its answers, RFC 9207); \
                             configure `client_id`"
                        ),
                    });
                };
                let scopes = if spec.scopes.is_empty() {
                    &found.scopes
                } else {
                    &spec.scopes
                };
                let method = AuthMethod::preferred(found.server.token_endpoint_auth_methods_supported.as_deref());
                let registered = register(http, endpoint, &redirect_uri, scopes, method)
                    .await
                    .map_err(|reason| GateError::ProviderUnavailable {
                        provider: spec.id.clone(),
                        reason,
                    })?;
                let context = registration_context(issuer, &redirect_uri);
                let record = RegistrationRecord {
                    issuer: issuer.clone(),
                    redirect_uri: redirect_uri.clone(),
                    client_id: registered.client_id,
                    client_secret: registered
                        .client_secret
                        .as_ref()
                        .map(|secret| vault.encrypt_str(secret.expose(), &context)),
                    auth_method: registered.method.as_str().to_owned(),
                    registered_at: Utc::now(),
                };
                let stored = store.save_registration(&record).await?;
                tracing::info!(upstream = %spec.id, %issuer, client_id = %stored.client_id, "registered at the authorization server");
                stored
            }
        };
        let method = AuthMethod::parse(&record.auth_method)
            .ok_or_else(|| crate::store::StoreError::Corrupt(format!("auth method {:?}", record.auth_method)))?;
        let client_secret = match &record.client_secret {
            Some(sealed) => Some(vault.decrypt_str(sealed, &registration_context(issuer, &redirect_uri))?),
            None => None,
        };
        Ok(Registered {
            client_id: record.client_id,
            client_secret,
            method,
        })
    }
}
