//! Keeping the conversation within the model's context: counting tokens and trimming history.
//!
//! [`trim_to_budget`] always keeps the system prompt and the tool declarations. Over budget, it
//! first drops images, oldest first (each costs hundreds of soft tokens), leaving a note where
//! each was: in a tool response a key [`IMAGE_OMITTED_KEY`] that asks the model to take the
//! screenshot again if it still needs it, in a user message a text part. The images of the last
//! user message are kept (they are what the user is asking about). Then it drops the oldest
//! exchanges (a user message and everything up to the next one) until the rest fits. If the
//! current exchange alone is too large, its oldest tool outputs are replaced by a short note
//! asking the model to call the tool again with a narrower request; if even that is not enough,
//! it fails with [`ContextOverflow`].
//!
//! [`ImageBudget`] makes any counter count each image by the soft tokens the model will see
//! (the image budget in use, plus its begin and end markers).
//!
//! The count comes from a [`TokenCounter`]: the runtime implements it with the real tokenizer
//! and chat template; [`ApproxTokenCounter`] estimates from characters.
//!
//! ```
//! use gg_agent::context::{trim_to_budget, ApproxTokenCounter, TokenCounter};
//! use gg_agent::ChatMessage;
//!
//! let counter = ApproxTokenCounter::default();
//! let mut messages = vec![ChatMessage::system("You are helpful.")];
//! for i in 0..50 {
//!     messages.push(ChatMessage::user(format!("question {i} {}", "word ".repeat(20))));
//!     messages.push(ChatMessage::model(format!("answer {i} {}", "word ".repeat(20))));
//! }
//! messages.push(ChatMessage::user("latest question"));
//! let report = trim_to_budget(&mut messages, &[], 300, &counter).unwrap();
//! assert!(report.tokens <= 300);
//! assert_eq!(messages[0].text(), "You are helpful.");
//! assert_eq!(messages.last().unwrap().text(), "latest question");
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::{ChatMessage, Part, Role, ToolResponse};
use crate::tool::ToolDefinition;

/// Counts tokens the way the model will see them.
pub trait TokenCounter {
    /// Tokens of one message as rendered in the prompt, including its turn markers.
    fn count_message(&self, message: &ChatMessage) -> usize;
    /// Tokens of the tool declarations in the system turn.
    fn count_tools(&self, tools: &[ToolDefinition]) -> usize;
}

/// An estimate without a tokenizer: characters / `chars_per_token` (rounded up), plus a fixed
/// overhead per message and a fixed cost per image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApproxTokenCounter {
    /// Characters per token (Gemma's tokenizer: about 4 for English).
    pub chars_per_token: usize,
    /// Tokens added per message for turn markers.
    pub per_message: usize,
    /// Tokens per image (Gemma 4 uses a fixed number of soft tokens per image).
    pub per_image: usize,
}

impl Default for ApproxTokenCounter {
    /// 4 characters per token, 4 tokens per message, images at Gemma 4's default budget (280
    /// soft tokens and the image's begin and end markers).
    fn default() -> Self {
        Self {
            chars_per_token: 4,
            per_message: 4,
            per_image: ImageBudget::tokens_per_image(crate::backend::DEFAULT_IMAGE_TOKENS),
        }
    }
}

/// A counter that counts each image as `soft_tokens` + 2 (`<|image>` ... `<image|>`) and
/// everything else as `inner` does: the context budget then follows the image budget the
/// model is run with ([`crate::GenerateOptions::image_tokens`]).
pub struct ImageBudget<'a> {
    /// The counter of everything but images.
    pub inner: &'a dyn TokenCounter,
    /// Soft tokens per image.
    pub soft_tokens: u32,
}

impl ImageBudget<'_> {
    /// Prompt tokens of one image at a budget of `soft_tokens`: at most that many soft tokens
    /// (Gemma 4's processor may give a few fewer) plus the begin and end markers.
    pub fn tokens_per_image(soft_tokens: u32) -> usize {
        soft_tokens as usize + 2
    }
}

impl TokenCounter for ImageBudget<'_> {
    fn count_message(&self, message: &ChatMessage) -> usize {
        let images = message.images().count();
        if images == 0 {
            return self.inner.count_message(message);
        }
        let text_only = ChatMessage {
            parts: message
                .parts
                .iter()
                .filter(|p| matches!(p, Part::Text { .. }))
                .cloned()
                .collect(),
            ..message.clone_without_parts()
        };
        self.inner.count_message(&text_only) + images * Self::tokens_per_image(self.soft_tokens)
    }

    fn count_tools(&self, tools: &[ToolDefinition]) -> usize {
        self.inner.count_tools(tools)
    }
}

