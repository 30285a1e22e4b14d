//! The store contract: the same behaviour from the PostgreSQL and the SQLite implementation, one
//! module a subject; the helpers they share are here.

#[path = "../common/mod.rs"]
mod common;

mod catalogues;
mod connections;
mod forms;
mod limits;
mod notices;
mod plans;
mod sessions;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use common::records::{answer, elicitation, notification, now, open, session};
use common::{Backend, TestDatabase};
use gatehouse::domain::{ElicitationId, LogLevel, Principal, SessionId};
use gatehouse::events::{self, Bus, EVERY_UPSTREAM};
use gatehouse::store::{
    self, AskKey, AskScope, CatalogueRecord, ClientAction, ConnectionCache, ConnectionRecord, ConnectionStatus,
    ElicitationRecord, ElicitationStatus, Ending, FormValuesRecord, NOTIFY_CHANNEL, Notice, RefreshLease,
    RefreshedTokens, SealedTable, SessionCache, SessionRecord, Store, StoreError,
};
use serde_json::{Value, json};
use sqlx::postgres::PgListener;

/// Caps the contract tests stay far below, except where a test is about them.
const SESSION_CAP: usize = 64;
const PENDING_CAP: usize = 32;

fn ask<'a>(
    principal: &'a Principal,
    session: &'a SessionId,
    requirement: &'a str,
    call_key: Option<&'a str>,
) -> AskKey<'a> {
    AskKey {
        principal,
        scope: AskScope::Session(session),
        requirement,
        call_key,
    }
}

fn ending<'a>(elicitation: &'a ElicitationId, notification: &'a Value, at: DateTime<Utc>) -> Ending<'a> {
    Ending {
        elicitation,
        notification,
        at,
    }
}

fn connection(principal: &Principal, at: DateTime<Utc>) -> ConnectionRecord {
    ConnectionRecord {
        principal: principal.clone(),
        provider: "github".into(),
        issuer: Some("https://github.com".into()),
        access_token: vec![1, 2, 3],
        refresh_token: None,
        expires_at: None,
        scopes: vec!["repo".into()],
        account_label: None,
        status: ConnectionStatus::Active,
        created_at: at,
        updated_at: at,
    }
}

fn principal(name: &str) -> Principal {
    Principal::parse(name).expect("principal")
}

/// A new session of `owner` with a stored pending elicitation.
async fn asked(store: &Arc<dyn Store>, owner: &str, requirement: &str, call_key: Option<&str>) -> ElicitationRecord {
    let record = session(owner);
    store
        .create_session(&record, SESSION_CAP)
        .await
        .expect("create session");
    store
        .insert_elicitation(&elicitation(&record, requirement, call_key), PENDING_CAP)
        .await
        .expect("insert elicitation")
        .expect("under the cap")
}

fn values(owner: &str, form: &str, fields: Value, secrets: Option<Vec<u8>>, at: DateTime<Utc>) -> FormValuesRecord {
    FormValuesRecord {
        principal: principal(owner),
        form: form.into(),
        fields,
        secrets,
        created_at: at,
        updated_at: at,
    }
}

async fn events_of(store: &Arc<dyn Store>, session: &SessionId) -> Vec<Value> {
    let events = store
        .events_after(session, 0, 100)
        .await
        .expect("events")
        .expect("the session");
    events.into_iter().map(|e| e.message).collect()
}

async fn status_of(store: &Arc<dyn Store>, id: &ElicitationId) -> ElicitationStatus {
    store.elicitation(id).await.expect("load").expect("exists").status
}
