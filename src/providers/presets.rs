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
mod tests {
    use std::collections::BTreeMap;

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

    /// The preset `name` as a provider, with `extra` lines of configuration.
    fn preset(name: &str, extra: &str) -> crate::providers::Provider {
        crate::providers::tests::provider(&format!("preset = \"{name}\"\n{extra}"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The authorize URL's query for these scopes.
    fn authorize_query(provider: &crate::providers::Provider, scopes: &[&str]) -> BTreeMap<String, String> {
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        let url = provider.authorize(&scopes, "https://gh.example/oauth/callback").url;
        url.query_pairs().into_owned().collect()
    }

    #[test]
    fn slack_asks_for_a_user_token_of_oauth_v2() {
        let slack = preset("slack", "");
        assert_eq!(slack.authorize_url.as_str(), "https://slack.com/oauth/v2/authorize");
        assert_eq!(slack.token_url.as_str(), "https://slack.com/api/oauth.v2.access");
        let query = authorize_query(&slack, &["channels:history", "chat:write"]);
        assert_eq!(query["user_scope"], "channels:history,chat:write");
        assert!(
            !query.contains_key("scope"),
            "`scope` would ask for a bot token: {query:?}"
        );
        assert_eq!(slack.tokens_at.as_deref(), Some("/authed_user"));
        assert_eq!(
            slack.split_scopes("chat:write,channels:history"),
            ["channels:history", "chat:write"]
        );
    }

    #[test]
    fn issuers_that_are_sent_only_sometimes_are_not_required() {
        for (name, issuer) in [
            ("google", "https://accounts.google.com"),
            ("github", "https://github.com/login/oauth"),
        ] {
            let provider = preset(name, "");
            assert_eq!(provider.issuer.as_deref(), Some(issuer), "{name}");
            assert!(!provider.require_iss, "{name} does not always send iss");
        }
        for name in ["slack", "microsoft", "gitlab", "atlassian"] {
            assert_eq!(preset(name, "").issuer, None, "{name}");
        }
        // An issuer of one's own is required unless said otherwise.
        let own = preset("google", "issuer = \"https://idp.acme.test\"");
        assert!(own.require_iss);
        // The preset's issuer names the preset's server, not one the configuration moves to.
        let enterprise = preset(
            "github",
            "authorize_url = \"https://github.acme.test/login/oauth/authorize\"",
        );
        assert_eq!(enterprise.issuer, None);
    }

    #[test]
    fn presets_ask_for_refresh_tokens_as_their_providers_document() {
        let google = authorize_query(&preset("google", ""), &["openid"]);
        assert_eq!(
            (google["access_type"].as_str(), google["prompt"].as_str()),
            ("offline", "consent")
        );
        let atlassian = authorize_query(&preset("atlassian", ""), &["offline_access", "read:me"]);
        assert_eq!(atlassian["audience"], "api.atlassian.com");
        assert_eq!(atlassian["scope"], "offline_access read:me");
        // Microsoft grants offline_access without ever listing it: counted as granted, or a
        // provider asking for it would ask again after every sign-in.
        let microsoft = preset("microsoft", "scopes = [\"offline_access\", \"User.Read\"]");
        assert_eq!(
            microsoft.split_scopes("User.Read openid profile email"),
            ["User.Read", "email", "offline_access", "openid", "profile"]
        );
        // GitHub documents space-delimited scopes and answers with commas.
        let github = preset("github", "");
        assert_eq!(
            authorize_query(&github, &["read:user", "repo"])["scope"],
            "read:user repo"
        );
        assert_eq!(github.split_scopes("repo,read:user"), ["read:user", "repo"]);
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
