//! The decoding loop: `embed_tokens` on the new ids, then the decoder with the past cache;
//! `present.*` stays on the GPU and is fed back as the next `past_key_values.*`.
//!
//! The cache tensors are never read back: the decoder's `present.*` outputs are GPU tensors
//! handed over (moved, no clone kept) as the next step's inputs. Given away like that, a past
//! whose buffer has room becomes the present in place: GroupQueryAttention writes only the new
//! rows into it (gg-runtime `ops/attention.rs`, `Gqa::append`). When a cache outgrows its
//! buffer it is copied once into a new one with room for a quarter more (at least 16 rows), so
//! capacity grows geometrically and a decode step neither copies nor allocates the cache.

use crate::error::{LlmError, Result};
use crate::model::GemmaModel;
use crate::sampler::{self, Sampling};
use gg_runtime::exec::Ctx;
use gg_runtime::gpu::CounterSnapshot;
use gg_runtime::{GpuTensor, HostTensor, Value};

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
    /// Dispatches per decoded token.
    pub fn dispatches_per_token(&self) -> f64 {
        per(self.decode_dispatches, self.decode_tokens)
    }
    /// Bytes read back per decoded token.
    pub fn bytes_read_back_per_token(&self) -> f64 {
        per(self.decode_bytes_read_back, self.decode_tokens)
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
        js_sys::Date::now() / 1000.0
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

/// One generation in progress: the GPU-resident cache and the position.
pub struct Generator<'m> {
    model: &'m GemmaModel,
    cache: Vec<Value>,
    /// Tokens in the cache.
    past: usize,
    sampling: Sampling,
    step: u64,
    /// Ids waiting to be fed (the prompt, then each sampled token).
    pending: Vec<u32>,
    stats: GenerationStats,
    /// Decoder runs so far (prefill counts as one).
    pub steps_run: usize,
}

impl std::fmt::Debug for Generator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("past", &self.past)
            .field("step", &self.step)
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
            pending: prompt.to_vec(),
            stats: GenerationStats {
                prefill_tokens: prompt.len(),
                ..GenerationStats::default()
            },
            steps_run: 0,
        })
    }

    /// Tokens in the cache.
    pub fn position(&self) -> usize {
        self.past
    }

    /// Counters so far.
    pub fn stats(&self) -> GenerationStats {
        self.stats
    }

    /// Records both sessions on the pending ids into `cx` (nothing is submitted); returns the
    /// logits of the last position (on the GPU).
    async fn forward(&mut self, cx: &mut Ctx<'_>) -> Result<GpuTensor> {
        let ids = std::mem::take(&mut self.pending);
        let s = ids.len();
        let total = self.past + s;
        if let Some(limit) = self.model.context_limit()
            && total > limit
        {
            return Err(LlmError::ContextTooLong {
                tokens: total,
                limit,
            });
        }
        let ids64: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let embeds = self
            .model
            .embed
            .run_in(
                cx,
                vec![(
                    "input_ids".into(),
                    Value::Host(HostTensor::from_i64(vec![1, s], &ids64)),
                )],
            )
            .await?;
        let layout = &self.model.layout;
        let mut inputs: Vec<(String, Value)> = Vec::with_capacity(8 + layout.cache.len());
        for (name, v) in embeds {
            let wanted =
                name == "inputs_embeds" || (name == "per_layer_inputs" && layout.per_layer_inputs);
            if wanted {
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

    /// Feeds the pending ids and returns the next token (sampled on the GPU; only its id is read
    /// back). The token becomes pending for the next call.
    pub async fn next_token(&mut self) -> Result<u32> {
        let prefill = self.step == 0;
        let gpu = &self.model.gpu;
        let before = gpu.counters.snapshot();
        let t0 = now_s();
        // The embedding, the decoder and the sampling kernel go to the GPU in one submit, which
        // also reads back the id.
        let model = self.model;
        let mut cx = model.decoder.context();
        let logits = self.forward(&mut cx).await?;
        let out = sampler::record(&mut cx, &logits, &self.sampling, self.step)?;
        drop(logits);
        let id = sampler::read_id(&mut cx, &out).await?;
        let dt = now_s() - t0;
        let after = gpu.counters.snapshot();
        if prefill {
            self.stats.prefill_s += dt;
        } else {
            self.stats.decode_tokens += 1;
            self.stats.decode_s += dt;
            add(&mut self.stats, &before, &after);
        }
        self.step += 1;
        self.pending.push(id);
        Ok(id)
    }

    /// Feeds `ids` (instead of the pending ids; empty: the pending ids, e.g. the prompt) and
    /// returns the logits of the last position, read back to the host: for tests and teacher
    /// forcing, not for decoding.
    pub async fn logits_for(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        if !ids.is_empty() {
            self.pending = ids.to_vec();
        }
        let model = self.model;
        let mut cx = model.decoder.context();
        let logits = self.forward(&mut cx).await?;
        self.step += 1;
        let host = cx.download(&logits).await?;
        Ok(host.to_f32())
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
