//! The decoding loop: `embed_tokens` on the new ids, then the decoder with the past cache;
//! `present.*` stays on the GPU and is fed back as the next `past_key_values.*`.
//!
//! The cache tensors are never read back: the decoder's `present.*` outputs are GPU tensors
//! handed over (moved, no clone kept) as the next step's inputs. Given away like that, a past
//! whose buffer has room becomes the present in place: GroupQueryAttention writes only the new
//! rows into it (gg-runtime `ops/attention/kv_append.rs`, `Gqa::append`). When a cache outgrows its
//! buffer it is copied once into a new one with room for a quarter more (at least 16 rows), so
//! capacity grows geometrically and a decode step neither copies nor allocates the cache.
//!
//! Run-ahead: each step ends with the sampling kernel writing the token id into a GPU tensor
//! and a 4-byte read-back of it. Before waiting for that read, [`Generator::next_token`] records
//! and submits the next step with the id tensor itself as the embedding's `input_ids`, so the host
//! records step N+1 while the GPU runs step N, and the GPU starts step N+1 without waiting for
//! the host. The host learns id N afterwards (for the text and the stop rules). When the caller
//! stops after id N (an end id, cancellation) step N+1 has run for nothing; its results are
//! dropped. [`Generator::last_token`] takes a token without running ahead.
//!
//! Constrained tool calls ([`Generator::constrained`], [`crate::constrain`]): inside a call the
//! mask of step N+1 depends on token N, so no step runs ahead there; a step run ahead just
//! before a call opens (its token N was `<|tool_call>`) is sampled again from its kept logits
//! under the mask, with the same random word. The tokens are the same with run-ahead and
//! without it.

use crate::constrain::CallConstraint;
use crate::error::{LlmError, Result};
use crate::model::{GemmaModel, IMAGE_FEATURES};
use crate::sampler::{self, Sampling};
use gg_gemma::constrain::Bitset;
use gg_runtime::exec::{Ctx, PendingRead};
use gg_runtime::gpu::CounterSnapshot;
use gg_runtime::{DType, GpuTensor, HostTensor, Value};

/// Work counters of a generation, split into prefill (the prompt) and decode (each new token).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens.
    pub prefill_tokens: usize,
    /// Tokens generated after the first (each one a decode step).
    pub decode_tokens: usize,
    /// Seconds of the prefill step (including the first sample).
    pub prefill_s: f64,
    /// Seconds of all decode steps.
    pub decode_s: f64,
    /// GPU dispatches during decode steps.
    pub decode_dispatches: u64,
    /// Bytes read back to the host during decode steps.
    pub decode_bytes_read_back: u64,
    /// GPU buffers created during decode steps.
    pub decode_buffers_created: u64,
    /// Bytes written from the host to the GPU during decode steps (the new ids, positions and
    /// mask; constants are uploaded once).
    pub decode_bytes_uploaded: u64,
    /// Bind groups created during decode steps (a step binding what the step before bound
    /// reuses its bind groups).
    pub decode_bind_groups_created: u64,
    /// Queue submits during decode steps.
    pub decode_submits: u64,
    /// Host seconds spent recording and submitting decode steps (with run-ahead this overlaps
    /// the GPU's work on the step before).
    pub decode_record_s: f64,
    /// Decode steps whose token was sampled under a tool-call mask (inside a call).
    pub call_tokens: usize,
    /// Seconds of those steps (part of `decode_s`).
    pub call_s: f64,
    /// Host seconds computing the masks (part of `call_s`).
    pub mask_s: f64,
    /// Steps run ahead unmasked whose token opened a call, sampled again under the mask.
    pub resampled: usize,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tok_s(&self) -> f64 {
        rate(self.prefill_tokens, self.prefill_s)
    }
    /// Generated tokens per second (decode steps only).
    pub fn decode_tok_s(&self) -> f64 {
        rate(self.decode_tokens, self.decode_s)
    }
    /// Decode tokens per second inside tool calls (sampled under the mask).
    pub fn call_tok_s(&self) -> f64 {
        rate(self.call_tokens, self.call_s)
    }
    /// Decode tokens per second outside tool calls.
    pub fn free_tok_s(&self) -> f64 {
        rate(
            self.decode_tokens - self.call_tokens,
            self.decode_s - self.call_s,
        )
    }
    /// Dispatches per decoded token.
    pub fn dispatches_per_token(&self) -> f64 {
        per(self.decode_dispatches, self.decode_tokens)
    }
    /// Bytes read back per decoded token.
    pub fn bytes_read_back_per_token(&self) -> f64 {
        per(self.decode_bytes_read_back, self.decode_tokens)
    }
    /// Host milliseconds of recording and submitting per decoded token.
    pub fn record_ms_per_token(&self) -> f64 {
        if self.decode_tokens == 0 {
            0.0
        } else {
            self.decode_record_s * 1000.0 / self.decode_tokens as f64
        }
    }
}

