//! Every path gatehouse answers at, in one leaf that any layer may name: the MCP endpoint, its
//! RFC 9728 metadata, the pages and their sign-in, the OAuth redirect URI and the health checks.
//! Paths are routes' paths, without the public URL's prefix (`PublicUrl::path` and `at` add it).

/// The MCP endpoint (Streamable HTTP).
pub const MCP: &str = "/mcp";

/// Where the Protected Resource Metadata of [`MCP`] is served (RFC 9728 3.1), and the root one.
pub const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource/mcp";
pub const ROOT_RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";

/// The landing page.
pub const INDEX: &str = "/";
/// The process is up.
pub const HEALTHZ: &str = "/healthz";
/// The database answers and the bus listens.
pub const READYZ: &str = "/readyz";
/// Where every serving process answers its instance nonce (text, `Cache-Control: no-store`).
pub const INSTANCE: &str = "/healthz/instance";

/// A provider's connect page for an elicitation, as a route.
pub const CONNECT: &str = "/connect/{id}";
/// The OAuth redirect URI of the configured providers, where they send the browser back.
pub const OAUTH_CALLBACK: &str = "/oauth/callback";
/// The redirect URI of one remote MCP server's authorization server (`auth = "mcp"`), named by
/// its upstream's id, as a route: one per authorization server (RFC 9700 4.4.2.2, against mix-up).
pub const REMOTE_CALLBACK: &str = "/oauth/callback/{upstream}";
/// gatehouse's Client ID Metadata Document for one remote MCP server's authorization server, as a
/// route: its URL is gatehouse's client id there, and it lists that server's redirect URI alone.
pub const CLIENT_METADATA: &str = "/oauth/client-metadata/{upstream}";
/// A form's page for an elicitation, as a route.
pub const FORM: &str = "/forms/{id}";
/// Approval requests an approver may decide, and one request's page, as a route.
pub const APPROVALS: &str = "/approvals";
pub const APPROVAL: &str = "/approvals/{id}";
/// A user's saved values of a form, as a route.
pub const STORED_FORM: &str = "/connections/forms/{form}";
/// What the signed-in user has given gatehouse.
pub const CONNECTIONS: &str = "/connections";

/// The operator pages (`[admin] allow`): the users view, and each view's own path.
pub const ADMIN: &str = "/admin";
pub const ADMIN_USERS: &str = "/admin/users";
pub const ADMIN_ELICITATIONS: &str = "/admin/elicitations";
pub const ADMIN_UPSTREAMS: &str = "/admin/upstreams";
pub const ADMIN_AUDIT: &str = "/admin/audit";
pub const ADMIN_HEALTH: &str = "/admin/health";

/// The pages' own sign-in (`oauth` mode), where the identity provider sends the browser back,
/// and the sign-out.
pub const LOGIN: &str = "/login";
pub const LOGIN_CALLBACK: &str = "/login/callback";
pub const LOGOUT: &str = "/logout";

/// The demo service (demo mode only, `crate::demo`): what the demo tools call.
pub const DEMO_SERVICE: &str = "/demo/service";
pub const DEMO_SEND: &str = "/demo/send";
/// The demo sign-in provider (demo mode only): its authorize page, token endpoint and API.
pub const DEMO_AUTHORIZE: &str = "/demo/oauth/authorize";
pub const DEMO_TOKEN: &str = "/demo/oauth/token";
pub const DEMO_PROFILE: &str = "/demo/api/profile";

/// The connect page of elicitation `id`.
pub fn connect(id: impl std::fmt::Display) -> String {
    format!("/connect/{id}")
}

/// The redirect URI of the `auth = "mcp"` upstream `upstream`'s authorization server.
pub fn remote_callback(upstream: &str) -> String {
    format!("/oauth/callback/{upstream}")
}

/// The Client ID Metadata Document gatehouse is known by at `upstream`'s authorization server.
pub fn client_metadata(upstream: &str) -> String {
    format!("/oauth/client-metadata/{upstream}")
}

/// The form page of elicitation `id`.
pub fn form(id: impl std::fmt::Display) -> String {
    format!("/forms/{id}")
}

/// The page of approval request `id` (its caller's and its approvers').
pub fn approval(id: impl std::fmt::Display) -> String {
    format!("/approvals/{id}")
}

/// The page of the saved values of form `form`.
pub fn stored_form(form: &str) -> String {
    format!("/connections/forms/{form}")
}

/// The sign-in, returning to `next` (a route's path with its query) once signed in.
pub fn login(next: &str) -> String {
    let next: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
    format!("{LOGIN}?next={next}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_path_carries_next_encoded() {
        assert_eq!(
            login("/connect/x?a=1&b=2"),
            "/login?next=%2Fconnect%2Fx%3Fa%3D1%26b%3D2"
        );
    }

    #[test]
    fn the_built_paths_match_their_routes() {
        assert_eq!(connect("abc"), CONNECT.replace("{id}", "abc"));
        assert_eq!(form("abc"), FORM.replace("{id}", "abc"));
        assert_eq!(stored_form("f"), STORED_FORM.replace("{form}", "f"));
        assert_eq!(remote_callback("u"), REMOTE_CALLBACK.replace("{upstream}", "u"));
        assert_eq!(client_metadata("u"), CLIENT_METADATA.replace("{upstream}", "u"));
    }
}
