//! Where an agent's tools run and what network they reach: [`Backend`], [`Network`] (what
//! a sandbox enforces) and [`NetworkSetting`] (what a workflow writes: `none`, `full` or
//! an allowlist of host names, enforced by the coordinator's egress proxy).

/// Which mechanism confines an agent's tools.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[strum(serialize_all = "lowercase")]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Backend {
    /// Landlock, seccomp and rlimits; as root also a per-agent uid and a cgroup. The
    /// default on Linux.
    #[default]
    Landlock,
    /// One Docker container per agent.
    Container,
    /// No confinement at all. Explicit opt-in only; every run warns.
    None,
}

impl Backend {
    /// The name workflow files and the command line use: `landlock`, `container`, `none`.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

/// Network access of a sandbox, as the sandbox enforces it.
///
/// A workflow's allowlist ([`NetworkSetting::Allow`]) becomes [`Network::Proxy`] here:
/// the sandbox only learns that its one way out is the egress proxy on
/// `127.0.0.1:<port>`; the host names stay with the coordinator's proxy.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[strum(serialize_all = "lowercase")]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Network {
    /// No sockets that leave the sandbox; under Landlock also no new Unix sockets
    /// (`socketpair` still works).
    #[default]
    None,
    /// Unrestricted IP network (for `setup:` steps that fetch dependencies); still no
    /// new Unix sockets, so no daemon on the host is reachable.
    Full,
    /// Only the coordinator's egress proxy, on `127.0.0.1:<port>` inside the sandbox;
    /// no other address, no DNS. Not a value of workflows or flags: an allowlist
    /// ([`NetworkSetting::Allow`]) stands for it there.
    #[strum(disabled)]
    #[cfg_attr(feature = "clap", value(skip))]
    Proxy,
}

impl Network {
    /// The name workflow files and the command line use: `none`, `full` (`proxy` for
    /// the sandbox's own form of an allowlist).
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

/// The registries each `preset:NAME` of an allowlist stands for.
pub const NETWORK_PRESETS: &[(&str, &[&str])] = &[
    ("rust", &["crates.io", "index.crates.io", "static.crates.io", "static.rust-lang.org"]),
    ("node", &["registry.npmjs.org"]),
    ("python", &["pypi.org", "files.pythonhosted.org"]),
];

/// `sandbox.network` as a workflow (or `setup:`) writes it: `none`, `full`, or
/// `{allow: [...], deny: [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum NetworkSetting {
    #[default]
    None,
    Full,
    /// Only the listed hosts, through the coordinator's egress proxy.
    Allow(Allowlist),
}

/// The host lists of an allowlist, as written (presets not expanded). Each entry is a
/// host name, `*.domain` (any name below it), `*`, `preset:rust|node|python`, an IP
/// address or a CIDR range; `deny` wins over `allow`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Allowlist {
    #[cfg_attr(feature = "serde", serde(default, deserialize_with = "de::entries"))]
    pub allow: Vec<String>,
    #[cfg_attr(feature = "serde", serde(default, deserialize_with = "de::entries"))]
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub deny: Vec<String>,
    /// Credentials the proxy adds to requests for one allowed host each; the sandbox
    /// never sees their values.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Vec::is_empty"))]
    pub credentials: Vec<Credential>,
}

/// A secret the egress proxy adds to every HTTPS request for one host (exact name and
/// port), terminating TLS for that host only. The value comes from the coordinator's
/// environment variable that `basic_env` (`user:token`, sent as HTTP Basic) or
/// `bearer_env` (sent as `Authorization: Bearer`) names; a workflow never holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Credential {
    /// `host` or `host:port` (port 443 when none is given).
    pub host: String,
    /// The variable holding `user:token`, sent as `Authorization: Basic`.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub basic_env: Option<String>,
    /// The variable holding a token, sent as `Authorization: Bearer`.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub bearer_env: Option<String>,
    /// A PEM file of the certificate authority that verifies the real server (relative
    /// paths from the repository root); the system's roots (honouring `SSL_CERT_FILE`)
    /// when absent.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub ca: Option<String>,
}

