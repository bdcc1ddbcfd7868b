//! The egress policy of one agent: which host names it may reach, which it may not, and
//! which addresses count as allowed even though they are private.
//!
//! Names are matched, never addresses the sandbox chose: the proxy resolves every name
//! itself, and a name that resolves to a loopback, private or link-local address is
//! refused unless that address is allowed explicitly (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a policy could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("unknown network preset `{0}`: use one of preset:rust, preset:node, preset:python")]
    UnknownPreset(String),
    #[error("`{0}` is not a host name, a `*.domain` pattern, an IP address or a CIDR range")]
    BadEntry(String),
}

/// The registries each preset stands for (one list, in `orch-types`).
pub use orch_types::NETWORK_PRESETS as PRESETS;

/// One entry of an allow or deny list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// `example.com`: that name only.
    Exact(String),
    /// `*.example.com`: any name below it, not the name itself.
    Below(String),
    /// `*`: every name.
    Any,
    /// An address or a range: allows reaching it even when it is private.
    Net(IpAddr, u8),
}

/// The decision for one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

/// An agent's allow and deny lists, presets expanded.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    allow: Vec<Entry>,
    deny: Vec<Entry>,
}

impl EgressPolicy {
    /// Builds a policy from the workflow's lists. Entries are host names, `*.domain`
    /// patterns, `*`, `preset:NAME`, IP addresses or CIDR ranges (allow only).
    pub fn new<S: AsRef<str>>(allow: &[S], deny: &[S]) -> Result<Self, PolicyError> {
        Ok(EgressPolicy { allow: parse_list(allow)?, deny: parse_list(deny)? })
    }

    /// Whether `host` may be reached by name. Deny wins over allow; no match is a deny.
    pub fn decide(&self, host: &str) -> Verdict {
        let host = normalize(host);
        if host.is_empty() {
            return Verdict::Deny("empty host name".into());
        }
        if let Some(entry) = self.deny.iter().find(|e| e.matches_name(&host)) {
            return Verdict::Deny(format!("denied by `{}`", entry.text()));
        }
        if self.allow.iter().any(|e| e.matches_name(&host)) {
            Verdict::Allow
        } else {
            Verdict::Deny(format!("`{host}` is not in the agent's network allowlist"))
        }
    }

    /// Whether the proxy may connect to `addr` on behalf of an allowed name: public
    /// addresses always, private ones only when an allow entry names them.
    pub fn address_allowed(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        if self.deny.iter().any(|e| e.contains(addr)) {
            return false;
        }
        !is_private(addr) || self.allow.iter().any(|e| e.contains(addr))
    }
}

fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<Vec<Entry>, PolicyError> {
    let mut out = Vec::new();
    for item in items {
        let item = item.as_ref().trim();
        if let Some(name) = item.strip_prefix("preset:") {
            let Some((_, hosts)) = PRESETS.iter().find(|(n, _)| *n == name) else {
                return Err(PolicyError::UnknownPreset(item.to_string()));
            };
            for host in *hosts {
                out.push(parse_entry(host)?);
            }
        } else {
            out.push(parse_entry(item)?);
        }
    }
    Ok(out)
}

fn parse_entry(text: &str) -> Result<Entry, PolicyError> {
    let bad = || PolicyError::BadEntry(text.to_string());
    if text == "*" {
        return Ok(Entry::Any);
    }
    if let Some((addr, bits)) = text.split_once('/') {
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let bits: u8 = bits.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if bits > max {
            return Err(bad());
        }
        return Ok(Entry::Net(canonical(addr), bits));
    }
    if let Ok(addr) = text.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        let addr = canonical(addr);
        return Ok(Entry::Net(addr, if addr.is_ipv4() { 32 } else { 128 }));
    }
    let (below, name) = match text.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let name = normalize(name);
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid {
        return Err(bad());
    }
    Ok(if below { Entry::Below(name) } else { Entry::Exact(name) })
}

impl Entry {
    fn matches_name(&self, host: &str) -> bool {
        match self {
            Entry::Exact(name) => host == name,
            Entry::Below(name) => {
                host.len() > name.len() + 1 && host.ends_with(name.as_str()) && {
                    let cut = host.len() - name.len();
                    host.as_bytes()[cut - 1] == b'.'
                }
            }
            Entry::Any => true,
            // A literal address in the CONNECT line is matched as a name too.
            Entry::Net(..) => host.parse::<IpAddr>().is_ok_and(|a| self.contains(canonical(a))),
        }
    }

