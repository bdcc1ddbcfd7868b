//! [`PermissionMode`]: how much an agent may do without a rule that allows it, with
//! Claude Code's five modes and the names its `settings.json` uses.

/// How much an agent may do without a matching rule.
///
/// Each mode is written the way Claude Code writes it (`acceptEdits`,
/// `bypassPermissions`); the spellings workflow files and `--permission-mode` accepted
/// before (`accept-edits`, `bypass`, ...) are read too.
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
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PermissionMode {
    /// Rules decide; a call no rule allows is asked about.
    #[default]
    #[strum(to_string = "default")]
    #[cfg_attr(feature = "clap", value(name = "default"))]
    Default,
    /// Like `default`, but file edits inside the writable roots need no rule.
    #[strum(to_string = "acceptEdits", serialize = "accept-edits", serialize = "accept_edits")]
    #[cfg_attr(feature = "clap", value(name = "acceptEdits", alias = "accept-edits"))]
    AcceptEdits,
    /// Read-only calls only.
    #[strum(to_string = "plan")]
    #[cfg_attr(feature = "clap", value(name = "plan"))]
    Plan,
    /// A call that would be asked about is denied instead.
    #[strum(to_string = "dontAsk", serialize = "dont-ask", serialize = "dont_ask")]
    #[cfg_attr(feature = "clap", value(name = "dontAsk", alias = "dont-ask"))]
    DontAsk,
    /// Every call no rule denies is allowed.
    #[strum(to_string = "bypassPermissions", serialize = "bypass", serialize = "bypass-permissions")]
    #[cfg_attr(feature = "clap", value(name = "bypassPermissions", alias = "bypass"))]
    BypassPermissions,
}

impl PermissionMode {
    /// Every mode's name as Claude Code writes it.
    pub const NAMES: [&'static str; 5] = ["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"];

    /// Every mode, in the order of [`Self::NAMES`].
    pub const ALL: [PermissionMode; 5] =
        [Self::Default, Self::AcceptEdits, Self::Plan, Self::DontAsk, Self::BypassPermissions];

    /// Reads a mode by Claude Code's name or one of orch's older spellings
    /// (`accept-edits`, `dont-ask`, `bypass`).
    pub fn parse(text: &str) -> Option<PermissionMode> {
        text.parse().ok()
    }

    /// The mode's name as Claude Code writes it: `acceptEdits`.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for PermissionMode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Claude Code's names, then the older spellings that are still read.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for PermissionMode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PermissionMode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "How much an agent may do without a matching rule, as Claude Code names it.",
            "type": "string",
            "enum": [
                "default", "acceptEdits", "plan", "dontAsk", "bypassPermissions",
                "accept-edits", "accept_edits", "dont-ask", "dont_ask", "bypass", "bypass-permissions",
            ],
        })
    }
}

/// Reads every name [`FromStr`](std::str::FromStr) reads; an unknown one is reported
/// with the canonical names only.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for PermissionMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PermissionMode, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PermissionMode;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a permission mode")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PermissionMode, E> {
                text.parse().map_err(|_| E::unknown_variant(text, &PermissionMode::NAMES))
            }
        }
        // The error comes from inside the value's own deserializer, so positioned
        // deserializers point at the value.
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn claude_code_names_are_canonical() {
        let names: Vec<_> = PermissionMode::iter().map(|m| m.as_str()).collect();
        assert_eq!(names, PermissionMode::NAMES);
        let unknown = serde_json::from_str::<PermissionMode>("\"yolo\"").unwrap_err().to_string();
        assert!(unknown.contains("expected one of `default`, `acceptEdits`, `plan`, `dontAsk`, `bypassPermissions`"));
        for mode in PermissionMode::iter() {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{mode}\""));
            assert_eq!(serde_json::from_str::<PermissionMode>(&json).unwrap(), mode);
            assert_eq!(mode.as_str().parse::<PermissionMode>(), Ok(mode));
        }
    }

    #[test]
    fn the_older_spellings_still_read() {
        for (text, mode) in [
            ("accept-edits", PermissionMode::AcceptEdits),
            ("bypass", PermissionMode::BypassPermissions),
            ("dont-ask", PermissionMode::DontAsk),
        ] {
            assert_eq!(text.parse::<PermissionMode>(), Ok(mode));
            assert_eq!(serde_json::from_str::<PermissionMode>(&format!("\"{text}\"")).unwrap(), mode);
        }
        assert!("yolo".parse::<PermissionMode>().is_err());
        assert!(serde_json::from_str::<PermissionMode>("\"Plan\"").is_err());
    }
}