/// How a credential is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    Basic,
    Bearer,
}

impl Credential {
    /// The variable that holds the value and how it is sent; `None` unless exactly one
    /// of `basic_env` and `bearer_env` is set.
    pub fn variable(&self) -> Option<(&str, CredentialKind)> {
        match (&self.basic_env, &self.bearer_env) {
            (Some(v), None) => Some((v, CredentialKind::Basic)),
            (None, Some(v)) => Some((v, CredentialKind::Bearer)),
            _ => None,
        }
    }

    /// The host name (lowercase, no trailing dot) and port the credential is for.
    pub fn host_port(&self) -> Option<(String, u16)> {
        let text = self.host.trim();
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().ok().filter(|p| *p != 0)?),
            None => (text, 443),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let valid = !name.starts_with('*')
            && !name.starts_with('[')
            && name.parse::<std::net::IpAddr>().is_err()
            && check_network_entry(&name).is_ok()
            && !name.starts_with("preset:");
        valid.then_some((name, port))
    }

    /// What is wrong with the entry's shape, as (field, message, hint); `None` when it
    /// is well formed. Whether the host is allowed and the variable set is checked by
    /// the workflow's validation.
    pub fn problem(&self) -> Option<(&'static str, String, String)> {
        if self.host_port().is_none() {
            return Some((
                "host",
                format!("`{}` is not a host name with an optional port", self.host),
                "write one exact host name, e.g. `git.example.com` or `git.example.com:8443` (no patterns, addresses or presets)"
                    .into(),
            ));
        }
        let Some((var, _)) = self.variable() else {
            return Some((
                "host",
                format!("the credential for `{}` names no variable, or two", self.host),
                "write exactly one of `basic_env: VAR` (VAR holds user:token) or `bearer_env: VAR` (VAR holds a token)"
                    .into(),
            ));
        };
        let field = if self.basic_env.is_some() { "basic_env" } else { "bearer_env" };
        if !is_variable_name(var) {
            return Some((
                field,
                format!("`{field}` must name an environment variable, and this is not a variable name"),
                "put the secret in the coordinator's environment (e.g. a CI secret) and write its name, e.g. `GIT_TOKEN`; a workflow must never hold the value itself"
                    .into(),
            ));
        }
        if self.ca.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Some(("ca", "empty `ca` path".into(), "name a PEM file, or remove `ca`".into()));
        }
        None
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Allowlist {
    /// Whether the lists let an agent reach `name` by name (exact entries, `*.domain`,
    /// `*`, presets; deny wins). The proxy enforces the same rules on every request.
    pub fn allows_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let matches = |entry: &String| {
            let entry = entry.trim().trim_end_matches('.').to_ascii_lowercase();
            if entry == "*" {
                return true;
            }
            if let Some(preset) = entry.strip_prefix("preset:") {
                return NETWORK_PRESETS.iter().any(|(n, hosts)| *n == preset && hosts.contains(&name.as_str()));
            }
            match entry.strip_prefix("*.") {
                Some(domain) => name.ends_with(&format!(".{domain}")),
                None => entry == name,
            }
        };
        !self.deny.iter().any(matches) && self.allow.iter().any(matches)
    }
}

#[cfg(feature = "schemars")]
impl schemars::JsonSchema for NetworkSetting {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NetworkSetting".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let allowlist = generator.subschema_for::<Allowlist>();
        schemars::json_schema!({
            "description": "`none`, `full`, or only the listed hosts through orch's egress proxy.",
            "oneOf": [{"type": "string", "enum": ["none", "full"]}, allowlist],
        })
    }
}

impl NetworkSetting {
    /// What the sandbox enforces for this setting.
    pub fn mode(&self) -> Network {
        match self {
            NetworkSetting::None => Network::None,
            NetworkSetting::Full => Network::Full,
            NetworkSetting::Allow(_) => Network::Proxy,
        }
    }

    /// The allowlist, if this setting is one.
    pub fn allowlist(&self) -> Option<&Allowlist> {
        match self {
            NetworkSetting::Allow(list) => Some(list),
            _ => None,
        }
    }

