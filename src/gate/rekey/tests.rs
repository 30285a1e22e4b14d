//! Unit tests of the rotation on a SQLite file: a row a replica rewrites between the rotation's
//! read and its compare-and-swap keeps the replica's value, re-sealed; the counts follow.

use chrono::Utc;
use serde_json::json;
use sqlx::Connection;

use super::*;
use crate::gate::testing::principal;
use crate::store::{FormStore, FormValuesRecord, SqliteStore};

const OLD: &str = "b2xkLWtleS1mb3ItdGhlLXJla2V5LXVuaXQtdGVzdHM=";
const NEW: &str = "bmV3LWtleS1mb3ItdGhlLXJla2V5LXVuaXQtdGVzdHM=";

fn ring(keys: &[&str]) -> KeyRing {
    let keys: Vec<Secret<String>> = keys.iter().map(|k| Secret::new((*k).to_owned())).collect();
    KeyRing::from_keys(&keys).expect("key ring")
}

async fn save(store: &SqliteStore, name: &str, secrets: Vec<u8>) {
    let record = FormValuesRecord {
        principal: principal(name),
        form: "key".into(),
        fields: json!({}),
        secrets: Some(secrets),
        created_at: Utc::now(),
        updated_at: Utc::now(),
    };
    store
        .save_form_values(&record, None, &json!({}), Utc::now())
        .await
        .expect("save");
}

fn context(name: &str) -> String {
    user_form_context(&principal(name), "key")
}

#[tokio::test]
async fn a_row_a_replica_rewrote_meanwhile_is_read_again_and_keeps_its_write() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
    let store = SqliteStore::connect(&url, 1).await.expect("store");
    store.migrate().await.expect("migrate");
    let (old, rotated) = (ring(&[OLD]), ring(&[NEW, OLD]));
    for name in ["p1", "p2"] {
        save(&store, name, old.encrypt(b"first", &context(name))).await;
    }

    // The rotation's first update of p1 finds that a replica (still sealing with the old key)
    // saved p1 again since the rotation read it: the trigger writes that value and drops the
    // rotation's update, as a compare-and-swap that lost would.
    let mut replica = sqlx::SqliteConnection::connect(&url).await.expect("connect");
    sqlx::query("CREATE TABLE replica_write (principal TEXT PRIMARY KEY, secrets BLOB NOT NULL)")
        .execute(&mut replica)
        .await
        .expect("table");
    sqlx::query("INSERT INTO replica_write VALUES ('p1', ?1)")
        .bind(old.encrypt(b"replica", &context("p1")))
        .execute(&mut replica)
        .await
        .expect("insert");
    sqlx::query(
        "CREATE TRIGGER replica_writes_first BEFORE UPDATE OF secrets ON form_values
         WHEN EXISTS (SELECT 1 FROM replica_write WHERE principal = OLD.principal)
         BEGIN
             UPDATE form_values SET secrets = (SELECT secrets FROM replica_write WHERE principal = OLD.principal)
                 WHERE principal = OLD.principal AND form = OLD.form;
             DELETE FROM replica_write WHERE principal = OLD.principal;
             SELECT RAISE(IGNORE);
         END",
    )
    .execute(&mut replica)
    .await
    .expect("trigger");

    let options = RotateOptions {
        batch_size: 10,
        pause: Duration::ZERO,
    };
    let mut batches = Vec::new();
    let total = rotate(&store, &rotated, options, |table, batch| batches.push((table, *batch)))
        .await
        .expect("rotate");
    let expected = Tally {
        resealed: 2,
        reread: 1,
        unopened: 0,
        busy: 0,
    };
    assert_eq!(total, expected);
    assert_eq!(
        batches,
        vec![(SealedTable::FormValues, expected)],
        "one batch; empty tables print none"
    );

    let new_id = rotated.key_ids()[0];
    for (name, plaintext) in [("p1", &b"replica"[..]), ("p2", b"first")] {
        let stored = store
            .form_values(&principal(name), "key")
            .await
            .expect("read")
            .and_then(|values| values.secrets)
            .expect("secrets");
        assert_eq!(KeyId::of(&stored), Some(new_id), "{name} is sealed by the new key");
        let opened = ring(&[NEW])
            .decrypt(&stored, &context(name))
            .expect("the new key alone opens it");
        assert_eq!(opened, plaintext, "{name}: the replica's write is kept");
    }

    let counted = status(&store, &rotated).await.expect("status");
    let form_values = |at: usize| {
        counted.sealers[at]
            .1
            .iter()
            .find(|(table, _)| *table == SealedTable::FormValues)
            .map(|(_, rows)| *rows)
    };
    assert_eq!(counted.sealers.len(), 2, "{counted:?}");
    assert_eq!(counted.sealers[0].0, Sealer::Key(new_id, Some(0)));
    assert_eq!((form_values(0), form_values(1)), (Some(2), Some(0)));
}

#[tokio::test]
async fn a_registrations_secret_is_resealed_and_a_public_client_is_left_alone() {
    use crate::store::{RegistrationRecord, RegistrationStore};
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
    let store = SqliteStore::connect(&url, 1).await.expect("store");
    store.migrate().await.expect("migrate");
    let (old, rotated) = (ring(&[OLD]), ring(&[NEW, OLD]));
    let (issuer, redirect_uri) = ("https://auth.example.com", "https://gh.example.com/oauth/callback");
    let context = registration_context(issuer, redirect_uri);
    for (issuer, secret) in [
        (issuer, Some(old.encrypt(b"client-secret", &context))),
        ("https://public.example.com", None),
    ] {
        let record = RegistrationRecord {
            issuer: issuer.into(),
            redirect_uri: redirect_uri.into(),
            client_id: "client".into(),
            client_secret: secret,
            auth_method: "client_secret_basic".into(),
            registered_at: Utc::now(),
        };
        store.save_registration(&record).await.expect("save");
    }
    let options = RotateOptions {
        batch_size: 10,
        pause: Duration::ZERO,
    };
    let total = rotate(&store, &rotated, options, |_, _| {}).await.expect("rotate");
    assert_eq!(total.resealed, 1, "{total:?}");
    let stored = store
        .registration(issuer, redirect_uri)
        .await
        .expect("read")
        .and_then(|r| r.client_secret)
        .expect("a secret");
    assert_eq!(KeyId::of(&stored), Some(rotated.key_ids()[0]));
    assert_eq!(
        ring(&[NEW])
            .decrypt(&stored, &context)
            .expect("the new key alone opens it"),
        b"client-secret"
    );
    let public = store
        .registration("https://public.example.com", redirect_uri)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(public.client_secret, None);
}
