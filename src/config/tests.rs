//! Unit tests of loading: defaults, the environment layer, `env:` references, and refusals that
//! name their key.

use super::*;

fn load(file: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, file).expect("write config");
    let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Config::load(ConfigSource {
        file: Some(&path),
        env: &env,
    })
}

fn key_of(error: ConfigError) -> String {
    match error {
        ConfigError::Key { key, .. } => key,
        other => panic!("expected a key error, got {other}"),
    }
}

#[test]
fn no_file_gives_the_embedded_default() {
    let config = Config::load(ConfigSource {
        file: None,
        env: &BTreeMap::new(),
    })
    .expect("default config");
    assert_eq!(config.server.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(config.database.url.expose(), "sqlite://gatehouse.db");
    assert_eq!(config.identity.mode, IdentityMode::Local);
    assert_eq!(config.public_url().as_str(), "http://127.0.0.1:8080/");
    assert_eq!(config.elicitation.without_url_mode, WithoutUrlMode::Link);
}

#[test]
fn clients_without_url_mode_may_be_refused_instead() {
    let config = load("[elicitation]\nwithout_url_mode = \"error\"\n", &[]).expect("config");
    assert_eq!(config.elicitation.without_url_mode, WithoutUrlMode::Error);
    let config = load("[elicitation]\nwithout_url_mode = \"link\"\n", &[]).expect("config");
    assert_eq!(config.elicitation.without_url_mode, WithoutUrlMode::Link);
}

#[test]
fn environment_overrides_file_and_types_follow_the_key() {
    let config = load(
        "[server]\nbind = \"127.0.0.1:9000\"\n[database]\nmax_connections = 3\n",
        &[
            ("GATEHOUSE_SERVER__BIND", "127.0.0.1:9100"),
            ("GATEHOUSE_DATABASE__MAX_CONNECTIONS", "7"),
            (
                "GATEHOUSE_SERVER__ALLOWED_ORIGINS",
                "https://a.example, https://b.example",
            ),
            ("GATEHOUSE_DATABASE__URL", "postgres://u:p@db/gatehouse"),
            (
                "GATEHOUSE_SECRETS__KEYS",
                "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleS0=",
            ),
        ],
    )
    .expect("config");
    assert_eq!(config.server.bind.port(), 9100);
    assert_eq!(config.database.max_connections, 7);
    assert_eq!(
        config.server.allowed_origins,
        vec!["https://a.example", "https://b.example"]
    );
    assert_eq!(config.database.url.expose(), "postgres://u:p@db/gatehouse");
    assert_eq!(
        config.secrets.keys.len(),
        1,
        "a list key takes one value from the environment"
    );
}

#[test]
fn postgres_needs_configured_keys() {
    let error = load("[database]\nurl = \"postgres://db/gatehouse\"\n", &[]).unwrap_err();
    assert_eq!(key_of(error), "secrets.keys");
}

#[test]
fn env_references_are_resolved_and_missing_ones_name_the_key() {
    let file = "[database]\nurl = \"env:GH_TEST_DB\"\n";
    let config = load(file, &[("GH_TEST_DB", "sqlite://x.db")]).expect("config");
    assert_eq!(config.database.url.expose(), "sqlite://x.db");
    let error = load(file, &[]).expect_err("missing variable");
    assert!(error.to_string().contains("GH_TEST_DB"), "{error}");
    assert_eq!(key_of(error), "database.url");
}

#[test]
fn bad_values_name_their_key() {
    for (file, key) in [
        ("[server]\nbind = \"nowhere\"\n", "server.bind"),
        ("[server]\nsse_keep_alive = \"soon\"\n", "server.sse_keep_alive"),
        (
            "[server]\nrequest_body_timeout = \"0s\"\n",
            "server.request_body_timeout",
        ),
        ("[server]\nbnid = \"x\"\n", "server.bnid"),
        ("[database]\nurl = \"mysql://x\"\n", "database.url"),
        (
            "[server]\nallowed_origins = [\"https://ok.example\", \"not a url\"]\n",
            "server.allowed_origins[1]",
        ),
        (
            "[[tools]]\nname = \"t\"\n[tools.http]\nurl = \"http://x\"\ntimeout = 5\n",
            "tools[0].http.timeout",
        ),
        (
            "[mcp]\nmax_sessions_per_principal = 0\n",
            "mcp.max_sessions_per_principal",
        ),
        (
            "[limits]\nheld_retries_per_principal = 0\n",
            "limits.held_retries_per_principal",
        ),
        (
            "[elicitation]\nmax_pending_per_principal = 0\n",
            "elicitation.max_pending_per_principal",
        ),
        ("[elicitation]\nretention = \"10m\"\n", "elicitation.retention"),
        (
            "[elicitation]\nwithout_url_mode = \"form\"\n",
            "elicitation.without_url_mode",
        ),
        (
            "[telemetry]\notlp_endpoint = \"grpc://127.0.0.1:4318\"\n",
            "telemetry.otlp_endpoint",
        ),
        ("[telemetry]\nservice_name = \" \"\n", "telemetry.service_name"),
    ] {
        assert_eq!(key_of(load(file, &[]).unwrap_err()), key, "{file}");
    }
}

#[test]
fn local_identity_is_refused_off_loopback() {
    let error = load(
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(key_of(error), "identity.mode");
    let error = load("[server]\nbind = \"0.0.0.0:8080\"\n", &[]).unwrap_err();
    assert_eq!(key_of(error), "server.public_url");
}

#[test]
fn public_url_may_carry_a_path_prefix_and_nothing_else() {
    let file = |url: &str| format!("[server]\nbind = \"127.0.0.1:8080\"\npublic_url = \"{url}\"\n");
    let config = load(&file("https://tools.example.com/gatehouse/"), &[]).expect("config");
    assert_eq!(config.public_url().as_str(), "https://tools.example.com/gatehouse");
    let config = load(
        "",
        &[("GATEHOUSE_SERVER__PUBLIC_URL", "http://localhost:8080/gatehouse")],
    )
    .expect("config");
    assert_eq!(config.public_url().as_str(), "http://localhost:8080/gatehouse");
    for refused in [
        "https://tools.example.com/gatehouse?x=1",
        "https://tools.example.com/gatehouse#x",
        "https://tools.example.com/a/../gatehouse",
        "https://tools.example.com/a%2Fb",
        "https://tools.example.com//gatehouse",
    ] {
        let error = load(&file(refused), &[]).unwrap_err();
        assert_eq!(key_of(error), "server.public_url", "{refused}");
    }
}

#[test]
fn header_identity_needs_trusted_proxies() {
    let base =
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n[identity]\nmode = \"header\"\n";
    assert_eq!(key_of(load(base, &[]).unwrap_err()), "server.trusted_proxies");
    let config = load(
        base,
        &[("GATEHOUSE_SERVER__TRUSTED_PROXIES", "10.0.0.0/8,127.0.0.1/32")],
    )
    .expect("config");
    assert_eq!(config.server.trusted_proxies.len(), 2);
}

#[test]
fn unreadable_and_malformed_files_say_so() {
    let missing = Config::load(ConfigSource {
        file: Some(Path::new("/nonexistent/g.toml")),
        env: &BTreeMap::new(),
    });
    assert!(matches!(missing, Err(ConfigError::Read { .. })));
    assert!(matches!(load("[server\n", &[]), Err(ConfigError::Syntax { .. })));
}

#[test]
fn conformance_fixtures_are_refused_by_a_build_without_them() {
    let loaded = load("[mcp]\nconformance_fixtures = true\n", &[]);
    if cfg!(feature = "conformance") {
        assert!(loaded.expect("config").mcp.conformance_fixtures);
    } else {
        assert_eq!(key_of(loaded.unwrap_err()), "mcp.conformance_fixtures");
    }
    assert!(
        !load("", &[]).expect("config").mcp.conformance_fixtures,
        "off by default"
    );
}

#[test]
fn the_otlp_endpoint_comes_from_the_environment_too() {
    let config = load("", &[("GATEHOUSE_TELEMETRY__OTLP_ENDPOINT", "http://127.0.0.1:4318")]).expect("config");
    let endpoint = config.telemetry.otlp_endpoint.expect("an endpoint");
    assert_eq!(endpoint.as_str(), "http://127.0.0.1:4318/");
    assert_eq!(config.telemetry.service_name, "gatehouse");
    let error = load("", &[("GATEHOUSE_TELEMETRY__OTLP_ENDPOINT", "127.0.0.1:4318")]).unwrap_err();
    assert_eq!(key_of(error), "telemetry.otlp_endpoint");
}

#[test]
fn approvals_are_checked_and_every_requirement_names_one() {
    const APPROVAL: &str =
        "[[approvals]]\nid = \"payments\"\ntitle = \"Payment approval\"\napprovers = { principal = [\"bob\"] }\n";
    const TOOL: &str =
        "[[tools]]\nname = \"pay\"\nrequires = [\"approval:payments\"]\nhttp = { url = \"https://pay.example.com\" }\n";
    let config = load(&format!("{APPROVAL}{TOOL}"), &[]).expect("config");
    assert_eq!(config.approvals[0].quorum, 1);
    assert_eq!(config.approvals[0].ttl, Duration::from_secs(3600));
    assert_eq!(config.approvals[0].max_argument_bytes, 65536);
    let refused = [
        (format!("{APPROVAL}quorum = 0\n"), "approvals[0].quorum"),
        (format!("{APPROVAL}ttl = \"8d\"\n"), "approvals[0].ttl"),
        (format!("{APPROVAL}max_argument_bytes = 0\n"), "approvals[0].max_argument_bytes"),
        (format!("{APPROVAL}notify = {{ webhook = \"ftp://x\" }}\n"), "approvals[0].notify.webhook"),
        (format!("{APPROVAL}notify = {{ secret = \"s\" }}\n"), "approvals[0].notify"),
        (APPROVAL.replace("approvers = { principal = [\"bob\"] }", "approvers = {}"), "approvals[0].approvers"),
        (APPROVAL.replace("Payment approval", " "), "approvals[0].title"),
        (format!("{APPROVAL}{APPROVAL}"), "approvals[1].id"),
        (TOOL.to_owned(), "tools[0].requires[0]"),
        (
            "[[upstreams]]\nid = \"u\"\nurl = \"https://u.example.com/mcp\"\n[[upstreams.overrides]]\ntool = \"t\"\nrequires = [\"approval:nope\"]\n".to_owned(),
            "upstreams[0].overrides[0].requires[0]",
        ),
    ];
    for (file, key) in refused {
        assert_eq!(key_of(load(&file, &[]).expect_err(key)), key, "{file}");
    }
}

#[test]
fn a_rule_naming_a_claim_the_identity_mode_never_carries_is_refused() {
    const TOOL: &str = "[[tools]]\nname = \"t\"\nhttp = { url = \"https://t.example.com\" }\n";
    const HEADER: &str = "[identity]\nmode = \"header\"\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    let local = format!("{TOOL}{TOOL}{TOOL}allow = {{ groups = [\"eng\"] }}\n");
    let error = load(&local, &[]).expect_err("local mode carries no groups");
    assert!(
        error.to_string().contains("carries only the claims principal"),
        "{error}"
    );
    assert_eq!(key_of(error), "tools[2].allow.groups");
    let header = format!("{HEADER}{TOOL}allow = {{ email = [\"*@acme.com\"] }}\n");
    let error = load(&header, &[]).expect_err("no email header");
    assert!(error.to_string().contains("identity.email_header"), "{error}");
    assert_eq!(key_of(error), "tools[0].allow.email");
    let admin = format!("{HEADER}[admin]\nallow = {{ department = [\"ops\"] }}\n");
    assert_eq!(
        key_of(load(&admin, &[]).expect_err("no such claim")),
        "admin.allow.department"
    );
    let with_groups = header.replace("mode = \"header\"\n", "mode = \"header\"\nemail_header = \"X-Email\"\n");
    load(&with_groups, &[]).expect("the email header carries email");
    load(&format!("{TOOL}allow = {{ principal = [\"local\"] }}\n"), &[]).expect("every mode carries principal");
}

#[test]
fn rule_principals_are_normalised_and_collisions_refused() {
    const HEADER: &str = "[identity]\nmode = \"header\"\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
    const APPROVAL: &str = "[[approvals]]\nid = \"p\"\ntitle = \"P\"\n";
    let config = load(
        &format!("{HEADER}{APPROVAL}approvers = {{ principal = [\" Bob \", \"ＣＡＲＯＬ\"] }}\n"),
        &[],
    )
    .expect("config");
    assert_eq!(config.approvals[0].approvers["principal"], ["bob", "carol"]);
    let colliding = format!("{HEADER}{APPROVAL}approvers = {{ principal = [\"dave\", \"erin\", \"Dave\"] }}\n");
    let error = load(&colliding, &[]).expect_err("Dave and dave are one");
    assert!(
        error.to_string().contains("`dave` and `Dave` are one principal"),
        "{error}"
    );
    assert_eq!(key_of(error), "approvals[0].approvers.principal");
    let oauth = "[identity]\nmode = \"oauth\"\nissuer = \"https://idp.example.com\"\nclient_id = \"g\"\n";
    let config = load(
        &format!("{oauth}{APPROVAL}approvers = {{ principal = [\"https://idp.example.com#Dave\", \"https://idp.example.com#dave\"] }}\n"),
        &[],
    )
    .expect("oauth subs are case-sensitive");
    assert_eq!(
        config.approvals[0].approvers["principal"],
        ["https://idp.example.com#Dave", "https://idp.example.com#dave"]
    );
}
