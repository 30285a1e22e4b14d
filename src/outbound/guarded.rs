//! The one client for requests to URLs that remote servers (or users) name: an `auth = "mcp"`
//! upstream's discovery, registration, code exchange, refresh and revocation, and later work of
//! the same kind (webhooks, push channels, enterprise sign-in). It resolves names itself, checks
//! every address against the address rule (`reach`), connects only to addresses that passed, and
//! follows no redirects, within a time limit (answers are read with `read_bounded`).
//!
//! The environment's `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are ignored: a proxy is
//! `[outbound] proxy` only. Through it, the proxy resolves names, so the rule checks only
//! addresses a URL spells out, and names as gatehouse resolved them when it checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use super::reach::Reach;

/// Time allowed for one request, its answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The operating system's resolver.
pub fn system_resolver() -> Arc<dyn Resolve> {
    Arc::new(System)
}

struct System;

impl Resolve for System {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

/// Resolves names with `inner`, keeping only addresses no more internal than `floor`.
struct Floored {
    floor: Reach,
    inner: Arc<dyn Resolve>,
}

impl Resolve for Floored {
    fn resolve(&self, name: Name) -> Resolving {
        let (floor, inner) = (self.floor, self.inner.clone());
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let allowed: Vec<SocketAddr> = inner
                .resolve(name)
                .await?
                .filter(|a| Reach::of(a.ip()).is_some_and(|r| r >= floor))
                .collect();
            if allowed.is_empty() {
                return Err(format!("{host} resolves to no address gatehouse may reach here").into());
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// See the module's comment: one client per floor of the address rule.
pub struct Guarded {
    resolver: Arc<dyn Resolve>,
    /// From the most internal floor to the most public.
    clients: [reqwest::Client; 3],
}

impl Guarded {
    /// Clients resolving with `resolver` (tests supply their own), through `proxy` when set.
    pub fn new(resolver: Arc<dyn Resolve>, proxy: Option<&Url>) -> Result<Self, reqwest::Error> {
        let build = |floor: Reach| {
            let builder = super::builder().timeout(REQUEST_TIMEOUT).no_proxy();
            match proxy {
                // The proxy resolves the names it is asked for; its own is the operator's.
                Some(proxy) => builder
                    .proxy(reqwest::Proxy::all(proxy.as_str())?)
                    .dns_resolver2(resolver.clone()),
                None => builder.dns_resolver2(Arc::new(Floored {
                    floor,
                    inner: resolver.clone(),
                }) as Arc<dyn Resolve>),
            }
            .build()
        };
        Ok(Self {
            clients: [build(Reach::Loopback)?, build(Reach::Private)?, build(Reach::Public)?],
            resolver,
        })
    }

    /// The client for URLs no more internal than `floor` (the reach of the server naming them).
    pub fn client(&self, floor: Reach) -> &reqwest::Client {
        &self.clients[floor as usize]
    }

    /// The reach of `url`'s host: of its address, or of the most internal address its name
    /// resolves to (`localhost` is loopback without asking).
    pub async fn reach_of(&self, url: &Url) -> Result<Reach, String> {
        let never = |ip: IpAddr| format!("{url} is on {ip}, an address gatehouse does not reach on a server's say");
        match url.host() {
            Some(Host::Ipv4(ip)) => Reach::of(IpAddr::V4(ip)).ok_or_else(|| never(IpAddr::V4(ip))),
            Some(Host::Ipv6(ip)) => Reach::of(IpAddr::V6(ip)).ok_or_else(|| never(IpAddr::V6(ip))),
            Some(Host::Domain(name)) if name.eq_ignore_ascii_case("localhost") => Ok(Reach::Loopback),
            Some(Host::Domain(name)) => {
                let parsed: Name = name.parse().map_err(|_| format!("{name} is not a host name"))?;
                let addresses = self
                    .resolver
                    .resolve(parsed)
                    .await
                    .map_err(|e| format!("{name} cannot be resolved: {e}"))?;
                let mut reach = None;
                for address in addresses {
                    let class = Reach::of(address.ip()).ok_or_else(|| never(address.ip()))?;
                    reach = Some(reach.map_or(class, |r: Reach| r.min(class)));
                }
                reach.ok_or_else(|| format!("{name} resolves to no address"))
            }
            None => Err(format!("{url} names no host")),
        }
    }

    /// `url` is no more internal than `floor`, as resolved now (a request to it is held to the
    /// same rule again when it connects).
    pub async fn within(&self, url: &Url, floor: Reach) -> Result<(), String> {
        let target = self.reach_of(url).await?;
        if target < floor {
            return Err(format!(
                "{url} is on a {} address, but the server is on a {} one",
                target.describe(),
                floor.describe()
            ));
        }
        Ok(())
    }
}
