//! Where an agent's tools run and what network they reach: [`Backend`] and [`Network`].

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

/// Network access of an agent's tools.
///
/// A policy that lists allowed and denied hosts (`{allow, deny}`) is meant to join
/// these variants. It will carry lists, so that change drops `Copy` (the sandbox then
/// passes `&Network`) and writes `ValueEnum` and the serde form by hand (a plain name,
/// or a mapping); nothing else here assumes the variants carry no data.
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
    /// Unrestricted network (for `setup:` steps that fetch dependencies).
    Full,
}

impl Network {
    /// The name workflow files and the command line use: `none`, `full`.
    pub fn as_str(&self) -> &'static str {
        self.into()
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
        assert!("Landlock!".parse::<Backend>().is_err());
    }
}
