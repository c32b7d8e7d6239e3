//! Errors of the text layer.

use thiserror::Error;

/// Everything that can go wrong while loading or using the model's text files.
#[derive(Debug, Error)]
pub enum TextError {
    /// A model file (tokenizer.json, generation_config.json, ...) is not valid JSON or has an
    /// unexpected shape.
    #[error("{file}: {message}")]
    InvalidFile {
        /// Which file, e.g. `generation_config.json`.
        file: &'static str,
        /// What is wrong, and what was expected instead.
        message: String,
    },
    /// The `tokenizers` crate refused the tokenizer or failed to encode/decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Special tokens that Gemma 4's chat format needs are missing from tokenizer.json.
    #[error(
        "tokenizer.json lacks the Gemma 4 special token(s) {missing:?}; this does not look like a \
         Gemma 4 tokenizer (see GEMMA4.md section 5)"
    )]
    MissingSpecialTokens {
        /// The token texts that were looked up and not found.
        missing: Vec<String>,
    },
    /// Images and their placeholders in the prompt do not agree.
    #[error("images: {0}")]
    Images(String),
    /// The chat template failed to compile or to render.
    #[error("chat template: {0}")]
    Template(String),
    /// Reading a file from disk failed (native builds only).
    #[error("{path}: {message}")]
    Io {
        /// The path that could not be read.
        path: String,
        /// The operating system's message.
        message: String,
    },
}

impl From<minijinja::Error> for TextError {
    fn from(err: minijinja::Error) -> Self {
        // minijinja's alternate Display prints the error with its template location and source
        // excerpt, which is what a developer needs when a model's template does not render.
        let mut message = format!("{err:#}");
        let mut source = std::error::Error::source(&err);
        while let Some(inner) = source {
            message.push_str(&format!("\ncaused by: {inner}"));
            source = inner.source();
        }
        TextError::Template(message)
    }
}

/// Result alias for this crate.
pub type Result<T, E = TextError> = std::result::Result<T, E>;
