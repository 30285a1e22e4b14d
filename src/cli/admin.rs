//! `gatehouse admin`: the operator lists and ends users' connections, elicitations, sessions and
//! saved form values. Thin over the gate's `Operator` (which the `/admin` pages act through too),
//! which does the work as it is done for the user (revoking at the provider, waking the session's
//! streams, telling other replicas) and puts each change on the audit trail as an `admin` entry. Lists are bounded tables for people
//! or JSON lines for programs, and never show a secret: no tokens, no form values, and of a
//! session id (a bearer credential for the session) only its first characters.

use std::sync::Arc;

use anyhow::{Context, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Config;
use crate::audit::Audit;
use crate::domain::{ElicitationId, Principal, SessionId, SessionPrefix};
use crate::events::Bus;
use crate::gate::{self, Actor, Connections, Disconnected, Elicitations, Expiry, FormDeletion, FormValues, Operator};
use crate::metrics::Metrics;
use crate::public_url::PublicUrl;
use crate::state::{Core, Parsed};
use crate::store::{
    ConnectionOrder, ConnectionRecord, ConnectionStatus, ElicitationRecord, SessionRecord, Store, Window,
};

#[derive(Subcommand)]
pub(super) enum AdminCommand {
    /// Users' connections to providers.
    Connections {
        #[command(subcommand)]
        command: ConnectionsCommand,
    },
    /// Requests to users to sign in or fill in a form.
    Elicitations {
        #[command(subcommand)]
        command: ElicitationsCommand,
    },
    /// MCP sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Users' saved form values.
    Forms {
        #[command(subcommand)]
        command: FormsCommand,
    },
}

#[derive(Args)]
pub(super) struct ListOptions {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// At most this many rows.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    limit: u32,
}

#[derive(Subcommand)]
pub(super) enum ConnectionsCommand {
    /// Connections, by principal and provider (never a token).
    List {
        /// Only this principal's connections.
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        list: ListOptions,
    },
    /// Remove a connection and revoke it at the provider, as the user's `disconnect` does.
    Revoke {
        #[arg(long)]
        principal: String,
        /// The provider's id (`providers[].id`).
        #[arg(long)]
        provider: String,
    },
}

#[derive(Subcommand)]
pub(super) enum ElicitationsCommand {
    /// Elicitations, newest first.
    List {
        /// Only the pending ones.
        #[arg(long)]
        pending: bool,
        #[command(flatten)]
        list: ListOptions,
    },
    /// Expire a pending elicitation now; its client is told it is over.
    Expire {
        /// The elicitation's id (a UUID).
        id: String,
    },
}

#[derive(Subcommand)]
pub(super) enum SessionsCommand {
    /// Live sessions, newest first, each shown by the first 8 characters of its id.
    List {
        #[command(flatten)]
        list: ListOptions,
    },
    /// End a session and its streams on every replica; its client gets 404 afterwards.
    End {
        /// The 8 characters `admin sessions list` shows, or the whole session id (which may start
        /// with `-`: URL-safe base64).
        #[arg(allow_hyphen_values = true)]
        id: String,
    },
}

#[derive(Subcommand)]
pub(super) enum FormsCommand {
    /// Delete a principal's saved values of a form; the next call needing them asks again.
    Delete {
        #[arg(long)]
        principal: String,
        /// The form's id (`forms[].id`).
        #[arg(long)]
        form: String,
    },
}

/// The lists' columns, each the lowercase name of a field of their JSON lines.
const CONNECTION_HEADINGS: [&str; 7] = [
    "PRINCIPAL",
    "PROVIDER",
    "ACCOUNT",
    "STATE",
    "CONNECTED",
    "UPDATED",
    "SCOPES",
];
const ELICITATION_HEADINGS: [&str; 7] = [
    "ID",
    "PRINCIPAL",
    "STATUS",
    "CLIENT",
    "CREATED",
    "EXPIRES",
    "REQUIREMENT",
];
const SESSION_HEADINGS: [&str; 5] = ["SESSION", "PRINCIPAL", "PROTOCOL", "CREATED", "CLIENT"];

/// Entries of the caches this process keeps for the gate and the sessions: it serves no one.
const CACHE_CAPACITY: usize = 16;

/// What the commands act through: the gate's rooms and the sessions, as a replica builds them,
/// without serving, sweeping or listening.
struct Admin {
    store: Arc<dyn Store>,
    elicitations: Arc<Elicitations>,
    connections: Arc<Connections>,
    form_values: Arc<FormValues>,
    bus: Arc<Bus>,
    audit: Arc<Audit>,
    writer: JoinHandle<()>,
    shutdown: CancellationToken,
}

pub(super) async fn run(config: Config, command: AdminCommand) -> anyhow::Result<()> {
    let admin = Admin::open(&config).await?;
    let result = admin.dispatch(command).await;
    admin.close().await;
    result
}

impl Admin {
    async fn open(config: &Config) -> anyhow::Result<Self> {
        let parsed = Parsed::from_config(config)?;
        let database = super::open_database(config, 2).await?;
        let shutdown = CancellationToken::new();
        let (core, writer) = Core::wire(
            config,
            &parsed,
            &database,
            Arc::new(PublicUrl::new(&config.public_url())),
            Arc::new(Metrics::off()),
            CACHE_CAPACITY,
            shutdown.clone(),
        );
        Ok(Self {
            store: core.store,
            elicitations: core.elicitations,
            connections: core.connections,
            form_values: core.form_values,
            bus: core.bus,
            audit: core.audit,
            writer,
            shutdown,
        })
    }

    /// Writes the audit entries recorded, then stops the writer.
    async fn close(self) {
        self.audit.flush().await;
        self.shutdown.cancel();
        if self.writer.await.is_err() {
            tracing::warn!("the audit writer failed");
        }
    }

    async fn dispatch(&self, command: AdminCommand) -> anyhow::Result<()> {
        match command {
            AdminCommand::Connections { command } => match command {
                ConnectionsCommand::List { principal, list } => self.list_connections(principal, &list).await,
                ConnectionsCommand::Revoke { principal, provider } => {
                    self.revoke(&principal_arg(&principal)?, &provider).await
                }
            },
            AdminCommand::Elicitations { command } => match command {
                ElicitationsCommand::List { pending, list } => self.list_elicitations(pending, &list).await,
                ElicitationsCommand::Expire { id } => self.expire(&id).await,
            },
            AdminCommand::Sessions { command } => match command {
                SessionsCommand::List { list } => self.list_sessions(&list).await,
                SessionsCommand::End { id } => self.end_session(&id).await,
            },
            AdminCommand::Forms {
                command: FormsCommand::Delete { principal, form },
            } => self.delete_form(&principal_arg(&principal)?, &form).await,
        }
    }

    async fn list_connections(&self, principal: Option<String>, list: &ListOptions) -> anyhow::Result<()> {
        let principal = principal.as_deref().map(principal_arg).transpose()?;
        let connections = self
            .store
            .list_connections(
                principal.as_ref(),
                ConnectionOrder::Principal,
                Window::first(limit(list)),
            )
            .await?;
        if let Some(principal) = &principal
            && connections.is_empty()
        {
            bail!("{principal} has no connections");
        }
        print_list(list, &CONNECTION_HEADINGS, connections.iter().map(connection_json));
        Ok(())
    }

    async fn revoke(&self, principal: &Principal, provider: &str) -> anyhow::Result<()> {
        match self.operator().revoke(&Actor::shell(), principal, provider).await? {
            Disconnected::NothingConnected => bail!("{principal} has no connection to {provider}"),
            Disconnected::Revoked => println!("Removed {principal}'s connection to {provider} and revoked it there."),
            Disconnected::NoRevocation => println!(
                "Removed {principal}'s connection to {provider}; {provider} has no revocation endpoint, so the \
                 grant lives on there until the user removes it in {provider}'s settings."
            ),
            Disconnected::RevocationFailed => bail!(
                "removed {principal}'s connection to {provider}, but {provider} did not confirm revoking it \
                 (see the log); the user can remove the grant in {provider}'s settings"
            ),
        }
        Ok(())
    }

    async fn list_elicitations(&self, pending: bool, list: &ListOptions) -> anyhow::Result<()> {
        let elicitations = self
            .store
            .list_elicitations(pending, Window::first(limit(list)))
            .await?;
        print_list(list, &ELICITATION_HEADINGS, elicitations.iter().map(elicitation_json));
        Ok(())
    }

    async fn expire(&self, id: &str) -> anyhow::Result<()> {
        let Ok(id) = id.parse::<ElicitationId>() else {
            bail!("{id:?} is not an elicitation id (a UUID, as `admin elicitations list` shows)");
        };
        match self.operator().expire(&Actor::shell(), &id).await? {
            Expiry::Unknown => bail!("no elicitation {id}"),
            Expiry::NotPending(status) => bail!("elicitation {id} is {} already", status.as_str()),
            Expiry::EndedMeanwhile => bail!("elicitation {id} ended meanwhile"),
            Expiry::Expired(elicitation) => println!("Expired elicitation {id} of {}.", elicitation.principal),
        }
        Ok(())
    }

    async fn list_sessions(&self, list: &ListOptions) -> anyhow::Result<()> {
        let sessions = self.store.list_sessions(None, Window::first(limit(list))).await?;
        print_list(list, &SESSION_HEADINGS, sessions.iter().map(session_json));
        Ok(())
    }

    async fn end_session(&self, id: &str) -> anyhow::Result<()> {
        let id = self.session_id(id).await?;
        let Some(session) = self.operator().end_session(&Actor::shell(), &id).await? else {
            bail!("no session {}", id.prefix());
        };
        println!("Ended session {} of {}.", id.prefix(), session.principal);
        Ok(())
    }

    /// The session `text` names: a whole id, or the start `admin sessions list` shows.
    async fn session_id(&self, text: &str) -> anyhow::Result<SessionId> {
        if let Ok(id) = text.parse::<SessionId>() {
            return Ok(id);
        }
        let Ok(prefix) = text.parse::<SessionPrefix>() else {
            bail!("{text:?} is not a session (the 8 characters `admin sessions list` shows, or the whole id)");
        };
        let mut found = self.store.sessions_with_prefix(&prefix, 2).await?;
        match (found.pop(), found.is_empty()) {
            (Some(id), true) => Ok(id),
            (Some(_), false) => bail!("several sessions start with {prefix}; give the whole session id"),
            (None, _) => bail!("no session {prefix}"),
        }
    }

    async fn delete_form(&self, principal: &Principal, form: &str) -> anyhow::Result<()> {
        match self.operator().delete_form(&Actor::shell(), principal, form).await? {
            FormDeletion::UnknownForm => bail!("no form {form:?} is configured (forms[].id)"),
            FormDeletion::NothingSaved => bail!("{principal} has no saved values for form {form}"),
            FormDeletion::Deleted => println!("Deleted {principal}'s values for form {form}."),
        }
        Ok(())
    }

    /// What the changes go through: the gate's rooms, as the pages' `/admin` changes do.
    fn operator(&self) -> Operator<'_> {
        Operator {
            store: &*self.store,
            bus: &self.bus,
            elicitations: &self.elicitations,
            connections: &self.connections,
            form_values: &self.form_values,
            audit: &self.audit,
        }
    }
}

