//! The events a hook command can be bound to, named as Claude Code names them in
//! `.claude/settings.json`.

/// A point in an agent's life where hook commands run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "clap", value(rename_all = "verbatim"))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum HookEvent {
    InstructionsLoaded,
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    PostToolUseFailure,
    PostToolBatch,
    PermissionRequest,
    Notification,
    SubagentStart,
    SubagentStop,
    Stop,
    StopFailure,
    PreCompact,
    PostCompact,
    SessionEnd,
}

impl HookEvent {
    /// Every event, in the order of an agent's life.
    pub const ALL: [HookEvent; 16] = [
        HookEvent::InstructionsLoaded,
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::PostToolUseFailure,
        HookEvent::PostToolBatch,
        HookEvent::PermissionRequest,
        HookEvent::Notification,
        HookEvent::SubagentStart,
        HookEvent::SubagentStop,
        HookEvent::Stop,
        HookEvent::StopFailure,
        HookEvent::PreCompact,
        HookEvent::PostCompact,
        HookEvent::SessionEnd,
    ];

    /// The event's name: `PreToolUse`.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }

    /// Whether a hook of this event can stop what it is about (exit 2 or
    /// `decision: "block"`), as in Claude Code. For the others, exit 2 is only reported.
    pub fn can_block(&self) -> bool {
        matches!(
            self,
            HookEvent::UserPromptSubmit
                | HookEvent::PreToolUse
                | HookEvent::PostToolUse
                | HookEvent::PostToolUseFailure
                | HookEvent::PostToolBatch
                | HookEvent::PermissionRequest
                | HookEvent::SubagentStop
                | HookEvent::Stop
                | HookEvent::PreCompact
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn all_lists_every_event_by_its_settings_name() {
        assert_eq!(HookEvent::iter().collect::<Vec<_>>(), HookEvent::ALL);
        for event in HookEvent::ALL {
            assert_eq!(event.as_str().parse::<HookEvent>(), Ok(event));
            assert_eq!(serde_json::to_string(&event).unwrap(), format!("\"{}\"", event.as_str()));
        }
        assert_eq!(HookEvent::PreToolUse.to_string(), "PreToolUse");
        assert!("pre_tool_use".parse::<HookEvent>().is_err());
    }
}
