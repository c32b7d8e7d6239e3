//! Tool outputs within a token budget.
//!
//! The page tools size their output in characters (the page has no tokenizer), so the agent
//! checks each output with the model's own [`TokenCounter`] before it enters the conversation:
//! an output over the cap has its longest string cut to fit, saying so — for
//! `read_page_content` the pagination fields (`returned_chars`, `next_offset`, `note`) are made
//! true to the cut, so the model reads on from where its text stops. An output that cannot be
//! made to fit by cutting a string is replaced by a note asking for a narrower request
//! ([`OMITTED_KEY`]).
//!
//! ```
//! use gg_agent::budget::fit_tool_output;
//! use gg_agent::{ApproxTokenCounter, TokenCounter};
//! use serde_json::json;
//!
//! let counter = ApproxTokenCounter::default();
//! let page = json!({"format": "text", "offset": 0, "returned_chars": 40_000,
//!     "total_chars": 40_000, "remaining_chars": 0, "note": "this is the end of the content",
//!     "content": "word ".repeat(8_000)});
//! let fitted = fit_tool_output("read_page_content", page, Vec::new(), false, 1_000, &counter);
//! assert!(counter.count_message(&fitted.message) <= 1_000);
//! let response = &fitted.message.tool_response.as_ref().unwrap().response;
//! assert_eq!(response["next_offset"], response["returned_chars"]);
//! assert!(fitted.cut.is_some());
//! ```

use serde_json::{Value, json};

use crate::context::{OMITTED_KEY, TokenCounter};
use crate::message::{ChatMessage, ImagePart, ToolCall};
use crate::untrusted::wrap_untrusted;

/// Characters per token the page tools' own size arguments are converted with (English text;
/// the output is checked with the real counter afterwards, so this only saves work).
const CHARS_PER_TOKEN: usize = 4;

/// `call` with its size arguments (`snapshot_page`'s `max_tokens`, `read_page_content`'s
/// `max_chars`) no larger than `cap` tokens allow; other calls unchanged.
pub fn budgeted_call(call: &ToolCall, cap: usize) -> ToolCall {
    let mut call = call.clone();
    let cap = cap.max(1);
    match call.name.as_str() {
        "snapshot_page" => {
            let asked = call.args.get("max_tokens").and_then(Value::as_u64);
            let most = cap as u64;
            call.args.insert(
                "max_tokens".into(),
                json!(asked.map_or(most, |asked| asked.min(most))),
            );
        }
        "read_page_content" => {
            let most = cap.saturating_mul(CHARS_PER_TOKEN) as u64;
            if let Some(asked) = call.args.get("max_chars").and_then(Value::as_u64) {
                call.args.insert("max_chars".into(), json!(asked.min(most)));
            }
        }
        _ => {}
    }
    call
}

/// What [`fit_tool_output`] left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Tokens of the output as the tool gave it.
    pub tokens: usize,
    /// Characters left out of its longest string (0 when the whole output was replaced).
    pub chars_left_out: usize,
    /// The whole output was replaced by a note.
    pub replaced: bool,
}

/// A tool's output as it enters the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The tool message (wrapped as untrusted data when `wrap` was set).
    pub message: ChatMessage,
    /// `Some` when the output had to be cut.
    pub cut: Option<Cut>,
}

/// The tool message for `value` (wrapped as untrusted data if `wrap`), cut so that it counts at
/// most `cap` tokens with `counter`. See the [module docs](self).
pub fn fit_tool_output(
    name: &str,
    value: Value,
    images: Vec<ImagePart>,
    wrap: bool,
    cap: usize,
    counter: &dyn TokenCounter,
) -> Fitted {
    let message = |value: Value| {
        let value = if wrap { wrap_untrusted(value) } else { value };
        ChatMessage::tool(name, value, images.clone())
    };
    let whole = message(value.clone());
    let tokens = counter.count_message(&whole);
    if tokens <= cap {
        return Fitted {
            message: whole,
            cut: None,
        };
    }
    if let Some(path) = longest_string(&value) {
        let text = string_at(&value, &path).unwrap_or_default().to_owned();
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let len = chars.len();
        let prefix = |keep: usize| -> &str {
            let end = chars.get(keep).map_or(text.len(), |(at, _)| *at);
            &text[..end]
        };
        let build = |keep: usize| message(cut_value(&value, &path, name, prefix(keep), len - keep));
        // The longest prefix that fits: a binary search, starting from the proportional guess.
        let fits = |keep: usize| counter.count_message(&build(keep)) <= cap;
        if fits(0) {
            let (mut lo, mut hi) = (0, len);
            let guess = len.saturating_mul(cap) / tokens.max(1);
            if guess > 0 && guess < len {
                if fits(guess) {
                    lo = guess;
                } else {
                    hi = guess - 1;
                }
            }
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            // Cut at a word boundary when one is near, as the page tools paginate.
            let keep = (lo - lo / 6..=lo)
                .rev()
                .find(|&k| k == 0 || k == len || chars[k - 1].1.is_whitespace())
                .unwrap_or(lo);
            return Fitted {
                message: build(keep),
                cut: Some(Cut {
                    tokens,
                    chars_left_out: len - keep,
                    replaced: false,
                }),
            };
        }
    }
    let note = json!({
        OMITTED_KEY: format!(
            "the output of {name} was {tokens} tokens, more than the {cap} one tool output may \
             take in the model's context; call it again with a narrower request (a selector, a \
             smaller max_chars or max_tokens)"
        )
    });
    Fitted {
        message: ChatMessage::tool(name, note, Vec::new()),
        cut: Some(Cut {
            tokens,
            chars_left_out: 0,
            replaced: true,
        }),
    }
}

