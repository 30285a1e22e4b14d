//! Providers found at run time: each `auth = "mcp"` upstream is a provider named by its id, whose
//! endpoints come from discovery (`discovery`) and whose client from configuration, a Client ID
//! Metadata Document or a registration (`registration`). This room reads the configuration and
//! builds the provider from what was found; finding it and keeping it is the gate's.

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
}

impl RemoteSpec {
    /// Every `auth = "mcp"` upstream's.
    pub(super) fn from_config(config: &Config) -> Result<Vec<RemoteSpec>, ConfigError> {
        let mut specs = Vec::new();
        for (i, upstream) in config.upstreams.iter().enumerate() {
            let key = format!("upstreams[{i}]");
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
            authorize_params: Default::default(),
            resource: Some(found.resource.clone()),
        }
    }
}
