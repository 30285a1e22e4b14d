//! Usable access tokens: a token about to expire is refreshed first, under a lease in the
//! database so only one call per connection refreshes at a time across replicas; the others wait
//! for its result. A refused refresh breaks the connection; an unreachable provider fails the call
//! without breaking anything. A discovered provider's connection is used only while its issuer is
//! the provider's: after a switch the user signs in again, and no token goes to the new server.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{Connections, access_context, refresh_context};
use crate::audit::Origin;
use crate::clock::after;
use crate::gate::GateError;
use crate::metrics::RefreshOutcome;
use crate::providers::{OAuthError, Provider};
use crate::secret::Secret;
use crate::store::{AuditAction, ConnectionRecord, ConnectionStatus, RefreshLease, RefreshedTokens};

/// Tokens expiring sooner than this are refreshed before use.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// How long a refresh may hold its lease (the provider timeout plus slack).
const REFRESH_LEASE: Duration = Duration::from_secs(20);
/// How often a call waiting for another's refresh looks again.
const REFRESH_POLL: Duration = Duration::from_millis(50);

/// A token and the connection version it came from.
type Usable = (Secret<String>, DateTime<Utc>);

/// Whether a connection came from its provider's authorization server as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Issuer {
    /// The same issuer, or a configured provider (its endpoints are the operator's).
    Same,
    /// Not recorded (made before issuers were): its access token still goes to the server it
    /// was got for, but its refresh token goes nowhere, as no one knows whose it is.
    Unknown,
    /// Another issuer's: the server moved to another authorization server.
    Other,
}

impl Issuer {
    pub(super) fn of(provider: &Provider, connection: &ConnectionRecord) -> Self {
        match (&connection.issuer, &provider.issuer) {
            _ if !provider.discovered => Issuer::Same,
            (Some(had), Some(has)) if had == has => Issuer::Same,
            (None, _) => Issuer::Unknown,
            _ => Issuer::Other,
        }
    }
}

fn fresh(connection: &ConnectionRecord, now: DateTime<Utc>) -> bool {
    connection.expires_at.is_none_or(|at| at > after(now, REFRESH_MARGIN))
}

impl Connections {
    /// The access token of an active connection, refreshed first when it is about to expire.
    /// `None`: the connection cannot be used and the user must sign in again.
    pub(super) async fn usable_token(
        &self,
        provider: &Arc<Provider>,
        mut connection: ConnectionRecord,
        from: &Origin,
    ) -> Result<Option<Usable>, GateError> {
        let deadline = tokio::time::Instant::now() + REFRESH_LEASE;
        loop {
            let now = Utc::now();
            let issuer = Issuer::of(provider, &connection);
            if connection.status != ConnectionStatus::Active || issuer == Issuer::Other {
                return Ok(None);
            }
            if fresh(&connection, now) {
                let token = self.backing.vault.decrypt_str(
                    &connection.access_token,
                    &access_context(&connection.principal, &provider.id),
                )?;
                return Ok(Some((token, connection.updated_at)));
            }
            if connection.refresh_token.is_none() || issuer != Issuer::Same {
                return Ok(None);
            }
            let store = &self.backing.store;
            let lease = RefreshLease {
                now,
                until: after(now, REFRESH_LEASE),
            };
            let leased = store.acquire_refresh_lease(&connection, lease).await?;
            if let Some(leased) = leased {
                return self.refresh(provider, leased, from).await;
            }
            // Another call (here or on another replica) is refreshing: wait for its result.
            if tokio::time::Instant::now() >= deadline {
                return Err(GateError::ProviderUnavailable {
                    provider: provider.name.clone(),
                    reason: "a token refresh is taking too long".into(),
                });
            }
            tokio::time::sleep(REFRESH_POLL).await;
            match store.connection(&connection.principal, &provider.id).await? {
                Some(reloaded) => connection = reloaded,
                None => return Ok(None),
            }
        }
    }

