//! Token-by-token text generation: the [`Generator`] plus the incremental detokenizer, the stop
//! rules (end ids from the model files, `max_new_tokens`, cancellation between steps) and prompt
//! rendering with the model's chat template.

use crate::constrain::CallConstraint;
use crate::error::{LlmError, Result};
use crate::generate::{GenerationStats, Generator, StopReason};
use crate::model::GemmaModel;
use crate::sampler::Sampling;
use gg_agent::CancellationToken;
use gg_gemma::{ChatMessage, IncrementalDecoder, PromptOptions, ToolDeclaration};

/// One generated token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Token id.
    pub id: u32,
    /// Text that became final with this token (may be empty while a character is incomplete;
    /// empty for an end id, which is not part of the text).
    pub text: String,
}

/// Options of one text generation.
#[derive(Debug, Clone)]
pub struct TextOptions {
    /// Most tokens to generate (an end id counts).
    pub max_new_tokens: usize,
    /// How to pick tokens.
    pub sampling: Sampling,
    /// Checked before every step: a cancelled generation stops within one step.
    pub cancel: Option<CancellationToken>,
    /// Ids that end generation besides the model's own end ids (`generation_config.json`).
    pub stop_ids: Vec<u32>,
    /// Tool calls sampled under the declared tools' grammar
    /// ([`GemmaModel::call_constraint`]); `None`: unconstrained.
    pub constraint: Option<CallConstraint>,
}

/// A running text generation. Call [`TextStream::next`] until it returns `None`, then
/// [`TextStream::finish`] for held-back text and [`TextStream::stop_reason`].
pub struct TextStream<'m> {
    model: &'m GemmaModel,
    generator: Generator<'m>,
    detok: IncrementalDecoder<'m>,
    options: TextOptions,
    produced: usize,
    stopped: Option<StopReason>,
}

impl std::fmt::Debug for TextStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextStream")
            .field("produced", &self.produced)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl<'m> TextStream<'m> {
    /// Starts generating after `prompt` (token ids).
    pub fn new(model: &'m GemmaModel, prompt: &[u32], options: TextOptions) -> Result<Self> {
        Ok(Self {
            model,
            generator: Generator::new(model, prompt, options.sampling)?
                .constrained(options.constraint.clone()),
            detok: model.tokenizer.incremental_decoder(),
            options,
            produced: 0,
            stopped: None,
        })
    }

    /// [`TextStream::new`] with the prompt's image features (each image's, in prompt order; see
    /// [`Generator::with_image_features`]).
    pub fn with_image_features(
        model: &'m GemmaModel,
        prompt: &[u32],
        options: TextOptions,
        features: Vec<gg_runtime::Value>,
    ) -> Result<Self> {
        let mut s = Self::new(model, prompt, options)?;
        s.generator = s.generator.with_image_features(features)?;
        Ok(s)
    }

    /// The next token, or `None` once stopped.
    pub async fn next(&mut self) -> Result<Option<Token>> {
        if self.stopped.is_some() {
            return Ok(None);
        }
        if self
            .options
            .cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            self.stopped = Some(StopReason::Cancelled);
            return Ok(None);
        }
        if self.produced >= self.options.max_new_tokens {
            self.stopped = Some(StopReason::MaxNewTokens);
            return Ok(None);
        }
        // The step after this token runs ahead on the GPU unless this is the last one allowed.
        let id = if self.produced + 1 < self.options.max_new_tokens {
            self.generator.next_token().await?
        } else {
            self.generator.last_token().await?
        };
        self.produced += 1;
        if self.model.tokenizer.is_end(id) || self.options.stop_ids.contains(&id) {
            self.stopped = Some(StopReason::EndId(id));
            return Ok(Some(Token {
                id,
                text: String::new(),
            }));
        }
        let text = self.detok.push(id)?;
        Ok(Some(Token { id, text }))
    }

    /// Text still held back (an incomplete character at the end comes out as `�`).
    pub fn finish(&mut self) -> Result<String> {
        Ok(self.detok.finish()?)
    }

    /// Why it stopped (`None` while running).
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stopped
    }

    /// Tokens generated so far (an end id included).
    pub fn produced(&self) -> usize {
        self.produced
    }

    /// Counters and timings.
    pub fn stats(&self) -> GenerationStats {
        self.generator.stats()
    }

    /// Decoder runs so far (the prefill is one; a step run ahead of a token the stream did not
    /// return, after an end id or a cancellation, counts too).
    pub fn steps_run(&self) -> usize {
        self.generator.steps_run
    }
}

impl GemmaModel {
    /// Renders a conversation with the model's chat template (generation prompt added) and
    /// tokenizes it.
    pub fn prompt_ids(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        thinking: bool,
    ) -> Result<Vec<u32>> {
        let text = self.template.render(
            messages,
            tools,
            PromptOptions {
                add_generation_prompt: true,
                enable_thinking: thinking,
            },
            &self.tokenizer.template_tokens(),
        )?;
        let ids = self.tokenizer.encode_prompt(&text)?;
        self.check_fits(&ids)?;
        Ok(ids)
    }

    /// Refuses a prompt that leaves no room for a token under the context limit.
    pub(crate) fn check_fits(&self, ids: &[u32]) -> Result<()> {
        match self.context_limit() {
            Some(limit) if ids.len() >= limit => Err(LlmError::ContextTooLong {
                tokens: ids.len(),
                limit,
            }),
            _ => Ok(()),
        }
    }

    /// Starts a text generation after `prompt`.
    pub fn stream(&self, prompt: &[u32], options: TextOptions) -> Result<TextStream<'_>> {
        TextStream::new(self, prompt, options)
    }
}

/// A seed when the caller gives none (the clock natively, `Math.random` in the browser).
pub fn fresh_seed() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        (js_sys::Math::random() * 9.007_199_254_740_992e15) as u64
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5EED, |d| d.as_nanos() as u64)
    }
}
