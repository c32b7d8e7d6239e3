//! The Gemma Gem agent: chat messages, tool definitions, the [`ModelBackend`] and
//! [`ToolExecutor`] traits, the safety gate and the agent loop. No GPU, no DOM, no Chrome: this
//! crate depends on serde, serde_json, futures, thiserror and `gg-fields` (which fields hold
//! secrets, shared with the content script) only, and builds for
//! `wasm32-unknown-unknown` (all traits use local, non-`Send` futures and streams).
//!
//! Who implements what:
//! - the runtime's Gemma session implements [`ModelBackend`] (and [`TokenCounter`] with its
//!   tokenizer);
//! - the extension (content script, service worker) and the demo widget implement
//!   [`ToolExecutor`] and [`Approver`] (the overlay's approval prompt);
//! - the offscreen document (or the widget's worker) owns an [`Agent`] and drives
//!   [`run_agent_loop`], forwarding its [`AgentEvent`]s to the overlay and persisting
//!   [`SitePermissions`] when [`AgentEvent::PermissionGranted`] arrives.
//!
//! Modules:
//! - [`message`]: [`ChatMessage`], [`Part`], [`ToolCall`], [`ToolResponse`];
//! - [`backend`]: [`ModelBackend`], [`GenerateOptions`], [`StreamChunk`];
//! - [`tool`]: [`ToolDefinition`], [`ToolExecutor`], [`ToolOutput`], [`ToolError`];
//! - [`builtin`]: the eight page tools and their validated arguments ([`BuiltinCall`]);
//! - [`gate`]: read/act/sensitive classification, [`Approver`];
//! - [`permissions`]: per-site records;
//! - [`untrusted`]: wrapping page-derived output;
//! - [`context`]: token counting and history trimming;
//! - [`budget`]: tool outputs cut to a token cap;
//! - [`agent`]: [`Agent`], [`run_agent_loop`], [`AgentEvent`].
//!
//! See [`agent`] for a complete example.

pub mod agent;
pub mod backend;
mod base64;
pub mod budget;
pub mod builtin;
mod cancel;
mod consequential;
pub mod context;
mod emit;
mod facts;
pub mod gate;
pub mod javascript;
pub mod message;
pub mod permissions;
mod site;
pub mod tool;
pub mod untrusted;

pub use agent::{
    Agent, AgentConfig, AgentEnv, AgentError, AgentEvent, DEFAULT_SYSTEM_PROMPT, StopReason,
    run_agent_loop,
};
pub use backend::{
    BackendError, ChunkStream, DEFAULT_IMAGE_TOKENS, FinishReason, GenerateOptions,
    IMAGE_TOKEN_BUDGETS, ModelBackend, StreamChunk,
};
pub use builtin::{
    BuiltinCall, BuiltinTool, ContentFormat, ReadMode, ReadPageContentArgs, ScrollArgs,
    ScrollDirection, TypeTextArgs, builtin_tools,
};
pub use cancel::{CancellationToken, Cancelled};
pub use context::{
    ApproxTokenCounter, ContextOverflow, ImageBudget, TokenCounter, TrimReport, trim_to_budget,
};
pub use gate::{
    ActionKind, ApprovalDecision, ApprovalRequest, Approver, Classification, DenyAll, ElementFacts,
    FieldFacts, FormFacts, RiskClass, SensitiveField, SensitiveReason,
};
pub use javascript::javascript_answer;
pub use message::{ChatMessage, ImagePart, Part, Role, ToolCall, ToolResponse};
pub use permissions::{Permission, SitePermissions, SitePolicy};
pub use site::site_key;
pub use tool::{ElementTarget, ToolDefinition, ToolError, ToolErrorKind, ToolExecutor, ToolOutput};
