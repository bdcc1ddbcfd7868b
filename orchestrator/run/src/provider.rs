//! Builds the model provider and price table the command line asks for, and checks that
//! a cost limit can hold: every model it covers must have a price.

use std::sync::Arc;

use orch_agents::model::anthropic::{AnthropicConfig, AnthropicProvider};
use orch_agents::model::openai::{OpenAiConfig, OpenAiProvider};
use orch_agents::model::scripted::ScriptedProvider;
use orch_agents::{ModelProvider, PriceTable};

use crate::exit::UsageError;
use crate::options::{ModelSpec, Provider};

pub fn build(args: &ModelSpec) -> crate::error::Result<Arc<dyn ModelProvider>> {
    Ok(match args.provider {
        Provider::Anthropic => {
            // The keys left the environment at start-up (see `secrets`).
            let mut config = AnthropicConfig::from_env();
            config.api_key = crate::secrets::var("ANTHROPIC_API_KEY");
            config.auth_token = crate::secrets::var("ANTHROPIC_AUTH_TOKEN");
            Arc::new(AnthropicProvider::new(config)?)
        }
        Provider::Openai => {
            let mut config = OpenAiConfig::from_env();
            config.api_key = crate::secrets::var("OPENAI_API_KEY").map(|k| k.trim().to_string());
            Arc::new(OpenAiProvider::new(config)?)
        }
        Provider::Scripted => {
            let path = args.script.as_ref().ok_or_else(|| {
                UsageError(
                    "--provider scripted needs a turn script: pass --script FILE (or set ORCH_SCRIPT)".to_string(),
                )
            })?;
            Arc::new(script(path)?)
        }
    })
}

pub fn prices(args: &ModelSpec) -> crate::error::Result<Arc<PriceTable>> {
    let mut table = PriceTable::default();
    if let Some(path) = &args.prices {
        // YAML is a superset of JSON, so this reads both.
        let overrides: PriceTable = orch_workflows::yaml::load_file_as(path)
            .map_err(|e| UsageError(format!("cannot use the price table: {}", crate::error::yaml_message(&e))))?;
        table.merge(&overrides);
    }
    Ok(Arc::new(table))
}

/// Checks the models a run or agent uses against `prices`. Each of `models` is `(model,
/// what uses it)`. A model without a price gets a "did you mean" line when one of the
/// table's names is close (returned, for the caller to show). With a cost limit
/// (`limit`: how it was set), an unpriced model is refused: its spend would count as
/// $0 and the limit would never stop it.
pub fn check_prices(
    prices: &PriceTable,
    models: &[(String, String)],
    limit: Option<&str>,
) -> Result<Vec<String>, UsageError> {
    let mut warnings = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (model, used_by) in models {
        if prices.price(model).is_some() || !seen.insert(model.as_str()) {
            continue;
        }
        let hint = closest(prices, model).map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default();
        if let Some(limit) = limit {
            return Err(UsageError(format!(
                "{limit} cannot hold: orch has no price for the model `{model}` ({used_by}){hint}, so its spend would \
                 count as $0; correct the name, or give its price in US dollars per million tokens with --prices \
                 FILE (a YAML table such as `{model}: {{ input: 3, output: 15 }}`)"
            )));
        }
        if !hint.is_empty() {
            warnings.push(format!("the model `{model}` ({used_by}) is not one orch knows{hint}"));
        }
    }
    Ok(warnings)
}

/// The table's name closest to `model` when it is close enough to be a misspelling: at
/// most 2 edits (3 for long names) from a prefix of `model` of about its length, so a
/// dated suffix (`-20250929`) does not count.
fn closest<'a>(prices: &'a PriceTable, model: &str) -> Option<&'a str> {
    let chars: Vec<char> = model.chars().collect();
    prices
        .names()
        .filter_map(|name| {
            let n = name.chars().count();
            let distance = (n.saturating_sub(2)..=n + 2)
                .filter(|&len| len <= chars.len() && len > 0)
                .map(|len| strsim::levenshtein(&chars[..len].iter().collect::<String>(), name))
                .min()?;
            (distance > 0 && distance <= if n > 12 { 3 } else { 2 }).then_some((distance, name))
        })
        .min()
        .map(|(_, name)| name)
}

/// The largest turn script read: recordings of long runs outgrow the 1 MiB of
/// hand-written YAML files.
pub const MAX_SCRIPT_BYTES: usize = 256 << 20;

/// Reads a turn script (`--script`, `--replay`) with the positioned YAML loader.
pub fn script(path: &std::path::Path) -> Result<ScriptedProvider, UsageError> {
    let script = orch_workflows::yaml::load_file_as_capped(path, MAX_SCRIPT_BYTES)
        .map_err(|e| UsageError(format!("cannot use the turn script: {}", crate::error::yaml_message(&e))))?;
    ScriptedProvider::new(script, &path.display().to_string()).map_err(|e| UsageError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prices: Option<std::path::PathBuf>, script: Option<std::path::PathBuf>) -> ModelSpec {
        ModelSpec { provider: Provider::Scripted, model: "m".into(), fallback_model: None, script, prices }
    }

    fn used(models: &[&str]) -> Vec<(String, String)> {
        models.iter().map(|m| (m.to_string(), "agent a".to_string())).collect()
    }

    #[test]
    fn a_cost_limit_refuses_a_model_without_a_price() {
        let table = PriceTable::default();
        let err = check_prices(&table, &used(&["claude-sonet-4-5"]), Some("`limits.max_cost_usd`")).unwrap_err().0;
        assert!(err.contains("`limits.max_cost_usd` cannot hold"), "{err}");
        assert!(err.contains("`claude-sonet-4-5` (agent a) (did you mean `claude-sonnet-4`?)"), "{err}");
        assert!(err.contains("--prices FILE"), "{err}");
        assert!(check_prices(&table, &used(&["gpt-4o"]), Some("--max-cost-usd")).is_err());
        // Priced models pass, dated names included; without a limit only a warning.
        assert!(check_prices(&table, &used(&["claude-sonnet-4-5-20250929"]), Some("x")).unwrap().is_empty());
        let warnings = check_prices(&table, &used(&["claude-haiku-4.5", "gpt-4o"]), None).unwrap();
        assert_eq!(
            warnings,
            ["the model `claude-haiku-4.5` (agent a) is not one orch knows (did you mean `claude-haiku-4-5`?)"]
        );
    }

    #[test]
    fn every_example_script_loads() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&examples).unwrap() {
            let file = entry.unwrap().path().join("script.yaml");
            if file.is_file() {
                script(&file).unwrap_or_else(|e| panic!("{e}"));
                loaded += 1;
            }
        }
        assert!(loaded >= 4, "only {loaded} example scripts");
    }

    #[test]
    fn prices_and_scripts_are_read_with_positions_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.yaml");
        let name = file.display().to_string();

        std::fs::write(&file, "models: {}\nmodels: {}\n").unwrap();
        let err = prices(&spec(Some(file.clone()), None)).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(&format!("{name}:2:1: duplicate key")), "{err}");
        std::fs::write(&file, "version: 1\nagents:\n  a:\n    - txt: hi\n").unwrap();
        let err = build(&spec(None, Some(file.clone()))).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(&format!("{name}:4:7: ")) && err.contains("txt"), "{err}");

        std::fs::write(&file, crate::error::alias_bomb()).unwrap();
        let err = prices(&spec(Some(file.clone()), None)).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("aliases copy too much"), "{err}");
        let err = build(&spec(None, Some(file.clone()))).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("aliases copy too much"), "{err}");
    }
}
