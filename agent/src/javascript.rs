//! `run_javascript`'s answer, checked the same way wherever the code ran (the extension's
//! service worker through `chrome.scripting`, the embeddable widget in its own page).

use crate::{ToolError, ToolErrorKind, ToolOutput};

/// Longest result (JSON characters) handed back to the model.
pub const RESULT_MAX_CHARS: usize = 8000;

/// The answer of code run for `run_javascript` in a page (`{status: "ok", value}`,
/// `{status: "error" | "blocked", message}`: what the extension's `ggPageEval` and the
/// embeddable widget produce), which the page may have forged: anything else is a clear error,
/// strings are capped at [`RESULT_MAX_CHARS`].
pub fn javascript_answer(result: &serde_json::Value) -> Result<ToolOutput, ToolError> {
    let message = || {
        let text = result
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("unknown error");
        cap(text)
    };
    match result.get("status").and_then(|s| s.as_str()) {
        Some("ok") => {
            let value = result
                .get("value")
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            let json = value.to_string();
            Ok(ToolOutput::new(
                if json.chars().count() > RESULT_MAX_CHARS {
                    serde_json::Value::String(cap(&json))
                } else {
                    value
                },
            ))
        }
        Some("blocked") => Err(ToolError::new(
            ToolErrorKind::Blocked,
            format!(
                "this page's Content-Security-Policy forbids running JavaScript from a string ({}); use the page tools (snapshot_page, click_element, type_text, read_page_content) instead",
                message()
            ),
        )),
        Some("error") => Err(ToolError::new(
            ToolErrorKind::Failed,
            format!("the code threw: {}", message()),
        )),
        _ => Err(ToolError::new(
            ToolErrorKind::Failed,
            "the page gave no readable answer (it may have replaced what the code runs with)",
        )),
    }
}

/// At most [`RESULT_MAX_CHARS`] characters of `text`, saying how many were left out.
fn cap(text: &str) -> String {
    match text.char_indices().nth(RESULT_MAX_CHARS) {
        None => text.to_owned(),
        Some((at, _)) => format!(
            "{} … ({} more characters)",
            &text[..at],
            text[at..].chars().count()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn page_answers_are_checked_and_capped() {
        let ok = javascript_answer(&json!({"status": "ok", "value": {"a": 1}})).unwrap();
        assert_eq!(ok.value, json!({"a": 1}));
        let long = "x".repeat(RESULT_MAX_CHARS + 5);
        let capped = javascript_answer(&json!({"status": "ok", "value": long})).unwrap();
        let text = capped.value.as_str().unwrap();
        assert!(text.ends_with("(7 more characters)"), "{text}");
        let thrown = javascript_answer(&json!({"status": "error", "message": "boom"})).unwrap_err();
        assert_eq!(thrown.message, "the code threw: boom");
        assert_eq!(thrown.kind, ToolErrorKind::Failed);
        let forged = javascript_answer(&json!({"status": 3})).unwrap_err();
        assert!(forged.message.contains("no readable answer"));
        let blocked =
            javascript_answer(&json!({"status": "blocked", "message": "eval"})).unwrap_err();
        assert_eq!(blocked.kind, ToolErrorKind::Blocked);
    }
}
