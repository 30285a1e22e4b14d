//! The pages' router state: the shared state, and what only the pages hold: the operator's
//! templates, the pages' own sign-in (`oauth` mode) and the per-address request limit. It says
//! how the pages word what the edge refuses: a notice page. Every request clones it, so it is one
//! pointer to the parts.

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::request::Parts;

use super::error::PageError;
use super::templates::Templates;
use crate::config::ConfigError;
use crate::edge::{Edge, Refused};
use crate::identity::oidc::SignIn;
use crate::rate_limit::RateLimit;
use crate::state::AppState;

#[derive(Clone)]
pub struct PagesState(Arc<PagesParts>);

impl std::ops::Deref for PagesState {
    type Target = PagesParts;

    fn deref(&self) -> &PagesParts {
        &self.0
    }
}

/// The parts of [`PagesState`]; the shared state's parts are reached through it.
pub struct PagesParts {
    pub app: AppState,
    pub templates: Arc<Templates>,
    /// The pages' OpenID Connect sign-in, in `oauth` mode.
    pub sign_in: Option<Arc<SignIn>>,
    /// Page requests per client address in the last minute (`limits.page_requests_per_minute`).
    pub page_requests: RateLimit<IpAddr>,
}

impl std::ops::Deref for PagesParts {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.app
    }
}

impl PagesState {
    /// The pages' parts over `app`, from its configuration, rendered with `templates`.
    pub fn new(app: AppState, templates: Templates) -> Result<Self, ConfigError> {
        let config = &app.config;
        let templates = Arc::new(templates);
        let sign_in = SignIn::from_config(config, app.identity.clone(), app.outbound.clone())?.map(Arc::new);
        let page_requests = RateLimit::per_minute(config.limits.page_requests_per_minute);
        Ok(Self(Arc::new(PagesParts {
            app,
            templates,
            sign_in,
            page_requests,
        })))
    }
}

impl Edge for PagesState {
    type Refusal = PageError;

    fn app(&self) -> &AppState {
        &self.app
    }

    fn refuse(&self, refused: Refused, parts: &Parts) -> PageError {
        let path = parts.uri.path();
        match refused {
            Refused::NoPeer => {
                PageError::Internal("a page request without the peer address (not served by gatehouse::serve)".into())
            }
            Refused::ForeignHost(host) => {
                tracing::info!(host, path, "refused a page request for a foreign Host");
                PageError::ForeignHost
            }
            Refused::ForeignOrigin(_) => {
                tracing::info!(path, "refused a page post from another origin");
                PageError::Forged
            }
            Refused::Unidentified { error, peer } => PageError::unidentified(&error, peer),
            Refused::DatabaseDown => PageError::Unavailable,
        }
    }
}
