//! Claude Code's model aliases (`sonnet`, `opus`, `haiku`, `inherit`), the one list that
//! agent files' `model:` and the `Agent` tool's `model` input read.

/// The model id an alias stands for, or the name itself when it is not an alias (a full
/// model id); `None` for `inherit` (the caller's model).
pub fn model_id(model: &str) -> Option<String> {
    let model = model.trim();
    if model.eq_ignore_ascii_case("inherit") {
        return None;
    }
    let id = match model {
        "sonnet" => "claude-sonnet-4-5",
        "opus" => "claude-opus-4-1",
        "haiku" => "claude-haiku-4-5",
        other => other,
    };
    Some(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_become_ids_and_ids_stay() {
        assert_eq!(model_id("sonnet").as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(model_id("opus").as_deref(), Some("claude-opus-4-1"));
        assert_eq!(model_id(" haiku ").as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(model_id("claude-3-7-sonnet-20250219").as_deref(), Some("claude-3-7-sonnet-20250219"));
        assert_eq!(model_id("Inherit"), None);
    }
}
