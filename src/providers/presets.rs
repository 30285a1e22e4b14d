//! Presets of well-known providers, so a configuration needs only `preset`, the client id and the
//! secret. The presets are `presets.toml`, written in the configuration's own vocabulary; a
//! preset fills every key a provider's table leaves out.

use crate::config::{ConfigError, ProviderConfig};

/// Every preset, as `[name]` tables of provider settings.
const PRESETS: &str = include_str!("presets.toml");

/// `config` with every key it leaves out taken from the preset it names (unchanged without one).
/// `key` is where `config` sits in the configuration, for errors.
pub fn apply(config: &ProviderConfig, key: &str) -> Result<ProviderConfig, ConfigError> {
    let Some(name) = &config.preset else {
        return Ok(config.clone());
    };
    let presets: toml::Table = toml::from_str(PRESETS).map_err(|e| {
        ConfigError::key(
            format!("{key}.preset"),
            format!("the built-in presets do not read: {e}"),
        )
    })?;
    let Some(toml::Value::Table(settings)) = presets.get(name) else {
        let names: Vec<&str> = presets.keys().map(String::as_str).collect();
        return Err(ConfigError::key(
            format!("{key}.preset"),
            format!("`{name}` is not a preset ({})", names.join(", ")),
        ));
    };
    let tenant = config.tenant.as_deref().unwrap_or("common");
    let mut settings: toml::Table = settings
        .iter()
        .map(|(k, v)| match v {
            toml::Value::String(s) => (k.clone(), toml::Value::String(s.replace("{tenant}", tenant))),
            other => (k.clone(), other.clone()),
        })
        .collect();
    // The preset is read as a provider table; its identity is the configuration's and is not used.
    for identity in ["id", "client_id", "client_secret"] {
        settings.insert(identity.to_owned(), toml::Value::String(name.clone()));
    }
    let preset: ProviderConfig = toml::Value::Table(settings).try_into().map_err(|e| {
        let field = if config.tenant.is_some() { "tenant" } else { "preset" };
        ConfigError::key(
            format!("{key}.{field}"),
            format!("the preset `{name}` does not fit: {e}"),
        )
    })?;
    let mut merged = config.clone();
    merged.name = merged.name.or(preset.name);
    merged.authorize_url = merged.authorize_url.or(preset.authorize_url);
    merged.token_url = merged.token_url.or(preset.token_url);
    merged.userinfo_url = merged.userinfo_url.or(preset.userinfo_url);
    merged.account_label = merged.account_label.or(preset.account_label);
    // The preset's issuer names the preset's own server, and whether that server always sends it:
    // a configuration that moves the authorize URL elsewhere (GitHub Enterprise, a GitLab of
    // one's own) or names an issuer of its own inherits neither.
    if config.authorize_url.is_none() && config.issuer.is_none() {
        merged.issuer = preset.issuer;
        merged.require_iss = merged.require_iss.or(preset.require_iss);
    }
    merged.revocation_url = merged.revocation_url.or(preset.revocation_url);
    merged.scope_separator = merged.scope_separator.or(preset.scope_separator);
    merged.client_auth = merged.client_auth.or(preset.client_auth);
    merged.scope_param = merged.scope_param.or(preset.scope_param);
    merged.tokens_at = merged.tokens_at.or(preset.tokens_at);
    merged.token_refused_when = merged.token_refused_when.or(preset.token_refused_when);
    if merged.unlisted_scopes.is_empty() {
        merged.unlisted_scopes = preset.unlisted_scopes;
    }
    merged.authorize_params = preset
        .authorize_params
        .into_iter()
        .chain(config.authorize_params.clone())
        .collect();
    Ok(merged)
}

#[cfg(test)]
mod tests;
