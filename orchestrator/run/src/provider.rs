//! Builds the model provider and price table the command line asks for.

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