impl ApproxTokenCounter {
    fn chars(&self, chars: usize) -> usize {
        chars.div_ceil(self.chars_per_token.max(1))
    }
}

impl TokenCounter for ApproxTokenCounter {
    fn count_message(&self, message: &ChatMessage) -> usize {
        let mut tokens = self.per_message;
        for part in &message.parts {
            tokens += match part {
                Part::Text { text } => self.chars(text.chars().count()),
                Part::Image(_) => self.per_image,
            };
        }
        for call in &message.tool_calls {
            tokens +=
                self.chars(call.name.len() + Value::Object(call.args.clone()).to_string().len());
        }
        if let Some(thinking) = &message.thinking {
            tokens += self.chars(thinking.chars().count());
        }
        if let Some(response) = &message.tool_response {
            tokens += self.chars(response.name.len() + response.response.to_string().len());
        }
        tokens
    }

    fn count_tools(&self, tools: &[ToolDefinition]) -> usize {
        tools
            .iter()
            .map(|tool| {
                self.chars(
                    tool.name.len() + tool.description.len() + tool.parameters.to_string().len(),
                )
            })
            .sum()
    }
}

/// The conversation cannot be made to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "the conversation needs {needed} tokens but the context budget is {budget} even after \
     trimming; start a new conversation or ask for less at once"
)]
pub struct ContextOverflow {
    /// Tokens of what could not be dropped.
    pub needed: usize,
    /// The budget.
    pub budget: usize,
}

/// What [`trim_to_budget`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrimReport {
    /// Images removed (oldest first), each replaced by a note.
    pub removed_images: usize,
    /// Messages dropped from the start of the history.
    pub removed_messages: usize,
    /// Tool outputs of the current exchange replaced by a note.
    pub shortened_tool_outputs: usize,
    /// Tokens of the result (system prompt, tools and messages).
    pub tokens: usize,
}

/// The key marking a tool output that was dropped to fit the context.
pub const OMITTED_KEY: &str = "omitted_to_fit_context";

/// The key added to a tool response whose image was dropped to fit the context.
pub const IMAGE_OMITTED_KEY: &str = "image_omitted_to_fit_context";

/// The text left in a user message where an image was dropped to fit the context.
pub const USER_IMAGE_OMITTED: &str = "[An image attached here was removed to fit the context.]";

/// Removes the first image of `message`, leaving a note where it was. `false` if it has none.
fn drop_first_image(message: &mut ChatMessage) -> bool {
    let Some(index) = message
        .parts
        .iter()
        .position(|p| matches!(p, Part::Image(_)))
    else {
        return false;
    };
    match &mut message.tool_response {
        Some(ToolResponse { response, .. }) => {
            message.parts.remove(index);
            let note = Value::String(
                "The image this tool returned was removed to fit the context; call the tool \
                 again if you still need to see it."
                    .to_owned(),
            );
            match response {
                Value::Object(map) => {
                    map.insert(IMAGE_OMITTED_KEY.to_owned(), note);
                }
                other => {
                    *other = json!({ "result": other.take(), IMAGE_OMITTED_KEY: note });
                }
            }
        }
        None => {
            message.parts[index] = Part::Text {
                text: USER_IMAGE_OMITTED.to_owned(),
            };
        }
    }
    true
}

fn omitted(message: &ChatMessage) -> bool {
    message
        .tool_response
        .as_ref()
        .is_some_and(|response| response.response.get(OMITTED_KEY).is_some())
}

