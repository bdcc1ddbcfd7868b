//! Builds the model provider and price table the command line asks for.

use std::sync::Arc;

use crate::error::Context as _;
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
            Arc::new(ScriptedProvider::from_file(path).map_err(|e| UsageError(e.to_string()))?)
        }
    })
}

pub fn prices(args: &ModelSpec) -> crate::error::Result<Arc<PriceTable>> {
    let mut table = PriceTable::default();
    if let Some(path) = &args.prices {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read the price table {}", path.display()))?;
        // YAML is a superset of JSON, so this reads both.
        let overrides: PriceTable = serde_yaml::from_str(&text)
            .map_err(|e| UsageError(format!("{}: not a price table: {e}", path.display())))?;
        table.merge(&overrides);
    }
    Ok(Arc::new(table))
}
