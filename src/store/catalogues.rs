//! Upstream catalogues: what each upstream MCP server answered to tools/list (and to the resource
//! and prompt lists), persisted so replicas share it and a restart keeps it. The record, its
//! digest, and the store trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::domain::Principal;

/// One upstream MCP server's tool catalogue as last listed.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogueRecord {
    pub upstream: String,
    /// The `tools` array the upstream answered to tools/list (all pages), unprefixed.
    pub tools: Value,
    /// What else it offers, unprefixed: an object with `resources`, `resourceTemplates` and
    /// `prompts` arrays and the `capabilities` it declared; `{}` for an upstream offering only tools.
    pub offers: Value,
    /// [`CatalogueRecord::digest_of`] `tools` and `offers`; equal digests mean an unchanged catalogue.
    pub digest: String,
    /// The principal whose credentials listed it (None: listed without credentials).
    pub listed_by: Option<Principal>,
    pub listed_at: DateTime<Utc>,
}

impl CatalogueRecord {
    /// The digest of a `tools` array: hex SHA-256 of its JSON as serde_json writes a [`Value`],
    /// which is canonical enough: no insignificant whitespace, and object keys sorted, since
    /// serde_json's `preserve_order` feature is off in this build (the unit test below fails if
    /// a dependency ever turns it on). Array order counts: a reordered catalogue is a change.
    pub fn digest_of(tools: &Value) -> String {
        hex::encode(Sha256::digest(tools.to_string().as_bytes()))
    }

    /// The digest of a listing: of `tools` alone when it offers nothing else (the digest stored
    /// before upstreams' other offers were listed), else of both.
    pub fn digest_of_listing(tools: &Value, offers: &Value) -> String {
        if offers.as_object().is_none_or(serde_json::Map::is_empty) {
            return Self::digest_of(tools);
        }
        Self::digest_of(&Value::Array(vec![tools.clone(), offers.clone()]))
    }
}

/// Upstream catalogues: one per upstream, replaced whenever it is listed again.
#[async_trait]
pub trait CatalogueStore: Send + Sync {
    /// Every stored catalogue, ordered by upstream id.
    async fn catalogues(&self) -> Result<Vec<CatalogueRecord>, StoreError>;

    async fn catalogue(&self, upstream: &str) -> Result<Option<CatalogueRecord>, StoreError>;

    /// Upserts. Returns true when the digest differs from the stored one (or none was stored);
    /// then, on PostgreSQL, in the same statement, NOTIFY the other replicas with
    /// `Notice::CatalogueChanged(upstream)`. An unchanged digest still updates listed_by/listed_at.
    /// Concurrent saves of one upstream take turns, each comparing with what the one before it
    /// stored; two first saves of an upstream racing may both return true.
    async fn save_catalogue(&self, record: &CatalogueRecord) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_digest_ignores_key_order_and_whitespace_but_not_content() {
        let tools = json!([{"name": "search", "inputSchema": {"type": "object", "properties": {}}}]);
        let reordered: Value =
            serde_json::from_str(r#"[ { "inputSchema" : { "properties": {}, "type": "object" }, "name": "search" } ]"#)
                .expect("json");
        let digest = CatalogueRecord::digest_of(&tools);
        assert_eq!(digest.len(), 64);
        assert!(digest.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(
            CatalogueRecord::digest_of(&reordered),
            digest,
            "object keys are sorted (serde_json's preserve_order is off)"
        );
        let changed = json!([{"name": "search", "inputSchema": {"type": "object", "properties": {"q": {}}}}]);
        assert_ne!(CatalogueRecord::digest_of(&changed), digest);
        assert_ne!(CatalogueRecord::digest_of(&json!([])), digest);
        assert_eq!(
            CatalogueRecord::digest_of(&json!([])),
            // SHA-256 of "[]".
            "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
        );
    }
}
