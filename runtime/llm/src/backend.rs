//! The agent's [`ModelBackend`] over a loaded Gemma model: the conversation is rendered with the
//! model's chat template, tokens are generated lazily as the stream is polled (one decoder step
//! per poll, so dropping the stream stops generation), decoded incrementally and split by the
//! Gemma output parser into answer text, thinking and tool calls.

use crate::constrain::CallConstraint;
use crate::error::LlmError;
use crate::generate::StopReason;
use crate::images::{ImageEncoder, ImageInput};
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
#[derive(Clone)]
pub struct GemmaBackend {
    model: Rc<GemmaModel>,
    /// The vision encoder; without one, images in the conversation are dropped.
    encoder: Option<Rc<dyn ImageEncoder>>,
}

impl std::fmt::Debug for GemmaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemmaBackend")
            .field("model", &self.model)
            .field("images", &self.encoder.is_some())
            .finish()
    }
}

impl GemmaBackend {
    /// Wraps a loaded model.
    pub fn new(model: Rc<GemmaModel>) -> Self {
        Self {
            model,
            encoder: None,
        }
    }

    /// Gives the model its vision encoder: the images of the conversation (those of system,
    /// user and model messages at the template's placeholders, those tools returned — a
    /// screenshot — right after their tool response) are then preprocessed at
    /// [`GenerateOptions::image_tokens`], encoded and fed at their placeholders
    /// ([`GemmaModel::prompt_with_images`]).
    pub fn with_image_encoder(mut self, encoder: Rc<dyn ImageEncoder>) -> Self {
        self.encoder = Some(encoder);
        self
    }

    /// The model.
    pub fn model(&self) -> &Rc<GemmaModel> {
        &self.model
    }
}

/// What a generation starts from: the prompt's token ids (each image's placeholder expanded to
/// its soft tokens) and the vision encoder's features for the images, in prompt order (one
/// `[soft_tokens, hidden]` value per image; empty without images or without an encoder).
#[derive(Debug)]
pub struct PreparedPrompt {
    /// The prompt, as the decoder reads it.
    pub ids: Vec<u32>,
    /// One value per image, its rows fed at that image's soft tokens.
    pub features: Vec<gg_runtime::Value>,
}

impl GemmaBackend {
    /// The start of [`ModelBackend::generate`]: renders the conversation with the model's chat
    /// template and, with a vision encoder, preprocesses the conversation's images at
    /// [`GenerateOptions::image_tokens`] (those of system, user and model messages at the
    /// template's placeholders, those tools returned right after their tool response), expands
    /// their placeholders and encodes them. Generation streams from exactly this.
    pub async fn prepare(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
        options: &GenerateOptions,
    ) -> Result<PreparedPrompt, LlmError> {
        let model: &GemmaModel = &self.model;
        // every image in the order the prompt reads them: the template's placeholders, and the
        // tools' images after their tool responses
        let (images, tool_images): (Vec<ImageInput>, Vec<usize>) = match &self.encoder {
            Some(_) => {
                let found = gg_gemma::agent::conversation_images(messages);
                let images = found
                    .images
                    .iter()
                    .map(|i| ImageInput {
                        bytes: i.data.clone(),
                    })
                    .collect();
                (images, found.tool_images)
            }
            None => (Vec::new(), Vec::new()),
        };
        let msgs = gg_gemma::agent::messages_from_agent(messages, !images.is_empty());
        let decls = gg_gemma::agent::tools_from_agent(tools);
        match &self.encoder {
            Some(enc) if !images.is_empty() => {
                let (ids, features) = model
                    .prompt_with_images(
                        &msgs,
                        &decls,
                        options.thinking,
                        &images,
                        &tool_images,
                        options.image_tokens as usize,
                        enc.as_ref(),
                    )
                    .await?;
                Ok(PreparedPrompt { ids, features })
            }
            _ => Ok(PreparedPrompt {
                ids: model.prompt_ids(&msgs, &decls, options.thinking)?,
                features: Vec::new(),
            }),
        }
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
        let text_options = TextOptions {
            max_new_tokens: options.max_new_tokens as usize,
            sampling: sampling_of(options),
            cancel: None,
            stop_ids: Vec::new(),
            constraint: if options.constrain_tool_calls {
                constraint_of(model, tools)
            } else {
                None
            },
        };
        let start = async move {
            let prepared = self.prepare(messages, tools, options).await?;
            if prepared.features.is_empty() {
                TextStream::new(model, &prepared.ids, text_options)
            } else {
                TextStream::with_image_features(
                    model,
                    &prepared.ids,
                    text_options,
                    prepared.features,
                )
            }
        };
        futures::stream::once(start)
            .flat_map(move |started| match started {
                Ok(text) => Self::chunks(model, text),
                Err(e) => futures::stream::iter([Err(backend_error(e))]).boxed_local(),
            })
            .boxed_local()
    }

    fn token_counter(&self) -> Option<&dyn TokenCounter> {
        Some(self)
    }
}

impl GemmaBackend {
    /// The chunks of a started generation.
    fn chunks<'a>(model: &'a GemmaModel, text: TextStream<'a>) -> ChunkStream<'a> {
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
