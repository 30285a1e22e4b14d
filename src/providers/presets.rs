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
    merged.issuer = merged.issuer.or(preset.issuer);
    merged.revocation_url = merged.revocation_url.or(preset.revocation_url);
    merged.scope_separator = merged.scope_separator.or(preset.scope_separator);
    merged.client_auth = merged.client_auth.or(preset.client_auth);
    merged.authorize_params = preset
        .authorize_params
        .into_iter()
        .chain(config.authorize_params.clone())
        .collect();
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_makes_a_provider() {
        let presets: toml::Table = toml::from_str(PRESETS).expect("presets.toml");
        assert_eq!(presets.len(), 6);
        for name in presets.keys() {
            let table = format!("id = \"acme\"\nclient_id = \"c\"\nclient_secret = \"s\"\npreset = \"{name}\"");
            let config: ProviderConfig = toml::from_str(&table).expect("provider table");
            let preset = apply(&config, "providers[0]").unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(preset.authorize_url.is_some() && preset.token_url.is_some() && preset.name.is_some());
            assert!(
                preset.scope_separator.is_some() && preset.client_auth.is_some(),
                "{name}"
            );
            crate::providers::Provider::from_config(&config, "providers[0]").unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn the_configuration_wins_over_the_preset() {
        let table = "id = \"acme\"\nclient_id = \"c\"\nclient_secret = \"s\"\npreset = \"google\"\n\
                     name = \"Work Google\"\nclient_auth = \"basic\"\nauthorize_params = { prompt = \"none\" }";
        let config: ProviderConfig = toml::from_str(table).expect("provider table");
        let merged = apply(&config, "providers[0]").expect("google");
        assert_eq!(merged.name.as_deref(), Some("Work Google"));
        assert_eq!(merged.client_auth, Some(crate::config::ClientAuth::Basic));
        assert_eq!(merged.authorize_params["prompt"], "none");
        assert_eq!(merged.authorize_params["access_type"], "offline");
        assert_eq!(merged.issuer.as_deref(), Some("https://accounts.google.com"));
    }
}
