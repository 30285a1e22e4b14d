//! Serving under the path prefix of `server.public_url` (`https://tools.example.com/gatehouse`).
//! Requests reach the routes with the prefix or without it: `/gatehouse/mcp` when gatehouse is
//! reached directly or behind a proxy that keeps the path (Caddy's `handle /gatehouse/*`), `/mcp`
//! behind one that strips it (`handle_path /gatehouse/*`). The prefix is taken off before routing,
//! so both deployments, and probes hitting `/healthz` at the root, find the same routes.
//!
//! RFC 9728 puts the metadata of the resource `https://host/gatehouse/mcp` at the host's root,
//! `/.well-known/oauth-protected-resource/gatehouse/mcp`; that path (also under the prefix) is
//! served as the metadata of `/mcp`. See `identity::oauth` for the URL `WWW-Authenticate` names.

use axum::Router;
use axum::extract::Request;
use axum::http::Uri;
use axum::http::uri::PathAndQuery;
use tower::ServiceExt;

use crate::routes::{MCP, RESOURCE_METADATA, ROOT_RESOURCE_METADATA};

/// `routes` reached with or without `prefix` (`/gatehouse`; empty: `routes` as they are).
pub fn serve_under(prefix: &str, routes: Router) -> Router {
    if prefix.is_empty() {
        return routes;
    }
    let prefix = prefix.to_owned();
    let metadata = format!("{ROOT_RESOURCE_METADATA}{prefix}{MCP}");
    Router::new().fallback_service(routes.map_request(move |mut request: Request| {
        if let Some(uri) = routed_uri(request.uri(), &prefix, &metadata) {
            *request.uri_mut() = uri;
        }
        request
    }))
}

/// The URI `uri` is routed as, when it differs: without the prefix, and the root-level RFC 9728
/// path of the prefixed `/mcp` as [`RESOURCE_METADATA`].
fn routed_uri(uri: &Uri, prefix: &str, metadata: &str) -> Option<Uri> {
    let path = uri.path();
    let unprefixed = match path.strip_prefix(prefix) {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    };
    let routed = if unprefixed == metadata {
        RESOURCE_METADATA
    } else {
        unprefixed
    };
    if routed == path {
        return None;
    }
    let path_and_query = match uri.query() {
        Some(query) => format!("{routed}?{query}"),
        None => routed.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(path_and_query).ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(uri: &str) -> String {
        let uri: Uri = uri.parse().expect("uri");
        let metadata = format!("{ROOT_RESOURCE_METADATA}/gatehouse{MCP}");
        routed_uri(&uri, "/gatehouse", &metadata).unwrap_or(uri).to_string()
    }

    #[test]
    fn the_prefix_is_taken_off_when_present() {
        assert_eq!(routed("/gatehouse/mcp"), "/mcp");
        assert_eq!(routed("/gatehouse"), "/");
        assert_eq!(routed("/gatehouse/"), "/");
        assert_eq!(
            routed("/gatehouse/oauth/callback?code=a&state=b"),
            "/oauth/callback?code=a&state=b"
        );
        assert_eq!(routed("/mcp"), "/mcp");
        assert_eq!(routed("/healthz"), "/healthz");
        assert_eq!(routed("/gatehousex/mcp"), "/gatehousex/mcp");
    }

    #[test]
    fn the_rfc_9728_path_is_the_metadata_of_mcp() {
        let metadata = "/.well-known/oauth-protected-resource/mcp";
        assert_eq!(routed("/.well-known/oauth-protected-resource/gatehouse/mcp"), metadata);
        assert_eq!(
            routed("/gatehouse/.well-known/oauth-protected-resource/gatehouse/mcp"),
            metadata
        );
        assert_eq!(routed("/gatehouse/.well-known/oauth-protected-resource/mcp"), metadata);
    }
}
