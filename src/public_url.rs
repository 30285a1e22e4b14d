//! The address browsers and clients reach gatehouse at, computed once at start from
//! `server.public_url` (or the bind address on loopback): the origin form posts and `/mcp` requests
//! must come from, the host a `Host` header must name, whether cookies are `Secure`, and the
//! absolute URLs of gatehouse's own pages.

use url::Url;

#[derive(Debug, Clone)]
pub struct PublicUrl {
    /// `scheme://host[:port]`, without a trailing slash: what an `Origin` header carries.
    origin: String,
    /// `host[:port]` as a `Host` header names it.
    host: String,
    https: bool,
}

impl PublicUrl {
    /// From the configured URL, which configuration has checked is an http(s) origin with a host.
    pub fn new(url: &Url) -> Self {
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            _ => String::new(),
        };
        Self {
            origin: url.origin().ascii_serialization(),
            host,
            https: url.scheme() == "https",
        }
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether browsers reach gatehouse over HTTPS (and so accept `Secure` cookies).
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The absolute URL of one of gatehouse's own paths (`path` starts with `/`).
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }
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
        let local = PublicUrl::new(&Url::parse("http://127.0.0.1:8080").expect("url"));
        assert_eq!(local.origin(), "http://127.0.0.1:8080");
        assert_eq!(local.host(), "127.0.0.1:8080");
        assert!(!local.is_https());
        assert_eq!(local.at("/mcp"), "http://127.0.0.1:8080/mcp");
    }
}
