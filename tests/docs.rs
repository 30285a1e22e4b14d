//! The documentation against the code: every configuration key documented, the generated
//! reference and schema as the code writes them, every TOML example in the README and the book
//! (and `gatehouse.example.toml`) loaded by the configuration loader, and every link between the
//! README and the book's pages reaching a file, and a heading where it names one, without leaving
//! the book (the built book's own links are checked again by `.ci/run`, docs/check-links).
//!
//! TOML examples (see docs/src/contributors/documentation.md): a ```toml fence is a whole
//! configuration file, unless the line before it is `<!-- config: fragment over BASE -->`; then it
//! is merged over one of the [`BASES`] (tables merged key by key, lists of tables appended) and
//! the result is loaded. Every `env:NAME` an example names is set for it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gatehouse::config::reference::{self, REFERENCE_PATH, SCHEMA_PATH};
use gatehouse::config::schema;
use gatehouse::config::{Config, ConfigSource};
use regex::Regex;

/// What a fragment may be merged over: the minimal files its keys need.
const BASES: &[(&str, &str)] = &[
    ("local", ""),
    (
        "header",
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gatehouse.example.com\"\n\
         trusted_proxies = [\"10.0.0.0/8\"]\n[identity]\nmode = \"header\"\n",
    ),
    (
        "oauth",
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gatehouse.example.com\"\n\
         [identity]\nmode = \"oauth\"\nissuer = \"https://idp.example.com/realms/acme\"\nclient_id = \"gatehouse\"\n",
    ),
];

const REGENERATE: &str = "regenerate them with `cargo run -- config-reference > docs/src/reference/configuration.md` \
     and `cargo run -- config-schema > docs/src/reference/gatehouse.schema.json`";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of the book, as paths relative to the repository.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read a docs directory")
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    let mut found = vec![repo().join("README.md")];
    walk(&repo().join("docs/src"), &mut found);
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap_or(path).display().to_string()
}

#[test]
fn every_configuration_key_is_documented() {
    let schema = schema::schema();
    let keys = schema::keys(&schema);
    assert!(keys.len() > 100, "the schema names every key: {}", keys.len());
    let undocumented: Vec<&str> = keys
        .iter()
        .filter(|k| k.description.as_deref().is_none_or(|d| d.trim().is_empty()))
        .map(|k| k.path.as_str())
        .collect();
    assert!(
        undocumented.is_empty(),
        "configuration keys without documentation (write a /// comment on the field in src/config/): {undocumented:?}"
    );
}

#[test]
fn the_reference_and_the_schema_in_the_book_are_what_the_code_writes() {
    let schema = schema::schema();
    for (path, expected) in [
        (SCHEMA_PATH, reference::schema_text(&schema)),
        (REFERENCE_PATH, reference::markdown(&schema)),
    ] {
        let kept = std::fs::read_to_string(repo().join(path)).unwrap_or_default();
        if kept != expected {
            let line = kept
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| kept.lines().count().min(expected.lines().count()));
            panic!(
                "{path} differs from what the code writes (first at line {}); {REGENERATE}",
                line + 1
            );
        }
    }
}

/// The reference's environment variables, set to their keys' defaults (which an empty file loads
/// with): each must name a key the loader knows, and take the value as the reference writes it.
/// The commands the message above names print exactly what the book keeps.
#[test]
fn config_reference_and_config_schema_print_the_files_of_the_book() {
    for (command, path) in [("config-schema", SCHEMA_PATH), ("config-reference", REFERENCE_PATH)] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg(command)
            .env_clear()
            .output()
            .expect("run gatehouse");
        assert!(
            output.status.success(),
            "gatehouse {command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let kept = std::fs::read(repo().join(path)).unwrap_or_default();
        assert!(
            output.stdout == kept,
            "`gatehouse {command}` differs from {path}; {REGENERATE}"
        );
    }
}

