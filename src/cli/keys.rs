//! `gatehouse keys rotate` and `gatehouse keys status`: the operator's side of key rotation. The
//! work is the gate's (`gate::rekey`); this module parses the options and prints progress, counts
//! and advice, naming keys by their fingerprint and their place in `[secrets] keys`.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::Config;
use crate::gate::rekey::{self, KeyStatus, RotateOptions, Sealer, Tally};
use crate::store::{SealedTable, Store};
use crate::vault::{KeyId, KeyRing};

/// The most rows a batch may hold.
const MAX_BATCH: u64 = 10_000;

#[derive(Subcommand)]
pub(super) enum KeysCommand {
    /// Re-encrypt every stored secret under the first key of `[secrets] keys`, in batches; safe
    /// while replicas serve, and resumable: run it again to carry on.
    Rotate {
        /// Rows per batch (1 to 10000).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH))]
        batch_size: u64,
        /// A pause after each batch (`200ms`, `1s`), to spread the load on the database.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        pause: Duration,
    },
    /// How many stored rows each key still protects, per table: remove an old key from
    /// `[secrets] keys` once it protects none.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn run(config: Config, command: KeysCommand) -> anyhow::Result<()> {
    let vault = crate::state::key_ring(&config).context("secrets")?;
    let store = super::open_database(&config, 2).await?.store;
    match command {
        KeysCommand::Rotate { batch_size, pause } => {
            let options = RotateOptions {
                batch_size: usize::try_from(batch_size).unwrap_or(1),
                pause,
            };
            rotate(store.as_ref(), &vault, options).await
        }
        KeysCommand::Status { json } => {
            let status = rekey::status(store.as_ref(), &vault).await?;
            if json {
                println!("{}", status_json(&status));
            } else {
                print!("{}", status_table(&status));
            }
            Ok(())
        }
    }
}

async fn rotate(store: &dyn Store, vault: &KeyRing, options: RotateOptions) -> anyhow::Result<()> {
    let ids = vault.key_ids();
    let Some((first, older)) = ids.split_first() else {
        bail!("secrets.keys is empty");
    };
    if older.is_empty() {
        println!(
            "Nothing to do: secrets.keys has one key ({first}), so there is no older key to rotate away from. \
             To rotate: put a new key (`gatehouse generate-key`) first in secrets.keys with the current one \
             after it, restart every replica, then run `gatehouse keys rotate` again."
        );
        return Ok(());
    }
    let older: Vec<String> = older
        .iter()
        .enumerate()
        .map(|(i, id)| format!("{id} (secrets.keys[{}])", i + 1))
        .collect();
    println!(
        "Re-encrypting under {first} (secrets.keys[0]), away from {}; batches of {}",
        older.join(", "),
        options.batch_size
    );
    let total = rekey::rotate(store, vault, options, |table, batch| {
        println!("{}: {}", table.name(), describe(batch));
    })
    .await
    .context("rotation stopped (run it again to carry on)")?;
    println!("Done: {}.", describe(&total));
    if total.unopened > 0 || total.busy > 0 {
        bail!(
            "{} rows were left as they are: {} no configured key opens, {} kept changing. \
             Run `gatehouse keys status` to see which keys they are under, and `gatehouse keys rotate` again.",
            total.unopened + total.busy,
            total.unopened,
            total.busy
        );
    }
    println!("`gatehouse keys status` shows what each key still protects.");
    Ok(())
}

/// "3 rows re-encrypted, 1 read again after a change" and so on, leaving out what is zero.
fn describe(tally: &Tally) -> String {
    let noun = if tally.resealed == 1 { "row" } else { "rows" };
    let mut parts = vec![format!("{} {noun} re-encrypted", tally.resealed)];
    if tally.reread > 0 {
        parts.push(format!("{} read again after a replica changed them", tally.reread));
    }
    if tally.unopened > 0 {
        parts.push(format!("{} no configured key opens (left as they are)", tally.unopened));
    }
    if tally.busy > 0 {
        parts.push(format!("{} kept changing (left for the next run)", tally.busy));
    }
    parts.join(", ")
}

/// The fingerprint and where the key is configured.
fn name(sealer: Sealer) -> (String, String) {
    match sealer {
        Sealer::Key(id, Some(0)) => (id.to_string(), "secrets.keys[0] (encrypts)".into()),
        Sealer::Key(id, Some(index)) => (id.to_string(), format!("secrets.keys[{index}]")),
        Sealer::Key(id, None) => (id.to_string(), "unknown key".into()),
        Sealer::UnknownFormat => ("-".into(), "unknown format".into()),
    }
}

fn total(rows: &[(SealedTable, u64)]) -> u64 {
    rows.iter().map(|(_, n)| n).sum()
}

/// One line per key, a column per table, then what the operator can do.
fn status_table(status: &KeyStatus) -> String {
    let mut out = format!("{:<10} {:<28}", "KEY", "CONFIGURED AS");
    for table in SealedTable::ALL {
        out.push_str(&format!(" {:>12}", table.name()));
    }
    out.push_str(&format!(" {:>8}\n", "total"));
    for (sealer, rows) in &status.sealers {
        let (fingerprint, configured) = name(*sealer);
        out.push_str(&format!("{fingerprint:<10} {configured:<28}"));
        for (_, count) in rows {
            out.push_str(&format!(" {count:>12}"));
        }
        out.push_str(&format!(" {:>8}\n", total(rows)));
    }
    for (sealer, rows) in &status.sealers {
        let count = total(rows);
        match sealer {
            Sealer::Key(id, Some(index)) if *index > 0 && count == 0 => out.push_str(&format!(
                "{id} (secrets.keys[{index}]) protects nothing stored: it can be removed from secrets.keys.\n"
            )),
            Sealer::Key(id, Some(index)) if *index > 0 => out.push_str(&format!(
                "{id} (secrets.keys[{index}]) still protects {count} rows: run `gatehouse keys rotate`.\n"
            )),
            Sealer::Key(id, None) => out.push_str(&format!(
                "{count} rows are sealed by {id}, which is not in secrets.keys: they cannot be opened.\n"
            )),
            Sealer::UnknownFormat => out.push_str(&format!(
                "{count} rows hold values in a format gatehouse does not write.\n"
            )),
            Sealer::Key(_, Some(_)) => {}
        }
    }
    out
}

fn status_json(status: &KeyStatus) -> Value {
    let keys: Vec<Value> = status
        .sealers
        .iter()
        .map(|(sealer, rows)| {
            let (fingerprint, configured): (Option<KeyId>, Option<usize>) = match sealer {
                Sealer::Key(id, index) => (Some(*id), *index),
                Sealer::UnknownFormat => (None, None),
            };
            let tables: serde_json::Map<String, Value> = rows
                .iter()
                .map(|(table, n)| (table.name().to_owned(), json!(n)))
                .collect();
            json!({
                "fingerprint": fingerprint.map(|id| id.to_string()),
                "configured": configured.map(|index| format!("secrets.keys[{index}]")),
                "encrypts": configured == Some(0),
                "rows": tables,
                "total": total(rows),
            })
        })
        .collect();
    json!({ "keys": keys })
}
