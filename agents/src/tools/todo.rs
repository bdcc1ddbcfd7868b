//! `TodoWrite`: the agent's own task list, replaced whole on every call.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Todo, TodoStatus, Tool, ToolContext, ToolError};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteInput {
    /// The whole updated list.
    pub todos: Vec<Todo>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct TodoWrite;

#[async_trait]
impl Tool for TodoWrite {
    type Input = TodoWriteInput;
    const NAME: &'static str = "TodoWrite";

    fn description(&self) -> &'static str {
        "Keep a short task list for this job. Send the whole list each time, with each item \
         pending, in_progress or completed. Keep at most one item in_progress, mark items \
         completed as soon as they are done, and use it for work of three steps or more."
    }

    fn is_read_only(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        false
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        let active = input.todos.iter().filter(|t| t.status == TodoStatus::InProgress).count();
        if active > 1 {
            return Err(format!("{active} todos are in_progress; keep at most one in progress at a time"));
        }
        if let Some(i) = input.todos.iter().position(|t| t.content.trim().is_empty()) {
            return Err(format!("todos[{i}].content is empty; say what the task is"));
        }
        Ok(())
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut out = String::from("Todo list updated:\n");
        for t in &input.todos {
            let mark = match t.status {
                TodoStatus::Pending => "[ ]",
                TodoStatus::InProgress => "[~]",
                TodoStatus::Completed => "[x]",
            };
            out.push_str(&format!("{mark} {}\n", t.content));
        }
        ctx.session.set_todos(input.todos);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{DynTool, Session};
    use serde_json::json;
    use std::sync::Arc;

    #[tokio::test]
    async fn replaces_the_list_and_rejects_two_in_progress() {
        let session = Arc::new(Session::new("/tmp"));
        let ctx = ToolContext { session: session.clone(), cancel: Default::default() };
        let input = json!({"todos": [
            {"content": "Read the code", "status": "completed"},
            {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
        ]});
        assert!(DynTool::validate(&TodoWrite, &input).is_ok());
        let out = DynTool::call(&TodoWrite, input, &ctx).await.unwrap();
        assert!(out.contains("[x] Read the code") && out.contains("[~] Fix the bug"), "{out}");
        assert_eq!(session.todos().len(), 2);
        let two = json!({"todos": [
            {"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]});
        assert!(DynTool::validate(&TodoWrite, &two).unwrap_err().contains("at most one"));
    }
}