fn principal_arg(text: &str) -> anyhow::Result<Principal> {
    Principal::parse(text).context("--principal")
}

fn limit(list: &ListOptions) -> usize {
    usize::try_from(list.limit).unwrap_or(usize::MAX)
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Each object as a JSON line, or its values (in `headings`' order) as a table row.
fn print_list(list: &ListOptions, headings: &[&str], objects: impl Iterator<Item = Value>) {
    let objects: Vec<Value> = objects.collect();
    if list.json {
        for object in &objects {
            println!("{object}");
        }
        return;
    }
    let rows: Vec<Vec<String>> = objects.iter().map(|object| cells(headings, object)).collect();
    print!("{}", super::table::table(headings, &rows));
}

/// The object's fields named by `headings` (lowercased), as text; `-` for null.
fn cells(headings: &[&str], object: &Value) -> Vec<String> {
    headings
        .iter()
        .map(|heading| match &object[heading.to_ascii_lowercase()] {
            Value::Null => "-".to_owned(),
            Value::String(text) => text.clone(),
            Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map_or_else(|| item.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" "),
            other => other.to_string(),
        })
        .collect()
}

/// What a connection shows: never its tokens.
fn connection_json(c: &ConnectionRecord) -> Value {
    json!({
        "principal": c.principal.as_str(),
        "provider": c.provider,
        "account": c.account_label,
        "state": match c.status {
            ConnectionStatus::Active => "active",
            ConnectionStatus::Broken => "broken",
        },
        "connected": time(c.created_at),
        "updated": time(c.updated_at),
        "scopes": c.scopes,
    })
}

/// What an elicitation shows: not its call-scoped detail, which holds the model's arguments.
fn elicitation_json(e: &ElicitationRecord) -> Value {
    json!({
        "id": e.id.to_string(),
        "principal": e.principal.as_str(),
        "status": e.status.as_str(),
        "client": e.client_name,
        "created": time(e.created_at),
        "expires": time(e.expires_at),
        "requirement": e.requirement,
    })
}

/// What a session shows: the start of its id only.
fn session_json(s: &SessionRecord) -> Value {
    json!({
        "session": s.id.prefix().to_string(),
        "principal": s.principal.as_str(),
        "protocol": s.protocol_version,
        "created": time(s.created_at),
        "client": gate::client_name(s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_row_follows_its_headings() {
        let object = json!({ "principal": "alice", "scopes": ["repo", "read:user"], "account": null });
        assert_eq!(
            cells(&["PRINCIPAL", "ACCOUNT", "SCOPES"], &object),
            ["alice", "-", "repo read:user"]
        );
    }

    #[test]
    fn a_session_shows_only_the_start_of_its_id() {
        let id = SessionId::generate();
        let shown = id.prefix().to_string();
        assert_eq!(shown.len(), crate::domain::SESSION_PREFIX_LEN);
        assert!(id.to_string().starts_with(&shown));
        assert!(shown.parse::<SessionPrefix>().is_ok());
        assert!(id.to_string().parse::<SessionPrefix>().is_err());
    }
}
