//! How internal an address is (loopback, private network, public), so that a URL a remote server
//! names cannot send gatehouse somewhere more internal than the server itself: a public server's
//! metadata pointing at 10.0.0.1 or at gatehouse's own loopback is refused. Link-local,
//! unspecified and multicast addresses are refused always. [`super::Guarded`] applies the rule.

use std::net::IpAddr;

/// From the most internal to the most public.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    Loopback,
    Private,
    Public,
}

impl Reach {
    pub fn describe(self) -> &'static str {
        match self {
            Reach::Loopback => "loopback",
            Reach::Private => "private",
            Reach::Public => "public",
        }
    }

    /// The class of `ip`; None for addresses never to be reached this way.
    pub fn of(ip: IpAddr) -> Option<Reach> {
        match ip {
            IpAddr::V4(v4) => {
                let [a, b, ..] = v4.octets();
                if v4.is_loopback() {
                    Some(Reach::Loopback)
                } else if v4.is_unspecified() || v4.is_link_local() || v4.is_multicast() || v4.is_broadcast() {
                    None
                } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                    // RFC 1918, and RFC 6598's shared address space.
                    Some(Reach::Private)
                } else {
                    Some(Reach::Public)
                }
            }
            IpAddr::V6(v6) => {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    return Reach::of(IpAddr::V4(v4));
                }
                let first = v6.segments()[0];
                if v6.is_loopback() {
                    Some(Reach::Loopback)
                } else if v6.is_unspecified() || v6.is_multicast() || (first & 0xffc0) == 0xfe80 {
                    None
                } else if (first & 0xfe00) == 0xfc00 {
                    // Unique local addresses (RFC 4193).
                    Some(Reach::Private)
                } else {
                    Some(Reach::Public)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(text: &str) -> Option<Reach> {
        Reach::of(text.parse().expect("an address"))
    }

    #[test]
    fn addresses_are_classed_from_loopback_to_public() {
        assert_eq!(reach("127.0.0.1"), Some(Reach::Loopback));
        assert_eq!(reach("::1"), Some(Reach::Loopback));
        assert_eq!(reach("::ffff:127.0.0.1"), Some(Reach::Loopback));
        for private in ["10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "fd00::2"] {
            assert_eq!(reach(private), Some(Reach::Private), "{private}");
        }
        for public in ["93.184.216.34", "192.0.2.2", "2606:4700::1111", "100.128.0.1"] {
            assert_eq!(reach(public), Some(Reach::Public), "{public}");
        }
        for never in [
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "fe80::1",
            "::",
            "ff02::1",
        ] {
            assert_eq!(reach(never), None, "{never}");
        }
    }

    #[tokio::test]
    async fn a_url_is_as_internal_as_its_host() {
        let guarded = super::super::Guarded::new(super::super::system_resolver(), None).expect("client");
        let of = |text: &str| url::Url::parse(text).expect("url");
        assert_eq!(
            guarded.reach_of(&of("http://localhost:3000/x")).await,
            Ok(Reach::Loopback)
        );
        assert_eq!(guarded.reach_of(&of("https://10.1.2.3/x")).await, Ok(Reach::Private));
        assert_eq!(
            guarded.reach_of(&of("https://[2606:4700::1111]/x")).await,
            Ok(Reach::Public)
        );
        assert!(
            guarded
                .reach_of(&of("http://169.254.169.254/latest/meta-data"))
                .await
                .is_err()
        );
        // A public server may not name a private or loopback address, nor a private one loopback.
        assert!(Reach::Private < Reach::Public && Reach::Loopback < Reach::Private);
    }
}
