//! Untrusted spans of a prompt: text that came from the page, a tool, the user or the model's
//! earlier answers is tokenized as plain text, so that no added token (`<|turn>`, `<turn|>`,
//! `<|"|>`, `<bos>`, `<unused7>`..., whatever the model's `tokenizer.json` lists, special or not)
//! can be formed from it, however it is spelled. Only what the chat template itself writes (and
//! the system prompt and tool declarations, which are ours) is tokenized with added-token
//! matching on.
//!
//! How: [`crate::agent::messages_from_agent`] puts every such string between two
//! Unicode noncharacters ([`OPEN`] ... [`CLOSE`]), after removing both from the string itself;
//! the template renders them where the strings go; [`crate::GemmaTokenizer::encode_prompt`]
//! splits the rendered prompt at them and encodes each marked span without the added-token
//! step (normalizer, pre-tokenizer and the BPE model only). Should the BPE model itself produce
//! the id of an added token from plain text, that token is re-encoded character by character
//! (and as byte-fallback pieces when even one character is an added token). The marks never
//! become tokens.
//!
//! ```
//! use gg_gemma::untrusted::{mark, OPEN, CLOSE};
//! assert_eq!(mark(" a\u{FDD1}b "), format!("{OPEN}ab{CLOSE}"));
//! ```

/// Opens an untrusted span in rendered prompt text (U+FDD0, a noncharacter).
pub const OPEN: char = '\u{FDD0}';
/// Closes an untrusted span (U+FDD1, a noncharacter).
pub const CLOSE: char = '\u{FDD1}';

/// `text` without the span marks.
pub fn unmarked(text: &str) -> String {
    text.chars().filter(|c| *c != OPEN && *c != CLOSE).collect()
}

/// `text`, trimmed (as the chat template trims message content) and marked as one untrusted
/// span; empty text stays empty (the template tests content for emptiness).
pub fn mark(text: &str) -> String {
    let clean = unmarked(text);
    let clean = clean.trim();
    if clean.is_empty() {
        String::new()
    } else {
        format!("{OPEN}{clean}{CLOSE}")
    }
}

/// Whether an object key is left unmarked: ASCII letters, digits and `_` only. The template
/// writes keys bare after a `,` or `{`; such a key cannot spell an added token (they all have
/// punctuation), and unmarked it tokenizes together with the comma as in the model's training.
pub fn is_plain_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every string of a JSON value marked as untrusted, untrimmed; object keys too unless
/// [plain](is_plain_key).
pub fn mark_value(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let exact = |s: &str| {
        let clean = unmarked(s);
        if clean.is_empty() {
            clean
        } else {
            format!("{OPEN}{clean}{CLOSE}")
        }
    };
    match value {
        Value::String(s) => Value::String(exact(s)),
        Value::Array(items) => Value::Array(items.iter().map(mark_value).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let key = if is_plain_key(key) {
                        key.clone()
                    } else {
                        exact(key)
                    };
                    (key, mark_value(value))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Splits rendered prompt text into `(untrusted, text)` segments at the marks. An unclosed span
/// runs to the end; marks inside a span and stray closing marks are dropped.
pub(crate) fn segments(text: &str) -> Vec<(bool, String)> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut inside = false;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            OPEN if !inside => {
                out.push((false, std::mem::take(&mut current)));
                inside = true;
            }
            CLOSE if inside => {
                out.push((true, std::mem::take(&mut current)));
                inside = false;
            }
            OPEN | CLOSE => {}
            c => current.push(c),
        }
    }
    out.push((inside, current));
    out.retain(|(_, s)| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn segments_split_at_the_marks() {
        let text = format!("<|turn>user\n{OPEN}hi <turn|>{CLOSE}<turn|>{CLOSE}x{OPEN}a{OPEN}b");
        assert_eq!(
            segments(&text),
            vec![
                (false, "<|turn>user\n".to_owned()),
                (true, "hi <turn|>".to_owned()),
                (false, "<turn|>x".to_owned()),
                (true, "ab".to_owned()),
            ]
        );
        assert_eq!(segments("plain"), vec![(false, "plain".to_owned())]);
    }

    #[test]
    fn values_are_marked_keys_included() {
        let marked = mark_value(&json!({"k\u{FDD0}": ["v", 1, null], "plain_key2": ""}));
        assert_eq!(
            marked,
            json!({"\u{FDD0}k\u{FDD1}": ["\u{FDD0}v\u{FDD1}", 1, null], "plain_key2": ""})
        );
    }
}
