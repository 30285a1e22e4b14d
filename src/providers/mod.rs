//! OAuth 2 providers from configuration: each `[[providers]]` table, its preset filled in
//! (`presets`), checked and resolved into a [`Provider`]. Talking to providers is `client`'s job,
//! reading their answers `answers`'.

mod answers;
mod client;
pub mod discovery;
mod presets;
pub mod registration;
mod remote;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use url::Url;

pub use answers::{OAuthError, TokenResponse};
pub use client::{Authorization, OAuthClient};
pub use remote::{RemoteKind, RemoteSpec};

use crate::config::{ClientAuth, Config, ConfigError, ProviderConfig, TokenRefusedWhen};
use crate::domain::is_identifier;
use crate::secret::Secret;

/// A provider with every URL resolved.
#[derive(Debug, Clone)]
pub struct Provider {
    pub id: String,
    /// Shown to users ("GitHub").
    pub name: String,
    pub client_id: String,
    /// None for a public client (a Client ID Metadata Document, or a registration without a
    /// secret): it authenticates with its `client_id` in the body and its PKCE verifier.
    client_secret: Option<Secret<String>>,
    pub client_auth: ClientAuth,
    pub authorize_url: Url,
    pub token_url: Url,
    pub userinfo_url: Option<Url>,
    /// JSON pointer into the userinfo answer for the account label.
    pub account_label: Option<String>,
    /// RFC 9207: what an `iss` sent to the callback must equal (the gate checks it).
    pub issuer: Option<String>,
    /// Whether a callback must carry `iss` (only ever with an `issuer`).
    pub require_iss: bool,
    pub revocation_url: Option<Url>,
    /// Scopes every sign-in asks for.
    pub scopes: Vec<String>,
    /// Joins scopes in the authorize URL (" ", or "," for Slack).
    pub scope_separator: String,
    /// The authorize parameter that carries the scopes (`scope`, or Slack's `user_scope`).
    pub scope_param: String,
    /// Counted as granted by every token answer, which never lists them (Microsoft's
    /// `offline_access`).
    pub unlisted_scopes: Vec<String>,
    /// A JSON pointer to the user's tokens in a token answer that nests them (Slack's
    /// `/authed_user`); answers without it are read at the top level.
    pub tokens_at: Option<String>,
    /// How the provider's API refuses a token in a 2xx answer (Slack's `ok: false` answers).
    pub token_refused_when: Option<TokenRefusal>,
    pub authorize_params: BTreeMap<String, String>,
    /// RFC 8707: the `resource` every authorize, code exchange and refresh request names (a
    /// remote MCP server's own authorization, `remote`).
    pub resource: Option<Url>,
    /// The key of this provider's own redirect URI (`/oauth/callback/{key}`): an `auth = "mcp"`
    /// upstream's id. None: the configured providers' shared `/oauth/callback`.
    pub callback: Option<String>,
    /// Its endpoints were found at run time (from its metadata), not configured: each connection
    /// is bound to the issuer it came from, and its tokens go to no other.
    pub discovered: bool,
    /// For a provider a remote server named (`remote`): how internal that server is. Its
    /// requests then go through `outbound::Guarded`, held to that reach; None: the ordinary
    /// client, for what the operator configured.
    pub reach: Option<crate::outbound::reach::Reach>,
}

/// A 2xx API answer that means the token was refused: its JSON value at `pointer` is one of
/// `values`.
#[derive(Debug, Clone)]
pub struct TokenRefusal {
    pointer: String,
    values: Vec<String>,
}

impl TokenRefusal {
    fn from_config(config: &TokenRefusedWhen, key: &str) -> Result<Self, ConfigError> {
        json_pointer(&config.pointer, &format!("{key}.pointer"), "/error")?;
        if config.values.is_empty() || config.values.iter().any(String::is_empty) {
            return Err(ConfigError::key(
                format!("{key}.values"),
                "must list at least one value, none of them empty",
            ));
        }
        Ok(Self {
            pointer: config.pointer.clone(),
            values: config.values.clone(),
        })
    }

