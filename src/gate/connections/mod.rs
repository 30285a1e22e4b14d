//! Connections to third parties: a principal's grant at a provider (tokens sealed by the key
//! ring, granted scopes, account label). This room owns the OAuth flow and its callback
//! (`flow`), usable tokens and their refresh under a lease (`tokens`), a refused token breaking
//! its connection, the per-replica cache of each principal's connections, and disconnecting with
//! revocation at the provider (only at the issuer the tokens came from).

mod flow;
mod remote;
mod tokens;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Backing, Elicitations, GateError};
use crate::audit::Origin;
use crate::domain::Principal;
use crate::providers::{OAuthClient, Provider, Providers};
use crate::secret::Secret;
use crate::store::{AuditAction, ConnectionCache, ConnectionRecord, ConnectionStatus, ElicitationRecord};

pub(in crate::gate) use flow::verifier_context;
pub use flow::{CallbackOutcome, CallbackParams, CallbackRefusal, ProviderErrorCode, StartedFlow};
use remote::RemoteProviders;
pub(in crate::gate) use remote::registration_context;
use tokens::Issuer;

/// What a connection looks like to the user (never a token).
pub struct ConnectionSummary {
    pub provider: String,
    pub provider_name: String,
    pub account_label: Option<String>,
    pub scopes: Vec<String>,
    pub active: bool,
    pub connected_at: DateTime<Utc>,
}

/// How disconnecting went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disconnected {
    /// There was no connection to remove.
    NothingConnected,
    /// Removed; the provider has no revocation endpoint, so access lives on there.
    NoRevocation,
    /// Removed and revoked at the provider.
    Revoked,
    /// Removed here, but the provider did not confirm revoking it.
    RevocationFailed,
}

/// Whether a call can use a principal's connection to a provider.
pub enum Grant {
    /// An access token, with the connection version it came from (a later 401 breaks only that
    /// version, not one refreshed meanwhile).
    Usable {
        token: Secret<String>,
        version: DateTime<Utc>,
    },
    /// The user must sign in (again), granting these scopes.
    SignIn { scopes: Vec<String> },
}

pub struct Connections {
    backing: Backing,
    elicitations: Arc<Elicitations>,
    providers: Arc<Providers>,
    /// The remote MCP servers' providers, found when first needed.
    remote: RemoteProviders,
    oauth: OAuthClient,
    /// Each principal's connections, invalidated through the bus when they change.
    cache: Arc<ConnectionCache>,
}

/// Whether `connection` is an active one to `provider` granting every scope in `needed`.
fn serves(connection: &ConnectionRecord, provider: &Provider, needed: &[String]) -> bool {
    connection.provider == provider.id
        && connection.status == ConnectionStatus::Active
        && needed.iter().all(|s| connection.scopes.contains(s))
}

pub(in crate::gate) fn access_context(principal: &Principal, provider: &str) -> String {
    format!("connection:{principal}:{provider}:access")
}

pub(in crate::gate) fn refresh_context(principal: &Principal, provider: &str) -> String {
    format!("connection:{principal}:{provider}:refresh")
}

impl Connections {
    pub fn new(
        backing: Backing,
        elicitations: Arc<Elicitations>,
        providers: Arc<Providers>,
        oauth: OAuthClient,
        cache: Arc<ConnectionCache>,
    ) -> Self {
        Self {
            remote: RemoteProviders::new(providers.remote(), backing.clone(), oauth.guarded().clone()),
            backing,
            elicitations,
            providers,
            oauth,
            cache,
        }
    }

    /// Provider `id`, configured or (found when first needed) a remote MCP server's; None when
    /// no provider has that id.
    pub async fn provider(&self, id: &str) -> Result<Option<Arc<Provider>>, GateError> {
        if let Some(provider) = self.providers.get(id) {
            return Ok(Some(provider.clone()));
        }
        self.remote.get(id, None).await.transpose()
    }

