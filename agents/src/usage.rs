//! Token usage and what it costs: the per-model price table and its overrides.

use std::collections::BTreeMap;
use std::ops::AddAssign;

use serde::{Deserialize, Serialize};

/// Tokens reported by the model API for one call, or summed over many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Every token the call processed: fresh input, cache writes, cache reads and output.
    /// This is what the token budget counts.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }

    /// The size of the prompt the call sent, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
        self.cache_creation_input_tokens += rhs.cache_creation_input_tokens;
        self.cache_read_input_tokens += rhs.cache_read_input_tokens;
    }
}

/// Prices of one model in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cache writes; defaults to 1.25 times `input`.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Cache reads; defaults to 0.1 times `input`.
    #[serde(default)]
    pub cache_read: Option<f64>,
}

impl Price {
    pub const fn new(input: f64, output: f64) -> Self {
        Self { input, output, cache_write: None, cache_read: None }
    }

    /// What `usage` costs at this price, in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let write = self.cache_write.unwrap_or(self.input * 1.25);
        let read = self.cache_read.unwrap_or(self.input * 0.1);
        (usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_creation_input_tokens as f64 * write
            + usage.cache_read_input_tokens as f64 * read)
            / 1_000_000.0
    }
}

/// Prices by model name. A name matches an entry when it equals it or starts with it
/// (so `claude-sonnet-4-5-20250929` uses the `claude-sonnet-4-5` entry); the longest
/// matching entry wins. A model with no entry costs nothing, which the loop reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

impl Default for PriceTable {
    /// Published list prices of the Anthropic models at the time of writing.
    fn default() -> Self {
        let mut prices = BTreeMap::new();
        for (name, price) in [
            ("claude-opus-4", Price::new(15.0, 75.0)),
            ("claude-opus-4-5", Price::new(5.0, 25.0)),
            ("claude-opus-4-6", Price::new(5.0, 25.0)),
            ("claude-sonnet-4", Price::new(3.0, 15.0)),
            ("claude-3-7-sonnet", Price::new(3.0, 15.0)),
            ("claude-3-5-sonnet", Price::new(3.0, 15.0)),
            ("claude-haiku-4-5", Price::new(1.0, 5.0)),
            ("claude-3-5-haiku", Price::new(0.8, 4.0)),
        ] {
            prices.insert(name.to_string(), price);
        }
        Self { prices }
    }
}

impl PriceTable {
    /// A table with no entries.
    pub fn empty() -> Self {
        Self { prices: BTreeMap::new() }
    }

    /// Adds or replaces the price of `model`.
    pub fn set(&mut self, model: impl Into<String>, price: Price) {
        self.prices.insert(model.into(), price);
    }

    /// Replaces entries with those of `overrides`.
    pub fn merge(&mut self, overrides: &PriceTable) {
        for (k, v) in &overrides.prices {
            self.prices.insert(k.clone(), *v);
        }
    }

    /// The model names (prefixes) the table has prices for.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.prices.keys().map(String::as_str)
    }

    /// The price of `model`, if the table knows it.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.prices
            .iter()
            .filter(|(name, _)| model.starts_with(name.as_str()))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| *p)
    }

    /// What `usage` on `model` costs; zero for an unknown model.
    pub fn cost(&self, model: &str, usage: &Usage) -> f64 {
        self.price(model).map(|p| p.cost(usage)).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let table = PriceTable::default();
        let p = table.price("claude-opus-4-5-20251101").unwrap();
        assert_eq!(p.input, 5.0);
        let p = table.price("claude-opus-4-1-20250805").unwrap();
        assert_eq!(p.input, 15.0);
        assert!(table.price("gpt-4o").is_none());
    }

    #[test]
    fn cost_counts_cache_tokens() {
        let price = Price::new(3.0, 15.0);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            cache_creation_input_tokens: 1_000_000,
            cache_read_input_tokens: 1_000_000,
        };
        let cost = price.cost(&usage);
        assert!((cost - (3.0 + 15.0 + 3.75 + 0.3)).abs() < 1e-9, "{cost}");
    }
}