    /// Whether `answer` says the token was refused.
    pub fn matches(&self, answer: &Value) -> bool {
        let text = match answer.pointer(&self.pointer) {
            Some(Value::String(text)) => text.clone(),
            Some(scalar @ (Value::Number(_) | Value::Bool(_))) => scalar.to_string(),
            _ => return false,
        };
        self.values.contains(&text)
    }
}

/// Refuses anything but a JSON pointer to a member (`/name…`); `example` is shown in the error.
fn json_pointer(pointer: &str, key: &str, example: &str) -> Result<(), ConfigError> {
    if pointer.len() < 2 || !pointer.starts_with('/') {
        return Err(ConfigError::key(
            key,
            format!("must be a JSON pointer like \"{example}\""),
        ));
    }
    Ok(())
}

/// Parameters of the authorize URL that gatehouse sets itself.
const RESERVED_AUTHORIZE_PARAMS: [&str; 7] = [
    "response_type",
    "client_id",
    "redirect_uri",
    "state",
    "code_challenge",
    "code_challenge_method",
    "scope",
];

/// Providers must be reached over HTTPS, except on loopback (development and tests).
fn check_url(url: &Url, key: &str) -> Result<(), ConfigError> {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if url.scheme() == "https" || (url.scheme() == "http" && loopback) {
        Ok(())
    } else {
        Err(ConfigError::key(key, "must be an https URL (http only on loopback)"))
    }
}

impl Provider {
    fn from_config(config: &ProviderConfig, key: &str) -> Result<Self, ConfigError> {
        let invalid = |field: &str, message: String| Err(ConfigError::key(format!("{key}.{field}"), message));
        if !is_identifier(&config.id) {
            return invalid("id", "must be letters, digits, `-` and `_`".into());
        }
        let config = presets::apply(config, key)?;
        let required = |url: &Option<Url>, field: &str| {
            url.clone()
                .ok_or_else(|| ConfigError::key(format!("{key}.{field}"), "is required without a preset"))
        };
        let authorize_url = required(&config.authorize_url, "authorize_url")?;
        let token_url = required(&config.token_url, "token_url")?;
        let urls = [
            ("authorize_url", Some(&authorize_url)),
            ("token_url", Some(&token_url)),
            ("userinfo_url", config.userinfo_url.as_ref()),
            ("revocation_url", config.revocation_url.as_ref()),
        ];
        for (field, url) in urls {
            if let Some(url) = url {
                check_url(url, &format!("{key}.{field}"))?;
            }
        }
        if let Some(pointer) = &config.account_label
            && !pointer.is_empty()
            && !pointer.starts_with('/')
        {
            return invalid("account_label", "must be a JSON pointer like \"/login\"".into());
        }
        if let Some(pointer) = &config.tokens_at {
            json_pointer(pointer, &format!("{key}.tokens_at"), "/authed_user")?;
        }
        let token_refused_when = config
            .token_refused_when
            .as_ref()
            .map(|when| TokenRefusal::from_config(when, &format!("{key}.token_refused_when")))
            .transpose()?;
        let require_iss = match (config.require_iss, &config.issuer) {
            (Some(true), None) => return invalid("require_iss", "needs an `issuer` to require".into()),
            (required, issuer) => issuer.is_some() && required.unwrap_or(true),
        };
        if config.client_id.trim().is_empty() {
            return invalid("client_id", "must not be empty".into());
        }
        if config.client_secret.expose().is_empty() {
            return invalid("client_secret", "must not be empty".into());
        }
        let one_scope = |s: &String| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == ',');
        if let Some(scope) = config.scopes.iter().find(|s| !one_scope(s)) {
            return invalid("scopes", format!("{scope:?} is not one scope"));
        }
        if let Some(scope) = config.unlisted_scopes.iter().find(|s| !one_scope(s)) {
            return invalid("unlisted_scopes", format!("{scope:?} is not one scope"));
        }
        let scope_param = config.scope_param.clone().unwrap_or_else(|| "scope".to_owned());
        let one_name = !scope_param.is_empty()
            && scope_param
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !one_name || (scope_param != "scope" && RESERVED_AUTHORIZE_PARAMS.contains(&scope_param.as_str())) {
            return invalid("scope_param", format!("{scope_param:?} cannot carry the scopes"));
        }
        let reserved = RESERVED_AUTHORIZE_PARAMS
            .iter()
            .copied()
            .chain([scope_param.as_str()])
            .find(|p| config.authorize_params.contains_key(*p));
        if let Some(param) = reserved {
            return invalid(
                &format!("authorize_params.{param}"),
                "is set by gatehouse itself".into(),
            );
        }
        Ok(Self {
            name: config.name.unwrap_or_else(|| config.id.clone()),
            id: config.id,
            client_id: config.client_id,
            client_secret: Some(config.client_secret),
            client_auth: config.client_auth.unwrap_or(ClientAuth::Basic),
            authorize_url,
            token_url,
            userinfo_url: config.userinfo_url,
            account_label: config.account_label,
            issuer: config.issuer,
            require_iss,
            revocation_url: config.revocation_url,
            scopes: config.scopes,
            scope_separator: config.scope_separator.unwrap_or_else(|| " ".to_owned()),
            scope_param,
            unlisted_scopes: config.unlisted_scopes,
            tokens_at: config.tokens_at,
            token_refused_when,
            authorize_params: config.authorize_params,
            resource: None,
            callback: None,
            discovered: false,
            reach: None,
        })
    }

    /// The provider's scopes plus `extra`, deduplicated, in a stable order.
    pub fn scopes_with(&self, extra: &[String]) -> Vec<String> {
        let mut scopes: Vec<String> = self.scopes.iter().chain(extra).cloned().collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }

    /// The scopes a token answer's granted-scope string says, split as this provider writes it,
    /// with the scopes it never lists.
    pub fn split_scopes(&self, text: &str) -> Vec<String> {
        let mut scopes: Vec<String> = text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .chain(self.unlisted_scopes.iter().cloned())
            .collect();
        scopes.sort();
        scopes.dedup();
        scopes
    }
}

