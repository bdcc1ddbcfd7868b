//! `NotebookEdit`: replaces, inserts or deletes one cell of a Jupyter notebook
//! (`.ipynb`), changing nothing else in its JSON. The notebook must have been read in
//! this session and be unchanged since, as for `Edit`.
//!
//! Jupyter writes notebooks with sorted keys and a one-space indent; the file is written
//! back the same way (with the indent it had), so an edit shows up as a small diff.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::edit::write_and_stamp;
use super::text::{self, MAX_TEXT_FILE_BYTES};
use super::{Tool, ToolContext, ToolError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CellType {
    Code,
    Markdown,
}

impl CellType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Code => "code",
            Self::Markdown => "markdown",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EditMode {
    #[default]
    Replace,
    Insert,
    Delete,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookEditInput {
    /// The notebook (.ipynb) to change: an absolute path, or one relative to the working directory.
    pub notebook_path: String,
    /// The id of the cell to replace or delete, or after which to insert (insert without it adds the
    /// cell at the top). `cell-N` or a plain number N also selects the N-th cell, counting from 0.
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The new source of the cell (ignored when deleting).
    pub new_source: String,
    /// The cell's type: required to insert; on replace, changes the type when given.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// replace (the default), insert or delete.
    #[serde(default)]
    pub edit_mode: Option<EditMode>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct NotebookEdit;

#[async_trait]
impl Tool for NotebookEdit {
    type Input = NotebookEditInput;
    const NAME: &'static str = "NotebookEdit";

    fn description(&self) -> &'static str {
        "Change one cell of a Jupyter notebook (.ipynb). edit_mode `replace` (the default) \
         sets the source of the cell named by cell_id, and its type when cell_type is given; \
         a replaced code cell loses its old outputs. `insert` adds a new cell of cell_type \
         (required) right after cell_id, or at the top without cell_id. `delete` removes the \
         cell. cell_id is the cell's id as Read shows it; `cell-N` or N (counting from 0) also \
         work. Read the notebook first; it must not have changed since. The rest of the file \
         (metadata, other cells, outputs) is left as it was."
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if input.notebook_path.trim().is_empty() {
            return Err("notebook_path is empty; give the path of the .ipynb file".into());
        }
        if !input.notebook_path.ends_with(".ipynb") {
            return Err(format!("{} is not a .ipynb notebook; use Edit for other files", input.notebook_path));
        }
        let mode = input.edit_mode.unwrap_or_default();
        if mode == EditMode::Insert && input.cell_type.is_none() {
            return Err("cell_type (code or markdown) is required to insert a cell".into());
        }
        if mode != EditMode::Insert && input.cell_id.as_deref().is_none_or(|c| c.trim().is_empty()) {
            return Err("cell_id is required to replace or delete a cell".into());
        }
        Ok(())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(input.notebook_path.clone())
    }

    fn writes(&self, input: &Self::Input) -> Vec<PathBuf> {
        vec![PathBuf::from(&input.notebook_path)]
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        Tool::validate(self, &input).map_err(ToolError)?;
        let path = ctx.session.resolve(&input.notebook_path);
        let given = &input.notebook_path;
        let metadata = match tokio::fs::metadata(&path).await {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ToolError(text::missing_file_message(given, &path).await));
            }
            Err(e) => return Err(ToolError(text::io_error_message("read", &path, &e))),
        };
        if !metadata.is_file() {
            return Err(ToolError(format!("{} is not a regular file.", path.display())));
        }
        if metadata.len() > MAX_TEXT_FILE_BYTES {
            return Err(ToolError(format!(
                "{} is too large for NotebookEdit ({} bytes).",
                path.display(),
                metadata.len()
            )));
        }
        let bytes = tokio::fs::read(&path).await.map_err(|e| ToolError(text::io_error_message("read", &path, &e)))?;
        text::check_fresh(&ctx.session, &path, &bytes, given, "NotebookEdit")?;
        let mut notebook: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ToolError(format!("{} is not valid notebook JSON ({e}); fix it with Edit or Write.", path.display()))
        })?;
        let summary = edit_cells(&mut notebook, &input).map_err(ToolError)?;
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::new("NotebookEdit was cancelled before it wrote anything."));
        }
        let out = render(&notebook, &bytes).map_err(ToolError)?;
        write_and_stamp(&path, &out, ctx).await?;
        Ok(format!("{summary} in {}.", path.display()))
    }
}