#[test]
fn every_environment_variable_of_the_reference_names_its_key() {
    let schema = schema::schema();
    let mut checked = 0;
    for key in schema::keys(&schema) {
        let (Some(env), Some(value)) = (&key.env, key.schema.get("default").filter(|v| !v.is_null())) else {
            continue;
        };
        let text = value
            .as_str()
            .map_or_else(|| reference::toml_text(value), str::to_owned);
        let vars = BTreeMap::from([(env.clone(), text.clone())]);
        if let Err(e) = Config::load(ConfigSource { file: None, env: &vars }) {
            panic!("{env}={text} (the default of {}) is refused: {e}", key.path);
        }
        checked += 1;
    }
    assert!(checked > 30, "the keys of tables have defaults: {checked}");
}

#[test]
fn every_configuration_value_has_an_example() {
    let schema = schema::schema();
    let without: Vec<String> = schema::keys(&schema)
        .into_iter()
        .filter(|k| k.kind == schema::KeyKind::Value && reference::example(&k.schema).is_none())
        .map(|k| k.path)
        .collect();
    assert!(
        without.is_empty(),
        "keys with neither a default nor an example (add #[schemars(example = ...)] in src/config/): {without:?}"
    );
}

/// A ```toml fence: where it is, what it says, and the base it is a fragment over.
struct Example {
    place: String,
    text: String,
    base: Option<String>,
}

fn toml_examples(path: &Path) -> Vec<Example> {
    let marker = Regex::new(r"^<!-- config: fragment over (\S+) -->$").expect("regex");
    let text = read(path);
    let mut examples = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut previous = "";
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            let indent = line.len() - trimmed.len();
            let mut body = Vec::new();
            for (_, inner) in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                body.push(inner.get(indent..).unwrap_or(inner.trim_start()));
            }
            if trimmed == "```toml" {
                examples.push(Example {
                    place: format!("{}:{}", shown(path), number + 1),
                    text: body.join("\n") + "\n",
                    base: marker.captures(previous.trim()).map(|c| c[1].to_owned()),
                });
            }
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    examples
}

/// Tables merged key by key, lists of tables appended, anything else replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(value)) => merge(inner, value),
            (Some(toml::Value::Array(inner)), toml::Value::Array(value)) => inner.extend(value),
            (Some(slot), value) => *slot = value,
            (None, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Loads `text` as a configuration file, with every `env:NAME` it names set.
fn load(text: &str) -> Result<Config, String> {
    let names = Regex::new(r"env:([A-Za-z_][A-Za-z0-9_]*)").expect("regex");
    let env: BTreeMap<String, String> = names
        .captures_iter(text)
        .map(|c| (c[1].to_owned(), format!("https://env.example/{}", &c[1])))
        .collect();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(&file, text).map_err(|e| e.to_string())?;
    Config::load(ConfigSource {
        file: Some(&file),
        env: &env,
    })
    .map_err(|e| e.to_string())
}

#[test]
fn every_toml_example_of_the_readme_and_the_book_is_a_configuration_gatehouse_loads() {
    let mut failures = Vec::new();
    let mut count = 0;
    for path in documents() {
        for example in toml_examples(&path) {
            count += 1;
            let text = match &example.base {
                None => example.text.clone(),
                Some(name) => {
                    let Some((_, base)) = BASES.iter().find(|(n, _)| *n == name.as_str()) else {
                        failures.push(format!("{}: no base named `{name}`", example.place));
                        continue;
                    };
                    let mut table: toml::Table = base.parse().expect("a base parses");
                    match example.text.parse::<toml::Table>() {
                        Ok(fragment) => merge(&mut table, fragment),
                        Err(e) => {
                            failures.push(format!("{}: not TOML: {e}", example.place));
                            continue;
                        }
                    }
                    toml::to_string(&table).expect("a table serializes")
                }
            };
            if let Err(e) = load(&text) {
                failures.push(format!("{}: {e}", example.place));
            }
        }
    }
    assert!(count > 20, "the README and the book have their TOML examples: {count}");
    assert!(
        failures.is_empty(),
        "TOML examples the configuration loader refuses:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_example_configuration_file_loads() {
    let text = read(&repo().join("gatehouse.example.toml"));
    if let Err(e) = load(&text) {
        panic!("gatehouse.example.toml: {e}");
    }
}

/// The ids mdBook gives a page's headings (`normalize_id`, then `-1`, `-2` for repeats).
fn heading_ids(text: &str) -> BTreeSet<String> {
    let link = Regex::new(r"\[([^\]]*)\]\([^)]*\)").expect("regex");
    let mut ids = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let heading = link.replace_all(heading.trim(), "$1");
        let id: String = heading
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next().unwrap_or(c)),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let repeat = seen.entry(id.clone()).or_default();
        ids.insert(if *repeat == 0 {
            id.clone()
        } else {
            format!("{id}-{repeat}")
        });
        *repeat += 1;
    }
    ids
}