    /// Whether `id` names a provider, configured or remote.
    pub fn knows(&self, id: &str) -> bool {
        self.providers.knows(id)
    }

    /// gatehouse's Client ID Metadata Document at upstream `id`'s authorization server (its URL,
    /// and the one redirect URI it lists), while gatehouse signs in there with it.
    pub async fn metadata_document(&self, id: &str) -> Option<(String, String)> {
        self.remote.metadata_document(id).await
    }

    /// The provider an elicitation asks for, with the scopes to request.
    pub async fn provider_of(
        &self,
        elicitation: &ElicitationRecord,
    ) -> Result<Option<(Arc<Provider>, Vec<String>)>, GateError> {
        let Ok(super::Requirement::Provider { provider, scopes }) = super::Requirement::parse(&elicitation.requirement)
        else {
            return Ok(None);
        };
        Ok(self.provider(&provider).await?.map(|p| (p, scopes)))
    }

    /// The provider's authorization server refused its client (`invalid_client`): a remote MCP
    /// server's registration is renewed.
    async fn client_refused(&self, provider: &Arc<Provider>, error: &str) -> Result<(), GateError> {
        if error == "invalid_client" && self.remote.knows(&provider.id) {
            self.remote.client_refused(provider).await?;
        }
        Ok(())
    }

    /// Whether the principal's connection to `provider` can serve a call needing `scopes` (beyond
    /// the provider's configured ones), refreshing its token first when it is about to expire.
    pub async fn grant(
        &self,
        principal: &Principal,
        provider: &Arc<Provider>,
        scopes: &[String],
        from: &Origin,
    ) -> Result<Grant, GateError> {
        let needed = provider.scopes_with(scopes);
        let connections = match self.cache.get(principal) {
            Some(cached) if cached.iter().any(|c| serves(c, provider, &needed)) => cached,
            // A sign-in on another replica reaches this cache through the bus, which can be a
            // moment after its completion notification reached the client, whose retry may come
            // here first: the store, not the cache, decides that the user must sign in.
            _ => self.load(principal).await?,
        };
        let connection = connections.iter().find(|c| c.provider == provider.id).cloned();
        Ok(match connection {
            Some(c) if serves(&c, provider, &needed) => match self.usable_token(provider, c, from).await? {
                Some((token, version)) => Grant::Usable { token, version },
                None => Grant::SignIn { scopes: needed },
            },
            // Step-up: sign in again for everything granted so far plus what is missing.
            Some(c) if c.status == ConnectionStatus::Active => Grant::SignIn {
                scopes: provider.scopes_with(&[c.scopes, needed].concat()),
            },
            _ => Grant::SignIn { scopes: needed },
        })
    }

    /// The principal's connections, from the cache when it has them.
    async fn of(&self, principal: &Principal) -> Result<Arc<Vec<ConnectionRecord>>, GateError> {
        match self.cache.get(principal) {
            Some(cached) => Ok(cached),
            None => self.load(principal).await,
        }
    }

    /// The principal's connections from the store, cached unless they changed meanwhile.
    async fn load(&self, principal: &Principal) -> Result<Arc<Vec<ConnectionRecord>>, GateError> {
        let epoch = self.cache.epoch();
        let loaded = Arc::new(self.backing.store.connections(principal).await?);
        self.cache.insert_loaded(epoch, principal.clone(), loaded.clone());
        Ok(loaded)
    }

    /// Puts what happened to the principal's connection to `provider` on the audit trail.
    fn audit(&self, principal: &Principal, action: AuditAction, provider: &str, from: &Origin, detail: Value) {
        self.backing.audit.record(principal, action, provider, from, detail);
    }

    /// After a change made here; other replicas learn of it from the store's notice.
    fn changed(&self, principal: &Principal) {
        self.backing.bus.connections_changed(principal);
    }