/// Applies the edit to the notebook's JSON and says what it did.
fn edit_cells(notebook: &mut Value, input: &NotebookEditInput) -> Result<String, String> {
    let minor = notebook.get("nbformat_minor").and_then(Value::as_u64).unwrap_or(0);
    let major = notebook.get("nbformat").and_then(Value::as_u64).unwrap_or(4);
    let cells = notebook
        .get_mut("cells")
        .and_then(Value::as_array_mut)
        .ok_or("the notebook has no `cells` list (is it nbformat 4?)")?;
    let wants_ids = (major, minor) >= (4, 5) || cells.iter().any(|c| c.get("id").is_some());
    let index = match input.cell_id.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        None => None,
        Some(id) => Some(find_cell(cells, id)?),
    };
    let ids: Vec<String> =
        cells.iter().filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned)).collect();
    match input.edit_mode.unwrap_or_default() {
        EditMode::Delete => {
            let i = index.ok_or("cell_id is required to delete a cell")?;
            cells.remove(i);
            Ok(format!("Deleted cell {}", label(input, i)))
        }
        EditMode::Insert => {
            let kind = input.cell_type.ok_or("cell_type is required to insert a cell")?;
            let at = index.map_or(0, |i| i + 1);
            let mut cell = Map::new();
            cell.insert("cell_type".into(), json!(kind.as_str()));
            let mut new_id = None;
            if wants_ids {
                let id = fresh_id(&ids);
                cell.insert("id".into(), json!(id));
                new_id = Some(id);
            }
            cell.insert("metadata".into(), json!({}));
            cell.insert("source".into(), source_lines(&input.new_source));
            if kind == CellType::Code {
                cell.insert("execution_count".into(), Value::Null);
                cell.insert("outputs".into(), json!([]));
            }
            cells.insert(at, Value::Object(cell));
            let name = new_id.map_or(format!("at index {at}"), |id| format!("{id} at index {at}"));
            Ok(format!("Inserted a new {} cell {name}", kind.as_str()))
        }
        EditMode::Replace => {
            let i = index.ok_or("cell_id is required to replace a cell")?;
            let cell = cells[i].as_object_mut().ok_or("the selected cell is not a JSON object")?;
            let old_kind = cell.get("cell_type").and_then(Value::as_str).unwrap_or("code").to_owned();
            let kind = input.cell_type.map_or(old_kind.clone(), |k| k.as_str().to_owned());
            let as_string = cell.get("source").is_some_and(Value::is_string);
            let source = if as_string { json!(input.new_source) } else { source_lines(&input.new_source) };
            cell.insert("source".into(), source);
            cell.insert("cell_type".into(), json!(kind));
            if kind == "code" {
                cell.insert("execution_count".into(), Value::Null);
                cell.insert("outputs".into(), json!([]));
            } else {
                cell.remove("execution_count");
                cell.remove("outputs");
            }
            let changed = if kind != old_kind { format!(" (now a {kind} cell)") } else { String::new() };
            Ok(format!("Replaced the source of cell {}{changed}", label(input, i)))
        }
    }
}

fn label(input: &NotebookEditInput, index: usize) -> String {
    format!("{} (index {index})", input.cell_id.as_deref().unwrap_or(""))
}