    /// Refreshes under the lease the caller holds.
    async fn refresh(
        &self,
        provider: &Arc<Provider>,
        leased: ConnectionRecord,
        from: &Origin,
    ) -> Result<Option<Usable>, GateError> {
        let principal = &leased.principal;
        let (store, vault) = (&self.backing.store, &self.backing.vault);
        if fresh(&leased, Utc::now()) {
            // Refreshed by someone else between our read and the lease: release it unchanged. The
            // token is not written back: `keys rotate` may have re-sealed it since it was read.
            let unchanged = RefreshedTokens {
                access_token: None,
                refresh_token: None,
                expires_at: leased.expires_at,
                scopes: None,
            };
            store.store_refreshed(principal, &provider.id, &unchanged).await?;
            self.changed(principal);
            let token = vault.decrypt_str(&leased.access_token, &access_context(principal, &provider.id))?;
            // Releasing bumped the version: a later 401 must match the stored one to break it.
            return Ok(Some((token, self.version(&leased).await?)));
        }
        let Some(sealed) = &leased.refresh_token else {
            return Ok(None);
        };
        let refresh_token = vault.decrypt_str(sealed, &refresh_context(principal, &provider.id))?;
        match self.oauth.refresh(provider, refresh_token.expose()).await {
            Ok(tokens) => {
                let refreshed = RefreshedTokens {
                    access_token: Some(
                        vault.encrypt_str(tokens.access_token.expose(), &access_context(principal, &provider.id)),
                    ),
                    // A provider that sends no new refresh token keeps the old one valid.
                    refresh_token: tokens
                        .refresh_token
                        .as_ref()
                        .map(|t| vault.encrypt_str(t.expose(), &refresh_context(principal, &provider.id))),
                    expires_at: tokens.expires_in.map(|s| after(Utc::now(), Duration::from_secs(s))),
                    scopes: tokens.scope.as_deref().map(|s| provider.split_scopes(s)),
                };
                store.store_refreshed(principal, &provider.id, &refreshed).await?;
                self.changed(principal);
                tracing::info!(principal = %principal, provider = %provider.id, "access token refreshed");
                self.backing
                    .metrics
                    .token_refresh(&provider.id, RefreshOutcome::Refreshed);
                let detail = json!({ "scopes": refreshed.scopes });
                self.audit(principal, AuditAction::ConnectionRefreshed, &provider.id, from, detail);
                Ok(Some((tokens.access_token, self.version(&leased).await?)))
            }
            Err(OAuthError::Rejected { error, .. }) => {
                tracing::info!(principal = %principal, provider = %provider.id, %error, "refresh refused; connection broken");
                self.client_refused(provider, &error).await?;
                self.backing
                    .metrics
                    .token_refresh(&provider.id, RefreshOutcome::Refused);
                if store
                    .mark_connection_broken(principal, &provider.id, leased.updated_at)
                    .await?
                {
                    self.backing.metrics.connection_broken(&provider.id);
                }
                self.changed(principal);
                let detail = json!({ "reason": "the provider refused the refresh", "error": error });
                self.audit(principal, AuditAction::ConnectionBroken, &provider.id, from, detail);
                Ok(None)
            }
            Err(OAuthError::Unavailable(reason)) => {
                tracing::warn!(principal = %principal, provider = %provider.id, %reason, "refresh failed");
                self.backing
                    .metrics
                    .token_refresh(&provider.id, RefreshOutcome::Unavailable);
                Err(GateError::ProviderUnavailable {
                    provider: provider.name.clone(),
                    reason,
                })
            }
        }
    }

    /// The stored version of a connection after this replica changed it.
    async fn version(&self, connection: &ConnectionRecord) -> Result<DateTime<Utc>, GateError> {
        Ok(self
            .backing
            .store
            .connection(&connection.principal, &connection.provider)
            .await?
            .map_or_else(Utc::now, |c| c.updated_at))
    }
}
