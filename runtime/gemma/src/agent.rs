//! Conversion from the agent crate's conversation to the chat-template messages.
//!
//! The agent keeps a conversation of [`gg_agent::ChatMessage`]s (roles system/user/model/tool,
//! text and image parts, tool calls without ids, tool responses as JSON, the model's thinking).
//! Gemma's template reads Hugging Face style messages; the mapping is:
//!
//! - system/user/model text -> `content` (model -> role `assistant`), the model's thinking ->
//!   `reasoning` (the template shows it only for tool-calling messages of the current turn);
//! - tool calls -> `tool_calls` (`{"type": "function", "function": {"name", "arguments"}}`);
//! - each tool message -> an entry of the preceding model message's `tool_responses`
//!   (`{"name", "response"}`), Gemma's native form: both Gemma 4 template revisions render it,
//!   as `<|tool_response>response:NAME{key:value,...}<tool_response|>` for object results, and
//!   the model's turn stays open after it, as it was when the model generated the calls;
//! - images become `<|image|>` placeholders when `with_images` is set and are dropped otherwise
//!   (a model without its vision encoder cannot use them); images returned by tools have no
//!   place in the tool-response syntax: the template drops them, and a model with a vision
//!   encoder gets them after the tool's `<tool_response|>` instead ([`conversation_images`],
//!   [`crate::ImageTokens::splice_tool_images`]);
//! - every string but the system prompt's (user and model text, thinking, tool-call names and
//!   arguments, tool responses with their keys) is marked as an [untrusted](crate::untrusted)
//!   span, so it is tokenized as plain text: only what the template writes becomes a marker.

use gg_agent as agent;

use crate::chat::{
    ChatMessage, Content, ContentPart, Role, ToolCallRequest, ToolDeclaration, ToolResponse,
};
use crate::untrusted;

/// Counts tokens exactly as the model will see them: each message, and the tool declarations,
/// rendered by the model's chat template and tokenized like the prompt (untrusted spans as plain
/// text). The agent trims its history and caps tool outputs with it.
#[derive(Clone, Copy)]
pub struct PromptCounter<'a> {
    /// The model's tokenizer.
    pub tokenizer: &'a crate::GemmaTokenizer,
    /// The model's chat template.
    pub template: &'a crate::ChatTemplate,
}

impl std::fmt::Debug for PromptCounter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptCounter").finish_non_exhaustive()
    }
}

impl PromptCounter<'_> {
    fn options() -> crate::PromptOptions {
        crate::PromptOptions {
            add_generation_prompt: false,
            enable_thinking: false,
        }
    }

    /// Tokens of `messages` and `tools` rendered together, without the `<bos>` the template
    /// writes once per prompt (`None` if the template fails).
    fn count(&self, messages: &[ChatMessage], tools: &[ToolDeclaration]) -> Option<usize> {
        let text = self
            .template
            .render(
                messages,
                tools,
                Self::options(),
                &self.tokenizer.template_tokens(),
            )
            .ok()?;
        let n = self.tokenizer.encode_prompt(&text).ok()?.len();
        let bos = text.starts_with(&self.tokenizer.special().bos.text);
        Some(n.saturating_sub(usize::from(bos)))
    }
}

impl agent::TokenCounter for PromptCounter<'_> {
    fn count_message(&self, message: &agent::ChatMessage) -> usize {
        let msgs = messages_from_agent(std::slice::from_ref(message), false);
        self.count(&msgs, &[]).unwrap_or_else(|| {
            // The template refused this message alone: estimate it.
            agent::ApproxTokenCounter::default().count_message(message)
        })
    }

    fn count_tools(&self, tools: &[agent::ToolDefinition]) -> usize {
        if tools.is_empty() {
            return 0;
        }
        // What the declarations add to a conversation (the template needs one message).
        let probe = [ChatMessage::user("")];
        match (
            self.count(&probe, &tools_from_agent(tools)),
            self.count(&probe, &[]),
        ) {
            (Some(with), Some(without)) => with.saturating_sub(without),
            _ => agent::ApproxTokenCounter::default().count_tools(tools),
        }
    }
}

impl agent::TokenCounter for crate::GemmaText {
    fn count_message(&self, message: &agent::ChatMessage) -> usize {
        self.counter().count_message(message)
    }

    fn count_tools(&self, tools: &[agent::ToolDefinition]) -> usize {
        self.counter().count_tools(tools)
    }
}

/// What the agent sees of one output-parser event: text, thinking, a tool call or a malformed
/// one (with the function name when it can be read). `None` for the events a backend handles
/// itself (the end markers, which decide the finish reason) and those the agent does not need.
/// Every backend (the real model, the scripted test model) maps events through this one function.
pub fn stream_chunk(event: crate::OutputEvent) -> Option<agent::StreamChunk> {
    use crate::OutputEvent;
    Some(match event {
        OutputEvent::Text(text) => agent::StreamChunk::Token { text },
        OutputEvent::Thinking(text) => agent::StreamChunk::Thinking { text },
        OutputEvent::ToolCall(call) => agent::StreamChunk::ToolCall { call: call.into() },
        OutputEvent::ToolCallError(e) => agent::StreamChunk::MalformedToolCall {
            name: crate::syntax::peek_call_name(
                e.raw
                    .strip_prefix(crate::markers::TOOL_CALL_START)
                    .unwrap_or(&e.raw),
            )
            .map(str::to_string),
            raw: e.raw.clone(),
            error: e.to_string(),
        },
        OutputEvent::ToolCallStart { .. } | OutputEvent::StrayMarker(_) | OutputEvent::End(_) => {
            return None;
        }
    })
}