/// Trims `messages` (system prompt first, if any) so that they and `tools` fit in `budget`
/// tokens. See the [module docs](self).
pub fn trim_to_budget(
    messages: &mut Vec<ChatMessage>,
    tools: &[ToolDefinition],
    budget: usize,
    counter: &dyn TokenCounter,
) -> Result<TrimReport, ContextOverflow> {
    let start = usize::from(messages.first().is_some_and(|m| m.role == Role::System));
    let fixed = counter.count_tools(tools)
        + messages[..start]
            .iter()
            .map(|m| counter.count_message(m))
            .sum::<usize>();
    let mut counts: Vec<usize> = messages[start..]
        .iter()
        .map(|m| counter.count_message(m))
        .collect();
    let mut report = TrimReport::default();
    loop {
        let total = fixed + counts.iter().sum::<usize>();
        if total <= budget {
            report.tokens = total;
            return Ok(report);
        }
        let history = &messages[start..];
        let last_user = history.iter().rposition(|m| m.role == Role::User);
        // Images first, oldest first; the last user message keeps its own.
        let with_image = history
            .iter()
            .enumerate()
            .position(|(i, m)| Some(i) != last_user && m.images().next().is_some());
        if let Some(i) = with_image {
            drop_first_image(&mut messages[start + i]);
            counts[i] = counter.count_message(&messages[start + i]);
            report.removed_images += 1;
            continue;
        }
        match last_user {
            Some(last_user) if last_user > 0 => {
                // Drop the oldest exchange: up to (not including) the next user message.
                let end = history[1..=last_user]
                    .iter()
                    .position(|m| m.role == Role::User)
                    .map_or(last_user, |i| i + 1);
                messages.drain(start..start + end);
                counts.drain(..end);
                report.removed_messages += end;
            }
            _ => {
                // Only the current exchange is left: drop its oldest tool output.
                let first = last_user.unwrap_or(0);
                let Some(index) = history[first..]
                    .iter()
                    .position(|m| m.role == Role::Tool && !omitted(m))
                    .map(|i| start + first + i)
                else {
                    return Err(ContextOverflow {
                        needed: total,
                        budget,
                    });
                };
                let message = &mut messages[index];
                let tokens = counts[index - start];
                let name = message
                    .tool_response
                    .as_ref()
                    .map(|r| r.name.clone())
                    .unwrap_or_default();
                *message = ChatMessage::tool(
                    name,
                    json!({
                        OMITTED_KEY: format!(
                            "This output ({tokens} tokens) was removed to fit the context. Call \
                             the tool again with a narrower request if you still need it."
                        )
                    }),
                    Vec::new(),
                );
                counts[index - start] = counter.count_message(message);
                report.shortened_tool_outputs += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ImagePart, ToolCall};

    /// One token per character of text: easy to reason about.
    struct CharCounter;

    impl TokenCounter for CharCounter {
        fn count_message(&self, message: &ChatMessage) -> usize {
            message.text().len()
                + message
                    .tool_response
                    .as_ref()
                    .map_or(0, |r| r.response.to_string().len())
        }
        fn count_tools(&self, tools: &[ToolDefinition]) -> usize {
            tools.len() * 10
        }
    }

    fn tool_def() -> ToolDefinition {
        ToolDefinition {
            name: "t".into(),
            description: String::new(),
            parameters: json!({}),
        }
    }

    #[test]
    fn drops_whole_oldest_exchanges_and_keeps_the_fixed_part() {
        let mut messages = vec![
            ChatMessage::system("sys"),      // 3
            ChatMessage::user("u1........"), // 10
            ChatMessage::model_with_calls("m1", vec![ToolCall::from_value("t", json!({}))]),
            ChatMessage::tool("t", json!("r1"), Vec::new()), // 4
            ChatMessage::model("m1 done"),                   // 7
            ChatMessage::user("u2"),                         // 2
            ChatMessage::model("m2"),                        // 2
            ChatMessage::user("u3"),                         // 2
        ];
        let tools = [tool_def()];
        // fixed = 3 + 10; history = 10+2+4+7+2+2+2 = 29; total 42.
        let report = trim_to_budget(&mut messages, &tools, 42, &CharCounter).unwrap();
        assert_eq!(
            report,
            TrimReport {
                removed_images: 0,
                removed_messages: 0,
                shortened_tool_outputs: 0,
                tokens: 42
            }
        );
        let report = trim_to_budget(&mut messages, &tools, 30, &CharCounter).unwrap();
        assert_eq!(report.removed_messages, 4);
        assert_eq!(report.tokens, 13 + 6);
        let texts: Vec<String> = messages.iter().map(ChatMessage::text).collect();
        assert_eq!(texts, ["sys", "u2", "m2", "u3"]);
        // Down to the current exchange only.
        let report = trim_to_budget(&mut messages, &tools, 15, &CharCounter).unwrap();
        assert_eq!(report.tokens, 15);
        assert_eq!(messages.len(), 2);
        assert_eq!(
            trim_to_budget(&mut messages, &tools, 14, &CharCounter),
            Err(ContextOverflow {
                needed: 15,
                budget: 14
            })
        );
    }

    #[test]
    fn shortens_tool_outputs_of_the_current_exchange() {
        let big = "x".repeat(500);
        let mut messages = vec![
            ChatMessage::user("read"),
            ChatMessage::model_with_calls("", vec![ToolCall::from_value("t", json!({}))]),
            ChatMessage::tool("t", json!(big), vec![ImagePart::png(vec![1, 2, 3])]),
            ChatMessage::model_with_calls("", vec![ToolCall::from_value("t", json!({}))]),
            ChatMessage::tool("t", json!("small"), Vec::new()),
        ];
        let report = trim_to_budget(&mut messages, &[], 300, &CharCounter).unwrap();
        assert_eq!(report.shortened_tool_outputs, 1);
        assert!(report.tokens <= 300);
        assert!(omitted(&messages[2]));
        assert_eq!(messages[2].images().count(), 0);
        assert_eq!(
            messages[4].tool_response.as_ref().unwrap().response,
            json!("small")
        );
    }

    fn png() -> ImagePart {
        ImagePart::png(b"\x89PNG\r\n\x1a\n".to_vec())
    }

    #[test]
    fn images_go_first_oldest_first_with_a_note_and_the_question_keeps_its_own() {
        let counter = ImageBudget {
            inner: &CharCounter,
            soft_tokens: 498,
        };
        // Each image costs 500 (more than any note).
        let mut messages = vec![
            ChatMessage::user_with_images("u1", vec![png()]),
            ChatMessage::model_with_calls("", vec![ToolCall::from_value("shot", json!({}))]),
            ChatMessage::tool("shot", json!({"width": 8}), vec![png()]),
            ChatMessage::model("m1"),
            ChatMessage::user_with_images("u2", vec![png(), png()]),
        ];
        let total = |m: &[ChatMessage]| m.iter().map(|m| counter.count_message(m)).sum::<usize>();
        assert_eq!(
            total(&messages),
            2 + 500 + (json!({"width": 8}).to_string().len() + 500) + 2 + 2 + 1000
        );
        // Just over budget: the oldest image (the first user message's) goes.
        let budget = total(&messages) - 1;
        let report = trim_to_budget(&mut messages, &[], budget, &counter).unwrap();
        assert_eq!((report.removed_images, report.removed_messages), (1, 0));
        assert_eq!(messages[0].images().count(), 0);
        assert_eq!(messages[0].text(), format!("u1{USER_IMAGE_OMITTED}"));
        assert_eq!(messages[2].images().count(), 1);
        // Then the screenshot; its response says so and keeps its value.
        let budget = total(&messages) - 1;
        let report = trim_to_budget(&mut messages, &[], budget, &counter).unwrap();
        assert_eq!((report.removed_images, report.removed_messages), (1, 0));
        assert_eq!(messages[2].images().count(), 0);
        let response = &messages[2].tool_response.as_ref().unwrap().response;
        assert_eq!(response["width"], 8);
        assert!(
            response[IMAGE_OMITTED_KEY]
                .as_str()
                .unwrap()
                .contains("call the tool again")
        );
        // With no image left but the question's, whole exchanges go.
        let budget = total(&messages) - 1;
        let report = trim_to_budget(&mut messages, &[], budget, &counter).unwrap();
        assert_eq!((report.removed_images, report.removed_messages), (0, 4));
        assert_eq!(messages.len(), 1);
        assert_eq!(
            messages[0].images().count(),
            2,
            "the question keeps its images"
        );
        assert!(trim_to_budget(&mut messages, &[], 1000, &counter).is_err());
    }

    #[test]
    fn a_tool_response_that_is_not_an_object_keeps_its_value_beside_the_note() {
        let mut message = ChatMessage::tool("t", json!("ok"), vec![png()]);
        assert!(drop_first_image(&mut message));
        let response = &message.tool_response.as_ref().unwrap().response;
        assert_eq!(response["result"], "ok");
        assert!(response[IMAGE_OMITTED_KEY].is_string());
        assert!(!drop_first_image(&mut message));
    }

    #[test]
    fn approx_counter_counts_text_images_and_calls() {
        let counter = ApproxTokenCounter::default();
        assert_eq!(counter.count_message(&ChatMessage::user("12345678")), 4 + 2);
        assert_eq!(
            counter.count_message(&ChatMessage::user_with_images(
                "",
                vec![ImagePart::png(vec![])]
            )),
            4 + 282
        );
        let call =
            ChatMessage::model_with_calls("", vec![ToolCall::from_value("ab", json!({"k": 1}))]);
        // "ab" + {"k":1} = 2 + 7 chars.
        assert_eq!(counter.count_message(&call), 4 + 3);
        assert!(counter.count_tools(&crate::builtin_tools()) > 100);
    }
}
