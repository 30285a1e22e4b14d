//! Stored principals in the identity mode's normal form: the one-off rewrite of the rows written
//! before principals were normalised where they enter (run wherever migrations run), and the
//! collisions it leaves apart for `doctor` to report. Two stored principals that one normal form
//! joins (`Dave` and `dave`) are never merged: their rows keep their old names until the operator
//! removes one user's, and the next start renames the other's.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::domain::PrincipalForm;

/// Every column holding a principal, by table.
pub(super) const PRINCIPAL_COLUMNS: [(&str, &str); 9] = [
    ("sessions", "principal"),
    ("elicitations", "principal"),
    ("oauth_flows", "principal"),
    ("connections", "principal"),
    ("form_values", "principal"),
    ("browser_sessions", "principal"),
    ("audit", "principal"),
    ("approval_votes", "approver"),
    ("upstream_catalogues", "listed_by"),
];

/// What a rewrite did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Normalised {
    /// Stored principals renamed to their normal form.
    pub renamed: usize,
    /// Stored principals left as they are because others share their normal form.
    pub collisions: Vec<Collision>,
}

/// Stored principals (two or more) that are one in the normal form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub normal: String,
    pub stored: Vec<String>,
}

#[async_trait]
pub trait PrincipalStore: Send + Sync {
    /// Every principal some row holds, once each.
    async fn stored_principals(&self) -> Result<Vec<String>, StoreError>;

    /// Rewrites stored principals to `form`, once per form (a form already applied does nothing),
    /// in one transaction that a concurrent replica waits for; with collisions left, the form is
    /// not recorded, so a later start tries again.
    async fn normalise_principals(&self, form: PrincipalForm) -> Result<Normalised, StoreError>;
}

/// Which stored principals are renamed (old, new), and which collide: grouped by normal form, a
/// group of one not yet normal is renamed; a group of several is left as it is.
pub fn plan(stored: impl IntoIterator<Item = String>, form: PrincipalForm) -> (Vec<(String, String)>, Vec<Collision>) {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for principal in stored {
        groups.entry(form.normal(&principal)).or_default().push(principal);
    }
    let (mut renames, mut collisions) = (Vec::new(), Vec::new());
    for (normal, mut stored) in groups {
        stored.sort();
        stored.dedup();
        match <[String; 1]>::try_from(stored) {
            Ok([only]) if only == normal => {}
            Ok([only]) => renames.push((only, normal)),
            Err(stored) => collisions.push(Collision { normal, stored }),
        }
    }
    (renames, collisions)
}

/// Applies the backend's pending migrations, then rewrites stored principals to `form`: what
/// `serve` (with `database.migrate_on_start`) and `gatehouse migrate` do.
pub async fn migrate(store: &dyn Store, form: PrincipalForm) -> Result<(), StoreError> {
    store.migrate().await?;
    let done = store.normalise_principals(form).await?;
    if done.renamed > 0 {
        tracing::info!(renamed = done.renamed, %form, "stored principals rewritten to the normal form");
    }
    for collision in &done.collisions {
        tracing::warn!(
            normal = %collision.normal,
            stored = ?collision.stored,
            "stored principals are one user in the normal form; their rows are kept apart until one \
             user's are removed (`gatehouse doctor` lists them)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_per_normal_form_is_renamed_and_colliding_names_are_left() {
        let stored = ["Carol", "carol2", "Dave", "dave", "ＤＡＶＥ", "erin", "erin"].map(str::to_owned);
        let (renames, collisions) = plan(stored, PrincipalForm::Folded);
        assert_eq!(renames, [("Carol".to_owned(), "carol".to_owned())]);
        assert_eq!(
            collisions,
            [Collision {
                normal: "dave".into(),
                stored: vec!["Dave".into(), "dave".into(), "ＤＡＶＥ".into()],
            }]
        );
        let (renames, collisions) = plan(["Dave".to_owned(), "dave".to_owned()], PrincipalForm::Exact);
        assert!(renames.is_empty() && collisions.is_empty());
    }
}
