//! `gatehouse stdio`: one local client over stdin/stdout, the browser pages on a loopback
//! listener. The listener is `server.bind`, which `local` identity keeps on loopback (port 0
//! picks a free port); unless `server.public_url` says otherwise, links point at the port taken.
//! Only `identity.mode = "local"` is served: the user is whoever started the process.

use std::future::Future;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::config::IdentityMode;
use crate::identity::{Caller, Identity};
use crate::{App, Config};

pub async fn run(mut config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    if !matches!(config.identity.mode, IdentityMode::Local) {
        bail!("gatehouse stdio serves the one user at this machine: it needs identity.mode = \"local\"");
    }
    let bind = config.server.bind;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind} (server.bind)"))?;
    config.server.bind = listener
        .local_addr()
        .with_context(|| format!("cannot read the address of {bind}"))?;
    let stopped = CancellationToken::new();
    let (app, tasks) = App::build(config, stopped.clone()).await?;
    let state = &app.state;
    let Identity::Local(principal) = &*state.identity else {
        bail!("the identity is not local");
    };
    let caller = Caller::named(principal.clone());
    // Stdout is the protocol's: the address goes to stderr, where the logs go too.
    eprintln!(
        "gatehouse: pages at {}{}",
        state.public_url.origin(),
        state.public_url.prefix()
    );
    tracing::info!(bind = %state.config.server.bind, database = ?state.store.backend(), "gatehouse serving MCP over stdio");
    let pages = tokio::spawn(crate::serve_pages(
        listener,
        app.clone(),
        stopped.clone().cancelled_owned(),
    ));
    let served = crate::mcp::stdio::serve(&app.mcp, caller, tokio::io::stdin(), tokio::io::stdout(), shutdown).await;
    stopped.cancel();
    match pages.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "the pages listener failed"),
        Err(error) => tracing::warn!(%error, "the pages listener's task failed"),
    }
    for task in tasks {
        let _ = task.await;
    }
    served.context("stdio")
}