    /// One line for plans and reports: `none`, `full`, `allow a, b; deny c`.
    pub fn describe(&self) -> String {
        match self {
            NetworkSetting::None => "none".into(),
            NetworkSetting::Full => "full".into(),
            NetworkSetting::Allow(list) => {
                let mut text =
                    format!("allow {}", if list.allow.is_empty() { "(nothing)".into() } else { list.allow.join(", ") });
                if !list.deny.is_empty() {
                    text.push_str("; deny ");
                    text.push_str(&list.deny.join(", "));
                }
                if !list.credentials.is_empty() {
                    let hosts: Vec<&str> = list.credentials.iter().map(|c| c.host.as_str()).collect();
                    text.push_str("; credentials for ");
                    text.push_str(&hosts.join(", "));
                }
                text
            }
        }
    }
}

impl From<Network> for NetworkSetting {
    /// `none` and `full` as themselves; `proxy` (which carries no lists) as `none`.
    fn from(network: Network) -> Self {
        match network {
            Network::Full => NetworkSetting::Full,
            Network::None | Network::Proxy => NetworkSetting::None,
        }
    }
}

/// Checks one allowlist entry's syntax: a host name, `*.domain`, `*`, a known
/// `preset:NAME`, an IP address or a CIDR range. The error says what to write.
pub fn check_network_entry(entry: &str) -> Result<(), String> {
    let text = entry.trim();
    if text == "*" {
        return Ok(());
    }
    if let Some(name) = text.strip_prefix("preset:") {
        return if NETWORK_PRESETS.iter().any(|(n, _)| *n == name) {
            Ok(())
        } else {
            Err(format!("unknown network preset `{text}`: use preset:rust, preset:node or preset:python"))
        };
    }
    let bad =
        || Err(format!("`{text}` is not a host name, a `*.domain` pattern, a preset, an IP address or a CIDR range"));
    if let Some((addr, bits)) = text.split_once('/') {
        let Ok(addr) = addr.parse::<std::net::IpAddr>() else { return bad() };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        return match bits.parse::<u8>() {
            Ok(b) if b <= max => Ok(()),
            _ => bad(),
        };
    }
    if text.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let name = text.strip_prefix("*.").unwrap_or(text).trim_end_matches('.');
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if valid { Ok(()) } else { bad() }
}

#[cfg(feature = "serde")]
mod de {
    use std::fmt;

    use serde::Deserialize as _;
    use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::ser::Serializer;

    use super::{Allowlist, NetworkSetting};