/// Every configured provider, and the remote MCP servers' to be found at run time.
pub struct Providers {
    providers: Vec<Arc<Provider>>,
    remote: Vec<RemoteSpec>,
}

impl Providers {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut providers: Vec<Arc<Provider>> = Vec::new();
        for (i, provider) in config.providers.iter().enumerate() {
            let key = format!("providers[{i}]");
            let provider = Provider::from_config(provider, &key)?;
            if providers.iter().any(|p| p.id == provider.id) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!("`{}` is configured twice", provider.id),
                ));
            }
            providers.push(Arc::new(provider));
        }
        let remote = RemoteSpec::from_config(config)?;
        if let Some(clash) = remote.iter().find(|r| providers.iter().any(|p| p.id == r.id)) {
            let i = config
                .upstreams
                .iter()
                .position(|u| u.id == clash.id)
                .unwrap_or_default();
            return Err(ConfigError::key(
                format!("upstreams[{i}].id"),
                format!(
                    "`{}` names a provider already; an `auth = \"mcp\"` upstream's id names its connections",
                    clash.id
                ),
            ));
        }
        Ok(Self { providers, remote })
    }

    /// A configured provider.
    pub fn get(&self, id: &str) -> Option<&Arc<Provider>> {
        self.providers.iter().find(|p| p.id == id)
    }

    /// The configured providers.
    pub fn iter(&self) -> impl Iterator<Item = &Provider> {
        self.providers.iter().map(|p| p.as_ref())
    }

    /// The remote MCP servers whose providers are found at run time.
    pub fn remote(&self) -> &[RemoteSpec] {
        &self.remote
    }

    /// Whether `id` names a provider, configured or remote.
    pub fn knows(&self, id: &str) -> bool {
        self.get(id).is_some() || self.remote.iter().any(|r| r.id == id)
    }
}

#[cfg(test)]
mod tests;
