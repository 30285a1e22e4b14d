//! What the binaries run: parses the command line and configuration, sets up logging and traces,
//! then serves (over HTTP, or over stdin/stdout with `stdio`), migrates, checks the configuration,
//! makes a key, prints the configuration's schema or reference, rotates keys (`keys`), prints the audit trail (`audit`), acts on users' access
//! (`admin`) or checks a deployment (`doctor`). `gatehouse` and the test-only `gatehouse-conformance` are both
//! [`binary!`](crate::binary) around [`main`].

mod admin;
mod audit;
mod doctor;
mod keys;
mod logging;
mod stdio;
mod table;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{ConfigError, ConfigSource, LogFormat};
use crate::store::StoreError;
use crate::{App, AppState, Config};
use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

pub use logging::log_filter_of;

#[derive(Parser)]
#[command(
    // The package is gatehouse-mcp (crates.io's `gatehouse` is another crate); the command is not.
    name = "gatehouse",
    version,
    about = "An MCP server that gates tools behind sign-ins and forms in the user's browser"
)]
struct Cli {
    /// Configuration file (TOML). Without one, gatehouse runs on its embedded default, and
    /// serves the demo tools (local identity, loopback).
    #[arg(long, global = true, env = "GATEHOUSE_CONFIG")]
    config: Option<PathBuf>,
    /// `serve`'s options, also taken without a command (`serve` is the default).
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Args, Clone, Copy, Default)]
struct ServeArgs {
    /// Without a configuration file, serve no demo tools (whoami and disconnect only).
    #[arg(long)]
    no_demo: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (the default). Without a configuration file it also serves a demo set of
    /// tools (`demo_...`), gone with a configuration or `--no-demo`.
    Serve(ServeArgs),
    /// Serve one local client over stdin/stdout (MCP's stdio transport), with the browser pages
    /// on a loopback listener (`server.bind`). Needs `identity.mode = "local"`.
    Stdio,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Validate the configuration and exit.
    CheckConfig,
    /// Print a new random key for `[secrets] keys` (base64, 32 bytes).
    GenerateKey,
    /// Print the configuration file's JSON Schema, for editors (taplo, Even Better TOML); the
    /// book keeps it as docs/src/reference/gatehouse.schema.json.
    ConfigSchema,
    /// Print the configuration reference (Markdown): every key with its type, default,
    /// environment variable and example; the book keeps it as docs/src/reference/configuration.md.
    ConfigReference,
    /// Key rotation: re-encrypt stored secrets under the first key, and see what each key protects.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Print the audit trail, newest first.
    Audit(audit::AuditArgs),
    /// List and end users' connections, elicitations, sessions and saved form values.
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Check a deployment: configuration, database and migrations, the key ring, every provider
    /// and upstream, and that `server.public_url` reaches this instance. Exits 1 on any problem.
    Doctor {
        /// Print JSON instead of one line per check.
        #[arg(long)]
        json: bool,
    },
}

/// The whole program; its exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Some(Command::GenerateKey)) {
        println!("{}", crate::vault::KeyRing::generate_key());
        return ExitCode::SUCCESS;
    }
    if let Some(command @ (Command::ConfigSchema | Command::ConfigReference)) = &cli.command {
        let schema = crate::config::schema::schema();
        if matches!(command, Command::ConfigSchema) {
            print!("{}", crate::config::reference::schema_text(&schema));
        } else {
            print!("{}", crate::config::reference::markdown(&schema));
        }
        return ExitCode::SUCCESS;
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let loaded = Config::load(ConfigSource {
        file: cli.config.as_deref(),
        env: &env,
    });
    if let Some(Command::Doctor { json }) = cli.command {
        // A configuration that does not load is one of doctor's findings, not a reason to stop.
        logging::init(loaded.as_ref().map_or(LogFormat::Text, |config| config.log.format));
        return match runtime() {
            Ok(runtime) => runtime.block_on(doctor::run(loaded, json)),
            Err(code) => code,
        };
    }
    let mut config = match loaded {
        Ok(config) => config,
        Err(error) => {
            eprintln!("gatehouse: {error}");
            return ExitCode::from(2);
        }
    };
    if matches!(cli.command, Some(Command::CheckConfig)) {
        logging::init(config.log.format);
        // What the file says is checked as a whole here, so its errors exit like loading errors.
        return match check_config(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("gatehouse: {}", report(&error));
                ExitCode::from(2)
            }
        };
    }
    let command = cli.command.unwrap_or(Command::Serve(ServeArgs::default()));
    if let Command::Serve(args) = &command
        && crate::demo::applies(cli.config.as_deref(), args.no_demo || cli.serve.no_demo, &config)
        && let Err(error) = crate::demo::add_to(&mut config)
    {
        eprintln!("gatehouse: {error}");
        return ExitCode::FAILURE;
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let telemetry = match &config.telemetry.otlp_endpoint {
        Some(endpoint) => {
            let _entered = runtime.enter();
            match logging::init_with_traces(config.log.format, &config.telemetry, endpoint) {
                Ok(telemetry) => Some(telemetry),
                Err(error) => {
                    eprintln!("gatehouse: {}", report(&error));
                    return ExitCode::FAILURE;
                }
            }
        }
        None => {
            logging::init(config.log.format);
            None
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Serve(_) => serve(config).await,
            Command::Stdio => stdio::run(config, shutdown_signal()).await,
            Command::Migrate => migrate(config).await,
            Command::Keys { command } => keys::run(config, command).await,
            Command::Audit(args) => audit::run(config, args).await,
            Command::Admin { command } => admin::run(config, command).await,
            Command::CheckConfig
            | Command::GenerateKey
            | Command::ConfigSchema
            | Command::ConfigReference
            | Command::Doctor { .. } => Ok(()),
        }
    });
    // Before the runtime stops: the exporter's gRPC channel runs on it.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    // Without waiting for blocking threads: `stdio` reads stdin on one, which a signal leaves
    // blocked until the next input.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let message = report(&error);
            tracing::error!("{message}");
            eprintln!("gatehouse: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A command's failure as the operator reads it: what it was doing, then why, each cause once
/// (the message of a typed error below often quotes its source already).
fn report(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|error| {
        eprintln!("gatehouse: cannot start the async runtime: {error}");
        ExitCode::FAILURE
    })
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let bind = config.server.bind;
    let shutdown = CancellationToken::new();
    let (app, tasks) = App::build(config, shutdown.clone()).await?;
    let state = &app.state;
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let public_url = state.public_url.origin();
    let mcp_url = state.public_url.at(crate::routes::MCP);
    tracing::info!(%bind, %public_url, database = ?state.store.backend(), "gatehouse listening; MCP endpoint {mcp_url}");
    if state.config.demo.is_some() {
        tracing::info!(
            "no configuration file: serving the demo tools (demo_...) beside whoami and disconnect; \
             a configuration file (--config) or --no-demo turns them off"
        );
    }
    let metrics = match state.config.server.metrics_bind {
        Some(metrics_bind) => Some(serve_metrics_apart(metrics_bind, state.clone(), shutdown.clone())?),
        None => None,
    };
    crate::serve(listener, app, shutdown_signal())
        .await
        .context("server error")?;
    shutdown.cancel();
    for task in tasks {
        let _ = task.await;
    }
    if let Some(metrics) = metrics
        && tokio::task::spawn_blocking(move || metrics.join()).await.is_err()
    {
        tracing::warn!("the metrics listener's thread failed");
    }
    tracing::info!("gatehouse stopped");
    Ok(())
}

