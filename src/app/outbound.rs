//! Outbound HTTPS: fetching documents named by others — a client's metadata document (its URL is
//! the attacker-chosen `client_id`) and an identity provider's JWKS. TLS is rustls with the
//! platform's roots and webpki's, plus an optional extra CA file for private providers. On a
//! deployed server every address a host resolves to must be global (no loopback, private,
//! link-local, CGNAT, unique-local, IPv4-mapped, documentation, multicast …); the connection then
//! goes to exactly the address that was checked (no second lookup an attacker's DNS could
//! answer differently), redirects are never followed, and size and time are capped. Every
//! failure reads the same to the caller, so a refusal never tells whether a port answered.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

/// The one thing a caller learns of a failed fetch (the cause goes to the debug log).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the document cannot be fetched")]
pub struct FetchFailed;

/// The outbound HTTP client's policy.
#[derive(Clone)]
pub struct Outbound {
    roots: Vec<reqwest::Certificate>,
    /// Development (the service itself on plain http): plain http and private addresses allowed.
    development: bool,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound").field("extra_roots", &self.roots.len()).field("development", &self.development).finish()
    }
}

impl Outbound {
    /// The policy: an optional PEM file of extra trusted CA certificates; `development` allows
    /// plain http and non-global addresses.
    pub fn new(ca_file: Option<&Path>, development: bool) -> anyhow::Result<Self> {
        let roots = match ca_file {
            None => Vec::new(),
            Some(path) => {
                let pem = std::fs::read(path).with_context(|| format!("cannot read the outbound CA file {}", path.display()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .with_context(|| format!("the outbound CA file {} is not PEM certificates", path.display()))?;
                anyhow::ensure!(!certs.is_empty(), "the outbound CA file {} holds no certificate", path.display());
                certs
            }
        };
        Ok(Self { roots, development })
    }

    /// GETs `url` and returns its body (at most `max_bytes`), or [`FetchFailed`].
    pub async fn get(&self, url: &str, max_bytes: usize, timeout: Duration) -> Result<Vec<u8>, FetchFailed> {
        match tokio::time::timeout(timeout, self.fetch(url, max_bytes, timeout)).await {
            Ok(Ok(body)) => Ok(body),
            Ok(Err(e)) => {
                tracing::debug!(%url, error = %e, "outbound fetch failed");
                Err(FetchFailed)
            }
            Err(_) => {
                tracing::debug!(%url, "outbound fetch timed out");
                Err(FetchFailed)
            }
        }
    }

    async fn fetch(&self, url: &str, max_bytes: usize, timeout: Duration) -> anyhow::Result<Vec<u8>> {
        let parsed = url::Url::parse(url)?;
        anyhow::ensure!(parsed.scheme() == "https" || (self.development && parsed.scheme() == "http"), "scheme {}", parsed.scheme());
        let port = parsed.port_or_known_default().context("no port")?;
        let host = parsed.host().context("no host")?;
        let candidates: Vec<SocketAddr> = match host {
            url::Host::Ipv4(ip) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
            url::Host::Ipv6(ip) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
            url::Host::Domain(domain) => tokio::net::lookup_host((domain, port)).await?.collect(),
        };
        anyhow::ensure!(!candidates.is_empty(), "no address");
        // Every address must pass, not just one: a name resolving to a public and a private
        // address is refused rather than hoping for the public one.
        if !self.development {
            if let Some(bad) = candidates.iter().find(|a| !is_global(a.ip())) {
                anyhow::bail!("non-global address {bad}");
            }
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout)
            .timeout(timeout)
            .no_proxy();
        if let url::Host::Domain(domain) = host {
            // Connect only to the checked addresses; TLS still verifies the name.
            builder = builder.resolve_to_addrs(domain, &candidates);
        }
        for root in &self.roots {
            builder = builder.add_root_certificate(root.clone());
        }
        let mut response = builder.build()?.get(parsed).send().await?;
        anyhow::ensure!(response.status().is_success(), "status {}", response.status());
        anyhow::ensure!(response.content_length().is_none_or(|n| n <= max_bytes as u64), "declared too large");
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            anyhow::ensure!(body.len() + chunk.len() <= max_bytes, "too large");
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Whether an address is reachable on the public internet: every special-purpose range of the
/// IANA registries is not, and IPv6 forms that embed an IPv4 address are judged by it.
pub(crate) fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let special = a == 0                                  // "this network"
        || a == 10                                        // private
        || a == 127                                       // loopback
        || (a == 100 && (64..128).contains(&b))           // CGNAT 100.64/10
        || (a == 169 && b == 254)                         // link-local
        || (a == 172 && (16..32).contains(&b))            // private
        || (a == 192 && b == 0 && c == 0)                 // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)                 // TEST-NET-1
        || (a == 192 && b == 88 && c == 99)               // 6to4 relay anycast
        || (a == 192 && b == 168)                         // private
        || (a == 198 && (18..20).contains(&b))            // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100)              // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)               // TEST-NET-3
        || a >= 224; // multicast 224/4, reserved 240/4, broadcast
    !special
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // IPv4-mapped ::ffff:a.b.c.d and the deprecated IPv4-compatible ::a.b.c.d: never trusted as
    // a way around the IPv4 rules (the compatible form and :: and ::1 included).
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0 || s[5] == 0xffff) {
        return false;
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if s[0] == 0x0064 && s[1] == 0xff9b {
        // NAT64 64:ff9b::/96 (and the local-use /48): judged by the IPv4 address it carries.
        return s[2..6] == [0, 0, 0, 0] && is_global_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        // 6to4: judged by the IPv4 address it carries.
        return is_global_v4(embedded(s[1], s[2]));
    }
    let special = (s[0] & 0xfe00) == 0xfc00                 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80                      // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0                      // site-local (deprecated) fec0::/10
        || (s[0] & 0xff00) == 0xff00                      // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8)             // documentation 2001:db8::/32
        || (s[0] == 0x3fff && s[1] < 0x1000)              // documentation 3fff::/20
        || (s[0] == 0x2001 && s[1] == 0)                  // Teredo 2001::/32
        || (s[0] == 0x2001 && (s[1] & 0xfff0) == 0x0010)  // ORCHID 2001:10::/28, 2001:20::/28
        || (s[0] == 0x2001 && (s[1] & 0xfff0) == 0x0020)
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]); // discard 100::/64
    !special
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_special_purpose_address_class_is_refused_and_public_ones_pass() {
        let refused = [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.7",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "192.88.99.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "::127.0.0.1",
            "::8.8.8.8",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "3fff::1",
            "2001::1",
            "2001:10::1",
            "2001:20::1",
            "100::1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::808:808",
            "2002:7f00:1::1",
            "2002:c0a8:101::1",
        ];
        for ip in refused {
            assert!(!is_global(ip.parse().unwrap()), "{ip} must be refused");
        }
        let allowed = [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for ip in allowed {
            assert!(is_global(ip.parse().unwrap()), "{ip} must pass");
        }
    }

    #[tokio::test]
    async fn a_deployed_server_refuses_private_targets_with_one_message_whatever_answers() {
        let deployed = Outbound::new(None, false).unwrap();
        // A port that answers and one that does not: the same refusal.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        for url in [
            format!("https://127.0.0.1:{open}/c.json"),
            format!("https://127.0.0.1:{closed}/c.json"),
            format!("https://localhost:{open}/c.json"),
            format!("https://[::ffff:127.0.0.1]:{open}/c.json"),
            "http://example.com/c.json".to_owned(),
            "ftp://example.com/c.json".to_owned(),
        ] {
            let err = deployed.get(&url, 1024, Duration::from_secs(2)).await.unwrap_err();
            assert_eq!(err.to_string(), "the document cannot be fetched", "{url}");
        }
    }
}