fn rate(n: usize, s: f64) -> f64 {
    if s > 0.0 { n as f64 / s } else { 0.0 }
}

fn per(n: u64, d: usize) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An end id (`generation_config.json`); the id is not part of the output text.
    EndId(u32),
    /// `max_new_tokens` reached.
    MaxNewTokens,
    /// Cancelled between steps.
    Cancelled,
}

/// A clock that works natively and in the browser.
pub(crate) fn now_s() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        // `performance.now()` (a window's or a worker's): monotonic, and the clock the browser
        // bench's JS driver times both runtimes with; `Date.now()` where there is none.
        let global = js_sys::global();
        js_sys::Reflect::get(&global, &"performance".into())
            .ok()
            .filter(|p| p.is_object())
            .and_then(|p| {
                let now = js_sys::Reflect::get(&p, &"now".into()).ok()?;
                js_sys::Function::from(now).call0(&p).ok()?.as_f64()
            })
            .unwrap_or_else(js_sys::Date::now)
            / 1000.0
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
    }
}

/// What a step feeds the embedding.
enum StepInput {
    /// Ids on the host (the prompt, or a token read back).
    Host(Vec<u32>),
    /// The id the step before sampled, still on the GPU (`[1, 1]` int64).
    Gpu(GpuTensor),
}

/// A step submitted to the GPU whose token id has not been read back yet.
struct InFlight<'m> {
    read: PendingRead<'m>,
    /// The sampled id on the GPU: the next step's `input_ids`.
    id: GpuTensor,
    /// The prompt's step.
    prefill: bool,
    /// Sampled under a tool-call mask.
    masked: bool,
    /// The logits, kept when the step ran ahead unmasked while a constraint is active (to
    /// sample them again if the token before opens a call).
    logits: Option<GpuTensor>,
    /// The sampler's step index (its random word).
    sample_step: u64,
    /// Counters before and after recording and submitting it.
    before: CounterSnapshot,
    after: CounterSnapshot,
    /// Host seconds of recording and submitting it.
    record_s: f64,
}

/// One generation in progress: the GPU-resident cache and the position.
pub struct Generator<'m> {
    model: &'m GemmaModel,
    cache: Vec<Value>,
    /// Tokens in the cache (with a step in flight, its input included).
    past: usize,
    sampling: Sampling,
    /// Tokens returned so far.
    step: u64,
    /// Steps recorded so far (the sampler's step index).
    launched: u64,
    /// Ids waiting to be fed (the prompt, then each token read back when no step runs ahead).
    pending: Vec<u32>,
    /// The step submitted ahead, fed with the last sampled id on the GPU.
    in_flight: Option<InFlight<'m>>,
    run_ahead: bool,
    /// Image features for the prompt's image tokens (per image `[rows, hidden]`), fed with the
    /// prompt.
    images: Vec<Value>,
    /// Constrained tool calls.
    constraint: Option<CallConstraint>,
    stats: GenerationStats,
    /// Decoder runs so far (prefill counts as one; a step run ahead counts when recorded).
    pub steps_run: usize,
}

impl std::fmt::Debug for Generator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("past", &self.past)
            .field("step", &self.step)
            .field("in_flight", &self.in_flight.is_some())
            .finish_non_exhaustive()
    }
}

