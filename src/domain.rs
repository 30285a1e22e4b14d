//! Domain values shared by every layer, each parsed once at the boundary where it enters.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use caseless::Caseless;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// Ids in configuration (providers, forms): 1 to 64 letters, digits, `-` and `_`.
pub fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// An MCP session id: 256 random bits, URL-safe base64 (visible ASCII as the spec requires).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

const SESSION_ID_BYTES: usize = 32;
const SESSION_ID_LEN: usize = 43;

impl SessionId {
    pub fn generate() -> Self {
        let mut bytes = [0u8; SESSION_ID_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The session a principal's 2026-07-28 requests share, which have none of their own: it is
    /// never stored, but their elicitations name it, so a pending one is reused across requests
    /// and its completion wakes their held retries through the bus. Derived from the principal
    /// (so every replica agrees) and shaped like any other id.
    pub fn stateless(principal: &Principal) -> Self {
        let digest = Sha256::new()
            .chain_update(b"gatehouse stateless session\0")
            .chain_update(principal.as_str().as_bytes())
            .finalize();
        Self(URL_SAFE_NO_PAD.encode(digest))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Only URL-safe base64's alphabet.
fn is_url_safe(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[derive(Debug, thiserror::Error)]
#[error("not a gatehouse session id")]
pub struct InvalidSessionId;

impl FromStr for SessionId {
    type Err = InvalidSessionId;

    /// Only well-formed ids reach the database, so a tampered header costs no query.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let well_formed = text.len() == SESSION_ID_LEN && is_url_safe(text);
        if well_formed {
            Ok(Self(text.to_owned()))
        } else {
            Err(InvalidSessionId)
        }
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    /// Logs show a prefix only: the full id is a bearer credential for the session.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({}…)", self.prefix())
    }
}

impl SessionId {
    /// What may be shown of the id (as in logs): its first [`SESSION_PREFIX_LEN`] characters.
    pub fn prefix(&self) -> SessionPrefix {
        SessionPrefix(self.0.chars().take(SESSION_PREFIX_LEN).collect())
    }
}

/// Characters of a session id shown to operators: 48 bits, enough to tell sessions apart, far
/// from enough to use one.
pub const SESSION_PREFIX_LEN: usize = 8;

/// The start of a session id, as `gatehouse admin sessions` shows it: exactly
/// [`SESSION_PREFIX_LEN`] of the id's characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPrefix(String);

impl SessionPrefix {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionPrefix {
    type Err = InvalidSessionId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let well_formed = text.len() == SESSION_PREFIX_LEN && is_url_safe(text);
        if well_formed {
            Ok(Self(text.to_owned()))
        } else {
            Err(InvalidSessionId)
        }
    }
}

impl fmt::Display for SessionPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An elicitation's id: a UUIDv7, opaque to clients, parsed before any lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElicitationId(uuid::Uuid);

impl ElicitationId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7())
    }
}

impl FromStr for ElicitationId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::try_parse(text).map(Self)
    }
}

impl fmt::Display for ElicitationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// One GET stream of a session, on whichever replica holds it: a UUIDv7, never shown to clients;
/// replicas name a stream by it when a resumed stream ends the older ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(uuid::Uuid);

impl StreamId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7())
    }
}

impl FromStr for StreamId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::try_parse(text).map(Self)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The end user, as the identity mode established it; never taken from what a client claims.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Principal(String);

#[derive(Debug, thiserror::Error)]
pub enum InvalidPrincipal {
    #[error("the principal is empty")]
    Empty,
    #[error("the principal is longer than {MAX_PRINCIPAL_LEN} bytes")]
    TooLong,
    #[error("the principal contains control characters")]
    Control,
}

const MAX_PRINCIPAL_LEN: usize = 256;

/// Unicode's `Bidi_Control` characters (a closed set): invisible, they would let a name display
/// as another one, so they are refused with the C0/C1 controls.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