/// Converts the agent's conversation to template messages. See the module documentation.
pub fn messages_from_agent(messages: &[agent::ChatMessage], with_images: bool) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            agent::Role::System => {
                out.push(with_content(ChatMessage::system(""), m, with_images, false))
            }
            agent::Role::User => {
                out.push(with_content(ChatMessage::user(""), m, with_images, true))
            }
            agent::Role::Model => {
                let mut msg = with_content(ChatMessage::assistant(""), m, with_images, true);
                msg.tool_calls = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        // The template writes argument keys bare after a `,`: a key of letters,
                        // digits and `_` (a declared parameter) stays unmarked, so that it
                        // tokenizes with its comma as the model wrote it; any other is marked.
                        let args = c
                            .args
                            .iter()
                            .map(|(key, value)| {
                                let plain = !key.is_empty()
                                    && key
                                        .chars()
                                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
                                let key = if plain {
                                    key.clone()
                                } else {
                                    untrusted::mark(key)
                                };
                                (key, untrusted::mark_value(value))
                            })
                            .collect();
                        ToolCallRequest::new(None, untrusted::mark(&c.name), args)
                    })
                    .collect();
                msg.reasoning = m
                    .thinking
                    .as_deref()
                    .filter(|t| !t.is_empty())
                    .map(untrusted::mark);
                out.push(msg);
            }
            agent::Role::Tool => {
                let Some(response) = &m.tool_response else {
                    continue;
                };
                let entry = ToolResponse {
                    name: untrusted::mark(&response.name),
                    response: untrusted::mark_value(&response.response),
                };
                match out.last_mut() {
                    Some(prev) if prev.role == Role::Assistant => prev.tool_responses.push(entry),
                    _ => {
                        let mut msg = ChatMessage::assistant("");
                        msg.tool_responses.push(entry);
                        out.push(msg);
                    }
                }
            }
        }
    }
    out
}

/// The images of a conversation in the order the model reads them, for a prompt rendered from
/// [`messages_from_agent`] with images on.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConversationImages<'a> {
    /// Every image, in prompt order: those of system, user and model messages at the
    /// template's placeholders, those tools returned after their tool response.
    pub images: Vec<&'a agent::ImagePart>,
    /// For each tool response the template renders (in order), how many images its tool
    /// returned ([`crate::ImageTokens::splice_tool_images`]).
    pub tool_images: Vec<usize>,
}

/// Lists the images of `messages` as the prompt places them. The template writes a model
/// message's tool responses before its own content, so a model message's images (if it had
/// any) come after the images of the tool responses folded into it.
pub fn conversation_images(messages: &[agent::ChatMessage]) -> ConversationImages<'_> {
    let mut out = ConversationImages::default();
    // images of the last model message, written after its tool responses
    let mut held: Vec<&agent::ImagePart> = Vec::new();
    for m in messages {
        match m.role {
            agent::Role::System | agent::Role::User => {
                out.images.append(&mut held);
                out.images.extend(m.images());
            }
            agent::Role::Model => {
                out.images.append(&mut held);
                held.extend(m.images());
            }
            agent::Role::Tool => {
                if m.tool_response.is_none() {
                    continue; // not rendered (messages_from_agent skips it)
                }
                let before = out.images.len();
                out.images.extend(m.images());
                out.tool_images.push(out.images.len() - before);
            }
        }
    }
    out.images.append(&mut held);
    out
}

fn with_content(
    mut msg: ChatMessage,
    m: &agent::ChatMessage,
    with_images: bool,
    untrusted: bool,
) -> ChatMessage {
    let text = |t: &str| {
        if untrusted {
            untrusted::mark(t)
        } else {
            t.to_owned()
        }
    };
    let has_images = with_images && m.images().next().is_some();
    msg.content = Some(if has_images {
        Content::Parts(
            m.parts
                .iter()
                .map(|p| match p {
                    agent::Part::Text { text: t } => ContentPart::Text { text: text(t) },
                    agent::Part::Image(_) => ContentPart::Image,
                })
                .collect(),
        )
    } else {
        let mut content = text(&m.text());
        // Images the prompt leaves out (a model without a vision encoder): the model is told, so
        // that it does not answer as if it had seen them.
        let dropped = m.images().count();
        if dropped > 0 {
            if !content.is_empty() {
                content.push_str("\n\n");
            }
            content.push_str(&dropped_images_note(dropped));
        }
        Content::Text(content)
    });
    msg
}

/// What a message says instead of `n` images the model cannot see.
pub fn dropped_images_note(n: usize) -> String {
    let what = if n == 1 {
        "an image".to_owned()
    } else {
        format!("{n} images")
    };
    format!("[{what} attached here cannot be shown: this model has no vision encoder]")
}

