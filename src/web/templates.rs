//! Page templates, rendered by minijinja (Jinja syntax). The built-in pages (templates/*.html,
//! compiled in) and the operator's files from `server.template_dir` share one environment, the
//! operator's added over the built-ins by name: a `base.html` there wraps every built-in page
//! (branding), since each `{% extends "base.html" %}`, and a page file there (`form.html`, ...)
//! replaces that page. A page is rendered with its struct serialized as its variables; the
//! operator's files are loaded and checked at start so a broken template fails the
//! configuration, not a user's request.
//!
//! Every page also gets `prefix`, the path prefix of `server.public_url` (`/gatehouse`, or empty):
//! a link to one of gatehouse's paths is written `{{ prefix }}/connections`. The URLs and paths
//! handed to a page in its own variables (a form's `action`, a notice's link) already carry it.

use std::path::Path;
use std::sync::LazyLock;

use minijinja::{AutoEscape, Environment, Output, State, Value};
use serde::Serialize;

use crate::config::ConfigError;

/// Every page file name an operator may replace.
pub const PAGE_NAMES: &[&str] = &[
    "base.html",
    "index.html",
    "notice.html",
    "connect.html",
    "form.html",
    "connections.html",
    "approvals.html",
    "approval.html",
    "logout.html",
];

/// Every file of templates/, compiled in: the pages of `PAGE_NAMES`, the operator pages and
/// their parts, and the demo's sign-in page.
const BUILT_IN: &[(&str, &str)] = &[
    ("base.html", include_str!("../../templates/base.html")),
    ("index.html", include_str!("../../templates/index.html")),
    ("notice.html", include_str!("../../templates/notice.html")),
    ("connect.html", include_str!("../../templates/connect.html")),
    ("form.html", include_str!("../../templates/form.html")),
    ("connections.html", include_str!("../../templates/connections.html")),
    ("approvals.html", include_str!("../../templates/approvals.html")),
    ("approval.html", include_str!("../../templates/approval.html")),
    ("logout.html", include_str!("../../templates/logout.html")),
    ("admin_nav.html", include_str!("../../templates/admin_nav.html")),
    ("admin_pager.html", include_str!("../../templates/admin_pager.html")),
    ("admin_users.html", include_str!("../../templates/admin_users.html")),
    (
        "admin_elicitations.html",
        include_str!("../../templates/admin_elicitations.html"),
    ),
    (
        "admin_upstreams.html",
        include_str!("../../templates/admin_upstreams.html"),
    ),
    ("admin_audit.html", include_str!("../../templates/admin_audit.html")),
    ("admin_health.html", include_str!("../../templates/admin_health.html")),
    ("demo_sign_in.html", include_str!("../../templates/demo_sign_in.html")),
];

/// The configuration key of the operator's directory, named by every refusal.
const KEY: &str = "server.template_dir";

/// A page: a serializable struct, its fields the template's variables.
pub trait Page: Serialize {
    /// Its file name under templates/ (and in an operator's directory).
    const NAME: &'static str;
}

/// A page could not be rendered (a bug, or an operator template failing on real data).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template: {0}")]
    Template(#[from] minijinja::Error),
}

/// The built-in templates alone, parsed once, for a page no operator replaces (the demo's
/// sign-in page).
static BUILT_IN_ONLY: LazyLock<Result<Templates, minijinja::Error>> = LazyLock::new(Templates::built_in);

/// The built-in templates and the operator's replacements, loaded once at start.
pub struct Templates {
    environment: Environment<'static>,
}

impl Templates {
    /// The built-in templates, without an operator's.
    pub fn built_in() -> Result<Self, minijinja::Error> {
        let mut environment = Environment::new();
        environment.set_formatter(escape_html);
        for (name, source) in BUILT_IN {
            environment.add_template(name, source)?;
        }
        Ok(Self { environment })
    }

