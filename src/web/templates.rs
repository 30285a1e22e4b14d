//! Page templates. The built-in pages are askama templates, checked at compile time. An operator
//! can replace any of them from `server.template_dir`: a `base.html` there wraps every built-in
//! page (branding), and a page file there (`form.html`, ...) replaces that page. Replacements are
//! Jinja templates (minijinja) rendered with the same variables, loaded and checked at start so a
//! broken template fails the configuration, not a user's request.
//!
//! Every page also gets `prefix`, the path prefix of `server.public_url` (`/gatehouse`, or empty):
//! a link to one of gatehouse's paths is written `{{ prefix }}/connections`. The URLs and paths
//! handed to a page in its own variables (a form's `action`, a notice's link) already carry it.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::config::ConfigError;

/// Every page file name, for checking what an operator's directory holds.
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

/// The name of the path prefix among a page's variables.
const PREFIX: &str = "prefix";

const BUILT_IN_BASE: &str = include_str!("../../templates/base.html");
/// How the built-in templates write the prefix (askama's runtime value). The built-in base also
/// serves minijinja, under an operator's pages, where it is the variable `{{ prefix }}`.
const ASKAMA_PREFIX: &str = r#"{{ ("prefix"|value::<String>)? }}"#;
/// Wraps a built-in page's blocks, rendered by askama, into the operator's layout.
const WRAPPER_NAME: &str = "gatehouse-wrapper.html";
const WRAPPER: &str = "{% extends \"base.html\" %}{% block title %}{{ gatehouse_title|safe }}{% endblock %}\
{% block content %}{{ gatehouse_content|safe }}{% endblock %}";

/// A page: an askama template with `title` and `content` blocks and a serializable context.
pub trait Page: askama::Template + Serialize {
    /// Its file name under templates/ (and in an operator's directory).
    const NAME: &'static str;

    /// The `title` and `content` blocks alone (askama's block fragments).
    fn blocks(&self, values: &dyn askama::Values) -> askama::Result<(String, String)>;
}

/// Implements `Page` for a template struct declared with `blocks = ["title", "content"]`.
macro_rules! impl_page {
    ($page:ty, $name:literal) => {
        impl $crate::web::templates::Page for $page {
            const NAME: &'static str = $name;

            fn blocks(&self, values: &dyn askama::Values) -> askama::Result<(String, String)> {
                use askama::Template as _;
                Ok((
                    self.as_title().render_with_values(values)?,
                    self.as_content().render_with_values(values)?,
                ))
            }
        }
    };
}
pub(crate) use impl_page;