    /// A list of allowlist entries, each checked where it stands (so the error points
    /// at the entry).
    pub fn entries<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        struct Entry(String);
        impl<'de> serde::Deserialize<'de> for Entry {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // Checked inside the visitor, so a positioned deserializer tags the
                // error with the entry's own place.
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Entry;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a host name, `*.domain`, a preset, an IP address or a CIDR range")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Entry, E> {
                        super::check_network_entry(v).map_err(E::custom)?;
                        Ok(Entry(v.trim().to_string()))
                    }
                }
                d.deserialize_str(V)
            }
        }
        Ok(Vec::<Entry>::deserialize(d)?.into_iter().map(|e| e.0).collect())
    }

    impl serde::Serialize for NetworkSetting {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                NetworkSetting::None => s.serialize_str("none"),
                NetworkSetting::Full => s.serialize_str("full"),
                NetworkSetting::Allow(list) => list.serialize(s),
            }
        }
    }

    impl<'de> serde::Deserialize<'de> for NetworkSetting {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = NetworkSetting;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("`none`, `full` or a mapping `{allow: [...], deny: [...]}`")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<NetworkSetting, E> {
                    match v {
                        "none" => Ok(NetworkSetting::None),
                        "full" => Ok(NetworkSetting::Full),
                        other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                    }
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NetworkSetting, A::Error> {
                    Allowlist::deserialize(de::value::MapAccessDeserializer::new(map)).map(NetworkSetting::Allow)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<NetworkSetting, A::Error> {
                    Err(de::Error::invalid_type(de::Unexpected::Seq, &self))
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn names_round_trip_through_text_and_serde() {
        for backend in Backend::iter() {
            assert_eq!(backend.as_str().parse::<Backend>(), Ok(backend));
            let json = serde_json::to_string(&backend).unwrap();
            assert_eq!(json, format!("\"{}\"", backend.as_str()));
            assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), backend);
        }
        for network in Network::iter() {
            assert_eq!(network.as_str().parse::<Network>(), Ok(network));
            let json = serde_json::to_string(&network).unwrap();
            assert_eq!(json, format!("\"{}\"", network.as_str()));
            assert_eq!(serde_json::from_str::<Network>(&json).unwrap(), network);
        }
        assert_eq!(Backend::iter().map(|b| b.as_str()).collect::<Vec<_>>(), ["landlock", "container", "none"]);
        assert_eq!(Network::iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["none", "full"]);
        assert!("proxy".parse::<Network>().is_err(), "`proxy` is not a value of flags or workflows");
        assert!("Landlock!".parse::<Backend>().is_err());
    }

    #[test]
    fn credentials_name_one_exact_host_and_one_variable() {
        let c = |host: &str, basic: Option<&str>, bearer: Option<&str>| Credential {
            host: host.into(),
            basic_env: basic.map(Into::into),
            bearer_env: bearer.map(Into::into),
            ca: None,
        };
        assert_eq!(c("Git.Example.com.", Some("V"), None).host_port(), Some(("git.example.com".into(), 443)));
        assert_eq!(c("git.example.com:8443", None, Some("V")).host_port(), Some(("git.example.com".into(), 8443)));
        for bad in ["*.example.com", "10.0.0.1", "[::1]:443", "::1", "preset:rust", "git.example.com:0", "a b", ""] {
            assert!(c(bad, Some("V"), None).problem().is_some(), "{bad}");
        }
        assert!(c("git.example.com", Some("V"), Some("W")).problem().is_some());
        assert!(c("git.example.com", None, None).problem().is_some());
        assert!(c("git.example.com", Some("user:ghp_x"), None).problem().is_some());
        assert!(c("git.example.com", Some("GIT_BASIC"), None).problem().is_none());
        let list = Allowlist {
            allow: vec!["*.example.com".into(), "preset:rust".into(), "exact.org".into()],
            deny: vec!["bad.example.com".into()],
            credentials: vec![],
        };
        assert!(list.allows_name("git.example.com") && list.allows_name("crates.io") && list.allows_name("Exact.org."));
        assert!(!list.allows_name("example.com") && !list.allows_name("bad.example.com") && !list.allows_name("x.org"));
    }

    #[test]
    fn network_settings_read_names_and_allowlists() {
        let none: NetworkSetting = serde_json::from_str("\"none\"").unwrap();
        assert_eq!(none, NetworkSetting::None);
        let full: NetworkSetting = serde_json::from_str("\"full\"").unwrap();
        assert_eq!(full.mode(), Network::Full);
        let list: NetworkSetting = serde_json::from_str(
            r#"{"allow": ["preset:rust", "*.example.com", "10.0.0.0/8"], "deny": ["a.example.com"]}"#,
        )
        .unwrap();
        assert_eq!(list.mode(), Network::Proxy);
        assert_eq!(list.describe(), "allow preset:rust, *.example.com, 10.0.0.0/8; deny a.example.com");
        let back = serde_json::to_string(&list).unwrap();
        assert_eq!(serde_json::from_str::<NetworkSetting>(&back).unwrap(), list);
        for bad in [
            r#""proxy""#,
            r#""some""#,
            r#"{"allow": ["preset:cobol"]}"#,
            r#"{"allow": ["bad host!"]}"#,
            r#"{"allow": ["10.0.0.0/33"]}"#,
            r#"{"allowed": ["x.org"]}"#,
        ] {
            assert!(serde_json::from_str::<NetworkSetting>(bad).is_err(), "{bad}");
        }
        assert!(check_network_entry("*").is_ok() && check_network_entry("::1").is_ok());
    }
}