    /// The built-in templates with the operator's from `dir` over them, checked.
    pub fn load(dir: Option<&Path>) -> Result<Self, ConfigError> {
        let mut templates =
            Self::built_in().map_err(|e| ConfigError::key(KEY, format!("a built-in template is broken: {e}")))?;
        let Some(dir) = dir else {
            return Ok(templates);
        };
        let entries =
            std::fs::read_dir(dir).map_err(|e| ConfigError::key(KEY, format!("cannot read {}: {e}", dir.display())))?;
        let mut replaced = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| ConfigError::key(KEY, format!("cannot read {}: {e}", dir.display())))?
                .path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            if !name.ends_with(".html") {
                continue;
            }
            if !PAGE_NAMES.contains(&name.as_str()) {
                return Err(ConfigError::key(
                    KEY,
                    format!(
                        "{} replaces no page (the pages are {})",
                        path.display(),
                        PAGE_NAMES.join(", ")
                    ),
                ));
            }
            let source = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError::key(KEY, format!("cannot read {}: {e}", path.display())))?;
            templates
                .environment
                .add_template_owned(name.clone(), source)
                .map_err(|e| ConfigError::key(KEY, format!("{} is not a valid template: {e}", path.display())))?;
            replaced.push(name);
        }
        // A page's `extends` must resolve now, not at a user's first visit. minijinja looks a parent
        // up only when rendering, so each page is rendered once without variables: only a missing
        // template counts, the other errors come from the absent variables.
        for name in &replaced {
            let template = templates
                .environment
                .get_template(name)
                .map_err(|e| ConfigError::key(KEY, format!("{name}: {e}")))?;
            if let Err(error) = template.render(())
                && error.kind() == minijinja::ErrorKind::TemplateNotFound
            {
                return Err(ConfigError::key(KEY, format!("{name}: {error}")));
            }
        }
        Ok(templates)
    }

    /// `page`, with `prefix` (the public URL's path prefix) among its variables.
    pub fn render<P: Page>(&self, page: &P, prefix: &str) -> Result<String, RenderError> {
        self.render_variables(P::NAME, Value::from_serialize(page), prefix)
    }

    /// The template `name` with `variables` (a page serialized) and `prefix`.
    fn render_variables(&self, name: &str, variables: Value, prefix: &str) -> Result<String, RenderError> {
        // Safe as it is: `crate::public_url::parse` allows only unreserved characters and '/'.
        let prefix = Value::from_safe_string(prefix.to_owned());
        let context = minijinja::context! { prefix => prefix, ..variables };
        Ok(self.environment.get_template(name)?.render(context)?)
    }

    /// `page` from the built-in templates, whatever an operator's directory holds.
    pub fn render_built_in<P: Page>(page: &P, prefix: &str) -> Result<String, RenderError> {
        match &*BUILT_IN_ONLY {
            Ok(templates) => templates.render(page, prefix),
            Err(error) => Err(minijinja::Error::new(error.kind(), error.to_string()).into()),
        }
    }
}

/// Prints a value into a page: unless marked safe, HTML-escaped with the entities the built-in
/// pages always had (`&#38;`, `&#60;`, `&#62;`, `&#34;`, `&#39;`). minijinja's default would also
/// write `/` as `&#x2f;`, which every URL and path a page prints would carry for nothing.
fn escape_html(out: &mut Output, state: &State, value: &Value) -> Result<(), minijinja::Error> {
    let Some(text) = value
        .as_str()
        .filter(|_| state.auto_escape() == AutoEscape::Html && !value.is_safe())
    else {
        return minijinja::escape_formatter(out, state, value);
    };
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
        out.write_str(&rest[..at])?;
        out.write_str(match rest.as_bytes()[at] {
            b'&' => "&#38;",
            b'<' => "&#60;",
            b'>' => "&#62;",
            b'"' => "&#34;",
            _ => "&#39;",
        })?;
        rest = &rest[at + 1..];
    }
    out.write_str(rest)?;
    Ok(())
}

/// A page as a test renders it: its template and its variables (see `tests`). Every module with
/// pages offers `samples()`, a few of each page covering its branches.
#[cfg(test)]
pub(crate) struct Sample {
    name: &'static str,
    variables: Value,
}

#[cfg(test)]
impl Sample {
    pub(crate) fn of<P: Page>(page: P) -> Self {
        Self {
            name: P::NAME,
            variables: Value::from_serialize(&page),
        }
    }
}

#[cfg(test)]
mod tests;
