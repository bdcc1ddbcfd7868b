//! The known limits of common models: context window, the largest output the API
//! allows, and the output cap orch asks for by default. Unknown models get
//! conservative values.

/// The sizes of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Tokens of prompt and answer together.
    pub context_window: u64,
    /// The largest `max_tokens` the API accepts for one answer.
    pub max_output_tokens: u32,
    /// The output cap of a normal call; a cut answer may be retried up to
    /// `max_output_tokens`.
    pub default_output_tokens: u32,
}

/// Used for a model the table does not know.
pub const UNKNOWN_MODEL: ModelLimits =
    ModelLimits { context_window: 128_000, max_output_tokens: 8_192, default_output_tokens: 8_192 };

const fn limits(context_window: u64, max_output_tokens: u32, default_output_tokens: u32) -> ModelLimits {
    ModelLimits { context_window, max_output_tokens, default_output_tokens }
}

/// Model name prefixes and their limits. The longest matching prefix wins, so dated
/// names (`claude-sonnet-4-5-20250929`) and provider prefixes are matched by family.
const TABLE: &[(&str, ModelLimits)] = &[
    // Anthropic, Claude 4.x families.
    ("claude-opus-4-5", limits(200_000, 64_000, 32_000)),
    ("claude-opus-4-1", limits(200_000, 32_000, 32_000)),
    ("claude-opus-4", limits(200_000, 32_000, 32_000)),
    ("claude-sonnet-4-5", limits(200_000, 64_000, 32_000)),
    ("claude-sonnet-4", limits(200_000, 64_000, 32_000)),
    ("claude-haiku-4-5", limits(200_000, 64_000, 32_000)),
    ("claude-3-7-sonnet", limits(200_000, 64_000, 32_000)),
    ("claude-3-5-sonnet", limits(200_000, 8_192, 8_192)),
    ("claude-3-5-haiku", limits(200_000, 8_192, 8_192)),
    // OpenAI.
    ("gpt-5", limits(400_000, 128_000, 32_000)),
    ("gpt-4.1", limits(1_047_576, 32_768, 32_768)),
    ("gpt-4o", limits(128_000, 16_384, 16_384)),
    ("o4-mini", limits(200_000, 100_000, 32_000)),
    ("o3", limits(200_000, 100_000, 32_000)),
];

/// The limits of `model`, by the longest known prefix of its name (after any
/// `provider/` part); [`UNKNOWN_MODEL`] when none matches.
pub fn limits_for(model: &str) -> ModelLimits {
    let name = model.rsplit('/').next().unwrap_or(model).trim().to_ascii_lowercase();
    TABLE
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, l)| *l)
        .unwrap_or(UNKNOWN_MODEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_match_by_longest_prefix_and_unknown_models_are_conservative() {
        assert_eq!(limits_for("claude-sonnet-4-5-20250929").max_output_tokens, 64_000);
        assert_eq!(limits_for("claude-opus-4-1-20250805").max_output_tokens, 32_000);
        assert_eq!(limits_for("claude-opus-4-5").max_output_tokens, 64_000);
        assert_eq!(limits_for("openai/gpt-4o-mini").context_window, 128_000);
        assert_eq!(limits_for("gpt-4.1-mini").context_window, 1_047_576);
        assert_eq!(limits_for("my-local-llama"), UNKNOWN_MODEL);
        for (_, l) in TABLE {
            assert!(l.default_output_tokens <= l.max_output_tokens);
            assert!(u64::from(l.max_output_tokens) < l.context_window);
        }
    }
}
