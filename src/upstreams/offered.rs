//! The upstreams' resources, templates and prompts as gatehouse serves them beside its own: the
//! lists a caller may see, the upstream that owns a URI or a prompt's name, the capabilities they
//! add up to, and a request forwarded to its owner on the user's session.

use std::sync::{Arc, PoisonError};

use serde_json::Value;

use super::Upstreams;
use super::offers::{Declared, Offers, original_uri};
pub use super::request::{Forwarded, Request};
use super::upstream::Upstream;
use crate::domain::{Principal, SessionId};
use crate::gate::Credentials;
use crate::identity::Claims;
use crate::secret::Secret;

/// One of the lists an upstream offers beside tools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum List {
    Resources,
    Templates,
    Prompts,
}

/// The upstream that owns a URI or a prompt, and the upstream's own name for it.
pub struct Owner {
    pub upstream: Arc<Upstream>,
    pub name: String,
}

impl Upstream {
    /// Whether a caller with these claims may see and use what the upstream offers.
    pub fn permits(&self, claims: &Claims) -> bool {
        self.access.as_ref().is_none_or(|access| access.permits(claims))
    }
}

impl Upstreams {
    /// What `f` makes of each upstream's offers, in configuration order.
    fn each_offers<T>(&self, mut f: impl FnMut(&Arc<Upstream>, &Offers) -> T) -> Vec<T> {
        let catalogues = self.core.catalogues.read().unwrap_or_else(PoisonError::into_inner);
        self.core
            .upstreams
            .iter()
            .filter_map(|u| catalogues.get(&u.id).map(|c| f(u, &c.offers)))
            .collect()
    }

    /// Every upstream's `list` that a caller with `claims` may see, in configuration order.
    pub fn offered(&self, list: List, claims: &Claims) -> Vec<Value> {
        self.each_offers(|upstream, offers| {
            if !upstream.permits(claims) {
                return Vec::new();
            }
            match list {
                List::Resources => offers.resources.clone(),
                List::Templates => offers.templates.clone(),
                List::Prompts => offers.prompts.clone(),
            }
        })
        .into_iter()
        .flatten()
        .collect()
    }

    /// What the upstreams offer altogether, as far as their listings tell.
    pub fn declared(&self) -> Declared {
        self.each_offers(|_, offers| offers.declared)
            .into_iter()
            .fold(Declared::default(), |all, one| Declared {
                resources: all.resources || one.resources,
                subscribe: all.subscribe || one.subscribe,
                prompts: all.prompts || one.prompts,
                completions: all.completions || one.completions,
            })
    }

    /// The upstream whose resource gatehouse's `uri` names.
    pub fn resource_owner(&self, uri: &str) -> Option<Owner> {
        self.core.upstreams.iter().find_map(|upstream| {
            let name = original_uri(&upstream.tag, uri)?;
            Some(Owner {
                upstream: upstream.clone(),
                name: name.to_owned(),
            })
        })
    }

    /// The upstream whose prompt gatehouse's `name` is.
    pub fn prompt_owner(&self, name: &str) -> Option<Owner> {
        self.each_offers(|upstream, offers| {
            offers.prompt(name).map(|original| Owner {
                upstream: upstream.clone(),
                name: original.to_owned(),
            })
        })
        .into_iter()
        .flatten()
        .next()
    }

    /// `session` ended: the resource subscriptions it made through this replica are forgotten.
    /// (One that ended elsewhere is forgotten at the next update, which finds it gone.)
    pub fn session_ended(&self, session: &SessionId) {
        self.core.pool.forget_subscriber(session);
    }

    /// Forwards `request` to `upstream` on `principal`'s session, with the credentials the gate lent
    /// (and the caller's own `access_token`, for a token-exchange upstream).
    pub async fn forward(
        &self,
        upstream: &Arc<Upstream>,
        principal: &Principal,
        credentials: &Credentials,
        access_token: Option<&Secret<String>>,
        request: Request,
    ) -> Forwarded {
        self.core
            .forward(upstream, principal, credentials, access_token, request)
            .await
    }
}
