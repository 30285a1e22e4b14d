//! How the stores find what a gated call looks up: through an index, never by reading a whole
//! table that grows with every elicitation. The statement below is the lookup of the store's
//! `take_unreported_decline` and `take_unreported_expiry`, which every gated call makes.

use sqlx::Connection;

use super::*;

/// The rows a gated call looks for: its ask's newest ending that no call has reported yet.
const UNREPORTED_ENDING: &str = "SELECT id FROM elicitations
    WHERE principal = 'alice' AND session_id = 'session' AND requirement = 'github:repo'
        AND call_key IS NOT DISTINCT FROM NULL AND status = 'declined' AND NOT reported
    ORDER BY completed_at DESC LIMIT 1";

backend_test!(
    async fn an_asks_unreported_ending_is_found_through_an_index(backend: Backend) {
        let (database, _store) = open(backend).await;
        let plan = match backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&database.url).await.expect("connect");
                // Without an index to use, PostgreSQL still reads the table; with one, it must use it.
                sqlx::query("SET enable_seqscan = off")
                    .execute(&mut conn)
                    .await
                    .expect("set");
                let lines: Vec<String> =
                    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {UNREPORTED_ENDING}")))
                        .fetch_all(&mut conn)
                        .await
                        .expect("explain");
                lines.join("\n")
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&database.url).await.expect("connect");
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {UNREPORTED_ENDING}")))
                        .fetch_all(&mut conn)
                        .await
                        .expect("explain");
                rows.into_iter()
                    .map(|(_, _, _, detail)| detail)
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        assert!(
            plan.contains("elicitations_ask"),
            "not through the ask's index:\n{plan}"
        );
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("SCAN elicitations"),
            "reads the whole table:\n{plan}"
        );
    }
);
