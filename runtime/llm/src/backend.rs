//! The agent's [`ModelBackend`] over a loaded Gemma model: the conversation is rendered with the
//! model's chat template, tokens are generated lazily as the stream is polled (one decoder step
//! per poll, so dropping the stream stops generation), decoded incrementally and split by the
//! Gemma output parser into answer text, thinking and tool calls.

use crate::constrain::CallConstraint;
use crate::error::LlmError;
use crate::generate::StopReason;
use crate::model::GemmaModel;
use crate::sampler::Sampling;
use crate::stream::{TextOptions, TextStream, fresh_seed};
use futures::StreamExt;
use gg_agent::context::TokenCounter;
use gg_agent::{
    BackendError, ChatMessage, ChunkStream, FinishReason, GenerateOptions, ModelBackend,
    StreamChunk, ToolDefinition,
};
use gg_gemma::{OutputEvent, OutputParser};
use std::rc::Rc;

/// Gemma 4 as an agent model backend.
#[derive(Clone, Debug)]
pub struct GemmaBackend {
    model: Rc<GemmaModel>,
}

impl GemmaBackend {
    /// Wraps a loaded model.
    pub fn new(model: Rc<GemmaModel>) -> Self {
        Self { model }
    }

    /// The model.
    pub fn model(&self) -> &Rc<GemmaModel> {
        &self.model
    }
}

/// Sampling for the agent's options (temperature 0: greedy).
pub fn sampling_of(options: &GenerateOptions) -> Sampling {
    if options.temperature <= 0.0 {
        Sampling::Greedy
    } else {
        Sampling::Sample {
            temperature: options.temperature,
            top_k: options.top_k,
            top_p: options.top_p,
            seed: options.seed.unwrap_or_else(fresh_seed),
        }
    }
}

/// The constraint of the agent's declarations (`None`, with a warning, when they cannot be
/// compiled into a grammar: unconstrained generation).
fn constraint_of(model: &GemmaModel, tools: &[ToolDefinition]) -> Option<CallConstraint> {
    match tools
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(values) => model.call_constraint(&values),
        Err(e) => {
            log::warn!("tool calls are not constrained: the declarations do not serialise: {e}");
            None
        }
    }
}

fn backend_error(e: LlmError) -> BackendError {
    match e {
        LlmError::ContextTooLong { tokens, limit } => {
            BackendError::ContextTooLong { tokens, limit }
        }
        LlmError::Runtime(gg_runtime::Error::Gpu(message)) => BackendError::Device { message },
        other => BackendError::Failed {
            message: other.to_string(),
        },
    }
}

/// Converts parser events to stream chunks; `saw_call` records whether a call was made.
fn chunks_of(
    events: Vec<OutputEvent>,
    saw_call: &mut bool,
) -> Vec<Result<StreamChunk, BackendError>> {
    events
        .into_iter()
        .filter_map(gg_gemma::agent::stream_chunk)
        .inspect(|c| {
            if matches!(
                c,
                StreamChunk::ToolCall { .. } | StreamChunk::MalformedToolCall { .. }
            ) {
                *saw_call = true;
            }
        })
        .map(Ok)
        .collect()
}

struct State<'a> {
    text: TextStream<'a>,
    parser: OutputParser,
    saw_call: bool,
    tool_response_id: u32,
    done: bool,
}

impl ModelBackend for GemmaBackend {
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        options: &'a GenerateOptions,
    ) -> ChunkStream<'a> {
        let model: &'a GemmaModel = &self.model;
        let start = (|| {
            let msgs = gg_gemma::agent::messages_from_agent(messages, false);
            let decls = gg_gemma::agent::tools_from_agent(tools);
            let ids = model.prompt_ids(&msgs, &decls, options.thinking)?;
            TextStream::new(
                model,
                &ids,
                TextOptions {
                    max_new_tokens: options.max_new_tokens as usize,
                    sampling: sampling_of(options),
                    cancel: None,
                    stop_ids: Vec::new(),
                    constraint: if options.constrain_tool_calls {
                        constraint_of(model, tools)
                    } else {
                        None
                    },
                },
            )
        })();
        let text = match start {
            Ok(t) => t,
            Err(e) => return futures::stream::iter([Err(backend_error(e))]).boxed_local(),
        };
        let state = State {
            text,
            parser: OutputParser::new(),
            saw_call: false,
            tool_response_id: model.tokenizer.special().tool_response_start.id,
            done: false,
        };
        futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let mut out = Vec::new();
            match st.text.next().await {
                Err(e) => {
                    st.done = true;
                    out.push(Err(backend_error(e)));
                }
                Ok(Some(tok)) => {
                    if !tok.text.is_empty() {
                        out = chunks_of(st.parser.push(&tok.text), &mut st.saw_call);
                    }
                }
                Ok(None) => {
                    st.done = true;
                    match st.text.finish() {
                        Ok(rest) => {
                            let mut events = st.parser.push(&rest);
                            events.extend(st.parser.finish());
                            out = chunks_of(events, &mut st.saw_call);
                            let reason = match st.text.stop_reason() {
                                Some(StopReason::EndId(id))
                                    if id == st.tool_response_id || st.saw_call =>
                                {
                                    FinishReason::ToolCall
                                }
                                Some(StopReason::EndId(_)) => FinishReason::EndOfTurn,
                                _ if st.saw_call => FinishReason::ToolCall,
                                _ => FinishReason::MaxNewTokens,
                            };
                            out.push(Ok(StreamChunk::Done { reason }));
                        }
                        Err(e) => out.push(Err(backend_error(e))),
                    }
                }
            }
            Some((futures::stream::iter(out), st))
        })
        .flatten()
        .boxed_local()
    }

    fn token_counter(&self) -> Option<&dyn TokenCounter> {
        Some(self)
    }
}

/// Counts tokens with the model's tokenizer and chat template ([`gg_gemma::agent::PromptCounter`]).
impl TokenCounter for GemmaBackend {
    fn count_message(&self, message: &ChatMessage) -> usize {
        self.counter().count_message(message)
    }

    fn count_tools(&self, tools: &[ToolDefinition]) -> usize {
        self.counter().count_tools(tools)
    }
}

impl GemmaBackend {
    fn counter(&self) -> gg_gemma::agent::PromptCounter<'_> {
        gg_gemma::agent::PromptCounter {
            tokenizer: &self.model.tokenizer,
            template: &self.model.template,
        }
    }
}
