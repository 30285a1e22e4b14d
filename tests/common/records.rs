//! For tests that write through the store's API: a migrated store of its own, and records as the
//! store takes them (a session, a pending elicitation, a call-scoped answer, a completion
//! notification, and now at the precision both backends keep).

use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use gatehouse::domain::{ElicitationId, Principal, ProtocolVersion, SessionId};
use gatehouse::store::{self, ElicitationRecord, ElicitationStatus, FormAnswerRecord, SessionRecord, Store};
use serde_json::{Value, json};

use super::{Backend, TestDatabase};

/// A database of its own, migrated, and the store on it.
pub async fn open(backend: Backend) -> (TestDatabase, Arc<dyn Store>) {
    let database = TestDatabase::new(backend).await;
    let store = store::connect(&database.url, 4).await.expect("connect").store;
    store.migrate().await.expect("migrate");
    (database, store)
}

pub fn session(principal: &str) -> SessionRecord {
    SessionRecord {
        id: SessionId::generate(),
        principal: Principal::parse(principal).expect("principal"),
        protocol_version: ProtocolVersion::new("2025-11-25"),
        client_info: json!({"name": "test-client", "version": "1.0"}),
        client_capabilities: json!({"elicitation": {"url": {}}}),
        log_level: None,
        created_at: Utc::now(),
    }
}

/// Now, at the millisecond: the precision both backends keep, so stored times compare equal.
pub fn now() -> DateTime<Utc> {
    Utc.timestamp_millis_opt(Utc::now().timestamp_millis())
        .single()
        .expect("now")
}

/// A pending elicitation asked in `session`, expiring in ten minutes.
pub fn elicitation(session: &SessionRecord, requirement: &str, call_key: Option<&str>) -> ElicitationRecord {
    let at = now();
    ElicitationRecord {
        id: ElicitationId::generate(),
        principal: session.principal.clone(),
        session_id: session.id.clone(),
        requirement: requirement.into(),
        status: ElicitationStatus::Pending,
        message: "Please fill in the form.".into(),
        url: "https://gatehouse.test/connect/x".into(),
        client_name: "test-client".into(),
        created_at: at,
        expires_at: at + Duration::minutes(10),
        completed_at: None,
        call_key: call_key.map(str::to_owned),
        detail: call_key.map(|key| format!("Run the tool with call {key}")),
        bound: None,
    }
}

pub fn answer(to: &ElicitationRecord, fields: Value, secrets: Option<Vec<u8>>) -> FormAnswerRecord {
    FormAnswerRecord {
        elicitation_id: to.id,
        fields,
        secrets,
        created_at: now(),
    }
}

pub fn notification(n: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"n": n}})
}
