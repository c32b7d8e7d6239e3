//! Gemma 4's special tokens, read from the model's own files.
//!
//! Ids are never hard-coded: each marker is looked up by its text in `tokenizer.json`, and the
//! bos/eos/pad/end ids come from `generation_config.json` (falling back to `tokenizer_config.json`
//! and then to the token texts `<bos>`, `<eos>`, `<pad>`).

use serde_json::Value;

use crate::error::{Result, TextError};

/// Text of Gemma 4's format markers. These strings are the chat format itself (the chat template
/// writes them literally); their ids come from the tokenizer.
pub mod text {
    /// Opens a turn: `<|turn>user\n`.
    pub const TURN_START: &str = "<|turn>";
    /// Closes a turn; an end id.
    pub const TURN_END: &str = "<turn|>";
    /// Opens a tool declaration in the system turn.
    pub const TOOL_START: &str = "<|tool>";
    /// Closes a tool declaration.
    pub const TOOL_END: &str = "<tool|>";
    /// Opens a tool call: `<|tool_call>call:NAME{...}<tool_call|>`.
    pub const TOOL_CALL_START: &str = "<|tool_call>";
    /// Closes a tool call.
    pub const TOOL_CALL_END: &str = "<tool_call|>";
    /// Opens a tool response; the model emits it after its calls and stops (an end id).
    pub const TOOL_RESPONSE_START: &str = "<|tool_response>";
    /// Closes a tool response.
    pub const TOOL_RESPONSE_END: &str = "<tool_response|>";
    /// String delimiter inside calls, declarations and responses.
    pub const STRING_DELIM: &str = "<|\"|>";
    /// Put at the top of the system turn to switch thinking on.
    pub const THINK: &str = "<|think|>";
    /// Opens a channel: `<|channel>thought\n...<channel|>`.
    pub const CHANNEL_START: &str = "<|channel>";
    /// Closes a channel.
    pub const CHANNEL_END: &str = "<channel|>";
    /// Beginning of sequence (default text when the config files do not name it).
    pub const BOS: &str = "<bos>";
    /// End of sequence (default text when the config files do not name it).
    pub const EOS: &str = "<eos>";
    /// Padding (default text when the config files do not name it).
    pub const PAD: &str = "<pad>";
    /// Unknown token (default text when the config files do not name it).
    pub const UNK: &str = "<unk>";
}

/// A special token: its id and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialToken {
    /// Token id in the vocabulary.
    pub id: u32,
    /// Token text as it appears in decoded output (decoded with special tokens kept).
    pub text: String,
}

/// The special tokens of a Gemma 4 model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence; the chat template writes it (`bos_token`).
    pub bos: SpecialToken,
    /// End of sequence (`eos_token`).
    pub eos: SpecialToken,
    /// Padding, when the model names one.
    pub pad: Option<SpecialToken>,
    /// Unknown token, when the model names one.
    pub unk: Option<SpecialToken>,
    /// `<|turn>`.
    pub turn_start: SpecialToken,
    /// `<turn|>`.
    pub turn_end: SpecialToken,
    /// `<|tool>`.
    pub tool_start: SpecialToken,
    /// `<tool|>`.
    pub tool_end: SpecialToken,
    /// `<|tool_call>`.
    pub tool_call_start: SpecialToken,
    /// `<tool_call|>`.
    pub tool_call_end: SpecialToken,
    /// `<|tool_response>`.
    pub tool_response_start: SpecialToken,
    /// `<tool_response|>`.
    pub tool_response_end: SpecialToken,
    /// `<|"|>`.
    pub string_delim: SpecialToken,
    /// `<|think|>`.
    pub think: SpecialToken,
    /// `<|channel>`.
    pub channel_start: SpecialToken,
    /// `<channel|>`.
    pub channel_end: SpecialToken,
    /// Generation stops at any of these ids (`generation_config.json` `eos_token_id`; Gemma 4:
    /// eos, `<turn|>`, `<|tool_response>`).
    pub end_ids: Vec<u32>,
}

/// How to look up token texts and ids; implemented by [`crate::GemmaTokenizer`]'s inner tokenizer
/// and by tests.
pub trait Vocabulary {
    /// Id of a token text (special or not).
    fn id_of(&self, text: &str) -> Option<u32>;
    /// Text of a token id.
    fn text_of(&self, id: u32) -> Option<String>;
}

impl Vocabulary for tokenizers::Tokenizer {
    fn id_of(&self, text: &str) -> Option<u32> {
        self.token_to_id(text)
    }
    fn text_of(&self, id: u32) -> Option<String> {
        self.id_to_token(id)
    }
}

