//! The model's text files together: tokenizer, special tokens and chat template.

use serde_json::Value;

use crate::chat::{ChatMessage, ToolDeclaration};
use crate::error::{Result, TextError};
use crate::template::{ChatTemplate, PromptOptions, TemplateTokens};
use crate::tokenizer::GemmaTokenizer;

/// The raw text files of a model in the Hugging Face layout. Only `tokenizer.json` is required;
/// the chat template comes from `chat_template.jinja`, or else from `tokenizer_config.json`'s
/// `chat_template` entry (older repositories keep it there).
#[derive(Debug, Clone, Copy, Default)]
pub struct TextFiles<'a> {
    /// `tokenizer.json`.
    pub tokenizer_json: &'a [u8],
    /// `tokenizer_config.json`.
    pub tokenizer_config: Option<&'a [u8]>,
    /// `generation_config.json`.
    pub generation_config: Option<&'a [u8]>,
    /// `chat_template.jinja`.
    pub chat_template: Option<&'a str>,
}

/// A prompt ready for prefill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The rendered chat template.
    pub text: String,
    /// Its token ids (no special tokens added: the template wrote `<bos>`).
    pub ids: Vec<u32>,
}

/// Tokenizer and chat template of one model.
#[derive(Debug)]
pub struct GemmaText {
    tokenizer: GemmaTokenizer,
    template: ChatTemplate,
    tokens: TemplateTokens,
}

impl GemmaText {
    /// Loads the text side of a model from its files' bytes.
    pub fn from_files(files: TextFiles<'_>) -> Result<Self> {
        let tokenizer = GemmaTokenizer::from_bytes(
            files.tokenizer_json,
            files.generation_config,
            files.tokenizer_config,
        )?;
        let source = match files.chat_template {
            Some(t) => t.to_owned(),
            None => template_from_tokenizer_config(files.tokenizer_config)?,
        };
        let template = ChatTemplate::new(source)?;
        let tokens = tokenizer.template_tokens();
        Ok(Self {
            tokenizer,
            template,
            tokens,
        })
    }

    /// Loads `tokenizer.json`, `tokenizer_config.json`, `generation_config.json` and
    /// `chat_template.jinja` from a model directory.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: &std::path::Path) -> Result<Self> {
        let read = |name: &str| std::fs::read(dir.join(name));
        let tokenizer_json = read("tokenizer.json").map_err(|e| TextError::Io {
            path: dir.join("tokenizer.json").display().to_string(),
            message: e.to_string(),
        })?;
        let tokenizer_config = read("tokenizer_config.json").ok();
        let generation_config = read("generation_config.json").ok();
        let chat_template = std::fs::read_to_string(dir.join("chat_template.jinja")).ok();
        Self::from_files(TextFiles {
            tokenizer_json: &tokenizer_json,
            tokenizer_config: tokenizer_config.as_deref(),
            generation_config: generation_config.as_deref(),
            chat_template: chat_template.as_deref(),
        })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &GemmaTokenizer {
        &self.tokenizer
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// Counts tokens as the model sees them (the agent's [`TokenCounter`](gg_agent::TokenCounter)).
    pub fn counter(&self) -> crate::agent::PromptCounter<'_> {
        crate::agent::PromptCounter {
            tokenizer: &self.tokenizer,
            template: &self.template,
        }
    }

    /// Renders a conversation with the model's template and special tokens.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        options: PromptOptions,
    ) -> Result<String> {
        self.template.render(messages, tools, options, &self.tokens)
    }

    /// Renders and tokenizes a conversation.
    pub fn prompt(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        options: PromptOptions,
    ) -> Result<Prompt> {
        let text = self.render(messages, tools, options)?;
        let ids = self.tokenizer.encode_prompt(&text)?;
        Ok(Prompt { text, ids })
    }
}

/// `tokenizer_config.json`'s `chat_template`: a string, or a list of `{name, template}` of which
/// the one named `default` is used.
fn template_from_tokenizer_config(config: Option<&[u8]>) -> Result<String> {
    const FILE: &str = "tokenizer_config.json";
    let missing = || TextError::InvalidFile {
        file: FILE,
        message:
            "no chat template: the model has no chat_template.jinja and tokenizer_config.json \
                  has no `chat_template`"
                .into(),
    };
    let config: Value = serde_json::from_slice(config.ok_or_else(missing)?).map_err(|e| {
        TextError::InvalidFile {
            file: FILE,
            message: format!("not valid JSON: {e}"),
        }
    })?;
    match config.get("chat_template") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str())
            .map(str::to_owned)
            .ok_or_else(|| TextError::InvalidFile {
                file: FILE,
                message: "`chat_template` is a list without a template named `default`".into(),
            }),
        _ => Err(missing()),
    }
}