/// The index of the cell with id `id`, or of the N-th cell for `cell-N` or `N`.
fn find_cell(cells: &[Value], id: &str) -> Result<usize, String> {
    if let Some(i) = cells.iter().position(|c| c.get("id").and_then(Value::as_str) == Some(id)) {
        return Ok(i);
    }
    let number = id.strip_prefix("cell-").unwrap_or(id);
    if let Ok(i) = number.parse::<usize>() {
        if i < cells.len() {
            return Ok(i);
        }
        return Err(format!("cell index {i} is out of range: the notebook has {} cells", cells.len()));
    }
    let known: Vec<&str> = cells.iter().filter_map(|c| c.get("id").and_then(Value::as_str)).take(20).collect();
    Err(format!(
        "no cell has the id `{id}`; the cell ids are: {}. Read the notebook to see them.",
        if known.is_empty() { "(none; use cell-N with N counted from 0)".to_string() } else { known.join(", ") }
    ))
}

/// A source as nbformat stores it: a list of lines, each keeping its newline.
fn source_lines(source: &str) -> Value {
    Value::Array(source.split_inclusive('\n').map(|l| json!(l)).collect())
}

/// An 8-hex-digit id no other cell has.
fn fresh_id(taken: &[String]) -> String {
    loop {
        let id = format!("{:08x}", rand::random::<u32>());
        if !taken.contains(&id) {
            return id;
        }
    }
}

