//! The layer order of gatehouse's top-level modules, written down and checked: a test reads every
//! `crate::` path in `src/` (outside comments and test files) and fails on an import of a module
//! that is not in a lower layer, which also rules out any circle between modules. Test-only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// From the top down. A module may use only modules of the layers below its own; modules of one
/// layer do not use each other. `lib.rs`, `main.rs` and `bin/` stand above them all.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["app"],
    &["demo"],
    &["mcp", "web"],
    &["edge"],
    &["diagnosis", "state"],
    &["upstreams"],
    &["tools"],
    &["gate"],
    &["identity"],
    &["providers"],
    &["audit", "events", "forms", "retention", "telemetry"],
    &["config", "path_prefix", "store", "vault"],
    &["metrics"],
    &[
        "clock",
        "domain",
        "instance",
        "jose",
        "jsonrpc",
        "outbound",
        "private_file",
        "public_url",
        "rate_limit",
        "refreshed",
        "routes",
        "secret",
        "text",
        "unread_body",
    ],
];

/// Above every layer: they assemble the rest (and this test, whose strings name modules).
const ROOTS: &[&str] = &["lib", "main", "bin", "layers"];

/// The top-level module each source file of `src` belongs to, and the top-level modules its code
/// names as `crate::NAME` (comment lines and test files skipped).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            if path.is_dir() {
                if name != "tests" {
                    pending.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src/");
            let first = relative.components().next().expect("a file").as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let named = found.entry(module.clone()).or_default();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (at, _) in line.match_indices("crate::") {
                    let rest = &line[at + "crate::".len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let target = &rest[..end];
                    if !target.is_empty() && target != module {
                        named.insert(target.to_owned());
                    }
                }
            }
        }
    }
    found
}

/// What breaks the order in `modules` (each module and the modules it names).
fn breaches(modules: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |m| (*m, layer)))
        .collect();
    let mut wrong = Vec::new();
    for (module, targets) in modules {
        if ROOTS.contains(&module.as_str()) {
            continue;
        }
        let Some(&layer) = layer_of.get(module.as_str()) else {
            wrong.push(format!(
                "src/{module} is in no layer: add it to LAYERS in src/layers.rs"
            ));
            continue;
        };
        for target in targets {
            // `crate::NAME` of a function or type of lib.rs (crate::serve), not a module.
            let Some(&below) = layer_of.get(target.as_str()) else {
                continue;
            };
            if below <= layer {
                wrong.push(format!(
                    "{module} (layer {layer}) uses {target} (layer {below}): only layers below a module's own may be used"
                ));
            }
        }
    }
    wrong
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let modules = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut wrong = breaches(&modules);
    for listed in LAYERS.iter().flat_map(|layer| layer.iter()) {
        if !modules.contains_key(*listed) {
            wrong.push(format!("LAYERS names {listed}, which src/ does not have"));
        }
    }
    assert!(wrong.is_empty(), "the layer order is broken:\n{}", wrong.join("\n"));
}

#[test]
fn an_import_against_the_order_or_within_a_layer_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("store")).expect("store/");
    std::fs::write(
        dir.path().join("store/mod.rs"),
        "// crate::mcp in a comment is no import\nuse crate::gate::Gate;\nuse crate::domain::Principal;\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("vault.rs"), "use crate::config::Config;\n").expect("write");
    std::fs::write(dir.path().join("tests.rs"), "use crate::cli;\n").expect("write");
    let modules = imports(dir.path());
    assert_eq!(
        modules["store"],
        BTreeSet::from(["domain".to_owned(), "gate".to_owned()])
    );
    assert!(!modules.contains_key("tests"), "test files are skipped");
    let wrong = breaches(&modules);
    assert_eq!(wrong.len(), 2, "{wrong:?}");
    assert!(
        wrong[0].starts_with("store (layer 12) uses gate (layer 8)"),
        "{wrong:?}"
    );
    assert!(
        wrong[1].starts_with("vault (layer 12) uses config (layer 12)"),
        "{wrong:?}"
    );
}
