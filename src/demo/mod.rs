//! The demo set: with no configuration file, a local gatehouse on loopback serves a few `demo_`
//! tools beside its own, so the first minute shows what gatehouse is for. They are an ordinary
//! configuration (`demo.toml`: forms, a provider and tools, gated by the real gate) calling what
//! gatehouse serves itself in demo mode only: a small service (`service`) and a sign-in provider
//! (`sign_in`). A configuration file or `--no-demo` turns it all off.

mod service;
mod sign_in;

#[cfg(test)]
pub(crate) use sign_in::samples;

use std::path::Path;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use serde::Deserialize;

use crate::config::{Config, ConfigError, FormConfig, IdentityMode, ProviderConfig, ToolConfig, TryFirst};
use crate::public_url::PublicUrl;

/// The largest request the demo's routes read: a few short strings.
const MAX_BODY_BYTES: usize = 4096;

/// The demo's forms and tools; `{public_url}` stands for this instance's public URL.
const DEMO: &str = include_str!("demo.toml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DemoSet {
    providers: Vec<ProviderConfig>,
    forms: Vec<FormConfig>,
    tools: Vec<ToolConfig>,
    first: TryFirst,
}

/// Whether a start serves the demo: no configuration `file`, no `--no-demo`, and local identity
/// (which the configuration allows on loopback only).
pub fn applies(file: Option<&Path>, no_demo: bool, config: &Config) -> bool {
    file.is_none() && !no_demo && config.identity.mode == IdentityMode::Local
}

/// Adds the demo's forms and tools to `config`, pointing at its public URL, and marks it as the
/// demo (`Config::demo`, with the tool to try first), which serves the demo service beside the pages.
pub fn add_to(config: &mut Config) -> Result<(), ConfigError> {
    let public_url = config.public_url();
    let text = DEMO.replace("{public_url}", public_url.as_str().trim_end_matches('/'));
    // The built-in file, not the operator's: no key of the configuration to name.
    let set: DemoSet = toml::from_str(&text).map_err(|error| ConfigError::Syntax {
        path: "the built-in demo set (src/demo/demo.toml)".into(),
        message: error.to_string(),
    })?;
    config.providers.extend(set.providers);
    config.forms.extend(set.forms);
    config.tools.extend(set.tools);
    config.demo = Some(set.first);
    Ok(())
}

/// What gatehouse serves in demo mode beside the MCP endpoint and the pages: the demo service and
/// the demo sign-in provider, under `public_url`.
pub fn router(public_url: &PublicUrl) -> Router {
    service::router()
        .merge(sign_in::router(public_url))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_tools_are_named_and_described_as_the_demo() {
        let mut config = Config::default();
        add_to(&mut config).expect("the demo set parses");
        let first = config.demo.as_ref().expect("marked as the demo");
        assert!(
            config.tools.iter().any(|tool| tool.name == first.tool),
            "the tool to try first, {}, is a demo tool",
            first.tool
        );
        assert_eq!(config.tools.len(), 3);
        assert_eq!(config.providers.len(), 1);
        for tool in &config.tools {
            assert!(tool.name.starts_with("demo_"), "{}", tool.name);
            assert!(tool.description.starts_with("Demo: "), "{}", tool.description);
            assert!(
                tool.description
                    .contains("vanishes once gatehouse is given a configuration"),
                "{}",
                tool.description
            );
            assert!(
                tool.http.url.starts_with("http://127.0.0.1:8080/demo/"),
                "{}",
                tool.http.url
            );
        }
        for provider in &config.providers {
            assert!(provider.id.starts_with("demo_"), "{}", provider.id);
        }
        for form in &config.forms {
            assert!(form.id.starts_with("demo_"), "{}", form.id);
            assert!(form.title.starts_with("Demo: "), "{}", form.title);
        }
    }

    #[test]
    fn only_a_local_start_without_a_file_or_no_demo_serves_it() {
        let config = Config::default();
        assert!(applies(None, false, &config));
        assert!(!applies(Some(Path::new("gatehouse.toml")), false, &config));
        assert!(!applies(None, true, &config));
        let mut header = Config::default();
        header.identity.mode = IdentityMode::Header;
        assert!(!applies(None, false, &header));
    }
}
