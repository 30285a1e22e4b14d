//! Upstream tool catalogues: round trips and the changes other replicas receive.

use super::*;

fn catalogue(upstream: &str, tools: Value, listed_by: Option<&str>, listed_at: DateTime<Utc>) -> CatalogueRecord {
    CatalogueRecord {
        upstream: upstream.into(),
        digest: CatalogueRecord::digest_of(&tools),
        tools,
        offers: json!({}),
        listed_by: listed_by.map(|who| Principal::parse(who).expect("principal")),
        listed_at,
    }
}

fn search_tool(description: &str) -> Value {
    json!([{
        "name": "search",
        "description": description,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "annotations": {"readOnlyHint": true},
    }])
}

backend_test!(
    /// A catalogue reads back as saved; saving it again unchanged is no change but records who
    /// listed it last and when; a changed one replaces it; every upstream's is listed.
    async fn upstream_catalogues_round_trip(backend: Backend) {
        let (_database, store) = open(backend).await;
        assert!(store.catalogues().await.expect("list").is_empty());
        assert!(store.catalogue("github").await.expect("load").is_none());

        let first = catalogue("github", search_tool("Search issues"), Some("Ada Lovelace"), now());
        assert!(
            store.save_catalogue(&first).await.expect("save"),
            "nothing was stored: a change"
        );
        assert_eq!(store.catalogue("github").await.expect("load"), Some(first.clone()));

        let later = now() + Duration::minutes(5);
        let relisted = catalogue("github", search_tool("Search issues"), None, later);
        assert_eq!(relisted.digest, first.digest);
        assert!(
            !store.save_catalogue(&relisted).await.expect("save again"),
            "same digest: no change"
        );
        let stored = store.catalogue("github").await.expect("load").expect("stored");
        assert_eq!(stored, relisted, "who listed it and when are updated anyway");

        let changed = catalogue(
            "github",
            search_tool("Search issues and pull requests"),
            Some("bob"),
            later,
        );
        assert_ne!(changed.digest, first.digest);
        assert!(store.save_catalogue(&changed).await.expect("save changed"));
        assert_eq!(store.catalogue("github").await.expect("load"), Some(changed.clone()));

        // Resources and prompts listed with the tools are stored with them and count as a change.
        let mut offering = changed.clone();
        offering.offers = json!({"resources": [{"uri": "repo://a/README", "name": "README"}], "prompts": []});
        offering.digest = CatalogueRecord::digest_of_listing(&offering.tools, &offering.offers);
        assert_ne!(offering.digest, changed.digest);
        assert!(store.save_catalogue(&offering).await.expect("save with offers"));
        assert_eq!(store.catalogue("github").await.expect("load"), Some(offering.clone()));
        let changed = offering;

        let notes = catalogue("notes", json!([]), None, now());
        assert!(store.save_catalogue(&notes).await.expect("save another"));
        assert_eq!(store.catalogues().await.expect("list"), vec![changed, notes]);
        assert!(store.catalogue("linear").await.expect("load").is_none());
    }
);

/// The next upstream id a catalogue subscriber receives.
async fn next_change(changes: &mut tokio::sync::broadcast::Receiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), changes.recv())
        .await
        .expect("a catalogue change in time")
        .expect("subscribed")
}

postgres_test!(
    /// A changed catalogue saved through one replica reaches the catalogue subscribers of another
    /// through its bus; an unchanged one announces nothing.
    async fn a_changed_catalogue_reaches_other_replicas() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let saving = store::connect(&database.url, 2).await.expect("connect");
        saving.store.migrate().await.expect("migrate");
        let other = store::connect(&database.url, 2)
            .await
            .expect("connect the other replica");
        let bus = Arc::new(Bus::new(
            other.store.clone(),
            Arc::new(SessionCache::new(4)),
            Arc::new(ConnectionCache::new(4)),
            false,
        ));
        let mut changes = bus.subscribe_catalogues();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let listening = tokio::spawn(events::listen_postgres(
            other.postgres.clone().expect("a PostgreSQL pool"),
            bus.clone(),
            Arc::new(gatehouse::metrics::Metrics::off()),
            shutdown.clone(),
        ));
        // Once listening, the bus asks for a full reload (it may have missed changes before).
        assert_eq!(next_change(&mut changes).await, EVERY_UPSTREAM);

        let store = &saving.store;
        let github = catalogue("github", search_tool("Search issues"), Some("alice"), now());
        assert!(store.save_catalogue(&github).await.expect("save"));
        assert_eq!(next_change(&mut changes).await, "github");
        let unchanged = catalogue("github", search_tool("Search issues"), Some("bob"), now());
        assert!(!store.save_catalogue(&unchanged).await.expect("save unchanged"));

        let notes = catalogue("notes", json!([]), None, now());
        assert!(store.save_catalogue(&notes).await.expect("save another"));
        assert_eq!(
            next_change(&mut changes).await,
            "notes",
            "the unchanged save announced nothing: the next notice is the one after it"
        );

        bus.catalogue_changed("local");
        assert_eq!(next_change(&mut changes).await, "local");
        shutdown.cancel();
        listening.await.expect("the listener ends");
    }
);
