//! Providers found at run time, each named by an upstream's id. An `auth = "mcp"` upstream's
//! endpoints come from discovery (`discovery`) and its client from configuration, a Client ID
//! Metadata Document or a registration (`registration`). An `auth = "token_exchange"` upstream
//! has one too, for when the identity provider wants the user to interact before it exchanges:
//! the identity provider's own endpoints, with `[identity]`'s client, asking for the upstream as
//! `resource`. This room reads the configuration and builds the provider from what was found;
//! finding it and keeping it is the gate's.

use std::collections::BTreeMap;

use url::Url;

use super::Provider;
use super::discovery::Discovered;
use super::registration::{AuthMethod, Registered};
use crate::config::{Config, ConfigError, UpstreamAuth, is_scope_token};

/// An `auth = "mcp"` upstream as a provider to be found.
#[derive(Debug, Clone)]
pub struct RemoteSpec {
    /// The upstream's id, which names its connections.
    pub id: String,
    /// The MCP server.
    pub url: Url,
    /// Scopes every sign-in asks for; when empty, what discovery found.
    pub scopes: Vec<String>,
    /// A client registered beforehand.
    pub client: Option<Registered>,
    pub kind: RemoteKind,
}

/// Where a remote provider's authorization server is.
#[derive(Debug, Clone)]
pub enum RemoteKind {
    /// Found from the MCP server, as the MCP authorization specification says.
    Mcp,
    /// The identity provider at `issuer`, signing the user in for `audience` (sent as `resource`
    /// when it is a URL, else as `audience`).
    Identity { issuer: Url, audience: String },
}

impl RemoteSpec {
    /// Every `auth = "mcp"` upstream's.
    pub(super) fn from_config(config: &Config) -> Result<Vec<RemoteSpec>, ConfigError> {
        let mut specs = Vec::new();
        for (i, upstream) in config.upstreams.iter().enumerate() {
            let key = format!("upstreams[{i}]");
            if let (Some(UpstreamAuth::TokenExchange), Some(issuer), Some(client_id), Some(url)) = (
                upstream.auth,
                &config.identity.issuer,
                &config.identity.client_id,
                &upstream.url,
            ) {
                // Checked as a token-exchange upstream (`upstreams::upstream`); a bad URL makes no
                // provider, and that check names the key.
                let Ok(url) = Url::parse(url) else { continue };
                let secret = config.identity.client_secret.clone();
                specs.push(RemoteSpec {
                    id: upstream.id.clone(),
                    scopes: upstream.scopes.clone(),
                    kind: RemoteKind::Identity {
                        issuer: issuer.clone(),
                        audience: upstream.audience.clone().unwrap_or_else(|| url.to_string()),
                    },
                    url,
                    client: Some(Registered {
                        client_id: client_id.clone(),
                        method: if secret.is_some() {
                            AuthMethod::Basic
                        } else {
                            AuthMethod::None
                        },
                        client_secret: secret,
                    }),
                });
            }
            if upstream.auth != Some(UpstreamAuth::Mcp) {
                if upstream.client_id.is_some() || upstream.client_secret.is_some() {
                    return Err(ConfigError::key(
                        key,
                        "`client_id` and `client_secret` are for `auth = \"mcp\"`",
                    ));
                }
                continue;
            }
            let Some(text) = &upstream.url else {
                return Err(ConfigError::key(format!("{key}.auth"), "`mcp` is for `url` upstreams"));
            };
            // Plain http is the operator's choice, as for any upstream; then the server's
            // authorization server may be reached over http too (see `discovery`).
            let url = Url::parse(text).map_err(|e| ConfigError::key(format!("{key}.url"), e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ConfigError::key(format!("{key}.url"), "must be an http or https URL"));
            }
            if let Some(scope) = upstream.scopes.iter().find(|s| !is_scope_token(s)) {
                return Err(ConfigError::key(
                    format!("{key}.scopes"),
                    format!("`{scope}` is not a scope (RFC 6749: printable ASCII without space, quote or backslash)"),
                ));
            }
            let client = match (&upstream.client_id, &upstream.client_secret) {
                (None, None) => None,
                (None, Some(_)) => {
                    return Err(ConfigError::key(
                        format!("{key}.client_secret"),
                        "needs the `client_id` it belongs to",
                    ));
                }
                (Some(id), _) if id.trim().is_empty() => {
                    return Err(ConfigError::key(format!("{key}.client_id"), "must not be empty"));
                }
                (Some(id), secret) => {
                    let secret = secret.as_ref().filter(|s| !s.expose().is_empty()).cloned();
                    let method = if secret.is_some() {
                        AuthMethod::Basic
                    } else {
                        AuthMethod::None
                    };
                    Some(Registered {
                        client_id: id.clone(),
                        client_secret: secret,
                        method,
                    })
                }
            };
            specs.push(RemoteSpec {
                id: upstream.id.clone(),
                url,
                scopes: upstream.scopes.clone(),
                client,
                kind: RemoteKind::Mcp,
            });
        }
        Ok(specs)
    }
}

impl Provider {
    /// The provider of a remote MCP server: its authorization server's endpoints, the client it
    /// knows gatehouse by, and the server as the `resource` of every request.
    pub fn remote(spec: &RemoteSpec, found: &Discovered, client: &Registered) -> Self {
        let server = &found.server;
        let scopes = if spec.scopes.is_empty() {
            found.scopes.clone()
        } else {
            spec.scopes.clone()
        };
        let mut authorize_params = BTreeMap::new();
        let (resource, callback) = match &spec.kind {
            RemoteKind::Mcp => (Some(found.resource.clone()), Some(spec.id.clone())),
            // The identity provider's client is the pages' own, registered with the configured
            // providers' redirect URI.
            RemoteKind::Identity { audience, .. } => match Url::parse(audience) {
                Ok(url) => (Some(url), None),
                Err(_) => {
                    authorize_params.insert("audience".to_owned(), audience.clone());
                    (None, None)
                }
            },
        };
        // A pre-registered confidential client uses what the server lists.
        let method = match (client.method, &client.client_secret) {
            (AuthMethod::None, _) | (_, None) => AuthMethod::None,
            (_, Some(_)) => match AuthMethod::preferred(server.token_endpoint_auth_methods_supported.as_deref()) {
                AuthMethod::None => client.method,
                preferred => preferred,
            },
        };
        Provider {
            id: spec.id.clone(),
            name: spec.id.clone(),
            client_id: client.client_id.clone(),
            client_secret: client.client_secret.clone(),
            client_auth: method.client_auth(),
            authorize_url: server.authorization_endpoint.clone(),
            token_url: server.token_endpoint.clone(),
            userinfo_url: None,
            account_label: None,
            issuer: Some(server.issuer.clone()),
            require_iss: server.authorization_response_iss_parameter_supported,
            revocation_url: server.revocation_endpoint.clone(),
            scopes,
            scope_separator: " ".to_owned(),
            scope_param: "scope".to_owned(),
            unlisted_scopes: Vec::new(),
            tokens_at: None,
            token_refused_when: None,
            authorize_params,
            resource,
            callback,
            discovered: true,
            reach: None,
        }
    }
}
