//! A page as a response: a handler returns a `PageResponse` (a page and its status), which
//! carries the page unrendered to the `render_pages` layer (see `layers`), since rendering needs
//! the operator's templates that a plain `IntoResponse` cannot reach.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::templates::{Page, RenderError, Templates};

/// A page, type-erased so a response can carry it to the rendering layer.
pub(super) trait Renderable: Send + Sync {
    fn render(&self, templates: &Templates, prefix: &str) -> Result<String, RenderError>;
}

impl<P: Page + Send + Sync> Renderable for P {
    fn render(&self, templates: &Templates, prefix: &str) -> Result<String, RenderError> {
        templates.render(self, prefix)
    }
}

/// The page a response still has to render (a response extension).
#[derive(Clone)]
pub(super) struct Deferred(pub(super) Arc<dyn Renderable>);

/// A page with the status it is sent with.
pub struct PageResponse {
    status: StatusCode,
    page: Arc<dyn Renderable>,
    form_target: Option<FormTarget>,
}

/// Another origin a page's form leads to through a redirect (the connect page's Continue goes on
/// to the provider). Browsers hold such redirects to the page's CSP `form-action`, so it is named
/// there beside `'self'`.
#[derive(Clone)]
pub(super) struct FormTarget(pub(super) String);

impl PageResponse {
    pub fn new(page: impl Page + Send + Sync + 'static) -> Self {
        Self {
            status: StatusCode::OK,
            page: Arc::new(page),
            form_target: None,
        }
    }

    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The page's form may lead on to `url`'s origin.
    pub fn with_form_target(mut self, url: &url::Url) -> Self {
        self.form_target = Some(FormTarget(url.origin().ascii_serialization()));
        self
    }
}

impl IntoResponse for PageResponse {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(Deferred(self.page));
        if let Some(target) = self.form_target {
            response.extensions_mut().insert(target);
        }
        response
    }
}