    fn contains(&self, addr: IpAddr) -> bool {
        let Entry::Net(net, bits) = self else { return false };
        match (net, addr) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), *bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), *bits),
            _ => false,
        }
    }

    fn text(&self) -> String {
        match self {
            Entry::Exact(n) => n.clone(),
            Entry::Below(n) => format!("*.{n}"),
            Entry::Any => "*".into(),
            Entry::Net(a, b) => format!("{a}/{b}"),
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let full = usize::from(bits / 8);
    let rest = bits % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

/// Lower case, without a trailing dot.
pub fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, private, link-local, shared, unspecified, multicast or reserved: anything a
/// public name has no business resolving to.
pub fn is_private(addr: IpAddr) -> bool {
    match canonical(addr) {
        IpAddr::V4(a) => is_private_v4(a),
        IpAddr::V6(a) => is_private_v6(a),
    }
}

fn is_private_v4(a: Ipv4Addr) -> bool {
    let [o0, o1, ..] = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o0 == 0
        || (o0 == 100 && (o1 & 0xc0) == 64) // 100.64.0.0/10, shared address space
        || (o0 == 192 && o1 == 0 && a.octets()[2] == 0) // 192.0.0.0/24
        || (o0 == 198 && (o1 & 0xfe) == 18) // 198.18.0.0/15, benchmarking
        || o0 >= 240
}

fn is_private_v6(a: Ipv6Addr) -> bool {
    let first = a.segments()[0];
    a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || first == 0x2001 && a.segments()[1] == 0x0db8 // documentation
        || a.segments()[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Validation (`Allowlist::allows_name`, in orch-types, for credential hosts) and
    /// the proxy decide names the same way.
    #[test]
    fn validation_and_the_proxy_agree_on_names() {
        let lists: [(&[&str], &[&str]); 4] = [
            (&["*.example.com", "exact.org", "preset:rust"], &["bad.example.com"]),
            (&["*"], &["*.internal.example"]),
            (&["example.com", "10.0.0.0/8"], &[]),
            (&["preset:node", "preset:python"], &["pypi.org"]),
        ];
        let names = [
            "example.com",
            "git.example.com",
            "a.b.example.com",
            "bad.example.com",
            "exact.org",
            "Exact.Org.",
            "x.exact.org",
            "crates.io",
            "index.crates.io",
            "registry.npmjs.org",
            "pypi.org",
            "files.pythonhosted.org",
            "host.internal.example",
            "elsewhere.net",
            "notexample.com",
        ];
        for (allow, deny) in lists {
            let policy = EgressPolicy::new(allow, deny).unwrap();
            let list = orch_types::Allowlist {
                allow: allow.iter().map(|s| s.to_string()).collect(),
                deny: deny.iter().map(|s| s.to_string()).collect(),
                credentials: vec![],
            };
            for name in names {
                let proxy = policy.decide(name) == Verdict::Allow;
                assert_eq!(list.allows_name(name), proxy, "{name} under allow {allow:?} deny {deny:?}");
            }
        }
    }

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        EgressPolicy::new(allow, deny).unwrap()
    }

    #[test]
    fn names_match_exactly_or_below_a_wildcard() {
        let p = policy(&["crates.io", "*.npmjs.org"], &[]);
        assert_eq!(p.decide("crates.io"), Verdict::Allow);
        assert_eq!(p.decide("CRATES.IO."), Verdict::Allow);
        assert!(matches!(p.decide("static.crates.io"), Verdict::Deny(_)));
        assert_eq!(p.decide("registry.npmjs.org"), Verdict::Allow);
        assert!(matches!(p.decide("npmjs.org"), Verdict::Deny(_)));
        assert!(matches!(p.decide("evilnpmjs.org"), Verdict::Deny(_)));
        assert!(matches!(p.decide("crates.io.evil.com"), Verdict::Deny(_)));
    }

    #[test]
    fn deny_wins_over_allow() {
        let p = policy(&["*"], &["internal.example.com", "*.corp.example"]);
        assert_eq!(p.decide("example.com"), Verdict::Allow);
        assert!(matches!(p.decide("internal.example.com"), Verdict::Deny(_)));
        assert!(matches!(p.decide("git.corp.example"), Verdict::Deny(_)));
    }

    #[test]
    fn presets_expand_and_unknown_presets_fail() {
        let p = policy(&["preset:rust", "preset:python"], &[]);
        assert_eq!(p.decide("index.crates.io"), Verdict::Allow);
        assert_eq!(p.decide("static.crates.io"), Verdict::Allow);
        assert!(matches!(p.decide("evil.crates.io"), Verdict::Deny(_)));
        assert_eq!(p.decide("files.pythonhosted.org"), Verdict::Allow);
        assert!(matches!(p.decide("registry.npmjs.org"), Verdict::Deny(_)));
        assert_eq!(
            EgressPolicy::new(&["preset:cobol"], &[]).unwrap_err(),
            PolicyError::UnknownPreset("preset:cobol".into())
        );
        assert!(EgressPolicy::new(&["bad host!"], &[]).is_err());
        assert!(EgressPolicy::new(&["10.0.0.0/33"], &[]).is_err());
    }

    #[test]
    fn private_addresses_need_an_explicit_allow() {
        let p = policy(&["*", "127.0.0.1", "10.1.0.0/16"], &[]);
        assert!(p.address_allowed("93.184.216.34".parse().unwrap()));
        assert!(p.address_allowed("127.0.0.1".parse().unwrap()));
        assert!(!p.address_allowed("127.0.0.2".parse().unwrap()));
        assert!(p.address_allowed("10.1.2.3".parse().unwrap()));
        assert!(!p.address_allowed("10.2.0.1".parse().unwrap()));
        for private in
            ["192.168.1.1", "172.16.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00::1"]
        {
            assert!(!p.address_allowed(private.parse().unwrap()), "{private}");
        }
        // Mapped addresses are judged as what they map.
        assert!(!p.address_allowed("::ffff:192.168.1.1".parse().unwrap()));
        assert!(p.address_allowed("::ffff:127.0.0.1".parse().unwrap()));
    }
}