    /// The principal's connections as the user may see them.
    pub async fn summaries(&self, principal: &Principal) -> Result<Vec<ConnectionSummary>, GateError> {
        Ok(self
            .of(principal)
            .await?
            .iter()
            .cloned()
            .map(|c| ConnectionSummary {
                provider_name: self
                    .providers
                    .get(&c.provider)
                    .map_or_else(|| c.provider.clone(), |p| p.name.clone()),
                provider: c.provider,
                account_label: c.account_label,
                scopes: c.scopes,
                active: c.status == ConnectionStatus::Active,
                connected_at: c.created_at,
            })
            .collect())
    }

    /// The provider refused a token during a call: the connection is broken (unless it was
    /// refreshed since `version`) and the next decision elicits a new sign-in.
    pub async fn token_rejected(
        &self,
        principal: &Principal,
        provider: &str,
        version: DateTime<Utc>,
        from: &Origin,
    ) -> Result<(), GateError> {
        if self
            .backing
            .store
            .mark_connection_broken(principal, provider, version)
            .await?
        {
            self.changed(principal);
            tracing::info!(principal = %principal, provider, "the provider refused the token; connection broken");
            self.backing.metrics.connection_broken(provider);
            let detail = json!({ "reason": "the provider refused the token" });
            self.audit(principal, AuditAction::ConnectionBroken, provider, from, detail);
        }
        Ok(())
    }

    /// Removes a connection and revokes its tokens where the provider supports it.
    pub async fn disconnect(
        &self,
        principal: &Principal,
        provider_id: &str,
        from: &Origin,
    ) -> Result<Disconnected, GateError> {
        let Some(connection) = self.backing.store.delete_connection(principal, provider_id).await? else {
            return Ok(Disconnected::NothingConnected);
        };
        self.changed(principal);
        let disconnected = self.revoke(principal, provider_id, &connection).await?;
        let revocation = match disconnected {
            Disconnected::NothingConnected | Disconnected::NoRevocation => "none",
            Disconnected::Revoked => "revoked",
            Disconnected::RevocationFailed => "failed",
        };
        let detail = json!({ "revocation": revocation });
        self.audit(principal, AuditAction::ConnectionRevoked, provider_id, from, detail);
        Ok(disconnected)
    }

    /// Revokes a removed connection's tokens where the provider supports it.
    async fn revoke(
        &self,
        principal: &Principal,
        provider_id: &str,
        connection: &ConnectionRecord,
    ) -> Result<Disconnected, GateError> {
        let provider = match self.provider(provider_id).await {
            // Another issuer's tokens, or an unknown one's, are revoked nowhere: not revoked there.
            Ok(Some(provider)) if Issuer::of(&provider, connection) != Issuer::Same => {
                tracing::warn!(principal = %principal, provider = provider_id, "not revoked: the tokens came from another authorization server than the provider's now");
                return Ok(Disconnected::RevocationFailed);
            }
            Ok(Some(provider)) if provider.revocation_url.is_some() => provider,
            Ok(_) => return Ok(Disconnected::NoRevocation),
            Err(error) => {
                tracing::warn!(principal = %principal, provider = provider_id, %error, "revocation failed");
                return Ok(Disconnected::RevocationFailed);
            }
        };
        // Revoking the refresh token ends the whole grant at most providers (RFC 7009 2.1).
        let (sealed, context, hint) = match &connection.refresh_token {
            Some(refresh) => (refresh, refresh_context(principal, provider_id), "refresh_token"),
            None => (
                &connection.access_token,
                access_context(principal, provider_id),
                "access_token",
            ),
        };
        let token = self.backing.vault.decrypt_str(sealed, &context)?;
        Ok(match self.oauth.revoke(&provider, token.expose(), hint).await {
            Ok(()) => Disconnected::Revoked,
            Err(error) => {
                tracing::warn!(principal = %principal, provider = provider_id, %error, "revocation failed");
                Disconnected::RevocationFailed
            }
        })
    }
}

#[cfg(test)]
mod tests;
