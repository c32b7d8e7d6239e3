//! The Gemma Gem agent: chat messages, tool definitions, the `ModelBackend` and
//! `ToolExecutor` traits and the agent loop. No GPU, no DOM, no Chrome.