/// Every `[text](target)` outside code, as (line, target).
fn links(text: &str) -> Vec<(usize, String)> {
    let code = Regex::new(r"`[^`]*`").expect("regex");
    let link = Regex::new(r"\]\(([^)\s]+)\)").expect("regex");
    let mut found = Vec::new();
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = code.replace_all(line, "");
        found.extend(link.captures_iter(&line).map(|c| (number + 1, c[1].to_owned())));
    }
    found
}

/// The file of the repository a link to it on GitHub names (`REPOSITORY/blob/main/PATH` or
/// `REPOSITORY/tree/main/PATH`, anchors and line marks dropped), or None for any other link.
fn in_repository(target: &str) -> Option<&str> {
    let rest = target.strip_prefix(env!("CARGO_PKG_REPOSITORY"))?;
    let path = rest
        .strip_prefix("/blob/main/")
        .or_else(|| rest.strip_prefix("/tree/main/"))?;
    Some(path.split('#').next().unwrap_or(path))
}

/// Whether `path` (which exists) lies in docs/src, which is all the built book holds.
fn book_page(path: &Path) -> bool {
    let book = repo().join("docs/src").canonicalize().expect("docs/src");
    path.canonicalize().is_ok_and(|p| p.starts_with(book))
}

/// Every relative link reaches its file, and its heading where it names one; a book page's
/// relative links stay inside docs/src (the rest of the repository is not in the built book: such
/// files are linked on GitHub, and those links name files that exist).
#[test]
fn links_between_the_readme_and_the_book_reach_their_files_and_headings() {
    let mut broken = Vec::new();
    let mut count = 0;
    for path in documents() {
        let text = read(&path);
        let in_book = path.starts_with(repo().join("docs/src"));
        for (line, target) in links(&text) {
            let place = format!("{}:{line}: {target}", shown(&path));
            if let Some(file) = in_repository(&target) {
                count += 1;
                if !repo().join(file).exists() {
                    broken.push(format!("{place}: no such file in the repository"));
                }
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            count += 1;
            let (file, anchor) = target
                .split_once('#')
                .map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
            let resolved = if file.is_empty() {
                path.clone()
            } else {
                path.parent().expect("a document's directory").join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{place}: no such file"));
                continue;
            }
            if in_book && !book_page(&resolved) {
                broken.push(format!(
                    "{place}: outside docs/src, so missing from the built book; link to {}/blob/main/... instead",
                    env!("CARGO_PKG_REPOSITORY")
                ));
                continue;
            }
            if let Some(anchor) = anchor
                && !heading_ids(&read(&resolved)).contains(anchor)
            {
                broken.push(format!("{place}: no such heading in {}", shown(&resolved)));
            }
        }
    }
    assert!(count > 50, "the README and the book link to each other: {count}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_lists_every_page_it_has() {
    let summary = read(&repo().join("docs/src/SUMMARY.md"));
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    let pages: BTreeSet<String> = documents()
        .iter()
        .filter_map(|p| p.strip_prefix(repo().join("docs/src")).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p != "SUMMARY.md")
        .collect();
    let unlisted: Vec<&String> = pages.difference(&listed).collect();
    assert!(unlisted.is_empty(), "pages of docs/src not in SUMMARY.md: {unlisted:?}");
}