impl Principal {
    /// Any printable Unicode (`José Müller`, `李雷`), trimmed, up to [`MAX_PRINCIPAL_LEN`] bytes;
    /// control characters are refused.
    pub fn parse(text: &str) -> Result<Self, InvalidPrincipal> {
        let text = text.trim();
        if text.is_empty() {
            Err(InvalidPrincipal::Empty)
        } else if text.len() > MAX_PRINCIPAL_LEN {
            Err(InvalidPrincipal::TooLong)
        } else if text.chars().any(|c| c.is_control() || is_bidi_control(c)) {
            Err(InvalidPrincipal::Control)
        } else {
            Ok(Self(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How an identity mode writes a principal, so that one user is one string: the form is applied
/// where a principal enters (the identity extractor, an operator's typed filter) and to every
/// `principal` in rules as the configuration loads, and stored rows are kept in it, so ownership,
/// self-approval and votes compare plain strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalForm {
    /// `oauth`: the issuer and the `sub` exactly as the token has them (an OpenID Connect `sub`
    /// is case-sensitive).
    Exact,
    /// `header` and `local`: NFKC, Unicode's full case folding, and trimmed, so `Carol`, `carol`
    /// and `ｃａｒｏｌ` are one user.
    Folded,
}

impl PrincipalForm {
    /// `text` in this form (not yet checked as a principal).
    pub fn normal(self, text: &str) -> String {
        match self {
            PrincipalForm::Exact => text.trim().to_owned(),
            // Unicode's compatibility caseless match (D145: NFKD(fold(NFKD(fold(NFD(X)))))),
            // recomposed: the second fold catches what the first decomposition exposes.
            PrincipalForm::Folded => text
                .nfd()
                .default_case_fold()
                .nfkd()
                .default_case_fold()
                .nfkc()
                .collect::<String>()
                .trim()
                .to_owned(),
        }
    }

    /// How the store records that its rows are in this form, with the Unicode versions of the
    /// tables (a new version rewrites them again); none for a form that changes nothing stored.
    pub fn stored_as(self) -> Option<String> {
        match self {
            PrincipalForm::Exact => None,
            PrincipalForm::Folded => {
                let (a, b, c) = unicode_normalization::UNICODE_VERSION;
                let (d, e, f) = caseless::UNICODE_VERSION;
                Some(format!("folded: NFKC {a}.{b}.{c}, case folding {d}.{e}.{f}"))
            }
        }
    }

    /// The principal `text` names in this form.
    pub fn principal(self, text: &str) -> Result<Principal, InvalidPrincipal> {
        Principal::parse(&self.normal(text))
    }
}

impl fmt::Display for PrincipalForm {
    /// What the form does, in words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrincipalForm::Exact => "compared exactly",
            PrincipalForm::Folded => "after NFKC, case folding and trimming",
        })
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The MCP revision a session speaks (`2025-11-25`): one gatehouse negotiated at `initialize`, or
/// the stateless revision for a 2026-07-28 request, and kept with the session. Revisions are dates,
/// so a later one compares greater; [`ProtocolVersion::era`] says which way it is spoken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ProtocolVersion(String);

/// The two ways MCP is spoken: a session that `initialize` opens (2025-11-25 and before), or
/// requests that each carry what they need and have no session (2026-07-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolEra {
    Handshake,
    Stateless,
}

impl ProtocolVersion {
    /// The stateless revision.
    pub const STATELESS: &'static str = "2026-07-28";

    /// A revision gatehouse negotiated, or one a session was stored with.
    pub fn new(version: impl Into<String>) -> Self {
        Self(version.into())
    }

    pub fn stateless() -> Self {
        Self(Self::STATELESS.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn era(&self) -> ProtocolEra {
        if self.0 == Self::STATELESS {
            ProtocolEra::Stateless
        } else {
            ProtocolEra::Handshake
        }
    }

    /// Whether this is `revision` or a later one.
    pub fn since(&self, revision: &str) -> bool {
        self.0.as_str() >= revision
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// MCP log levels (RFC 5424 severities), least severe first so `>=` means "at least as severe".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
            format!("`{text}` is not a log level (debug, info, notice, warning, error, critical, alert, emergency)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_round_trip_and_reject_tampering() {
        let id = SessionId::generate();
        assert_eq!(id.as_str().parse::<SessionId>().expect("parses").as_str(), id.as_str());
        assert_ne!(SessionId::generate(), id);
        for bad in [
            "",
            "short",
            &format!("{}!", &id.as_str()[..42]),
            &format!("{}A", id.as_str()),
        ] {
            assert!(bad.parse::<SessionId>().is_err(), "{bad:?} should be refused");
        }
        assert!(!format!("{id:?}").contains(id.as_str()));
    }

    #[test]
    fn principals_are_trimmed_and_bounded() {
        assert_eq!(
            Principal::parse("  alice@example.com ").expect("valid").as_str(),
            "alice@example.com"
        );
        assert!(matches!(Principal::parse("   "), Err(InvalidPrincipal::Empty)));
        assert!(matches!(
            Principal::parse(&"a".repeat(300)),
            Err(InvalidPrincipal::TooLong)
        ));
        assert!(matches!(Principal::parse("eve\nadmin"), Err(InvalidPrincipal::Control)));
    }

    #[test]
    fn principals_may_be_any_printable_unicode_but_not_controls() {
        for name in ["José Müller", "李雷", "Ærøskøbing", "Zoë 👩‍💻"] {
            assert_eq!(Principal::parse(name).expect(name).as_str(), name);
        }
        for bad in [
            "eve\u{7f}",
            "eve\u{85}admin",
            "eve\u{1b}[31m",
            "bob\u{202e}ecila",
            "a\u{2066}b",
        ] {
            assert!(
                matches!(Principal::parse(bad), Err(InvalidPrincipal::Control)),
                "{bad:?} should be refused"
            );
        }
        assert!(matches!(
            Principal::parse(&"é".repeat(129)),
            Err(InvalidPrincipal::TooLong)
        ));
    }

    #[test]
    fn header_and_local_principals_fold_case_and_compatibility_forms() {
        let folded = |text: &str| PrincipalForm::Folded.normal(text);
        assert_eq!(folded("Carol"), "carol");
        assert_eq!(folded(" ＣＡＲＯＬ\u{3000}"), "carol", "fullwidth letters and space");
        assert_eq!(folded("Straße"), folded("STRASSE"));
        assert_eq!(folded("ǅemal"), "džemal");
        assert_eq!(folded("ﬁona"), "fiona");
        assert_eq!(folded("ΣΊΣΥΦΟΣ"), folded("σίσυφος"));
        assert_eq!(folded("ᾼ"), folded("αι"), "the ypogegrammeni folds after decomposition");
        assert_ne!(folded("bob"), folded("bób"));
        for text in [
            "Carol",
            "ＣＡＲＯＬ",
            "Straße",
            "ǅemal",
            "ᾼ",
            "ΐ",
            "Ꭰꭰ",
            "ﷺ",
            "İstanbul",
            "Å Å",
        ] {
            assert_eq!(folded(&folded(text)), folded(text), "{text}: the form is stable");
        }
        assert_eq!(
            PrincipalForm::Folded.principal("Ｄａｖｅ").expect("valid").as_str(),
            "dave"
        );
    }

    #[test]
    fn oauth_principals_keep_their_case() {
        let exact = PrincipalForm::Exact;
        assert_eq!(exact.normal("https://idp#AbC"), "https://idp#AbC");
        assert_ne!(exact.normal("https://idp#abc"), exact.normal("https://idp#ABC"));
        assert_eq!(exact.normal("https://idp#ＡＢ"), "https://idp#ＡＢ");
    }

    #[test]
    fn log_levels_order_by_severity() {
        assert!(LogLevel::Error > LogLevel::Info);
        assert_eq!("warning".parse::<LogLevel>(), Ok(LogLevel::Warning));
        assert!("loud".parse::<LogLevel>().is_err());
    }
}