/// The metrics listener (`server.metrics_bind`) on a thread and runtime of its own, so a scrape
/// is not queued behind the MCP requests a loaded replica's runtime is busy with. It stops when
/// `shutdown` is cancelled.
fn serve_metrics_apart(
    bind: SocketAddr,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let listener = std::net::TcpListener::bind(bind)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .with_context(|| format!("cannot listen on {bind} (server.metrics_bind)"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the metrics listener's runtime")?;
    tracing::info!(metrics_bind = %bind, "metrics at http://{bind}/metrics");
    std::thread::Builder::new()
        .name("gatehouse-metrics".into())
        .spawn(move || {
            runtime.block_on(async move {
                let served = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => crate::serve_metrics(listener, state, shutdown.cancelled_owned()).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = served {
                    tracing::error!(%error, "the metrics listener failed");
                }
            });
        })
        .context("cannot start the metrics listener's thread")
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    let database = crate::store::connect(config.database.url.expose(), 1).await?;
    crate::store::principals::migrate(&*database.store, config.identity.mode.principal_form()).await?;
    database.store.check_ready().await?;
    println!("migrations applied ({:?})", database.store.backend());
    Ok(())
}

/// The configured database for an operator's command, refused unless it is migrated (naming the
/// command that migrates it).
async fn open_database(config: &Config, max_connections: u32) -> anyhow::Result<crate::store::Database> {
    let database = crate::store::connect(config.database.url.expose(), max_connections).await?;
    database.store.check_ready().await.map_err(NotMigrated)?;
    Ok(database)
}

/// The database is not ready for an operator's command: its message says how to make it so.
#[derive(Debug, thiserror::Error)]
#[error("{0} (`gatehouse migrate` applies the migrations)")]
struct NotMigrated(#[source] StoreError);

fn check_config(config: Config) -> anyhow::Result<()> {
    check_parts(&config)?;
    // Here, not in `check_parts`: doctor checks each program as a finding of its own.
    crate::upstreams::command::check_all(&config)?;
    if !config.secrets.keys.is_empty() {
        crate::vault::KeyRing::from_keys(&config.secrets.keys)?;
    }
    println!("configuration is valid");
    Ok(())
}

/// What start builds from the configuration besides the key ring and the database: providers,
/// forms, tools, upstreams, templates and identity.
fn check_parts(config: &Config) -> Result<(), ConfigError> {
    let providers = crate::providers::Providers::from_config(config)?;
    let forms = crate::forms::Forms::from_config(&config.forms)?;
    crate::tools::ToolRegistry::from_config(config, &providers, &forms, reqwest::Client::new())?;
    crate::upstreams::Upstreams::parse(config, &providers, &forms)?;
    crate::web::templates::Templates::load(config.server.template_dir.as_deref())?;
    crate::identity::Identity::from_config(config, reqwest::Client::new())?;
    Ok(())
}

/// Completes at SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::*;

    #[test]
    fn a_failure_reads_as_what_was_being_done_then_why() {
        let error = Err::<(), _>(std::io::Error::other("address in use"))
            .context("cannot listen on 127.0.0.1:8080")
            .expect_err("failed");
        assert_eq!(report(&error), "cannot listen on 127.0.0.1:8080: address in use");
    }

    #[test]
    fn a_cause_its_message_already_quotes_is_not_repeated() {
        let error = anyhow::Error::new(NotMigrated(StoreError::Migrate(
            sqlx::migrate::MigrateError::VersionMissing(3),
        )));
        assert_eq!(
            report(&error),
            "migration error: migration 3 was previously applied but is missing in the resolved migrations \
             (`gatehouse migrate` applies the migrations)"
        );
    }
}
