//! What a tool needs before it may run: a connection at a provider (with scopes), a submitted
//! form, or another person's approval of the call, parsed once from configuration.

use std::fmt;

use crate::domain::is_identifier;

/// One thing a tool needs: a connection at a provider (with scopes), a submitted form, or an
/// approval (`[[approvals]]`) of the very call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Provider { provider: String, scopes: Vec<String> },
    Form { form: String },
    Approval { approval: String },
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error(
    "`{text}` is not a requirement: {reason} (expected \"provider\", \"provider:scope1 scope2\", \"form:id\" or \"approval:id\")"
)]
pub struct InvalidRequirement {
    text: String,
    reason: &'static str,
}

impl Requirement {
    pub fn parse(text: &str) -> Result<Self, InvalidRequirement> {
        let error = |reason| InvalidRequirement {
            text: text.to_owned(),
            reason,
        };
        let (head, rest) = match text.split_once(':') {
            Some((head, rest)) => (head.trim(), Some(rest)),
            None => (text.trim(), None),
        };
        if head == "form" || head == "approval" {
            let id = rest.map(str::trim).unwrap_or("");
            if !is_identifier(id) {
                return Err(error("a form or approval id is letters, digits, `-` and `_`"));
            }
            let id = id.to_owned();
            return Ok(if head == "form" {
                Requirement::Form { form: id }
            } else {
                Requirement::Approval { approval: id }
            });
        }
        if !is_identifier(head) {
            return Err(error("a provider id is letters, digits, `-` and `_`"));
        }
        let scopes: Vec<String> = rest.unwrap_or("").split_whitespace().map(str::to_owned).collect();
        if rest.is_some() && scopes.is_empty() {
            return Err(error("a `:` must be followed by scopes"));
        }
        Ok(Requirement::Provider {
            provider: head.to_owned(),
            scopes,
        })
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Provider { provider, scopes } if scopes.is_empty() => f.write_str(provider),
            Requirement::Provider { provider, scopes } => write!(f, "{provider}:{}", scopes.join(" ")),
            Requirement::Form { form } => write!(f, "form:{form}"),
            Requirement::Approval { approval } => write!(f, "approval:{approval}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            Requirement::parse("github").expect("provider"),
            Requirement::Provider {
                provider: "github".into(),
                scopes: vec![]
            }
        );
        let scoped = Requirement::parse("google:openid  email").expect("scoped");
        assert_eq!(
            scoped,
            Requirement::Provider {
                provider: "google".into(),
                scopes: vec!["openid".into(), "email".into()]
            }
        );
        assert_eq!(scoped.to_string(), "google:openid email");
        assert_eq!(
            Requirement::parse("form:openai").expect("form"),
            Requirement::Form { form: "openai".into() }
        );
        let approval = Requirement::parse("approval:payments").expect("approval");
        assert_eq!(
            approval,
            Requirement::Approval {
                approval: "payments".into()
            }
        );
        assert_eq!(approval.to_string(), "approval:payments");
    }

    #[test]
    fn refuses_malformed_requirements() {
        for bad in [
            "",
            "git hub",
            "github:",
            "form:",
            "form:a b",
            "ac/me",
            "approval:",
            "approval:a b",
        ] {
            assert!(Requirement::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