/// The notebook as JSON with the indent and final newline of the original file.
fn render(notebook: &Value, original: &[u8]) -> Result<Vec<u8>, String> {
    let text = String::from_utf8_lossy(original);
    let indent = text.lines().nth(1).map(|l| l.len() - l.trim_start().len()).filter(|n| *n > 0).unwrap_or(1);
    let indent = " ".repeat(indent);
    let mut out = Vec::with_capacity(original.len());
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(notebook, &mut ser).map_err(|e| format!("cannot encode the notebook: {e}"))?;
    if text.ends_with('\n') {
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{DynTool, Session, read::Read};
    use std::sync::Arc;

    /// A notebook as Jupyter writes it (sorted keys, one-space indent).
    const NOTEBOOK: &str = r##"{
 "cells": [
  {
   "cell_type": "markdown",
   "id": "intro",
   "metadata": {},
   "source": [
    "# Title\n",
    "Some text"
   ]
  },
  {
   "cell_type": "code",
   "execution_count": 3,
   "id": "a1b2c3d4",
   "metadata": {
    "tags": []
   },
   "outputs": [
    {
     "name": "stdout",
     "output_type": "stream",
     "text": [
      "2\n"
     ]
    }
   ],
   "source": [
    "x = 1\n",
    "print(x + 1)"
   ]
  }
 ],
 "metadata": {
  "kernelspec": {
   "display_name": "Python 3",
   "language": "python",
   "name": "python3"
  }
 },
 "nbformat": 4,
 "nbformat_minor": 5
}
"##;

    async fn setup() -> (tempfile::TempDir, ToolContext, String) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext { session: Arc::new(Session::new(dir.path())), cancel: Default::default() };
        let path = dir.path().join("nb.ipynb");
        std::fs::write(&path, NOTEBOOK).unwrap();
        let path = path.to_str().unwrap().to_owned();
        DynTool::call(&Read, json!({ "file_path": path }), &ctx).await.unwrap();
        (dir, ctx, path)
    }

    async fn edit(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        DynTool::validate(&NotebookEdit, &input).map_err(ToolError)?;
        DynTool::call(&NotebookEdit, input, ctx).await
    }

    fn load(path: &str) -> Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn replace_changes_only_that_cell_and_clears_outputs() {
        let (_dir, ctx, path) = setup().await;
        let out = edit(&ctx, json!({ "notebook_path": path, "cell_id": "a1b2c3d4", "new_source": "y = 2\nprint(y)" }))
            .await
            .unwrap();
        assert!(out.contains("Replaced"), "{out}");
        let text = std::fs::read_to_string(&path).unwrap();
        let before: Value = serde_json::from_str(NOTEBOOK).unwrap();
        let after = load(&path);
        assert_eq!(after["cells"][1]["source"], json!(["y = 2\n", "print(y)"]));
        assert_eq!(after["cells"][1]["outputs"], json!([]));
        assert_eq!(after["cells"][1]["execution_count"], Value::Null);
        assert_eq!(after["cells"][1]["metadata"], before["cells"][1]["metadata"]);
        assert_eq!(after["cells"][0], before["cells"][0]);
        assert_eq!(after["metadata"], before["metadata"]);
        // Written back the way Jupyter writes it: one-space indent, final newline.
        assert!(text.starts_with("{\n \"cells\": [\n  {\n"), "{text}");
        assert!(text.ends_with("}\n"));
    }

    #[tokio::test]
    async fn insert_after_a_cell_and_at_the_top() {
        let (_dir, ctx, path) = setup().await;
        edit(
            &ctx,
            json!({ "notebook_path": path, "cell_id": "intro", "new_source": "import os", "cell_type": "code", "edit_mode": "insert" }),
        )
        .await
        .unwrap();
        edit(
            &ctx,
            json!({ "notebook_path": path, "new_source": "# Top", "cell_type": "markdown", "edit_mode": "insert" }),
        )
        .await
        .unwrap();
        let nb = load(&path);
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 4);
        assert_eq!(cells[0]["source"], json!(["# Top"]));
        assert_eq!(cells[0]["cell_type"], "markdown");
        assert!(cells[0].get("outputs").is_none());
        assert_eq!(cells[2]["source"], json!(["import os"]));
        assert_eq!(cells[2]["outputs"], json!([]));
        let id = cells[2]["id"].as_str().unwrap();
        assert_eq!(id.len(), 8);
        assert_eq!(cells[3]["id"], "a1b2c3d4");
    }

    #[tokio::test]
    async fn delete_by_id_and_by_index() {
        let (_dir, ctx, path) = setup().await;
        edit(&ctx, json!({ "notebook_path": path, "cell_id": "cell-1", "new_source": "", "edit_mode": "delete" }))
            .await
            .unwrap();
        edit(&ctx, json!({ "notebook_path": path, "cell_id": "intro", "new_source": "", "edit_mode": "delete" }))
            .await
            .unwrap();
        assert_eq!(load(&path)["cells"], json!([]));
    }

    #[tokio::test]
    async fn unknown_cell_and_stale_notebook_change_nothing() {
        let (_dir, ctx, path) = setup().await;
        let err = edit(&ctx, json!({ "notebook_path": path, "cell_id": "nope", "new_source": "x" })).await.unwrap_err();
        assert!(err.0.contains("intro, a1b2c3d4"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), NOTEBOOK);
        std::fs::write(&path, NOTEBOOK.replace("Title", "Other")).unwrap();
        let err =
            edit(&ctx, json!({ "notebook_path": path, "cell_id": "intro", "new_source": "x" })).await.unwrap_err();
        assert!(err.0.contains("changed on disk"), "{err}");
    }

    #[test]
    fn validates_claude_code_inputs() {
        let v = |i: Value| DynTool::validate(&NotebookEdit, &i);
        assert!(v(json!({ "notebook_path": "/a.ipynb", "new_source": "x", "edit_mode": "insert" })).is_err());
        assert!(v(json!({ "notebook_path": "/a.ipynb", "new_source": "x" })).is_err());
        assert!(v(json!({ "notebook_path": "/a.py", "cell_id": "c", "new_source": "x" })).is_err());
        assert!(
            v(json!({ "notebook_path": "/a.ipynb", "cell_id": "c", "new_source": "x", "edit_mode": "move" })).is_err()
        );
        assert!(
            v(json!({ "notebook_path": "/a.ipynb", "cell_id": "c", "new_source": "x", "cell_type": "raw" })).is_err()
        );
        assert!(v(json!({ "notebook_path": "/a.ipynb", "cell_id": "c", "new_source": "x", "cell_type": "code", "edit_mode": "replace" })).is_ok());
    }
}