fn parse_json(file: &'static str, bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| TextError::InvalidFile {
        file,
        message: format!("not valid JSON: {e}"),
    })
}

/// An id field of generation_config.json: a number, a list of numbers, or absent/null.
fn ids_field(file: &'static str, config: &Value, key: &str) -> Result<Vec<u32>> {
    let to_id = |v: &Value| -> Result<u32> {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| TextError::InvalidFile {
                file,
                message: format!("`{key}` must be a token id or a list of token ids, got {v}"),
            })
    };
    match config.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(to_id).collect(),
        Some(v) => Ok(vec![to_id(v)?]),
    }
}

/// A token field of tokenizer_config.json: `"<bos>"` or `{"content": "<bos>", ...}`.
fn token_text_field(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

impl SpecialTokens {
    /// Reads the special tokens from the vocabulary and the optional config files
    /// (`generation_config.json`, `tokenizer_config.json`, raw bytes).
    pub fn load(
        vocab: &impl Vocabulary,
        generation_config: Option<&[u8]>,
        tokenizer_config: Option<&[u8]>,
    ) -> Result<Self> {
        const GEN: &str = "generation_config.json";
        const TOK: &str = "tokenizer_config.json";
        let gen_cfg = generation_config
            .map(|b| parse_json(GEN, b))
            .transpose()?
            .unwrap_or(Value::Null);
        let tok_cfg = tokenizer_config
            .map(|b| parse_json(TOK, b))
            .transpose()?
            .unwrap_or(Value::Null);

        let mut missing = Vec::new();
        let mut by_text = |t: &str| -> SpecialToken {
            match vocab.id_of(t) {
                Some(id) => SpecialToken {
                    id,
                    text: t.to_owned(),
                },
                None => {
                    missing.push(t.to_owned());
                    SpecialToken {
                        id: u32::MAX,
                        text: t.to_owned(),
                    }
                }
            }
        };
        let turn_start = by_text(text::TURN_START);
        let turn_end = by_text(text::TURN_END);
        let tool_start = by_text(text::TOOL_START);
        let tool_end = by_text(text::TOOL_END);
        let tool_call_start = by_text(text::TOOL_CALL_START);
        let tool_call_end = by_text(text::TOOL_CALL_END);
        let tool_response_start = by_text(text::TOOL_RESPONSE_START);
        let tool_response_end = by_text(text::TOOL_RESPONSE_END);
        let string_delim = by_text(text::STRING_DELIM);
        let think = by_text(text::THINK);
        let channel_start = by_text(text::CHANNEL_START);
        let channel_end = by_text(text::CHANNEL_END);

        // bos / eos / pad / unk: id from generation_config.json, else the text named in
        // tokenizer_config.json, else Gemma's default text.
        let mut named = |id_key: &str, text_key: &str, default: &str, required: bool| {
            let from_gen = ids_field(GEN, &gen_cfg, id_key)?.first().copied();
            let token = match from_gen {
                Some(id) => vocab
                    .text_of(id)
                    .map(|text| SpecialToken { id, text })
                    .ok_or_else(|| TextError::InvalidFile {
                        file: GEN,
                        message: format!("`{id_key}` = {id} is not in the vocabulary"),
                    })
                    .map(Some)?,
                None => {
                    let t = token_text_field(&tok_cfg, text_key).unwrap_or_else(|| default.into());
                    match vocab.id_of(&t) {
                        Some(id) => Some(SpecialToken { id, text: t }),
                        None if required => {
                            missing.push(t);
                            None
                        }
                        None => None,
                    }
                }
            };
            Ok::<_, TextError>(token)
        };
        let bos = named("bos_token_id", "bos_token", text::BOS, true)?;
        let eos = named("eos_token_id", "eos_token", text::EOS, true)?;
        let pad = named("pad_token_id", "pad_token", text::PAD, false)?;
        let unk = named("unk_token_id", "unk_token", text::UNK, false)?;

        let (Some(bos), Some(eos), true) = (bos, eos, missing.is_empty()) else {
            return Err(TextError::MissingSpecialTokens { missing });
        };

        let mut end_ids = ids_field(GEN, &gen_cfg, "eos_token_id")?;
        if end_ids.is_empty() {
            end_ids = vec![eos.id, turn_end.id, tool_response_start.id];
        }

        Ok(Self {
            bos,
            eos,
            pad,
            unk,
            turn_start,
            turn_end,
            tool_start,
            tool_end,
            tool_call_start,
            tool_call_end,
            tool_response_start,
            tool_response_end,
            string_delim,
            think,
            channel_start,
            channel_end,
            end_ids,
        })
    }

    /// Whether generation stops at this id.
    pub fn is_end(&self, id: u32) -> bool {
        self.end_ids.contains(&id)
    }
}
