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
    // The Web API refuses a token with HTTP 200 and `ok: false`, other errors are answers.
    let refusal = slack.token_refused_when.expect("Slack refuses tokens in 200 answers");
    for error in [
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
    ] {
        assert!(
            refusal.matches(&serde_json::json!({"ok": false, "error": error})),
            "{error}"
        );
    }
    assert!(!refusal.matches(&serde_json::json!({"ok": false, "error": "channel_not_found"})));
    assert!(!refusal.matches(&serde_json::json!({"ok": true})));
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
