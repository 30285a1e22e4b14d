use super::*;

/// A provider `acme` (client `c`, secret `s`) with `extra` lines of configuration.
pub(super) fn provider(extra: &str) -> Result<Provider, ConfigError> {
    let toml = format!("id = \"acme\"\nclient_id = \"c\"\nclient_secret = \"s\"\n{extra}");
    let config: ProviderConfig = toml::from_str(&toml).expect("provider table");
    Provider::from_config(&config, "providers[0]")
}

#[test]
fn presets_fill_urls_and_settings_override_them() {
    let github = provider("preset = \"github\"\nscopes = [\"read:user\"]").expect("github");
    assert_eq!(github.token_url.as_str(), "https://github.com/login/oauth/access_token");
    assert_eq!(github.name, "GitHub");
    let url = github
        .authorize(
            &github.scopes_with(&["repo".into()]),
            "https://gh.example/oauth/callback",
        )
        .url;
    let query: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(query["scope"], "read:user repo");
    assert_eq!(query["code_challenge_method"], "S256");
    let entra = provider("preset = \"microsoft\"\ntenant = \"contoso.onmicrosoft.com\"").expect("entra");
    assert!(
        entra
            .authorize_url
            .as_str()
            .contains("/contoso.onmicrosoft.com/oauth2/v2.0/authorize")
    );
    let overridden =
        provider("preset = \"gitlab\"\nauthorize_url = \"https://gitlab.acme.test/oauth/authorize\"").expect("gitlab");
    assert_eq!(overridden.authorize_url.host_str(), Some("gitlab.acme.test"));
}

#[test]
fn provider_errors_name_their_key() {
    let key_of = |extra: &str| match provider(extra) {
        Err(ConfigError::Key { key, .. }) => key,
        other => panic!("expected a key error for {extra:?}, got {other:?}"),
    };
    assert_eq!(key_of(""), "providers[0].authorize_url");
    assert_eq!(key_of("preset = \"myspace\""), "providers[0].preset");
    assert_eq!(
        key_of("authorize_url = \"http://auth.acme.test/a\"\ntoken_url = \"https://auth.acme.test/t\""),
        "providers[0].authorize_url"
    );
    assert_eq!(key_of("preset = \"github\"\nscopes = [\"a b\"]"), "providers[0].scopes");
    assert_eq!(
        key_of("preset = \"github\"\nauthorize_params = { state = \"x\" }"),
        "providers[0].authorize_params.state"
    );
    assert_eq!(
        key_of("preset = \"github\"\naccount_label = \"login\""),
        "providers[0].account_label"
    );
    let cases = [
        ("preset = \"gitlab\"\nrequire_iss = true", "require_iss"),
        ("preset = \"slack\"\ntokens_at = \"authed_user\"", "tokens_at"),
        ("preset = \"slack\"\ntokens_at = \"/\"", "tokens_at"),
        ("preset = \"github\"\nscope_param = \"state\"", "scope_param"),
        ("preset = \"github\"\nscope_param = \"a b\"", "scope_param"),
        (
            "preset = \"slack\"\nauthorize_params = { user_scope = \"x\" }",
            "authorize_params.user_scope",
        ),
        (
            "preset = \"slack\"\nauthorize_params = { scope = \"x\" }",
            "authorize_params.scope",
        ),
        ("preset = \"microsoft\"\nunlisted_scopes = [\"a b\"]", "unlisted_scopes"),
        (
            "preset = \"github\"\ntoken_refused_when = { pointer = \"error\", values = [\"x\"] }",
            "token_refused_when.pointer",
        ),
        (
            "preset = \"github\"\ntoken_refused_when = { pointer = \"/\", values = [\"x\"] }",
            "token_refused_when.pointer",
        ),
        (
            "preset = \"github\"\ntoken_refused_when = { pointer = \"/error\", values = [] }",
            "token_refused_when.values",
        ),
        (
            "preset = \"github\"\ntoken_refused_when = { pointer = \"/error\", values = [\"\"] }",
            "token_refused_when.values",
        ),
    ];
    for (extra, field) in cases {
        assert_eq!(key_of(extra), format!("providers[0].{field}"), "{extra}");
    }
}

#[test]
fn a_token_refusal_matches_the_value_at_its_pointer() {
    let provider = provider(
        "preset = \"github\"\ntoken_refused_when = { pointer = \"/error/code\", values = [\"190\", \"revoked\"] }",
    )
    .expect("provider");
    let refusal = provider.token_refused_when.expect("a refusal rule");
    assert!(refusal.matches(&serde_json::json!({"error": {"code": 190}})));
    assert!(refusal.matches(&serde_json::json!({"error": {"code": "revoked"}})));
    assert!(!refusal.matches(&serde_json::json!({"error": {"code": 4}})));
    assert!(!refusal.matches(&serde_json::json!({"error": "revoked"})));
    assert!(!refusal.matches(&serde_json::json!({"error": {"code": ["revoked"]}})));
    assert!(!refusal.matches(&serde_json::json!(["revoked"])));
}