impl<'m> Generator<'m> {
    /// Starts a generation for `prompt` (token ids, the chat template's `<bos>` included).
    pub fn new(model: &'m GemmaModel, prompt: &[u32], sampling: Sampling) -> Result<Self> {
        sampling.validate()?;
        if prompt.is_empty() {
            return Err(LlmError::Options("the prompt has no tokens".into()));
        }
        if let Some(limit) = model.context_limit()
            && prompt.len() >= limit
        {
            return Err(LlmError::ContextTooLong {
                tokens: prompt.len(),
                limit,
            });
        }
        let cache = model
            .layout
            .cache
            .iter()
            .map(|e| {
                Value::Host(HostTensor::from_i64_as(
                    e.dtype,
                    vec![1, e.kv_heads, 0, e.head_dim],
                    &[],
                ))
            })
            .collect();
        Ok(Self {
            model,
            cache,
            past: 0,
            sampling,
            step: 0,
            launched: 0,
            pending: prompt.to_vec(),
            in_flight: None,
            run_ahead: model.gpu.tuning.submits_overlap,
            images: Vec::new(),
            constraint: None,
            stats: GenerationStats {
                prefill_tokens: prompt.len(),
                ..GenerationStats::default()
            },
            steps_run: 0,
        })
    }

    /// Whether [`Generator::next_token`] runs the next step ahead (by default where the GPU's
    /// submits overlap, [`gg_runtime::tuning::Tuning::submits_overlap`]; off, every step is recorded after
    /// the id before it is read back, as [`Generator::last_token`] does). The tokens are the same
    /// either way.
    pub fn run_ahead(mut self, on: bool) -> Self {
        self.run_ahead = on;
        self
    }

    /// Feeds the prompt's image tokens (`<|image|>`, one per soft token, already expanded:
    /// [`GemmaModel::prompt_ids_with_images`]) with `features`: each image's encoder output
    /// (`[rows, hidden]`, host or GPU, float32 or float16), in prompt order. The rows together
    /// must equal the image tokens. A mobius split package's embedding graph takes them as its
    /// `image_features` input; otherwise they replace the `inputs_embeds` rows of the image
    /// tokens on the GPU and the embedding sees the pad id there ([`crate::merge`]). No features
    /// (a prompt without images) changes nothing.
    pub fn with_image_features(mut self, features: Vec<Value>) -> Result<Self> {
        if features.is_empty() {
            // no images: any model, any layout
            return Ok(self);
        }
        let tokens = self.model.image_tokens.ok_or_else(|| {
            LlmError::Model("the tokenizer has no image tokens: this model takes no images".into())
        })?;
        if self.model.embed.is_none() {
            return Err(LlmError::Model(
                "this package has no embedding graph to take image features (a single model.onnx)"
                    .into(),
            ));
        }
        if !self.model.embedding_takes_images() && self.model.pad_id.is_none() {
            return Err(LlmError::Model(
                "the tokenizer names no pad token, which the embedding needs at image tokens"
                    .into(),
            ));
        }
        if let Some(f) = features.iter().find(|f| f.shape().len() != 2) {
            return Err(LlmError::Options(format!(
                "image features of shape {:?}; expected [rows, hidden]",
                f.shape()
            )));
        }
        let rows = features.iter().map(|f| f.shape()[0]).sum();
        crate::merge::feature_rows(&self.pending, tokens.image, rows)?;
        self.images = features;
        Ok(self)
    }

    /// Samples tool calls under `constraint` (see the module docs); `None`: unconstrained.
    /// Before the first token: the prompt is followed, so a prompt that ends inside an open
    /// call starts constrained.
    pub fn constrained(mut self, constraint: Option<CallConstraint>) -> Self {
        self.constraint = constraint.map(|mut c| {
            c.follow_prompt(&self.pending);
            c
        });
        self
    }

    /// The constraint, if any.
    pub fn constraint(&self) -> Option<&CallConstraint> {
        self.constraint.as_ref()
    }

    /// Tokens in the cache (a step running ahead included).
    pub fn position(&self) -> usize {
        self.past
    }

    /// Counters so far.
    pub fn stats(&self) -> GenerationStats {
        self.stats
    }

