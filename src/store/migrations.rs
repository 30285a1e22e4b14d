//! The schema's migrations, embedded in the binary: one list of names for both backends' folders
//! (`migrations/postgres`, `migrations/sqlite`), each file's text compiled in. Written out here
//! instead of `sqlx::migrate!` because that macro is sqlx's `macros` feature, which builds sqlx's
//! PostgreSQL and SQLite drivers a second time for the compiler (about a tenth of a cold build).
//! The checksum each migration records is sqlx's own over the same bytes, so databases migrated
//! by the macro's build carry on. A test keeps the list equal to the folders.

use std::sync::LazyLock;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// Each migration's version and name, as its file is named (`0001_sessions.sql`), and its text on
/// PostgreSQL and on SQLite.
macro_rules! migrations {
    ($($version:literal $name:literal),+ $(,)?) => {
        const MIGRATIONS: &[(i64, &str, &str, &str)] = &[$((
            $version,
            $name,
            include_str!(concat!("../../migrations/postgres/", $name, ".sql")),
            include_str!(concat!("../../migrations/sqlite/", $name, ".sql")),
        )),+];
    };
}

migrations! {
    1 "0001_sessions",
    2 "0002_elicitations",
    3 "0003_forms",
    4 "0004_bounds",
    5 "0005_upstreams",
    6 "0006_browser_sessions",
    7 "0007_audit",
    8 "0008_leases",
    9 "0009_upstream_offers",
    10 "0010_oauth_registrations",
    11 "0011_approval_votes",
    12 "0012_elicitations_by_ask",
    13 "0013_principal_forms",
    14 "0014_issuers",
    15 "0015_call_bindings",
}

/// The migrations of PostgreSQL's folder.
pub static POSTGRES: LazyLock<Migrator> = LazyLock::new(|| migrator(|(_, _, postgres, _)| postgres));

/// The migrations of SQLite's folder.
pub static SQLITE: LazyLock<Migrator> = LazyLock::new(|| migrator(|(_, _, _, sqlite)| sqlite));

fn migrator(sql: fn(&(i64, &str, &'static str, &'static str)) -> &'static str) -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|migration| {
                let (version, name, ..) = *migration;
                let text = sql(migration);
                // As sqlx's folder reader names it: the file name after the version, words apart.
                let description = name.split_once('_').map_or(name, |(_, rest)| rest).replace('_', " ");
                let no_tx = text.starts_with("-- no-transaction");
                Migration::new(
                    version,
                    description.into(),
                    MigrationType::Simple,
                    text.into_sql_str(),
                    no_tx,
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// Every file of both folders is in the list, under its own version, and nothing else is.
    #[test]
    fn the_list_is_the_folders() {
        for folder in ["migrations/postgres", "migrations/sqlite"] {
            let mut files: Vec<String> = std::fs::read_dir(folder)
                .expect("the migrations folder")
                .map(|entry| entry.expect("an entry").file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let listed: Vec<String> = MIGRATIONS.iter().map(|(_, name, ..)| format!("{name}.sql")).collect();
            assert_eq!(files, listed, "{folder}");
        }
        for (version, name, ..) in MIGRATIONS {
            assert_eq!(name[..4].parse::<i64>().ok(), Some(*version), "{name}");
        }
    }
}
