//! Incremental detokenization that never emits half a character.
//!
//! Gemma's tokenizer falls back to byte pieces (`<0xE2>`, `<0x82>`, `<0xAC>`) for characters that
//! are not in the vocabulary, so one character can be split over several tokens. Decoding each
//! token on its own would print `�` and then garbage. [`IncrementalDecoder`] decodes a small window
//! of recent tokens with the model's own decoder, emits only the text that is new, and holds text
//! back while the window ends in an incomplete UTF-8 sequence made of byte-fallback pieces.

use crate::tokenizer::GemmaTokenizer;

/// Streams text out of generated token ids. See the module documentation.
#[derive(Debug)]
pub struct IncrementalDecoder<'t> {
    tokenizer: &'t GemmaTokenizer,
    /// Ids from the start of the last emitted chunk to now.
    ids: Vec<u32>,
    /// How many of `ids` belong to the last emitted chunk (the rest are pending).
    prefix_len: usize,
    /// The text of `ids[..prefix_len]`, already emitted.
    prefix: String,
}

impl<'t> IncrementalDecoder<'t> {
    /// A decoder for `tokenizer`.
    pub fn new(tokenizer: &'t GemmaTokenizer) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            prefix_len: 0,
            prefix: String::new(),
        }
    }

    /// Adds one generated id and returns the text that became final (possibly empty).
    pub fn push(&mut self, id: u32) -> crate::Result<String> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}') && self.pending_bytes_incomplete() {
            return Ok(String::new());
        }
        self.emit(text)
    }

    /// Ends the stream: returns whatever is still held back (an incomplete character comes out
    /// as `�`, as the model's decoder writes it), and resets the decoder.
    pub fn finish(&mut self) -> crate::Result<String> {
        if self.ids.len() == self.prefix_len {
            self.reset();
            return Ok(String::new());
        }
        let text = self.tokenizer.decode(&self.ids)?;
        let out = self.emit(text);
        self.reset();
        out
    }

    /// Forgets all state (e.g. between turns).
    pub fn reset(&mut self) {
        self.ids.clear();
        self.prefix_len = 0;
        self.prefix.clear();
    }

    /// Whether ids are held back waiting for the rest of a character.
    pub fn has_pending(&self) -> bool {
        self.ids.len() > self.prefix_len
    }

    fn emit(&mut self, text: String) -> crate::Result<String> {
        let new = match text.strip_prefix(self.prefix.as_str()) {
            Some(rest) => rest.to_owned(),
            None => {
                // The decoder rewrote earlier text (possible with decoders that look at context,
                // never with Gemma's Replace/ByteFallback/Fuse): emit what follows the longest
                // common prefix.
                let common = self
                    .prefix
                    .char_indices()
                    .zip(text.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(self.prefix.len().min(text.len()), |((i, _), _)| i);
                let common = (0..=common)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                text[common..].to_owned()
            }
        };
        // The ids of the chunk just emitted become the context for the next one.
        self.ids.drain(..self.prefix_len);
        self.prefix_len = self.ids.len();
        self.prefix = self.tokenizer.decode(&self.ids)?;
        Ok(new)
    }

    /// True when the pending ids end in byte-fallback pieces that form a valid but incomplete
    /// UTF-8 sequence, i.e. more bytes can still complete the character. An invalid sequence (a
    /// stray continuation byte, or a fifth byte) is final: it is emitted as `�` right away.
    fn pending_bytes_incomplete(&self) -> bool {
        let pending = &self.ids[self.prefix_len..];
        let mut tail = Vec::with_capacity(4);
        for &id in pending.iter().rev() {
            match self.tokenizer.fallback_byte(id) {
                Some(b) if tail.len() < 4 => tail.push(b),
                _ => break,
            }
        }
        if tail.is_empty() {
            return false;
        }
        tail.reverse();
        // Start at the last lead byte (the character being built).
        let Some(lead) = tail.iter().rposition(|b| b & 0xC0 != 0x80) else {
            return false;
        };
        match std::str::from_utf8(&tail[lead..]) {
            Ok(_) => false,
            Err(e) => e.error_len().is_none(),
        }
    }
}
