//! The model's tokenizer (`tokenizer.json`) through the `tokenizers` crate.

use std::collections::HashSet;

use serde_json::Value;
use tokenizers::{
    Model, Normalizer, OffsetType, PreTokenizedString, PreTokenizer, Token, Tokenizer,
};

use crate::detok::IncrementalDecoder;
use crate::error::{Result, TextError};
use crate::special::SpecialTokens;
use crate::template::TemplateTokens;

/// Gemma 4's tokenizer with its special tokens.
#[derive(Debug, Clone)]
pub struct GemmaTokenizer {
    inner: Tokenizer,
    special: SpecialTokens,
    dropped_merges: usize,
    /// Whether `<0xHH>` pieces decode to their byte (the ByteFallback decoder is in use).
    byte_fallback: bool,
    /// Ids of every added token of `tokenizer.json` (special or not): none may come out of an
    /// untrusted span.
    added_ids: HashSet<u32>,
}

impl GemmaTokenizer {
    /// Loads `tokenizer.json` (bytes) plus the optional `generation_config.json` and
    /// `tokenizer_config.json` (bytes), which name the bos/eos/pad and end ids.
    ///
    /// Merges whose result is not in the vocabulary (Gemma 4's tokenizer.json has some; the
    /// `tokenizers` crate refuses such files) are dropped: such a merge can never produce a token,
    /// so dropping it does not change any encoding. [`Self::dropped_merges`] says how many.
    pub fn from_bytes(
        tokenizer_json: &[u8],
        generation_config: Option<&[u8]>,
        tokenizer_config: Option<&[u8]>,
    ) -> Result<Self> {
        let (inner, dropped_merges) = match Tokenizer::from_bytes(tokenizer_json) {
            Ok(tok) => (tok, 0),
            Err(first) => {
                let (fixed, dropped) = drop_unreachable_merges(tokenizer_json)?;
                if dropped == 0 {
                    return Err(TextError::Tokenizer(first.to_string()));
                }
                let tok = Tokenizer::from_bytes(&fixed).map_err(|e| {
                    TextError::Tokenizer(format!(
                        "{first}; after dropping {dropped} unreachable merges: {e}"
                    ))
                })?;
                (tok, dropped)
            }
        };
        let special = SpecialTokens::load(&inner, generation_config, tokenizer_config)?;
        // Byte pieces count as bytes only when the model's decoder turns them into bytes.
        let byte_fallback = inner
            .token_to_id("<0x41>")
            .and_then(|id| inner.decode(&[id], false).ok())
            .is_some_and(|text| text == "A");
        let added_ids = inner.get_added_tokens_decoder().into_keys().collect();
        Ok(Self {
            inner,
            special,
            dropped_merges,
            byte_fallback,
            added_ids,
        })
    }

