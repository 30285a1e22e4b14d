//! Per-tool access by claims: `allow = { groups = ["eng"], email = ["*@acme.com"] }` on a tool or
//! an upstream. Any listed claim with a matching value grants; a tool without `allow` is
//! everyone's. `*` matches any run of characters; emails compare without regard to ASCII case,
//! everything else exactly.

use super::Claims;
use crate::config::AllowConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    rules: Vec<(String, Vec<String>)>,
}

impl Allow {
    pub fn from_config(config: &AllowConfig) -> Self {
        let rules = config
            .iter()
            .map(|(claim, patterns)| {
                let patterns = patterns
                    .iter()
                    .map(|p| {
                        if claim == "email" {
                            p.to_ascii_lowercase()
                        } else {
                            p.clone()
                        }
                    })
                    .collect();
                (claim.clone(), patterns)
            })
            .collect();
        Self { rules }
    }

    pub fn permits(&self, claims: &Claims) -> bool {
        self.rules.iter().any(|(claim, patterns)| {
            claims.get(claim).iter().any(|value| {
                let value = if claim == "email" {
                    value.to_ascii_lowercase()
                } else {
                    value.clone()
                };
                patterns.iter().any(|pattern| glob_matches(pattern, &value))
            })
        })
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (greedy with
/// backtracking to the last star: linear in practice, never exponential).
fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((star_p, star_t)) = star {
            pi = star_p + 1;
            ti = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(groups: &[&str], email: &str) -> Claims {
        let mut claims = Claims::default();
        claims.insert("groups", groups.iter().copied());
        claims.insert("email", std::iter::once(email));
        claims
    }

    fn allow(toml: &str) -> Allow {
        Allow::from_config(&toml::from_str(toml).expect("allow table"))
    }

    #[test]
    fn any_listed_claim_grants() {
        let rule = allow("groups = [\"eng\"]\nemail = [\"*@acme.com\"]");
        assert!(rule.permits(&claims(&["eng"], "x@other.org")));
        assert!(rule.permits(&claims(&["sales"], "Bob@ACME.com")));
        assert!(!rule.permits(&claims(&["sales"], "bob@acme.com.evil.org")));
        assert!(
            !rule.permits(&claims(&["Eng"], "x@other.org")),
            "groups compare exactly"
        );
        assert!(!rule.permits(&Claims::default()));
    }

    #[test]
    fn globs_match_whole_values() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("/eng/*", "/eng/platform", true),
            ("eng", "engineering", false),
            ("*@acme.com", "@acme.com", true),
            ("**a", "bba", true),
        ] {
            assert_eq!(glob_matches(pattern, text), expected, "{pattern} vs {text}");
        }
    }
}
