use super::*;

fn parts(header: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(value) = header {
        headers.insert("x-forwarded-user", value.parse().expect("header value"));
    }
    headers
}

fn header_identity() -> HeaderIdentity {
    HeaderIdentity {
        header: HeaderName::from_static("x-forwarded-user"),
        groups_header: Some(HeaderName::from_static("x-forwarded-groups")),
        email_header: Some(HeaderName::from_static("x-forwarded-email")),
        trusted_proxies: vec!["10.0.0.0/8".parse().expect("cidr")],
    }
}

#[test]
fn the_client_address_is_believed_from_trusted_proxies_only() {
    let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("cidr")];
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-forwarded-for",
        "198.51.100.1, 192.0.2.9, 10.0.0.2".parse().expect("value"),
    );
    let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
    let stranger: SocketAddr = "203.0.113.5:5000".parse().expect("addr");
    let ip = |text: &str| text.parse::<IpAddr>().expect("ip");
    assert_eq!(client_address(&trusted, &headers, proxy), ip("192.0.2.9"));
    assert_eq!(client_address(&trusted, &headers, stranger), ip("203.0.113.5"));
    assert_eq!(client_address(&trusted, &HeaderMap::new(), proxy), ip("10.1.2.3"));
    headers.insert("x-forwarded-for", "not-an-address, 10.0.0.2".parse().expect("value"));
    assert_eq!(client_address(&trusted, &headers, proxy), ip("10.0.0.2"));
}

#[test]
fn header_mode_believes_only_trusted_proxies() {
    let identity = header_identity();
    let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
    let stranger: SocketAddr = "192.0.2.9:5000".parse().expect("addr");
    assert_eq!(
        identity
            .caller(&parts(Some("alice")), proxy)
            .expect("trusted")
            .principal
            .as_str(),
        "alice"
    );
    assert!(matches!(
        identity.caller(&parts(Some("alice")), stranger),
        Err(IdentityError::UntrustedPeer)
    ));
    assert!(matches!(
        identity.caller(&parts(None), proxy),
        Err(IdentityError::MissingHeader(_))
    ));
    assert!(matches!(
        identity.caller(&parts(Some("  ")), proxy),
        Err(IdentityError::InvalidHeader(_))
    ));
    let mapped: SocketAddr = "[::ffff:10.0.0.7]:1".parse().expect("addr");
    assert!(
        identity.caller(&parts(Some("bob")), mapped).is_ok(),
        "IPv4-mapped IPv6 peers match IPv4 CIDRs"
    );
}

#[test]
fn header_mode_refuses_a_repeated_header_and_reads_utf8() {
    let identity = header_identity();
    let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
    for values in [["mallory", "alice"], ["alice", "alice"]] {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-user", value.parse().expect("header value"));
        }
        assert!(matches!(
            identity.caller(&headers, proxy),
            Err(IdentityError::RepeatedHeader(_))
        ));
    }
    let mut headers = HeaderMap::new();
    let utf8 = axum::http::HeaderValue::from_bytes("José Müller".as_bytes()).expect("header value");
    headers.insert("x-forwarded-user", utf8);
    assert_eq!(
        identity.caller(&headers, proxy).expect("UTF-8").principal.as_str(),
        "josé müller",
        "in the normal form"
    );
    let caller = identity.caller(&headers, proxy).expect("UTF-8");
    assert_eq!(
        caller.claims.get("principal"),
        ["josé müller"],
        "rules read the principal"
    );
    let latin1 = axum::http::HeaderValue::from_bytes(b"Jos\xe9").expect("header value");
    headers.insert("x-forwarded-user", latin1);
    assert!(matches!(
        identity.caller(&headers, proxy),
        Err(IdentityError::NotUtf8(_))
    ));
}

#[test]
fn header_mode_reads_groups_and_email_from_their_headers() {
    let identity = header_identity();
    let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
    let mut headers = parts(Some("alice"));
    headers.insert("x-forwarded-groups", "eng, ops,,".parse().expect("header value"));
    headers.insert("x-forwarded-email", "alice@acme.com".parse().expect("header value"));
    let caller = identity.caller(&headers, proxy).expect("trusted");
    assert_eq!(caller.claims.get("groups"), ["eng", "ops"]);
    assert_eq!(caller.claims.get("email"), ["alice@acme.com"]);
    headers.append("x-forwarded-groups", "admin".parse().expect("header value"));
    assert!(matches!(
        identity.caller(&headers, proxy),
        Err(IdentityError::RepeatedHeader(_))
    ));
}

#[tokio::test]
async fn local_mode_ignores_headers() {
    let identity = Identity::Local(Principal::parse("me").expect("principal"));
    let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let caller = identity.caller(&parts(Some("mallory")), peer).await.expect("local");
    assert_eq!(caller.principal.as_str(), "me");
}