impl From<&agent::ToolDefinition> for ToolDeclaration {
    fn from(tool: &agent::ToolDefinition) -> Self {
        let parameters = (!tool.parameters.is_null()).then(|| tool.parameters.clone());
        ToolDeclaration::new(tool.name.clone(), tool.description.clone(), parameters)
    }
}

/// Converts the agent's tool definitions to template declarations.
pub fn tools_from_agent(tools: &[agent::ToolDefinition]) -> Vec<ToolDeclaration> {
    tools.iter().map(ToolDeclaration::from).collect()
}

impl From<crate::syntax::ParsedToolCall> for agent::ToolCall {
    fn from(call: crate::syntax::ParsedToolCall) -> Self {
        agent::ToolCall::new(call.name, call.arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_messages_fold_into_the_calling_model_message() {
        let conv = vec![
            agent::ChatMessage::user("hi"),
            agent::ChatMessage::model_with_calls(
                "",
                vec![agent::ToolCall::from_value("f", json!({"a": 1}))],
            )
            .with_thinking("t"),
            agent::ChatMessage::tool("f", json!({"ok": true}), Vec::new()),
            agent::ChatMessage::tool("f", json!("second"), Vec::new()),
            agent::ChatMessage::model("done"),
        ];
        let out = messages_from_agent(&conv, false);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].role, Role::Assistant);
        let m = untrusted::mark;
        assert_eq!(out[1].reasoning.as_deref(), Some(m("t").as_str()));
        assert_eq!(out[1].tool_calls[0].function.name, m("f"));
        assert_eq!(
            out[1].tool_calls[0].function.arguments.get("a"),
            Some(&json!(1))
        );
        assert_eq!(
            out[1].tool_responses,
            vec![
                ToolResponse {
                    name: m("f"),
                    response: json!({"ok": true})
                },
                ToolResponse {
                    name: m("f"),
                    response: json!(m("second"))
                },
            ]
        );
        assert_eq!(out[2].content, Some(Content::Text(m("done"))));

        // A tool message with nothing to attach to gets its own model message.
        let out = messages_from_agent(
            &[agent::ChatMessage::tool("g", json!(1), Vec::new())],
            false,
        );
        assert_eq!(
            (out.len(), out[0].role, out[0].tool_responses.len()),
            (1, Role::Assistant, 1)
        );
    }

    #[test]
    fn images_are_placeholders_or_dropped() {
        let img = agent::ImagePart::png(vec![1, 2, 3]);
        let conv = vec![agent::ChatMessage::user_with_images("look", vec![img])];
        assert_eq!(
            messages_from_agent(&conv, true)[0].content,
            Some(Content::Parts(vec![
                ContentPart::Text {
                    text: untrusted::mark("look")
                },
                ContentPart::Image
            ]))
        );
        // Without a vision encoder the model is told an image was there (outside the user's
        // untrusted span: the note is ours).
        assert_eq!(
            messages_from_agent(&conv, false)[0].content,
            Some(Content::Text(format!(
                "{}\n\n[an image attached here cannot be shown: this model has no vision encoder]",
                untrusted::mark("look")
            )))
        );
        let two = vec![agent::ChatMessage::user_with_images(
            "",
            vec![
                agent::ImagePart::png(vec![1]),
                agent::ImagePart::png(vec![2]),
            ],
        )];
        assert_eq!(
            messages_from_agent(&two, false)[0].content,
            Some(Content::Text(dropped_images_note(2)))
        );
        // The system prompt is ours: not marked.
        let system = messages_from_agent(&[agent::ChatMessage::system("rules")], false);
        assert_eq!(system[0].content, Some(Content::Text("rules".into())));
    }

    #[test]
    fn conversation_images_in_prompt_order() {
        let img = |b: u8| agent::ImagePart::png(vec![b]);
        let mut model = agent::ChatMessage::model_with_calls(
            "",
            vec![
                agent::ToolCall::from_value("take_screenshot", json!({})),
                agent::ToolCall::from_value("get_page_title", json!({})),
            ],
        );
        // a model message's own images are written after its tool responses
        model.parts.push(agent::Part::Image(img(9)));
        let conv = vec![
            agent::ChatMessage::user_with_images("look", vec![img(1), img(2)]),
            model,
            agent::ChatMessage::tool("take_screenshot", json!({"width": 4}), vec![img(3)]),
            agent::ChatMessage::tool("get_page_title", json!("t"), vec![]),
            agent::ChatMessage::user_with_images("and this", vec![img(4)]),
        ];
        let found = conversation_images(&conv);
        let bytes: Vec<u8> = found.images.iter().map(|i| i.data[0]).collect();
        assert_eq!(bytes, [1, 2, 3, 9, 4]);
        assert_eq!(found.tool_images, [1, 0]);
        // one entry per tool response the template renders
        let rendered: usize = messages_from_agent(&conv, true)
            .iter()
            .map(|m| m.tool_responses.len())
            .sum();
        assert_eq!(rendered, found.tool_images.len());
    }
}