    /// Records the sessions on `input` into `cx` (nothing is submitted); returns the logits (on
    /// the GPU): one row, or, from a decoder without `num_logits_to_keep`, a row per fed token
    /// (the sampler reads the last).
    async fn forward(&mut self, cx: &mut Ctx<'_>, input: StepInput) -> Result<GpuTensor> {
        // the prompt's image features, with the ids the embedding gets and each row's feature
        let mut images = None;
        let ids: Value = match input {
            StepInput::Host(ids) => {
                if ids.is_empty() {
                    return Err(LlmError::Options("no token ids to feed".into()));
                }
                let features = std::mem::take(&mut self.images);
                if let (false, Some(tokens)) = (features.is_empty(), self.model.image_tokens) {
                    let features = crate::merge::concat_rows(cx, features)?;
                    let rows = crate::merge::feature_rows(
                        &ids,
                        tokens.image,
                        features.shape().first().copied().unwrap_or(0),
                    )?;
                    let embed_ids = match (self.model.embedding_takes_images(), self.model.pad_id) {
                        (false, Some(pad)) => {
                            crate::merge::pad_image_tokens(&ids, tokens.image, pad)
                        }
                        _ => ids.clone(),
                    };
                    images = Some((features, rows, embed_ids));
                }
                let ids64: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
                Value::Host(HostTensor::from_i64(vec![1, ids.len()], &ids64))
            }
            StepInput::Gpu(t) => {
                if t.shape != [1, 1] || t.dtype != DType::I64 {
                    return Err(LlmError::Model(format!(
                        "the sampled id is {t:?}, expected int64 [1, 1]"
                    )));
                }
                Value::Gpu(t)
            }
        };
        let s = ids.shape()[1];
        let total = self.past + s;
        if let Some(limit) = self.model.context_limit()
            && total > limit
        {
            return Err(LlmError::ContextTooLong {
                tokens: total,
                limit,
            });
        }
        let layout = &self.model.layout;
        let mut inputs: Vec<(String, Value)> = Vec::with_capacity(8 + layout.cache.len());
        let (for_embed, for_decoder) = match (self.model.embed.is_some(), layout.input_ids) {
            (true, true) => (Some(ids.clone()), Some(ids)),
            (true, false) => (Some(ids), None),
            (false, _) => (None, Some(ids)),
        };
        if let Some(ids) = for_decoder {
            inputs.push(("input_ids".into(), ids));
        }
        if let (Some(embed), Some(ids)) = (&self.model.embed, for_embed) {
            let takes_images = self.model.embedding_takes_images();
            let (mut features, mut merge) = (None, None);
            let ids = match images {
                Some((f, rows, embed_ids)) => {
                    let ids64: Vec<i64> = embed_ids.iter().map(|&i| i64::from(i)).collect();
                    if takes_images {
                        features = Some(f);
                    } else {
                        merge = Some((f, rows));
                    }
                    Value::Host(HostTensor::from_i64(vec![1, embed_ids.len()], &ids64))
                }
                None => ids,
            };
            let mut feeds = Vec::with_capacity(1 + self.model.embed_empty.len());
            feeds.push(("input_ids".to_string(), ids));
            for e in &self.model.embed_empty {
                let value = match features.take() {
                    Some(f) if e.name == IMAGE_FEATURES => as_dtype(f, e.dtype)?,
                    other => {
                        features = other;
                        Value::Host(HostTensor::from_i64_as(e.dtype, e.shape.clone(), &[]))
                    }
                };
                feeds.push((e.name.clone(), value));
            }
            for (name, v) in embed.run_in(cx, feeds).await? {
                let wanted = (name == "inputs_embeds" && layout.inputs_embeds)
                    || (name == "per_layer_inputs" && layout.per_layer_inputs);
                if !wanted {
                    continue;
                }
                let v = match (&merge, name.as_str()) {
                    (Some((f, rows)), "inputs_embeds") => {
                        let embeds = cx.to_gpu(&v)?;
                        Value::Gpu(crate::merge::record(cx, &embeds, f, rows)?)
                    }
                    _ => v,
                };
                inputs.push((name, v));
            }
        }
        inputs.push((
            "attention_mask".into(),
            Value::Host(HostTensor::from_i64(vec![1, total], &vec![1; total])),
        ));
        if layout.position_ids {
            let pos: Vec<i64> = (self.past..total).map(|p| p as i64).collect();
            inputs.push((
                "position_ids".into(),
                Value::Host(HostTensor::from_i64(vec![1, s], &pos)),
            ));
        }
        if layout.num_logits_to_keep {
            inputs.push((
                "num_logits_to_keep".into(),
                Value::Host(HostTensor::from_i64(vec![], &[1])),
            ));
        }
        let cache = std::mem::take(&mut self.cache);
        for (e, v) in layout.cache.iter().zip(cache) {
            inputs.push((e.input.clone(), v));
        }
        let mut outs = self.model.decoder.run_in(cx, inputs).await?;
        self.steps_run += 1;
        let mut logits = None;
        let mut next = Vec::with_capacity(layout.cache.len());
        for e in &layout.cache {
            let pos = outs
                .iter()
                .position(|(n, _)| *n == e.output)
                .ok_or_else(|| LlmError::Model(format!("decoder did not produce {}", e.output)))?;
            let (_, v) = outs.swap_remove(pos);
            if !matches!(v, Value::Gpu(_)) {
                return Err(LlmError::Model(format!(
                    "{} was produced on the host; the cache must stay on the GPU",
                    e.output
                )));
            }
            next.push(v);
        }
        for (n, v) in outs {
            if n == "logits" {
                logits = Some(v);
            }
        }
        self.cache = next;
        self.past = total;
        match logits {
            Some(Value::Gpu(t)) => Ok(t),
            Some(Value::Host(_)) => Err(LlmError::Model("logits were produced on the host".into())),
            None => Err(LlmError::Model("decoder did not produce logits".into())),
        }
    }

