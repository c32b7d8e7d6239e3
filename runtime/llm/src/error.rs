//! Errors of model loading and generation; every message names the culprit in one line.

/// Error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A model file could not be read.
    #[error("{path}: {message}")]
    File {
        /// Repository path or URL.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The model files are inconsistent or unsupported.
    #[error("model: {0}")]
    Model(String),
    /// The runtime (graph loading, GPU) failed.
    #[error("{0}")]
    Runtime(#[from] gg_runtime::Error),
    /// Tokenizer or chat template failure.
    #[error("text: {0}")]
    Text(#[from] gg_gemma::TextError),
    /// The prompt does not fit the context.
    #[error("the prompt has {tokens} tokens, more than the model's context of {limit}")]
    ContextTooLong {
        /// Prompt tokens.
        tokens: usize,
        /// Context size.
        limit: usize,
    },
    /// Constrained decoding could not go on (the grammar allows no token, or the sampler
    /// picked one it refuses): a bug, reported instead of emitting a malformed call.
    #[error("constrained decoding: {0}")]
    Constraint(String),
    /// Bad generation options.
    #[error("invalid option: {0}")]
    Options(String),
}

/// Result alias.
pub type Result<T, E = LlmError> = std::result::Result<T, E>;