    /// Loads `tokenizer.json`, `generation_config.json` and `tokenizer_config.json` from a model
    /// directory in the Hugging Face layout (the two config files are optional).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: &std::path::Path) -> Result<Self> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| TextError::Io {
                path: path.display().to_string(),
                message: e.to_string(),
            })
        };
        let tokenizer = read("tokenizer.json")?;
        let generation = read("generation_config.json").ok();
        let config = read("tokenizer_config.json").ok();
        Self::from_bytes(&tokenizer, generation.as_deref(), config.as_deref())
    }

    /// The special tokens (markers, bos/eos, end ids).
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Number of merges dropped at load time because their result is not in the vocabulary.
    pub fn dropped_merges(&self) -> usize {
        self.dropped_merges
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Encodes a rendered prompt. The chat template already wrote `<bos>` and every marker, so no
    /// special tokens are added; marker texts that the template wrote become their special-token
    /// ids, while spans marked untrusted ([`crate::untrusted`]) are encoded as plain text: no
    /// added token comes out of them.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        for (untrusted, segment) in crate::untrusted::segments(text) {
            if untrusted {
                ids.extend(self.encode_untrusted(&segment)?);
            } else {
                let encoding = self
                    .inner
                    .encode(segment.as_str(), false)
                    .map_err(|e| TextError::Tokenizer(e.to_string()))?;
                ids.extend_from_slice(encoding.get_ids());
            }
        }
        Ok(ids)
    }

    /// The ids of every added token (`tokenizer.json` `added_tokens`, special or not).
    pub fn added_token_ids(&self) -> &HashSet<u32> {
        &self.added_ids
    }

    /// Encodes text that must stay plain text: the normalizer, the pre-tokenizer and the BPE
    /// model, without the added-token step. Any added-token id the model still produces is
    /// replaced by the encoding of its characters one by one (byte-fallback pieces for a
    /// character that is itself an added token); it is an error when that is impossible.
    pub fn encode_untrusted(&self, text: &str) -> Result<Vec<u32>> {
        let tokens = self.plain_tokens(text)?;
        let mut ids = Vec::with_capacity(tokens.len());
        for token in tokens {
            if !self.added_ids.contains(&token.id) {
                ids.push(token.id);
                continue;
            }
            let Some(piece) = text.get(token.offsets.0..token.offsets.1) else {
                return Err(TextError::Tokenizer(format!(
                    "untrusted text: no source for token {} at {:?}",
                    token.id, token.offsets
                )));
            };
            for c in piece.chars() {
                let mut buf = [0u8; 4];
                let one = c.encode_utf8(&mut buf);
                let char_tokens = self.plain_tokens(one)?;
                if char_tokens.iter().all(|t| !self.added_ids.contains(&t.id)) {
                    ids.extend(char_tokens.iter().map(|t| t.id));
                    continue;
                }
                for byte in one.bytes() {
                    match self.byte_piece_id(byte) {
                        Some(id) => ids.push(id),
                        None => {
                            return Err(TextError::Tokenizer(format!(
                                "untrusted text: {c:?} can only be written as an added token here"
                            )));
                        }
                    }
                }
            }
        }
        Ok(ids)
    }

    /// The BPE model's tokens of `text`, offsets in bytes of `text`.
    fn plain_tokens(&self, text: &str) -> Result<Vec<Token>> {
        let error = |e: tokenizers::Error| TextError::Tokenizer(e.to_string());
        let mut pretokenized = PreTokenizedString::from(text);
        if let Some(normalizer) = self.inner.get_normalizer() {
            pretokenized
                .normalize(|s| normalizer.normalize(s))
                .map_err(error)?;
        }
        if let Some(pre_tokenizer) = self.inner.get_pre_tokenizer() {
            pre_tokenizer
                .pre_tokenize(&mut pretokenized)
                .map_err(error)?;
        }
        let model = self.inner.get_model();
        pretokenized
            .tokenize(|normalized| model.tokenize(normalized.get()))
            .map_err(error)?;
        let encoding = pretokenized
            .into_encoding(None, 0, OffsetType::Byte)
            .map_err(error)?;
        Ok(encoding
            .get_ids()
            .iter()
            .zip(encoding.get_offsets())
            .zip(encoding.get_tokens())
            .map(|((id, offsets), value)| Token::new(*id, value.clone(), *offsets))
            .collect())
    }

    /// The id of the byte-fallback piece `<0xHH>` of `byte`, when the vocabulary has one that
    /// is not an added token.
    fn byte_piece_id(&self, byte: u8) -> Option<u32> {
        let id = self.inner.token_to_id(&format!("<0x{byte:02X}>"))?;
        (!self.added_ids.contains(&id)).then_some(id)
    }

    /// Decodes ids to text, keeping special tokens (`<|tool_call>` etc. appear as text).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TextError::Tokenizer(e.to_string()))
    }

    /// The vocabulary piece of an id (`▁Paris`, `<0xE2>`, `<|tool_call>`).
    pub fn piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary piece or added token.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.inner.token_to_id(piece)
    }

    /// The byte of a byte-fallback piece `<0xHH>`, or `None` for any other id (and for every id
    /// when the tokenizer's decoder does not decode byte pieces to bytes).
    pub fn fallback_byte(&self, id: u32) -> Option<u8> {
        if !self.byte_fallback {
            return None;
        }
        byte_of_piece(&self.inner.id_to_token(id)?)
    }

    /// Whether generation stops at this id.
    pub fn is_end(&self, id: u32) -> bool {
        self.special.is_end(id)
    }

    /// A streaming decoder that never emits half a character.
    pub fn incremental_decoder(&self) -> IncrementalDecoder<'_> {
        IncrementalDecoder::new(self)
    }

    /// The special-token texts the chat template reads (`bos_token`, `eos_token`, ...).
    pub fn template_tokens(&self) -> TemplateTokens {
        TemplateTokens {
            bos_token: self.special.bos.text.clone(),
            eos_token: self.special.eos.text.clone(),
            pad_token: self.special.pad.as_ref().map(|t| t.text.clone()),
            unk_token: self.special.unk.as_ref().map(|t| t.text.clone()),
        }
    }
}

/// `<0xHH>` (upper-case hex, the byte-fallback convention) -> the byte.
pub(crate) fn byte_of_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Removes BPE merges whose concatenated result is missing from the vocabulary. Returns the
/// rewritten JSON and how many merges were dropped.
fn drop_unreachable_merges(tokenizer_json: &[u8]) -> Result<(Vec<u8>, usize)> {
    const FILE: &str = "tokenizer.json";
    let invalid = |message: String| TextError::InvalidFile {
        file: FILE,
        message,
    };
    let mut root: Value = serde_json::from_slice(tokenizer_json)
        .map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let Some(model) = root.get_mut("model").and_then(Value::as_object_mut) else {
        return Ok((Vec::new(), 0));
    };
    if model.get("type").and_then(Value::as_str) != Some("BPE") {
        return Ok((Vec::new(), 0));
    }
    let vocab: std::collections::HashSet<String> = match model.get("vocab") {
        Some(Value::Object(v)) => v.keys().cloned().collect(),
        _ => return Err(invalid("model.vocab must be an object".into())),
    };
    let Some(Value::Array(merges)) = model.get_mut("merges") else {
        return Ok((Vec::new(), 0));
    };
    let before = merges.len();
    merges.retain(|merge| {
        let pair = match merge {
            Value::String(s) => s.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())),
            Value::Array(p) => match (
                p.first().and_then(Value::as_str),
                p.get(1).and_then(Value::as_str),
            ) {
                (Some(a), Some(b)) => Some((a.to_owned(), b.to_owned())),
                _ => None,
            },
            _ => None,
        };
        // Keep anything we do not understand: the tokenizers crate reports it precisely.
        pair.is_none_or(|(a, b)| vocab.contains(&format!("{a}{b}")))
    });
    let dropped = before - merges.len();
    let bytes = serde_json::to_vec(&root).map_err(|e| invalid(e.to_string()))?;
    Ok((bytes, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_pieces() {
        assert_eq!(byte_of_piece("<0xE2>"), Some(0xE2));
        assert_eq!(byte_of_piece("<0x0A>"), Some(0x0A));
        assert_eq!(byte_of_piece("<0xE>"), None);
        assert_eq!(byte_of_piece("<0xE2"), None);
        assert_eq!(byte_of_piece("<0xZZ>"), None);
        assert_eq!(byte_of_piece("▁the"), None);
    }
}
