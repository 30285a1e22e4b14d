//! The address browsers and clients reach gatehouse at, computed once at start from
//! `server.public_url` (or the bind address on loopback): the origin form posts and `/mcp` requests
//! must come from, the host a `Host` header must name, whether cookies are `Secure`, the path
//! prefix gatehouse is served under, and the absolute URLs of gatehouse's own pages.

use url::Url;

#[derive(Debug, Clone)]
pub struct PublicUrl {
    /// `scheme://host[:port]`, without a trailing slash: what an `Origin` header carries.
    origin: String,
    /// `host[:port]` as a `Host` header names it.
    host: String,
    /// The path gatehouse is served under (`/gatehouse`), without a trailing slash; empty at the root.
    prefix: String,
    https: bool,
    loopback: bool,
}

impl PublicUrl {
    /// From the configured URL, which [`parse`] has checked (or the bind address).
    pub fn new(url: &Url) -> Self {
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            _ => String::new(),
        };
        Self {
            origin: url.origin().ascii_serialization(),
            host,
            prefix: url.path().trim_end_matches('/').to_owned(),
            https: url.scheme() == "https",
            loopback: match url.host() {
                Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            },
        }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// The path prefix (`/gatehouse`), empty when gatehouse is served at the root.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether browsers reach gatehouse over HTTPS (and so accept `Secure` cookies).
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Whether an authorization server can take a URL here as a client id (a Client ID Metadata
    /// Document's): https, or http on loopback, where gatehouse and the server are both in
    /// development.
    pub fn can_name_a_client(&self) -> bool {
        self.https || self.loopback
    }

    /// One of gatehouse's own paths (`path` starts with `/`) as browsers see it: under the prefix.
    pub fn path(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// The absolute URL of one of gatehouse's own paths (`path` starts with `/`).
    pub fn at(&self, path: &str) -> String {
        format!("{}{}{path}", self.origin, self.prefix)
    }

    /// The `Path` of gatehouse's cookies: the prefix, or `/` at the root.
    pub fn cookie_path(&self) -> &str {
        if self.prefix.is_empty() { "/" } else { &self.prefix }
    }

    /// Cookie `name` with the strongest prefix browsers allow here: `__Host-` over HTTPS at the
    /// root (Secure, Path=/, no Domain, so no sibling host can plant it); `__Secure-` over HTTPS
    /// under a path prefix, as `__Host-` demands Path=/; plain on http://localhost, where browsers
    /// refuse `Secure` cookies.
    pub fn cookie_name(&self, name: &str) -> String {
        match (self.https, self.prefix.is_empty()) {
            (true, true) => format!("__Host-{name}"),
            (true, false) => format!("__Secure-{name}"),
            (false, _) => name.to_owned(),
        }
    }
}

/// `server.public_url` as written: an http(s) URL with a host and at most a path prefix
/// (`https://tools.example.com/gatehouse`, a trailing slash is dropped). Refused: a query or
/// fragment, and path segments that are empty, `.`/`..` or percent-encoded, which proxies and
/// browsers would each read their own way (checked on the text, as parsing resolves them).
pub fn parse(text: &str) -> Result<Url, String> {
    let mut url = Url::parse(text).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("`{text}` must be an http or https URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() || text.contains(['?', '#']) {
        return Err(format!("`{text}` must not have a query or fragment"));
    }
    if text.contains('\\') {
        return Err(format!("`{text}` must separate its path with '/', not '\\'"));
    }
    let after_scheme = text.split_once("://").map_or("", |(_, rest)| rest);
    let written_path = after_scheme.find('/').map_or("", |at| &after_scheme[at..]);
    let prefix = written_path.strip_suffix('/').unwrap_or(written_path);
    if !prefix.is_empty() {
        let plain = |segment: &str| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~'))
        };
        if !prefix[1..].split('/').all(plain) {
            return Err(format!(
                "`{text}`: a path prefix is segments of letters, digits, '-', '.', '_' and '~' \
                 (no empty, `.` or `..` segments, no percent-encoding)"
            ));
        }
    }
    url.set_path(if prefix.is_empty() { "/" } else { prefix });
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_the_public_url() {
        let url = PublicUrl::new(&Url::parse("https://tools.example.com/").expect("url"));
        assert_eq!(url.origin(), "https://tools.example.com");
        assert_eq!(url.host(), "tools.example.com");
        assert!(url.is_https());
        assert_eq!(url.at("/connect/x"), "https://tools.example.com/connect/x");
        assert_eq!(url.cookie_path(), "/");
        assert_eq!(url.cookie_name("c"), "__Host-c");
        let local = PublicUrl::new(&Url::parse("http://127.0.0.1:8080").expect("url"));
        assert_eq!(local.origin(), "http://127.0.0.1:8080");
        assert_eq!(local.host(), "127.0.0.1:8080");
        assert!(!local.is_https());
        assert_eq!(local.at("/mcp"), "http://127.0.0.1:8080/mcp");
        assert_eq!(local.cookie_name("c"), "c");
    }

    #[test]
    fn a_path_prefix_carries_into_every_url_and_cookie() {
        let url = PublicUrl::new(&parse("https://tools.example.com/gatehouse/").expect("url"));
        assert_eq!(url.origin(), "https://tools.example.com");
        assert_eq!(url.prefix(), "/gatehouse");
        assert_eq!(url.path("/connections"), "/gatehouse/connections");
        assert_eq!(url.at("/mcp"), "https://tools.example.com/gatehouse/mcp");
        assert_eq!(url.cookie_path(), "/gatehouse");
        assert_eq!(url.cookie_name("c"), "__Secure-c");
    }

    #[test]
    fn accepted_and_refused_public_urls() {
        for (text, normal) in [
            ("https://tools.example.com", "https://tools.example.com/"),
            ("https://tools.example.com/", "https://tools.example.com/"),
            (
                "https://tools.example.com/gatehouse",
                "https://tools.example.com/gatehouse",
            ),
            (
                "https://tools.example.com/gatehouse/",
                "https://tools.example.com/gatehouse",
            ),
            ("http://127.0.0.1:8080/a/b-c.d", "http://127.0.0.1:8080/a/b-c.d"),
        ] {
            assert_eq!(parse(text).map(String::from).as_deref(), Ok(normal), "{text}");
        }
        for text in [
            "ftp://tools.example.com",
            "https://tools.example.com/gatehouse?x=1",
            "https://tools.example.com/?",
            "https://tools.example.com/gatehouse#top",
            "https://tools.example.com/a/../gatehouse",
            "https://tools.example.com/./gatehouse",
            "https://tools.example.com/%2e%2e/gatehouse",
            "https://tools.example.com/a%2Fb",
            "https://tools.example.com//gatehouse",
            "https://tools.example.com/gatehouse//",
            "https://tools.example.com/a b",
            "https://tools.example.com\\gatehouse",
            "not a url",
        ] {
            assert!(parse(text).is_err(), "{text} was accepted");
        }
    }
}
