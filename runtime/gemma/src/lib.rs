//! Gemma 4 text layer: everything between the model's text files and token ids that the Gemma
//! session needs, with no GPU in sight.
//!
//! - [`GemmaText`]: loads a model's text files (bytes or a directory) and turns a conversation
//!   into a [`Prompt`] (rendered text and ids).
//! - [`GemmaTokenizer`]: the model's `tokenizer.json` (through the `tokenizers` crate, which also
//!   builds for wasm32) and its [`SpecialTokens`], read from `tokenizer.json`,
//!   `generation_config.json` and `tokenizer_config.json` — no id is hard-coded.
//! - [`IncrementalDecoder`]: turns generated ids into text as they come, never emitting half of
//!   a character split over byte-fallback pieces.
//! - [`ChatTemplate`]: renders the model's own `chat_template.jinja` with minijinja, configured
//!   to match transformers' `apply_chat_template` byte for byte (golden tests against Python).
//! - [`OutputParser`]: splits the streamed model output into answer text, thinking
//!   (`<|channel>thought\n...<channel|>`) and tool calls
//!   (`<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>`), reporting malformed calls as
//!   structured [`ToolCallError`]s.
//! - [`syntax`]: Gemma's argument syntax both ways (render a value as the template does, parse
//!   what the model wrote into `serde_json::Value`).
//!
//! - [`constrain`]: the grammar of a tool call and the token-level matcher that restricts
//!   sampling to valid calls of the declared tools once `<|tool_call>` is written.
//! - [`untrusted`]: spans of the prompt tokenized as plain text (no added token can be formed).
//! - [`image`](mod@image): each image placeholder of a rendered prompt expanded to the image's
//!   begin marker, one token per soft token and the end marker ([`ImageTokens`]).
//! - [`agent`]: the agent crate's conversation and tool definitions converted to template
//!   messages and declarations.
//!
//! The chat format is described in `GEMMA4.md` section 5.

pub mod agent;
mod chat;
pub mod constrain;
mod detok;
mod error;
pub mod image;
mod model;
mod output;
mod special;
pub mod syntax;
mod template;
mod tokenizer;
pub mod untrusted;

pub use chat::{
    ChatMessage, Content, ContentPart, FunctionCall, FunctionDeclaration, Role, ToolCallRequest,
    ToolDeclaration,
};
pub use detok::IncrementalDecoder;
pub use error::{Result, TextError};
pub use image::ImageTokens;
pub use model::{GemmaText, Prompt, TextFiles};
pub use output::{EndMarker, OutputEvent, OutputParser};
pub use special::{SpecialToken, SpecialTokens, Vocabulary, text as markers};
pub use syntax::{ParsedToolCall, ToolCallError, ToolCallErrorKind};
pub use template::{ChatTemplate, PromptOptions, TemplateTokens};
pub use tokenizer::GemmaTokenizer;
