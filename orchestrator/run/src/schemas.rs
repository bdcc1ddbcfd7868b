//! The published JSON Schemas, generated from the types (`orch schema NAME` prints
//! them; `workflows/schemas/*.schema.json` holds them, checked current by a test):
//! workflow files, report.json, the `--json` event lines and findings.

use serde_json::Value;

/// Where the schemas are published (their `$id`s), the files of `workflows/schemas/`.
const BASE: &str = "https://github.com/orch-ci/orch/raw/v1/workflows/schemas";

/// One published schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    Workflow,
    Report,
    Events,
    Finding,
}

impl Schema {
    /// Every schema, in the order `orch schema --help` lists them.
    pub const ALL: [Schema; 4] = [Schema::Workflow, Schema::Report, Schema::Events, Schema::Finding];

    /// Its name on the command line and in its file name.
    pub fn name(self) -> &'static str {
        match self {
            Schema::Workflow => "workflow",
            Schema::Report => "report",
            Schema::Events => "events",
            Schema::Finding => "finding",
        }
    }

    /// The file it is committed as, under `workflows/schemas/`.
    pub fn file_name(self) -> String {
        format!("{}.schema.json", self.name())
    }

    /// The schema itself.
    pub fn json(self) -> Value {
        let (mut schema, title) = match self {
            Schema::Workflow => return orch_workflows::workflow_schema(),
            Schema::Report => (
                serde_json::to_value(schemars::schema_for!(crate::run::report::RunReport)).unwrap_or(Value::Null),
                "orch report.json (schema_version 1)",
            ),
            Schema::Events => (crate::run_event::schema(), "one line of orch's --json event stream"),
            Schema::Finding => return orch_workflows::publish::finding_schema(),
        };
        if let Some(object) = schema.as_object_mut() {
            object.insert("$id".into(), Value::from(format!("{BASE}/{}", self.file_name())));
            object.insert("title".into(), Value::from(title));
        }
        schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `workflows/schemas/` holds every schema as generated (`ORCH_UPDATE_SCHEMAS=1`
    /// rewrites them).
    #[test]
    fn the_committed_schemas_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workflows/schemas");
        for schema in Schema::ALL {
            let path = dir.join(schema.file_name());
            let current = serde_json::to_string_pretty(&schema.json()).unwrap() + "\n";
            // The workflow and finding schemas are orch-workflows' own (its tests write them).
            let ours = matches!(schema, Schema::Report | Schema::Events);
            if ours && std::env::var_os("ORCH_UPDATE_SCHEMAS").is_some() {
                std::fs::write(&path, &current).unwrap();
            }
            let committed: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_default()).unwrap_or(Value::Null);
            assert_eq!(
                committed,
                schema.json(),
                "{} is stale: run `ORCH_UPDATE_SCHEMAS=1 cargo test --workspace schema` and commit it",
                path.display()
            );
            jsonschema::validator_for(&schema.json()).unwrap();
        }
    }
}