/// A page could not be rendered (a bug, or an operator template failing on real data).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template: {0}")]
    BuiltIn(#[from] askama::Error),
    #[error("operator template: {0}")]
    Operator(#[from] minijinja::Error),
}

/// The built-in templates and the operator's replacements, loaded once at start.
pub struct Templates {
    /// The operator's templates, when a directory is configured.
    overrides: Option<minijinja::Environment<'static>>,
    /// Page names the operator replaced.
    replaced: BTreeSet<String>,
}

impl Templates {
    pub fn built_in() -> Self {
        Self {
            overrides: None,
            replaced: BTreeSet::new(),
        }
    }

    /// Loads and checks the operator's templates from `dir`.
    pub fn load(dir: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(dir) = dir else {
            return Ok(Self::built_in());
        };
        let key = "server.template_dir";
        let entries =
            std::fs::read_dir(dir).map_err(|e| ConfigError::key(key, format!("cannot read {}: {e}", dir.display())))?;
        let mut environment = minijinja::Environment::new();
        let mut replaced = BTreeSet::new();
        for entry in entries {
            let path = entry
                .map_err(|e| ConfigError::key(key, format!("cannot read {}: {e}", dir.display())))?
                .path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                continue;
            };
            if !name.ends_with(".html") {
                continue;
            }
            if !PAGE_NAMES.contains(&name.as_str()) {
                return Err(ConfigError::key(
                    key,
                    format!(
                        "{} replaces no page (the pages are {})",
                        path.display(),
                        PAGE_NAMES.join(", ")
                    ),
                ));
            }
            let source = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError::key(key, format!("cannot read {}: {e}", path.display())))?;
            environment
                .add_template_owned(name.clone(), source)
                .map_err(|e| ConfigError::key(key, format!("{} is not a valid template: {e}", path.display())))?;
            replaced.insert(name);
        }
        if !replaced.contains("base.html") {
            environment
                .add_template_owned("base.html", BUILT_IN_BASE.replace(ASKAMA_PREFIX, "{{ prefix }}"))
                .map_err(|e| ConfigError::key(key, format!("built-in base.html: {e}")))?;
        }
        environment
            .add_template(WRAPPER_NAME, WRAPPER)
            .map_err(|e| ConfigError::key(key, format!("page wrapper: {e}")))?;
        // A page's `extends` must resolve now, not at a user's first visit. minijinja looks a parent
        // up only when rendering, so each page is rendered once without variables: only a missing
        // template counts, the other errors come from the absent variables.
        for name in &replaced {
            let template = environment
                .get_template(name)
                .map_err(|e| ConfigError::key(key, format!("{name}: {e}")))?;
            if let Err(error) = template.render(())
                && error.kind() == minijinja::ErrorKind::TemplateNotFound
            {
                return Err(ConfigError::key(key, format!("{name}: {error}")));
            }
        }
        Ok(Self {
            overrides: Some(environment),
            replaced,
        })
    }

    /// `page`, with `prefix` (the public URL's path prefix) among its variables.
    pub fn render<P: Page>(&self, page: &P, prefix: &str) -> Result<String, RenderError> {
        let prefix_value = prefix.to_owned();
        let values: (&str, &dyn std::any::Any) = (PREFIX, &prefix_value);
        let Some(environment) = &self.overrides else {
            return Ok(page.render_with_values(&values)?);
        };
        // Safe as it is: `crate::public_url::parse` allows only unreserved characters and '/'.
        let prefix = minijinja::Value::from_safe_string(prefix.to_owned());
        if self.replaced.contains(P::NAME) {
            let context = minijinja::context! { prefix => prefix, ..minijinja::Value::from_serialize(page) };
            return Ok(environment.get_template(P::NAME)?.render(context)?);
        }
        if !self.replaced.contains("base.html") {
            return Ok(page.render_with_values(&values)?);
        }
        let (title, content) = page.blocks(&values)?;
        Ok(environment.get_template(WRAPPER_NAME)?.render(minijinja::context! {
            gatehouse_title => title,
            gatehouse_content => content,
            prefix => prefix,
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::error::NoticePage;

    #[test]
    fn every_page_gets_the_prefix_built_in_or_replaced() {
        let page = NoticePage::new("Done", "All done.", None);
        let built_in = Templates::built_in().render(&page, "/gh").expect("built-in");
        assert!(built_in.contains(r#"<a href="/gh/connections">"#), "{built_in}");

        let dir = tempfile::tempdir().expect("dir");
        let notice =
            r#"{% extends "base.html" %}{% block content %}<a href="{{ prefix }}/x">{{ heading }}</a>{% endblock %}"#;
        std::fs::write(dir.path().join("notice.html"), notice).expect("write");
        let replaced = Templates::load(Some(dir.path()))
            .expect("load")
            .render(&page, "/gh")
            .expect("operator");
        assert!(replaced.contains(r#"<a href="/gh/x">Done</a>"#), "{replaced}");
        assert!(
            replaced.contains(r#"<a href="/gh/connections">"#),
            "the built-in base: {replaced}"
        );

        std::fs::write(
            dir.path().join("base.html"),
            r#"<nav>{{ prefix }}</nav>{% block content %}{% endblock %}"#,
        )
        .expect("write");
        std::fs::remove_file(dir.path().join("notice.html")).expect("remove");
        let wrapped = Templates::load(Some(dir.path()))
            .expect("load")
            .render(&page, "/gh")
            .expect("wrapped");
        assert!(wrapped.starts_with("<nav>/gh</nav>"), "{wrapped}");
    }
}
