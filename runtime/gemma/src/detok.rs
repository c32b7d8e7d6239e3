//! Incremental detokenization that never emits half a character.
//!
//! Gemma's tokenizer falls back to byte pieces (`<0xE2>`, `<0x82>`, `<0xAC>`) for characters that
//! are not in the vocabulary, so one character can be split over several tokens; decoding each
//! token on its own would print `�` and then garbage. [`IncrementalDecoder`] collects the bytes of
//! consecutive byte-fallback pieces and releases each character once its last byte arrived. An
//! invalid byte sequence is released at once as one `�` per maximal invalid subsequence (the rule of
//! `String::from_utf8_lossy`), so valid characters around it are kept; `tokenizers`' ByteFallback
//! decoder instead turns a whole run of byte pieces into `�`s when any of it is invalid. Other tokens
//! are decoded by the model's own decoder, with the previous token as context (decoders may strip
//! a leading space from the first token they see).

use crate::tokenizer::GemmaTokenizer;

/// Streams text out of generated token ids. See the module documentation.
#[derive(Debug)]
pub struct IncrementalDecoder<'t> {
    tokenizer: &'t GemmaTokenizer,
    /// Bytes of byte-fallback pieces not yet released (a character still being built).
    pending: Vec<u8>,
    /// The last non-byte token, context for decoding the next one.
    context: Option<u32>,
}

impl<'t> IncrementalDecoder<'t> {
    /// A decoder for `tokenizer`.
    pub fn new(tokenizer: &'t GemmaTokenizer) -> Self {
        Self {
            tokenizer,
            pending: Vec::new(),
            context: None,
        }
    }

    /// Adds one generated id and returns the text that became final (possibly empty).
    pub fn push(&mut self, id: u32) -> crate::Result<String> {
        let mut out = String::new();
        if let Some(byte) = self.tokenizer.fallback_byte(id) {
            self.pending.push(byte);
            self.release(&mut out, false);
            return Ok(out);
        }
        self.release(&mut out, true);
        let text = match self.context {
            Some(prev) => {
                let before = self.tokenizer.decode(&[prev])?;
                let both = self.tokenizer.decode(&[prev, id])?;
                match both.strip_prefix(before.as_str()) {
                    Some(new) => new.to_owned(),
                    None => self.tokenizer.decode(&[id])?,
                }
            }
            None => self.tokenizer.decode(&[id])?,
        };
        out.push_str(&text);
        self.context = Some(id);
        Ok(out)
    }

    /// Ends the stream: returns what is still held back (an incomplete character comes out as
    /// `�`) and resets the decoder.
    pub fn finish(&mut self) -> crate::Result<String> {
        let mut out = String::new();
        self.release(&mut out, true);
        self.reset();
        Ok(out)
    }

    /// Forgets all state (e.g. between turns).
    pub fn reset(&mut self) {
        self.pending.clear();
        self.context = None;
    }

    /// Whether bytes are held back waiting for the rest of a character.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Moves every complete character (and every definitely invalid sequence, as `�`) from
    /// `pending` to `out`. With `flush`, an incomplete trailing character goes out as `�` too.
    fn release(&mut self, out: &mut String, flush: bool) {
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by construction.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &after[n..];
                        }
                        None if flush => {
                            out.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let start = self.pending.len() - keep;
        self.pending.drain(..start);
    }
}
