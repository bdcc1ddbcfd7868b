//! `model_settings:` and `limits.checkpoint_every` (issue 18): parsed in `defaults:` and
//! per agent, merged field by field (the agent's over the defaults), and refused with a
//! position when a key is unknown.

use std::time::Duration;

use orch_workflows::{Inputs, load_str, plan};

#[test]
fn model_settings_merge_field_by_field_and_reach_the_spec() {
    let text = "version: 1
defaults:
  model_settings: { first_byte_timeout: 30s, idle_timeout: 45s, retry_budget: 2m, thinking: { budget_tokens: 2048 } }
  limits: { checkpoint_every: 5 }
agents:
  plain: { prompt: x }
  own:
    prompt: y
    model_settings: { idle_timeout: 10s, max_output_tokens: 4000, context_window: 50000 }
    limits: { checkpoint_every: 0 }
";
    let workflow = load_str(text, "wf.yaml").unwrap();
    let planned = plan(&workflow, &Inputs::new()).unwrap();
    let spec = |id: &str| planned.agents().find(|s| s.id == id).unwrap().clone();
    let plain = spec("plain").model_settings;
    assert_eq!(plain.first_byte_timeout.map(|d| d.as_std()), Some(Duration::from_secs(30)));
    assert_eq!(plain.idle_timeout.map(|d| d.as_std()), Some(Duration::from_secs(45)));
    assert_eq!(plain.retry_budget.map(|d| d.as_std()), Some(Duration::from_secs(120)));
    assert_eq!(plain.thinking.map(|t| t.budget_tokens), Some(2048));
    assert_eq!(plain.max_output_tokens, None);
    assert_eq!(spec("plain").limits.checkpoint_every, Some(5));
    let own = spec("own").model_settings;
    assert_eq!(own.idle_timeout.map(|d| d.as_std()), Some(Duration::from_secs(10)));
    assert_eq!(own.first_byte_timeout.map(|d| d.as_std()), Some(Duration::from_secs(30)));
    assert_eq!((own.max_output_tokens, own.context_window), (Some(4000), Some(50000)));
    assert_eq!(spec("own").limits.checkpoint_every, Some(0));
}

#[test]
fn an_unknown_model_setting_is_an_error_with_its_position() {
    let text = "version: 1\nagents:\n  a:\n    prompt: x\n    model_settings: { idle_timout: 10s }\n";
    let errors = load_str(text, "wf.yaml").unwrap_err();
    let all = format!("{errors:?}");
    assert!(all.contains("idle_timout"), "{all}");
    assert!(all.contains("line: 5") || all.contains("5:"), "{all}");
}