    /// Records and submits one step on `input`, with the sampling kernel (under `mask`, if
    /// any) and the read-back of its id; `keep_logits` keeps the logits in the result.
    async fn launch(
        &mut self,
        input: StepInput,
        mask: Option<&Bitset>,
        keep_logits: bool,
    ) -> Result<InFlight<'m>> {
        let model = self.model;
        let before = model.gpu.counters.snapshot();
        let t0 = now_s();
        let prefill = self.launched == 0;
        let sample_step = self.launched;
        // The embedding, the decoder and the sampling kernel go to the GPU in one submit, which
        // also starts the read-back of the id.
        let mut cx = model.decoder.context();
        let (id, logits) = self.record_step(&mut cx, input, mask).await?;
        let read = cx.read_later(&id)?;
        Ok(InFlight {
            read,
            id,
            prefill,
            masked: mask.is_some(),
            logits: keep_logits.then_some(logits),
            sample_step,
            before,
            after: model.gpu.counters.snapshot(),
            record_s: now_s() - t0,
        })
    }

    /// Records one step on `input` and the sampling kernel into `cx`; returns the tensor the
    /// token id goes to, and the logits.
    async fn record_step(
        &mut self,
        cx: &mut Ctx<'_>,
        input: StepInput,
        mask: Option<&Bitset>,
    ) -> Result<(GpuTensor, GpuTensor)> {
        let logits = self.forward(cx, input).await?;
        let mask = mask.map(|m| sampler::Mask { words: m.words() });
        let id = sampler::record_masked(cx, &logits, &self.sampling, self.launched, mask)?;
        self.launched += 1;
        Ok((id, logits))
    }

    /// Samples the logits a step run ahead kept again, under `mask` (its token before opened a
    /// call), with the same random word; the first sampling's read-back is awaited and dropped.
    async fn resample(&mut self, cur: InFlight<'m>, mask: &Bitset) -> Result<InFlight<'m>> {
        let logits = cur.logits.ok_or_else(|| {
            LlmError::Constraint("a step ran ahead unmasked without keeping its logits".into())
        })?;
        let model = self.model;
        let t0 = now_s();
        let counted = model.gpu.counters.snapshot();
        let mut cx = model.decoder.context();
        let id = sampler::record_masked(
            &mut cx,
            &logits,
            &self.sampling,
            cur.sample_step,
            Some(sampler::Mask {
                words: mask.words(),
            }),
        )?;
        let read = cx.read_later(&id)?;
        // Returns the staging buffer of the unmasked read-back to the pool.
        cur.read.wait().await?;
        self.stats.resampled += 1;
        if !cur.prefill {
            // The second sampling's work (the step's own is counted from `before` to `after`).
            add(&mut self.stats, &counted, &model.gpu.counters.snapshot());
        }
        Ok(InFlight {
            read,
            id,
            prefill: cur.prefill,
            masked: true,
            logits: None,
            sample_step: cur.sample_step,
            before: cur.before,
            after: cur.after,
            record_s: cur.record_s + now_s() - t0,
        })
    }

    /// The mask of the next token to be read (`None` outside calls), timed.
    fn next_mask(&mut self) -> Option<Bitset> {
        let c = self.constraint.as_ref()?;
        if !c.inside() {
            return None;
        }
        let t0 = now_s();
        let mask = c.mask();
        self.stats.mask_s += now_s() - t0;
        mask
    }

    /// Feeds the pending ids (the prompt, then each token) and returns the next token, sampled on
    /// the GPU; only its id is read back. Runs the step after it ahead (see the module docs)
    /// unless [`Generator::run_ahead`] turned that off or the context is full: call
    /// [`Generator::last_token`] instead when no token will follow.
    pub async fn next_token(&mut self) -> Result<u32> {
        self.advance(self.run_ahead).await
    }

    /// Like [`Generator::next_token`], without running the next step ahead: for the last token
    /// the caller will take, so that no step runs for nothing.
    pub async fn last_token(&mut self) -> Result<u32> {
        self.advance(false).await
    }

    async fn advance(&mut self, ahead: bool) -> Result<u32> {
        let t0 = now_s();
        let mask = self.next_mask();
        let mut cur = match self.in_flight.take() {
            Some(f) => f,
            None => {
                let ids = std::mem::take(&mut self.pending);
                self.launch(StepInput::Host(ids), mask.as_ref(), false)
                    .await?
            }
        };
        if let Some(mask) = &mask
            && !cur.masked
        {
            cur = self.resample(cur, mask).await?;
        }
        let room = self
            .model
            .context_limit()
            .is_none_or(|limit| self.past < limit);
        // Inside a call the next mask depends on this token: no step runs ahead.
        if ahead && room && mask.is_none() {
            let keep = self.constraint.is_some();
            let next = self
                .launch(StepInput::Gpu(cur.id.clone()), None, keep)
                .await?;
            self.in_flight = Some(next);
        }
        let InFlight {
            read,
            prefill,
            before,
            after,
            record_s,
            ..
        } = cur;
        let waited = self.model.gpu.counters.snapshot();
        let id = sampler::id_of(&read.wait().await?)?;
        if let Some(c) = &mut self.constraint {
            c.accept(id)?;
        }
        let done = self.model.gpu.counters.snapshot();
        let dt = now_s() - t0;
        if prefill {
            self.stats.prefill_s += dt;
        } else {
            if mask.is_some() {
                self.stats.call_tokens += 1;
                self.stats.call_s += dt;
            }
            self.stats.decode_tokens += 1;
            self.stats.decode_s += dt;
            self.stats.decode_record_s += record_s;
            add(&mut self.stats, &before, &after);
            add(&mut self.stats, &waited, &done);
        }
        self.step += 1;
        if self.in_flight.is_none() {
            self.pending.push(id);
        }
        Ok(id)
    }

    /// Records the pending ids' step and `decode` more, each fed the id the step before sampled
    /// (on the GPU), into one context, and drops it without submitting: compiles what those
    /// steps need (see [`GemmaModel::warm_up`]). The generation is spent afterwards.
    async fn rehearse(mut self, decode: usize) -> Result<()> {
        let model = self.model;
        let mut cx = model.decoder.context();
        let ids = std::mem::take(&mut self.pending);
        let mut input = StepInput::Host(ids);
        for _ in 0..=decode {
            input = StepInput::Gpu(self.record_step(&mut cx, input, None).await?.0);
        }
        Ok(())
    }

    /// Feeds `ids` (instead of the pending ids; empty: the pending ids, e.g. the prompt) and
    /// returns the logits of the last position, read back to the host: for tests and teacher
    /// forcing, not for decoding. Not after [`Generator::next_token`] ran a step ahead (take
    /// that token with [`Generator::last_token`] first).
    pub async fn logits_for(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        if self.in_flight.is_some() {
            return Err(LlmError::Options(
                "a step is running ahead (next_token); take the token before logits_for with last_token"
                    .into(),
            ));
        }
        if !ids.is_empty() {
            self.pending = ids.to_vec();
        }
        let model = self.model;
        let mut cx = model.decoder.context();
        let ids = std::mem::take(&mut self.pending);
        let logits = self.forward(&mut cx, StepInput::Host(ids)).await?;
        self.step += 1;
        self.launched += 1;
        let host = cx.download(&logits).await?.to_f32();
        // Without num_logits_to_keep the decoder gives a row per fed token: the last one.
        let v = logits.shape.last().copied().unwrap_or(host.len()).max(1);
        Ok(host[host.len() - v.min(host.len())..].to_vec())
    }
}

