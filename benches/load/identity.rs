//! Section "identity": `whoami` at N clients with header identity, then with MCP authorization
//! (each client a bearer JWT from a fake identity provider on loopback, verified against its
//! keys), back to back on the same machine and database; every client is a principal of its own.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::fake_idp::{FakeIdp, FakeIdpOptions, TestUser};
use super::{Database, Era, Options, Target, Who, call_load, local, report, start_gatehouse, wait_until_up};

pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    for i in 0..options.clients {
        idp.add_user(TestUser {
            sub: format!("bench-{i}"),
            name: format!("Bench User {i}"),
            email: format!("bench-{i}@bench.test"),
            groups: vec!["bench".to_owned()],
        });
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    println!(
        "\n## whoami by identity mode at {} concurrent clients ({} s measured after {} s warm-up)\n",
        options.clients,
        options.duration.as_secs(),
        options.warmup.as_secs()
    );
    println!("| identity | calls/s | p50 ms | p99 ms | calls | errors |\n|---|---|---|---|---|---|");

    let header_config = dir.path().join("header.toml");
    std::fs::write(
        &header_config,
        include_str!("../../tests/fixtures/header_identity.toml"),
    )
    .map_err(|e| e.to_string())?;
    let header = run(options, database, &header_config, |_| Who::Users("bench-identity-")).await?;
    report("header (X-Forwarded-User)", &header);

    let oauth_config = dir.path().join("oauth.toml");
    let config = format!(
        "[identity]\nmode = \"oauth\"\nissuer = \"{}\"\nscopes = [\"mcp\"]\nclient_id = \"gatehouse\"\n",
        idp.issuer()
    );
    std::fs::write(&oauth_config, config).map_err(|e| e.to_string())?;
    let bearer = run(options, database, &oauth_config, |audience| {
        let tokens = (0..options.clients)
            .map(|i| idp.access_token(&format!("bench-{i}"), audience, "mcp"))
            .collect();
        Who::Bearer(Arc::new(tokens))
    })
    .await?;
    report("oauth (bearer JWT, RS256)", &bearer);
    let ratio = (bearer.calls as f64 / bearer.seconds) / (header.calls as f64 / header.seconds);
    println!(
        "\nbearer / header throughput: {ratio:.2}; the provider's keys were fetched {} time(s)",
        idp.stats().jwks_fetches
    );
    Ok(())
}

/// A gatehouse on `config` under the load; `who` gets its audience (its own `/mcp` URL).
async fn run(
    options: &Options,
    database: &Database,
    config: &Path,
    who: impl FnOnce(&str) -> Who,
) -> Result<super::LoadResult, String> {
    let port = local::free_port();
    let public = format!("http://127.0.0.1:{port}");
    let mut gatehouse = start_gatehouse(&database.url, port, Some((config, &public)))?;
    wait_until_up(&format!("{public}/healthz")).await?;
    let url = format!("{public}/mcp");
    let target = Target {
        name: "whoami",
        who: who(&url),
        url,
        tool: "whoami",
        method: "tools/call",
        arguments: json!({}),
        era: Era::Handshake,
    };
    let result = call_load(&target, options.clients, options.warmup, options.duration).await;
    let _ = gatehouse.kill().await;
    result
}
