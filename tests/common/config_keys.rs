//! The configuration's keys as its schema names them (`gatehouse::config::schema`, what
//! `gatehouse config-reference` prints), and the key names a text mentions, for tests that hold
//! every hint to keys that exist. A name is dotted and starts with a section (`server.public_url`,
//! `upstreams[0].command`), or is written `[section] key`. An index stands for any entry
//! (`upstreams[0].command` is `upstreams[].command`), and an index into a list of values names
//! the list (`secrets.keys[1]` is `secrets.keys`).

use std::collections::BTreeSet;

use gatehouse::config::schema;
use regex::Regex;

/// What ends a file's name, not a key's.
const FILE_EXTENSIONS: &[&str] = &["html", "css", "js", "json", "md", "rs", "toml", "txt"];

pub struct KnownKeys {
    keys: BTreeSet<String>,
    dotted: Regex,
    sectioned: Regex,
    index: Regex,
}

impl KnownKeys {
    pub fn new() -> Self {
        let keys: BTreeSet<String> = schema::keys(&schema::schema()).into_iter().map(|k| k.path).collect();
        let sections: Vec<String> = keys
            .iter()
            .filter(|k| !k.contains(['.', '[']))
            .map(|k| regex::escape(k))
            .collect();
        assert!(sections.len() > 10, "the schema names its sections: {sections:?}");
        let sections = sections.join("|");
        // Not within a word, a host name, a path or an address: `tools.example.com` in a URL.
        let dotted =
            format!(r"(?:^|[^\w./@:-])((?:{sections})(?:\[[^\]\s]*\])?(?:\.[a-z_][a-z0-9_]*(?:\[[^\]\s]*\])?)+)");
        Self {
            keys,
            dotted: Regex::new(&dotted).expect("dotted names"),
            sectioned: Regex::new(&format!(r"\[({sections})\] ([a-z_][a-z0-9_]*)")).expect("[section] key"),
            index: Regex::new(r"\[[^\]]*\]").expect("indexes"),
        }
    }

    /// Whether `name` is a key of the configuration.
    pub fn knows(&self, name: &str) -> bool {
        let general = self.index.replace_all(name, "[]");
        self.keys.contains(general.as_ref()) || general.strip_suffix("[]").is_some_and(|list| self.keys.contains(list))
    }

    /// Every key name `text` mentions.
    pub fn named_in(&self, text: &str) -> Vec<String> {
        // A file's name is no key: `approvals.html`, a template.
        let file = |name: &String| {
            name.rsplit('.')
                .next()
                .is_some_and(|last| FILE_EXTENSIONS.contains(&last))
        };
        let dotted = self
            .dotted
            .captures_iter(text)
            .map(|c| c[1].to_owned())
            .filter(|name| !file(name));
        let sectioned = self
            .sectioned
            .captures_iter(text)
            .map(|c| format!("{}.{}", &c[1], &c[2]));
        dotted.chain(sectioned).collect()
    }

    /// The key names `text` mentions that the configuration does not have.
    pub fn unknown_in(&self, text: &str) -> Vec<String> {
        self.named_in(text)
            .into_iter()
            .filter(|name| !self.knows(name))
            .collect()
    }
}