/// Host image features converted to the embedding input's dtype; GPU ones must have it.
fn as_dtype(features: Value, dtype: DType) -> Result<Value> {
    if features.dtype() == dtype {
        return Ok(features);
    }
    match features {
        Value::Host(h) if h.dtype.is_float() && dtype.is_float() => {
            let v = h.to_f64();
            Ok(Value::Host(HostTensor::from_f64_as(
                dtype,
                h.shape.clone(),
                &v,
            )))
        }
        other => Err(LlmError::Options(format!(
            "image features are {}, the embedding graph takes {}",
            other.dtype().name(),
            dtype.name()
        ))),
    }
}

fn add(stats: &mut GenerationStats, before: &CounterSnapshot, after: &CounterSnapshot) {
    stats.decode_dispatches += after.dispatches - before.dispatches;
    stats.decode_bytes_read_back += after.bytes_read_back - before.bytes_read_back;
    stats.decode_buffers_created += after.buffers_created - before.buffers_created;
    stats.decode_bytes_uploaded += after.bytes_uploaded - before.bytes_uploaded;
    stats.decode_bind_groups_created += after.bind_groups_created - before.bind_groups_created;
    stats.decode_submits += after.submits - before.submits;
}

/// Prompt lengths [`GemmaModel::warm_up`] rehearses: one per row bucket of the prompt kernels
/// (the GEMMs' 2-4, 5-8, 9-16, 17-32 and 33+ rows; 2 also takes the attention's smallest query
/// block where a key head serves 2 or 4 query heads), so that short prompts — a first "hi", a
/// later turn's few new tokens after the cached conversation — compile nothing either, and one
/// past the 256 keys from which a decode step splits its attention across workgroups.
pub const WARM_UP_PROMPTS: [usize; 7] = [2, 4, 8, 16, 24, 40, 300];

