//! Every configuration key a hint names exists. `gatehouse doctor`'s findings carry their key as a
//! field and name keys in their hints; `check-config` prints a key and a message that may name
//! others. Two checks: every string literal of the code that builds findings or configuration
//! errors (`src/`, test modules left out) names only keys of the configuration's schema; and what
//! `check-config` prints for broken files does too. `tests/doctor.rs` checks every finding of
//! every doctor run it makes the same way (its `doctor` helper).

mod common;

use std::path::{Path, PathBuf};

use common::config_keys::KnownKeys;

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read a source directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The contents of the string literals of Rust source `code` (plain, byte and raw), skipping
/// comments and character literals.
fn string_literals(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut literals = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let rest = |n: usize| chars.get(i + n).copied();
        match chars[i] {
            '/' if rest(1) == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if rest(1) == Some('*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            'r' if (rest(1) == Some('"') || rest(1) == Some('#'))
                && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')) =>
            {
                let mut hashes = 0;
                let mut j = i + 1;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let start = j + 1;
                let mut end = start;
                loop {
                    if end >= chars.len() {
                        break;
                    }
                    if chars[end] == '"' && (1..=hashes).all(|h| chars.get(end + h) == Some(&'#')) {
                        break;
                    }
                    end += 1;
                }
                literals.push(chars[start..end.min(chars.len())].iter().collect());
                i = end + 1 + hashes;
            }
            '"' => {
                let mut text = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                        // A line continuation joins the lines without their indentation.
                        if chars.get(i) == Some(&'\n') {
                            while chars.get(i + 1).is_some_and(|c| c.is_whitespace()) {
                                i += 1;
                            }
                            i += 1;
                            continue;
                        }
                    }
                    if let Some(&c) = chars.get(i) {
                        text.push(c);
                    }
                    i += 1;
                }
                literals.push(text);
                i += 1;
            }
            // A character literal (`'"'`, `'\''`), not a lifetime (`'a`).
            '\'' if rest(2) == Some('\'') || (rest(1) == Some('\\') && rest(3) == Some('\'')) => {
                i += if rest(1) == Some('\\') { 4 } else { 3 };
            }
            _ => i += 1,
        }
    }
    literals
}

#[test]
fn the_lexer_finds_literals_and_skips_comments_and_characters() {
    let code = "let a = \"one // not a comment\"; // \"comment\"\nlet b = '\"'; let c = r#\"raw \"x\"\"#;\n\
                fn f<'a>(x: &'a str) {} let d = \"cont\\\n      inued\";";
    assert_eq!(
        string_literals(code),
        ["one // not a comment", "raw \"x\"", "continued"]
    );
}

#[test]
fn the_key_names_of_a_text_are_found_and_checked() {
    let known = KnownKeys::new();
    let text = "set identity.issuer, see upstreams[2].command and secrets.keys[1], or [outbound] proxy; \
                not https://tools.example.com or server.no_such_key";
    assert_eq!(
        known.named_in(text),
        [
            "identity.issuer",
            "upstreams[2].command",
            "secrets.keys[1]",
            "server.no_such_key",
            "outbound.proxy"
        ]
    );
    assert_eq!(known.unknown_in(text), ["server.no_such_key"]);
}

/// Every string literal of the code that builds doctor's findings and configuration errors.
#[test]
fn every_key_the_code_names_in_a_finding_or_a_configuration_error_exists() {
    let known = KnownKeys::new();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let key_argument =
        regex::Regex::new(r#"(?:Finding::(?:problem|warning)\(\s*[^,()]+,|ConfigError::key\()\s*"([^"]*)""#)
            .expect("regex");
    let mut scanned = 0;
    let mut unknown = Vec::new();
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if matches!(name, "tests.rs" | "testing.rs") {
            continue;
        }
        let code = std::fs::read_to_string(&file).expect("read a source file");
        if !code.contains("ConfigError") && !code.contains("Finding") {
            continue;
        }
        scanned += 1;
        let code = code.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let shown = file.strip_prefix(&src).unwrap_or(&file).display().to_string();
        // A key given as a literal, however it is written (`--config` is no key).
        for given in key_argument.captures_iter(code) {
            if !known.knows(&given[1]) {
                unknown.push(format!("src/{shown}: the key `{}` in {:?}", &given[1], &given[0]));
            }
        }
        for literal in string_literals(code) {
            for name in known.unknown_in(&literal) {
                unknown.push(format!("src/{shown}: `{name}` in {literal:?}"));
            }
        }
    }
    assert!(
        scanned > 20,
        "the code that builds findings and errors is scanned: {scanned} files"
    );
    assert!(
        unknown.is_empty(),
        "hints and errors name keys the configuration does not have:\n{}",
        unknown.join("\n")
    );
}

/// What `check-config` prints for broken files names only keys that exist.
#[test]
fn check_config_names_only_keys_that_exist() {
    let known = KnownKeys::new();
    let printed_key = regex::Regex::new("config key `([^`]*)`").expect("regex");
    let dir = tempfile::tempdir().expect("dir");
    let broken = [
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n",
        "[server]\nbind = \"127.0.0.1:8080\"\nallowed_origins = [\"nope\"]\n",
        "[identity]\nmode = \"oauth\"\n",
        "[[upstreams]]\nid = \"notes\"\ncommand = [\"gatehouse-test-no-such-program\"]\n",
        "[[upstreams]]\nid = \"notes\"\nurl = \"https://notes.example/mcp\"\ncommand = [\"x\"]\n",
        "[[tools]]\nname = \"t\"\nrequires = [\"nobody\"]\nhttp = { method = \"GET\", url = \"https://x.example\" }\n",
        "[elicitation]\nttl = \"forever\"\n",
    ];
    for toml in broken {
        let file = dir.path().join("gatehouse.toml");
        std::fs::write(&file, toml).expect("write");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("--config")
            .arg(&file)
            .arg("check-config")
            .current_dir(dir.path())
            .env_clear()
            .output()
            .expect("run gatehouse");
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{toml}: refused: {said}");
        let key = printed_key
            .captures(&said)
            .unwrap_or_else(|| panic!("{toml}: names the key: {said}"));
        assert!(
            known.knows(&key[1]),
            "{toml}: `{}` is no configuration key: {said}",
            &key[1]
        );
        assert_eq!(known.unknown_in(&said), Vec::<String>::new(), "{toml}: {said}");
    }
}
