//! The model side: [`ModelBackend`] streams [`StreamChunk`]s for a conversation.
//!
//! The runtime's Gemma session implements it (in the offscreen document, single-threaded wasm),
//! and tests implement it with scripted answers. It is a plain trait object with local
//! (non-`Send`) streams.
//!
//! ```
//! use futures::{StreamExt, stream};
//! use gg_agent::{ChatMessage, ChunkStream, FinishReason, GenerateOptions, ModelBackend,
//!     StreamChunk, ToolDefinition};
//!
//! /// Answers every conversation with "Hello!".
//! struct Hello;
//!
//! impl ModelBackend for Hello {
//!     fn generate<'a>(
//!         &'a self,
//!         _messages: &'a [ChatMessage],
//!         _tools: &'a [ToolDefinition],
//!         _options: &'a GenerateOptions,
//!     ) -> ChunkStream<'a> {
//!         stream::iter([
//!             Ok(StreamChunk::Token { text: "Hello!".into() }),
//!             Ok(StreamChunk::Done { reason: FinishReason::EndOfTurn }),
//!         ])
//!         .boxed_local()
//!     }
//! }
//!
//! let chunks: Vec<_> = futures::executor::block_on(
//!     Hello.generate(&[ChatMessage::user("hi")], &[], &GenerateOptions::default()).collect(),
//! );
//! assert_eq!(chunks.len(), 2);
//! ```

use futures::stream::LocalBoxStream;
use serde::{Deserialize, Serialize};

use crate::message::{ChatMessage, ToolCall};
use crate::tool::ToolDefinition;

/// Sampling and length settings for one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    /// Most tokens to generate in one model step.
    pub max_new_tokens: u32,
    /// Let the model think first (Gemma's `<|think|>`); thoughts arrive as
    /// [`StreamChunk::Thinking`] and are kept apart from the answer
    /// ([`ChatMessage::thinking`]).
    pub thinking: bool,
    /// Sampling temperature; `0.0` means greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (`0`: no limit).
    pub top_k: u32,
    /// Nucleus sampling threshold (`1.0`: no limit).
    pub top_p: f32,
    /// Seed for reproducible sampling; `None` picks one.
    pub seed: Option<u64>,
    /// Soft tokens each image becomes for the model (its vision encoder's budget: one of
    /// [`IMAGE_TOKEN_BUDGETS`]); more shows finer detail and costs more context.
    pub image_tokens: u32,
    /// Restrict sampling inside a tool call to calls of the declared tools with valid
    /// arguments (constrained decoding, where the backend supports it); off, the model writes
    /// calls freely and malformed ones are reported back to it. Missing in older wire JSON:
    /// on.
    pub constrain_tool_calls: bool,
}

/// The soft-token budgets Gemma 4's image processor supports per image (`max_soft_tokens`).
pub const IMAGE_TOKEN_BUDGETS: [u32; 5] = [70, 140, 280, 560, 1120];

/// The default image budget (Gemma 4's processor default).
pub const DEFAULT_IMAGE_TOKENS: u32 = 280;

impl Default for GenerateOptions {
    /// Gemma 4's recommended sampling (temperature 1.0, top-k 64, top-p 0.95), 1024 new tokens,
    /// thinking off, 280 soft tokens per image, tool calls constrained.
    fn default() -> Self {
        Self {
            max_new_tokens: 1024,
            thinking: false,
            temperature: 1.0,
            top_k: 64,
            top_p: 0.95,
            seed: None,
            image_tokens: DEFAULT_IMAGE_TOKENS,
            constrain_tool_calls: true,
        }
    }
}

/// Why the model stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn (Gemma's `<turn|>` or end of sequence).
    EndOfTurn,
    /// The model made tool calls and waits for their responses (Gemma's `<|tool_response>`).
    ToolCall,
    /// `max_new_tokens` was reached.
    MaxNewTokens,
}

/// One item of a generation stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamChunk {
    /// Answer text, as decoded so far (incremental; never split inside a UTF-8 character).
    Token {
        /// The new text.
        text: String,
    },
    /// Thinking text (only with [`GenerateOptions::thinking`]).
    Thinking {
        /// The new text.
        text: String,
    },
    /// A complete, parsed tool call.
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// The model wrote a tool call the backend could not parse. The loop tells the model.
    MalformedToolCall {
        /// The tool's name, if it could be read.
        name: Option<String>,
        /// The raw text of the call as the model wrote it.
        raw: String,
        /// What is wrong with it.
        error: String,
    },
    /// Generation ended. Nothing follows.
    Done {
        /// Why.
        reason: FinishReason,
    },
}

/// A failure of the model backend (not of a tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BackendError {
    /// The model is not loaded (yet).
    #[error("the model is not ready: {message}")]
    NotReady {
        /// Details.
        message: String,
    },
    /// The prompt does not fit the model's context.
    #[error("the prompt has {tokens} tokens, more than the model's context of {limit}")]
    ContextTooLong {
        /// Tokens in the prompt.
        tokens: usize,
        /// The context size.
        limit: usize,
    },
    /// The GPU device was lost or ran out of memory.
    #[error("the GPU failed: {message}; reload the model")]
    Device {
        /// Details.
        message: String,
    },
    /// Anything else.
    #[error("generation failed: {message}")]
    Failed {
        /// Details.
        message: String,
    },
}

/// The stream a [`ModelBackend`] returns.
pub type ChunkStream<'a> = LocalBoxStream<'a, Result<StreamChunk, BackendError>>;

/// A language model that continues a conversation.
pub trait ModelBackend {
    /// Starts generating the model's next message for `messages` (system prompt first, if any),
    /// with `tools` declared to the model.
    ///
    /// The stream yields text, thinking and tool calls as they are decoded and ends with
    /// [`StreamChunk::Done`]; an `Err` item ends it early. Dropping the stream must stop the
    /// generation: that is how the agent loop cancels, so the backend should do its work lazily
    /// as the stream is polled and yield between decoding steps.
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        options: &'a GenerateOptions,
    ) -> ChunkStream<'a>;

    /// Counts tokens exactly as this model sees them (its tokenizer and chat template), if it
    /// can; the agent's context budget and tool-output caps then use it instead of an estimate.
    fn token_counter(&self) -> Option<&dyn crate::TokenCounter> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_serialize_tagged() {
        let chunk = StreamChunk::Done {
            reason: FinishReason::ToolCall,
        };
        assert_eq!(
            serde_json::to_value(&chunk).unwrap(),
            json!({"type": "done", "reason": "tool_call"})
        );
    }

    #[test]
    fn options_fill_defaults() {
        let options: GenerateOptions = serde_json::from_value(json!({"thinking": true})).unwrap();
        assert!(options.thinking);
        assert_eq!(options.top_k, 64);
        assert_eq!(options.max_new_tokens, 1024);
        // Options written before constrain_tool_calls existed constrain; it can be turned off.
        assert!(options.constrain_tool_calls);
        let off: GenerateOptions =
            serde_json::from_value(json!({"constrain_tool_calls": false})).unwrap();
        assert!(!off.constrain_tool_calls);
    }
}