impl GemmaModel {
    /// Compiles the kernels of a generation ahead of the first one, without running anything:
    /// for each of [`WARM_UP_PROMPTS`] (that the context holds) it records a greedy generation
    /// on a synthetic prompt (the prompt's step and two decode steps, each fed the id the step
    /// before sampled on the GPU) into one context and drops it unsubmitted. Recording compiles
    /// every pipeline the steps use, and pipelines are kept per GPU, so the first real prompts
    /// and their decode steps compile nothing (seconds of the first answer on a GPU in the
    /// browser). Costs no GPU time: only the host's recording, the compiling, and pool buffers
    /// a prompt of that length needs anyway. On software adapters, whose compiler is slow,
    /// compiling each kernel when first used (only those) is cheaper (measured: bench/README.md,
    /// "Runtime history"). `gemma-gem bench --warm-up` measures it.
    pub async fn warm_up(&self) -> Result<()> {
        let vocab = crate::synthetic::vocab_of(self);
        for n in WARM_UP_PROMPTS {
            if self.context_limit().is_some_and(|l| n + 3 > l) {
                continue;
            }
            let prompt = crate::synthetic::prompt_ids(n, vocab);
            Generator::new(self, &prompt, Sampling::Greedy)?
                .rehearse(2)
                .await?;
        }
        Ok(())
    }
}
