//! Chat messages and tool declarations in the shape chat templates read.
//!
//! Hugging Face chat templates (Gemma 4's included) read OpenAI-style dictionaries:
//! `{"role": "assistant", "content": "...", "tool_calls": [{"id", "type": "function",
//! "function": {"name", "arguments"}}]}`, `{"role": "tool", "tool_call_id", "name", "content"}` and
//! tools as `{"type": "function", "function": {"name", "description", "parameters"}}`. These types
//! serialize to exactly that shape; the agent crate's own message types convert into them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System prompt (first message only; rendered inside Gemma's system turn).
    System,
    /// The user.
    User,
    /// The model (Gemma's `model` role).
    Assistant,
    /// A tool result answering an assistant tool call.
    Tool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Text, or a list of parts (text and media placeholders). For assistant messages, thinking
    /// inside `<|channel>...<channel|>` is stripped by the template when rendering history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The model's thinking for this message; Gemma's template renders it only for a tool-calling
    /// assistant message after the last user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// For tool messages: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For tool messages: the tool's name (used when the call id does not resolve it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Gemma's native form of tool results: the responses to this assistant message's calls,
    /// carried on the message itself (rendered `response:NAME{key:value,...}` for objects). The
    /// alternative is one [`Role::Tool`] message per result after this message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_responses: Vec<ToolResponse>,
}

/// Message content: plain text or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Text and media parts, in order.
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text parts concatenated.
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect(),
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::Text(text.to_owned())
    }
}

/// One part of a message's content. Media parts render as the model's placeholder tokens
/// (`<|image|>`, ...); the media itself goes to the encoders, not through the template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image placeholder.
    Image,
    /// An audio placeholder.
    Audio,
    /// A video placeholder.
    Video,
}

/// A tool result in Gemma's native form (see [`ChatMessage::tool_responses`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResponse {
    /// The tool that was called.
    pub name: String,
    /// What it returned.
    pub response: Value,
}

impl ChatMessage {
    fn new(role: Role, content: Option<String>) -> Self {
        Self {
            role,
            content: content.map(Content::Text),
            tool_calls: Vec::new(),
            reasoning: None,
            tool_call_id: None,
            name: None,
            tool_responses: Vec::new(),
        }
    }

    /// A system prompt.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, Some(content.into()))
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, Some(content.into()))
    }

    /// A plain assistant answer.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, Some(content.into()))
    }

    /// An assistant message that calls tools.
    pub fn assistant_tool_calls(calls: Vec<ToolCallRequest>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::new(Role::Assistant, Some(String::new()))
        }
    }

    /// A tool result for the call `call_id` of tool `name`.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            name: Some(name.into()),
            ..Self::new(Role::Tool, Some(content.into()))
        }
    }

    /// Sets the message's thinking text.
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }
}

/// A tool call inside an assistant message, OpenAI-style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// Call id, matched by the tool message's `tool_call_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".to_owned()
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON object (templates iterate it with `dictsort`).
    pub arguments: Map<String, Value>,
}

impl ToolCallRequest {
    /// A call of `name` with `arguments`.
    pub fn new(id: Option<String>, name: impl Into<String>, arguments: Map<String, Value>) -> Self {
        Self {
            id,
            kind: function_kind(),
            function: FunctionCall {
                name: name.into(),
                arguments,
            },
        }
    }
}

/// A tool the model may call, with its JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDeclaration {
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// Name, description and parameters.
    pub function: FunctionDeclaration,
}

/// The function part of a tool declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionDeclaration {
    /// Tool name.
    pub name: String,
    /// What the tool does (shown to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON schema of the arguments (`{"type": "object", "properties": {...}, "required": [...]}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

impl ToolDeclaration {
    /// A tool declaration.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Option<Value>,
    ) -> Self {
        Self {
            kind: function_kind(),
            function: FunctionDeclaration {
                name: name.into(),
                description: Some(description.into()),
                parameters,
            },
        }
    }
}