/// A step into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The path of the longest string in `value` (by characters), if there is a non-empty one.
fn longest_string(value: &Value) -> Option<Vec<Step>> {
    fn walk(value: &Value, path: &mut Vec<Step>, best: &mut Option<(usize, Vec<Step>)>) {
        match value {
            Value::String(s) => {
                let n = s.chars().count();
                if n > 0 && best.as_ref().is_none_or(|(m, _)| n > *m) {
                    *best = Some((n, path.clone()));
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    walk(item, path, best);
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    path.push(Step::Key(key.clone()));
                    walk(item, path, best);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut best = None;
    walk(value, &mut Vec::new(), &mut best);
    best.map(|(_, path)| path)
}

fn string_at<'v>(value: &'v Value, path: &[Step]) -> Option<&'v str> {
    let mut at = value;
    for step in path {
        at = match step {
            Step::Key(key) => at.get(key)?,
            Step::Index(i) => at.get(*i)?,
        };
    }
    at.as_str()
}

fn set_at(value: &mut Value, path: &[Step], new: Value) {
    let mut at = value;
    for step in path {
        let next = match step {
            Step::Key(key) => at.get_mut(key),
            Step::Index(i) => at.get_mut(*i),
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    *at = new;
}

/// `value` with the string at `path` replaced by `kept`, `left_out` characters shorter.
fn cut_value(value: &Value, path: &[Step], name: &str, kept: &str, left_out: usize) -> Value {
    let mut out = value.clone();
    let paginated = name == "read_page_content"
        && path == [Step::Key("content".into())]
        && value.get("offset").and_then(Value::as_u64).is_some();
    if paginated {
        // read_page_content: the page ends where the text was cut; the model reads on from there.
        let offset = value["offset"].as_u64().unwrap_or(0);
        let returned = kept.chars().count() as u64;
        let total = value
            .get("total_chars")
            .and_then(Value::as_u64)
            .unwrap_or(offset + returned + left_out as u64);
        let next = offset + returned;
        let remaining = total.saturating_sub(next);
        out["content"] = Value::String(kept.to_owned());
        out["returned_chars"] = json!(returned);
        out["remaining_chars"] = json!(remaining);
        out["next_offset"] = json!(next);
        let mut note = format!(
            "{remaining} more characters (the text was cut to fit the model's context): call \
             read_page_content again with offset={next} to read on"
        );
        if value.get("partial").and_then(Value::as_bool) == Some(true) {
            // Keep what the page said about reading stopping early.
            if let Some((_, why)) = value
                .get("note")
                .and_then(Value::as_str)
                .and_then(|old| old.split_once("; "))
            {
                note.push_str("; ");
                note.push_str(why);
            }
        }
        out["note"] = Value::String(note);
        return out;
    }
    set_at(
        &mut out,
        path,
        Value::String(format!(
            "{kept} … ({left_out} more characters cut to fit the model's context; ask for less \
             at once)"
        )),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApproxTokenCounter;

    /// One token per whitespace-separated word, like a real tokenizer on plain words.
    struct Words;

    impl TokenCounter for Words {
        fn count_message(&self, message: &ChatMessage) -> usize {
            let response = message
                .tool_response
                .as_ref()
                .map(|r| r.response.to_string())
                .unwrap_or_default();
            4 + response.split_whitespace().count()
        }
        fn count_tools(&self, _: &[crate::ToolDefinition]) -> usize {
            0
        }
    }

    fn response(f: &Fitted) -> &Value {
        &f.message.tool_response.as_ref().unwrap().response
    }

    #[test]
    fn size_arguments_are_capped() {
        let call = |name: &str, args: Value| ToolCall {
            name: name.into(),
            args: args.as_object().unwrap().clone(),
        };
        let snap = budgeted_call(&call("snapshot_page", json!({})), 1500);
        assert_eq!(snap.args["max_tokens"], 1500);
        let snap = budgeted_call(&call("snapshot_page", json!({"max_tokens": 100})), 1500);
        assert_eq!(snap.args["max_tokens"], 100);
        let snap = budgeted_call(&call("snapshot_page", json!({"max_tokens": 90_000})), 1500);
        assert_eq!(snap.args["max_tokens"], 1500);
        let read = budgeted_call(
            &call("read_page_content", json!({"max_chars": 90_000})),
            1000,
        );
        assert_eq!(read.args["max_chars"], 4000);
        let read = budgeted_call(&call("read_page_content", json!({"offset": 3})), 1000);
        assert_eq!(read.args.get("max_chars"), None);
        let click = call("click_element", json!({"ref": "e1"}));
        assert_eq!(budgeted_call(&click, 10), click);
    }

    #[test]
    fn small_outputs_are_kept_as_they_are() {
        let value = json!({"title": "Hello"});
        let f = fit_tool_output(
            "get_page_title",
            value.clone(),
            Vec::new(),
            false,
            100,
            &Words,
        );
        assert_eq!(f.cut, None);
        assert_eq!(response(&f), &value);
        let wrapped = fit_tool_output(
            "get_page_title",
            value.clone(),
            Vec::new(),
            true,
            100,
            &Words,
        );
        assert_eq!(response(&wrapped), &wrap_untrusted(value));
    }

    #[test]
    fn read_page_content_is_cut_where_the_next_page_starts() {
        let content: String = (0..3000).map(|i| format!("w{i} ")).collect();
        let value = json!({
            "format": "text", "offset": 500, "returned_chars": content.chars().count(),
            "total_chars": 100_000, "remaining_chars": 100_000 - 500 - content.chars().count(),
            "next_offset": 500 + content.chars().count(),
            "note": "more", "content": content,
        });
        let f = fit_tool_output("read_page_content", value, Vec::new(), true, 1000, &Words);
        assert!(Words.count_message(&f.message) <= 1000);
        let page = &response(&f)["page_data"];
        let kept = page["content"].as_str().unwrap();
        // Close to the cap (a binary search, not a guess), and cut between words.
        assert!(
            Words.count_message(&f.message) > 900,
            "{}",
            Words.count_message(&f.message)
        );
        assert!(kept.ends_with(' ') && content_prefix(kept));
        let returned = kept.chars().count() as u64;
        assert_eq!(page["returned_chars"], returned);
        assert_eq!(page["next_offset"], 500 + returned);
        assert_eq!(page["remaining_chars"], 100_000 - 500 - returned);
        let note = page["note"].as_str().unwrap();
        assert!(
            note.contains(&format!("offset={}", 500 + returned)),
            "{note}"
        );
        assert!(f.cut.unwrap().chars_left_out > 0);
    }

    fn content_prefix(kept: &str) -> bool {
        let full: String = (0..3000).map(|i| format!("w{i} ")).collect();
        full.starts_with(kept)
    }

    #[test]
    fn other_outputs_cut_their_longest_string_and_say_so() {
        let value = json!({"outline": "line ".repeat(5000), "url": "https://a.example/"});
        let f = fit_tool_output("snapshot_page", value, Vec::new(), false, 300, &Words);
        assert!(Words.count_message(&f.message) <= 300);
        let outline = response(&f)["outline"].as_str().unwrap();
        assert!(outline.contains("more characters cut to fit"), "{outline}");
        assert_eq!(response(&f)["url"], "https://a.example/");
    }

    #[test]
    fn an_output_without_a_long_string_is_replaced_by_a_note() {
        let value = Value::Array((0..2000).map(|i| json!(i)).collect());
        let counter = ApproxTokenCounter::default();
        let f = fit_tool_output("run_javascript", value, Vec::new(), true, 50, &counter);
        assert!(counter.count_message(&f.message) <= 50 + 40);
        assert!(response(&f).get(OMITTED_KEY).is_some());
        assert!(f.cut.unwrap().replaced);
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let value = json!({"content": "日本語のテキスト ".repeat(2000), "offset": 0});
        let counter = ApproxTokenCounter::default();
        let f = fit_tool_output("read_page_content", value, Vec::new(), false, 500, &counter);
        assert!(counter.count_message(&f.message) <= 500);
    }
}
