//! Conversation data: messages, content blocks and tool declarations.
//!
//! The shapes follow the Anthropic Messages API, so a history serializes to that wire
//! format as it is; other providers convert from it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: vec![ContentBlock::text(text)] }
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: vec![ContentBlock::text(text)] }
    }

    /// The concatenated text blocks of this message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls this message makes, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = ToolUse<'_>> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolUse { id, name, input }),
            _ => None,
        })
    }
}

/// A borrowed view of a `tool_use` block.
#[derive(Debug, Clone, Copy)]
pub struct ToolUse<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a Value,
}

/// Base64 data of an image or a document block, as the Anthropic API takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaSource {
    /// Always `base64`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `image/png`, `image/jpeg`, `image/gif`, `image/webp` or `application/pdf`.
    pub media_type: String,
    pub data: String,
}

impl MediaSource {
    pub fn base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Self { kind: "base64".into(), media_type: media_type.into(), data: data.into() }
    }
}

/// One block of message content. It serializes through a borrowed view of its wire
/// form ([`wire::BlockRef`]), so sending a history copies none of it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", from = "wire::Block")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Extended thinking. It must be sent back unchanged, signature included.
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// The text of a tool result; `attachments` are image or document blocks sent with
    /// it (on the wire, `content` is then a list of blocks).
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<ContentBlock>,
    },
    Image {
        source: MediaSource,
    },
    Document {
        source: MediaSource,
    },
}

impl Serialize for ContentBlock {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        wire::BlockRef::from(self).serialize(serializer)
    }
}

/// The wire shape of a block: a tool result's content is a string, or a list of text,
/// image and document blocks. [`Block`] is what is read, [`BlockRef`] what is written.
mod wire {
    use serde::{Deserialize, Serialize};

    use super::{ContentBlock, MediaSource};

    /// [`Block`] borrowed from a [`ContentBlock`]: what a block serializes as.
    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum BlockRef<'a> {
        Text {
            text: &'a str,
        },
        Thinking {
            thinking: &'a str,
            signature: &'a str,
        },
        RedactedThinking {
            data: &'a str,
        },
        ToolUse {
            id: &'a str,
            name: &'a str,
            input: &'a serde_json::Value,
        },
        ToolResult {
            tool_use_id: &'a str,
            content: ResultRef<'a>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            is_error: bool,
        },
        Image {
            source: &'a MediaSource,
        },
        Document {
            source: &'a MediaSource,
        },
    }

    #[derive(Serialize)]
    #[serde(untagged)]
    pub enum ResultRef<'a> {
        Text(&'a str),
        Blocks(Vec<BlockRef<'a>>),
    }

    impl<'a> From<&'a ContentBlock> for BlockRef<'a> {
        fn from(block: &'a ContentBlock) -> Self {
            match block {
                ContentBlock::Text { text } => Self::Text { text },
                ContentBlock::Thinking { thinking, signature } => Self::Thinking { thinking, signature },
                ContentBlock::RedactedThinking { data } => Self::RedactedThinking { data },
                ContentBlock::ToolUse { id, name, input } => Self::ToolUse { id, name, input },
                ContentBlock::ToolResult { tool_use_id, content, is_error, attachments } => {
                    let content = if attachments.is_empty() {
                        ResultRef::Text(content)
                    } else {
                        let mut blocks = Vec::with_capacity(attachments.len() + 1);
                        if !content.is_empty() {
                            blocks.push(Self::Text { text: content });
                        }
                        blocks.extend(attachments.iter().map(Self::from));
                        ResultRef::Blocks(blocks)
                    };
                    Self::ToolResult { tool_use_id, content, is_error: *is_error }
                }
                ContentBlock::Image { source } => Self::Image { source },
                ContentBlock::Document { source } => Self::Document { source },
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    pub enum ResultContent {
        Text(String),
        Blocks(Vec<Block>),
    }

    impl Default for ResultContent {
        fn default() -> Self {
            Self::Text(String::new())
        }
    }

    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Block {
        Text {
            text: String,
        },
        Thinking {
            thinking: String,
            #[serde(default)]
            signature: String,
        },
        RedactedThinking {
            data: String,
        },
        ToolUse {
            id: String,
            name: String,
            input: serde_json::Value,
        },
        ToolResult {
            tool_use_id: String,
            #[serde(default)]
            content: ResultContent,
            #[serde(default)]
            is_error: bool,
        },
        Image {
            source: MediaSource,
        },
        Document {
            source: MediaSource,
        },
    }

    impl From<Block> for ContentBlock {
        fn from(block: Block) -> Self {
            match block {
                Block::Text { text } => Self::Text { text },
                Block::Thinking { thinking, signature } => Self::Thinking { thinking, signature },
                Block::RedactedThinking { data } => Self::RedactedThinking { data },
                Block::ToolUse { id, name, input } => Self::ToolUse { id, name, input },
                Block::ToolResult { tool_use_id, content, is_error } => {
                    let (content, attachments) = match content {
                        ResultContent::Text(text) => (text, Vec::new()),
                        ResultContent::Blocks(blocks) => {
                            let mut text = String::new();
                            let mut attachments = Vec::new();
                            for b in blocks {
                                match b {
                                    Block::Text { text: t } => {
                                        if !text.is_empty() {
                                            text.push('\n');
                                        }
                                        text.push_str(&t);
                                    }
                                    other => attachments.push(ContentBlock::from(other)),
                                }
                            }
                            (text, attachments)
                        }
                    };
                    Self::ToolResult { tool_use_id, content, is_error, attachments }
                }
                Block::Image { source } => Self::Image { source },
                Block::Document { source } => Self::Document { source },
            }
        }
    }
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    pub fn tool_result(tool_use_id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        Self::ToolResult { tool_use_id: tool_use_id.into(), content: content.into(), is_error, attachments: Vec::new() }
    }

    /// A tool result with image or document blocks.
    pub fn tool_result_with(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
        attachments: Vec<ContentBlock>,
    ) -> Self {
        Self::ToolResult { tool_use_id: tool_use_id.into(), content: content.into(), is_error, attachments }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}
