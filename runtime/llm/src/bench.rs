//! Benchmark steps shared by the native bench (`gemma-gem bench`) and the browser bench
//! (`bench/wasm`): a prefill of `n` synthetic prompt tokens (time to first token), and decode steps
//! after a given context, with the work counters per decoded token; the vision encoder on a
//! synthetic image of a given number of soft tokens ([`vision_encode`]).
//!
//! Prompts are synthetic ids ([`prompt_ids`]): the bench measures the runtime, not the text, and
//! the browser bench feeds onnxruntime-web the very same ids (the formula is mirrored in
//! `bench/web/ort.mjs`). Decoding is greedy and never stops at an end id. [`decode_in_call`]
//! measures decode steps inside a constrained tool call (the mask computed on the host,
//! uploaded and applied by the sampling kernel) against steps outside it.

use crate::error::{LlmError, Result};
use crate::generate::{Generator, now_s};
use crate::model::GemmaModel;
use crate::sampler::Sampling;
pub use crate::synthetic::{prompt_ids, vocab_of};

/// One prefill measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillRun {
    /// Prompt tokens.
    pub tokens: usize,
    /// Seconds from the prompt ids to the first token id on the host (embed, decoder, sampling).
    pub ttft_s: f64,
}

impl PrefillRun {
    /// Prompt tokens per second.
    pub fn tok_s(&self) -> f64 {
        if self.ttft_s > 0.0 {
            self.tokens as f64 / self.ttft_s
        } else {
            0.0
        }
    }
}

/// One decode measurement: `tokens` decode steps after a prompt of `context` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeRun {
    /// Tokens in the cache before the first measured step.
    pub context: usize,
    /// Decode steps measured.
    pub tokens: usize,
    /// Seconds of those steps.
    pub decode_s: f64,
    /// GPU dispatches per decoded token.
    pub dispatches_per_token: f64,
    /// Queue submits per decoded token.
    pub submits_per_token: f64,
    /// Bytes read back to the host per decoded token.
    pub bytes_read_back_per_token: f64,
    /// GPU buffers created per decoded token (0 once the pools are warm).
    pub buffers_created_per_token: f64,
    /// Bytes uploaded from the host per decoded token.
    pub bytes_uploaded_per_token: f64,
    /// Bind groups created per decoded token.
    pub bind_groups_created_per_token: f64,
    /// Host milliseconds of recording and submitting per decoded token (overlapping the GPU's
    /// work on the step before: the next step runs ahead).
    pub record_ms_per_token: f64,
}

impl DecodeRun {
    /// Decoded tokens per second.
    pub fn tok_s(&self) -> f64 {
        if self.decode_s > 0.0 {
            self.tokens as f64 / self.decode_s
        } else {
            0.0
        }
    }
}

/// Checks that `tokens` fit the model's context.
pub fn check_fits(model: &GemmaModel, tokens: usize) -> Result<()> {
    match model.context_limit() {
        Some(limit) if tokens > limit => Err(LlmError::ContextTooLong { tokens, limit }),
        _ => Ok(()),
    }
}

/// A greedy generator on a synthetic prompt of `n` tokens, after checking that `total` tokens
/// (the prompt and what the caller will generate) fit the model's context.
fn greedy_on_prompt(model: &GemmaModel, n: usize, total: usize) -> Result<Generator<'_>> {
    check_fits(model, total)?;
    Generator::new(model, &prompt_ids(n, vocab_of(model)), Sampling::Greedy)
}

/// Runs embed + decoder + sampling on a prompt of `n` tokens and times it to the first token.
pub async fn prefill(model: &GemmaModel, n: usize) -> Result<PrefillRun> {
    let mut g = greedy_on_prompt(model, n, n + 1)?;
    let t0 = now_s();
    g.last_token().await?;
    Ok(PrefillRun {
        tokens: n,
        ttft_s: now_s() - t0,
    })
}

/// Prefills `context` tokens, then times `tokens` decode steps, each but the last running the
/// next one ahead as a text stream does (`run_ahead`: `None` as the generator chooses for the
/// adapter, `Some(false)` none does, `Some(true)` each does). The prompt's step does not run
/// ahead, so no decode step is in flight before the decode clock starts, and the last step
/// leaves none in flight: the time covers exactly `tokens` steps (issue 33).
pub async fn decode(
    model: &GemmaModel,
    context: usize,
    tokens: usize,
    run_ahead: Option<bool>,
) -> Result<DecodeRun> {
    if tokens == 0 {
        return Err(LlmError::Options("decode needs at least one token".into()));
    }
    // The prefill produces the first token; each further token is one decode step.
    let mut g = greedy_on_prompt(model, context, context + tokens + 1)?;
    if let Some(on) = run_ahead {
        g = g.run_ahead(on);
    }
    g.last_token().await?;
    for i in 0..tokens {
        if i + 1 < tokens {
            g.next_token().await?;
        } else {
            g.last_token().await?;
        }
    }
    let s = g.stats();
    let per = |v: u64| v as f64 / s.decode_tokens.max(1) as f64;
    Ok(DecodeRun {
        context,
        tokens: s.decode_tokens,
        decode_s: s.decode_s,
        dispatches_per_token: per(s.decode_dispatches),
        submits_per_token: per(s.decode_submits),
        bytes_read_back_per_token: per(s.decode_bytes_read_back),
        buffers_created_per_token: per(s.decode_buffers_created),
        bytes_uploaded_per_token: per(s.decode_bytes_uploaded),
        bind_groups_created_per_token: per(s.decode_bind_groups_created),
        record_ms_per_token: s.record_ms_per_token(),
    })
}

/// The greedy ids of a decode run: the first token after the synthetic prompt of `context` tokens
/// and `tokens` more (what another runtime must compute too; the browser and native benches
/// compare them). Not timed.
pub async fn greedy_ids(model: &GemmaModel, context: usize, tokens: usize) -> Result<Vec<u32>> {
    let mut g = greedy_on_prompt(model, context, context + tokens + 1)?;
    let mut ids = Vec::with_capacity(tokens + 1);
    for _ in 0..=tokens {
        ids.push(g.last_token().await?);
    }
    Ok(ids)
}

/// Decode steps inside a tool call against steps outside one, in the same generation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallDecodeRun {
    /// Tokens in the cache before the call opened (the synthetic prompt and `<|tool_call>`).
    pub context: usize,
    /// Decode steps sampled under the call's mask.
    pub call_tokens: usize,
    /// Seconds of those steps.
    pub call_s: f64,
    /// Decode steps outside the call (after it closed).
    pub free_tokens: usize,
    /// Seconds of those steps.
    pub free_s: f64,
    /// Host milliseconds computing the mask, per step inside the call.
    pub mask_ms_per_token: f64,
    /// Bytes uploaded per decode step, all steps (the mask: vocabulary / 8 bytes per step
    /// inside the call).
    pub bytes_uploaded_per_token: f64,
}

impl CallDecodeRun {
    /// Tokens per second inside the call.
    pub fn call_tok_s(&self) -> f64 {
        if self.call_s > 0.0 {
            self.call_tokens as f64 / self.call_s
        } else {
            0.0
        }
    }
    /// Tokens per second outside it.
    pub fn free_tok_s(&self) -> f64 {
        if self.free_s > 0.0 {
            self.free_tokens as f64 / self.free_s
        } else {
            0.0
        }
    }
}

/// Prefills `context` synthetic tokens followed by `<|tool_call>`, then times `tokens` greedy
/// decode steps under the constraint of the agent's built-in tools: every step is inside the
/// call until the model closes it, unconstrained after. The matcher's vocabulary and grammar
/// are built before (they are kept per model).
pub async fn decode_in_call(
    model: &GemmaModel,
    context: usize,
    tokens: usize,
    run_ahead: Option<bool>,
) -> Result<CallDecodeRun> {
    if tokens == 0 {
        return Err(LlmError::Options("decode needs at least one token".into()));
    }
    check_fits(model, context + tokens + 2)?;
    let tools: Vec<serde_json::Value> = gg_agent::builtin_tools()
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| LlmError::Options(format!("tool declarations: {e}")))?;
    let constraint = model.call_constraint(&tools).ok_or_else(|| {
        LlmError::Constraint("the built-in tools did not compile into a grammar".into())
    })?;
    let mut prompt = prompt_ids(context, vocab_of(model));
    prompt.push(model.tokenizer.special().tool_call_start.id);
    let mut g = Generator::new(model, &prompt, Sampling::Greedy)?.constrained(Some(constraint));
    if let Some(on) = run_ahead {
        g = g.run_ahead(on);
    }
    for _ in 0..tokens {
        g.next_token().await?;
    }
    g.last_token().await?;
    let s = g.stats();
    Ok(CallDecodeRun {
        context: prompt.len(),
        call_tokens: s.call_tokens,
        call_s: s.call_s,
        free_tokens: s.decode_tokens - s.call_tokens,
        free_s: s.decode_s - s.call_s,
        mask_ms_per_token: if s.call_tokens > 0 {
            s.mask_s * 1000.0 / s.call_tokens as f64
        } else {
            0.0
        },
        bytes_uploaded_per_token: s.decode_bytes_uploaded as f64 / s.decode_tokens.max(1) as f64,
    })
}

/// Dispatches of one decode step after `context` prompt tokens, per kind of node (the decoder's
/// and the embedding's, prefixed `decoder:` / `embed:`), plus `other` (sampling, copies outside
/// the sessions), and their total. Natively each kind also has its wall time (see
/// [`gg_runtime::OpProfile::micros`]).
pub async fn decode_profile(
    model: &GemmaModel,
    context: usize,
) -> Result<(Vec<(String, gg_runtime::OpProfile)>, u64)> {
    // Without run-ahead, so that the profiled call records the step it measures.
    let mut g = greedy_on_prompt(model, context.max(1), context + 2)?;
    g.last_token().await?;
    profiled(model, g.last_token()).await
}

/// The same for the prompt's step: `tokens` prompt tokens up to the first token.
pub async fn prefill_profile(
    model: &GemmaModel,
    tokens: usize,
) -> Result<(Vec<(String, gg_runtime::OpProfile)>, u64)> {
    let mut g = greedy_on_prompt(model, tokens.max(1), tokens + 1)?;
    profiled(model, g.last_token()).await
}

async fn profiled<T>(
    model: &GemmaModel,
    step: impl std::future::Future<Output = Result<T>>,
) -> Result<(Vec<(String, gg_runtime::OpProfile)>, u64)> {
    let sessions: Vec<(&str, &gg_runtime::Session)> = std::iter::once(("decoder", &model.decoder))
        .chain(model.embed.iter().map(|e| ("embed", e)))
        .collect();
    for (_, s) in &sessions {
        s.set_profiling(true);
    }
    let before = model.gpu.counters.snapshot().dispatches;
    let r = step.await;
    let total = model.gpu.counters.snapshot().dispatches - before;
    let mut out: Vec<(String, gg_runtime::OpProfile)> = Vec::new();
    for (tag, s) in sessions {
        out.extend(
            s.profile()
                .into_iter()
                .map(|(k, v)| (format!("{tag}:{k}"), v)),
        );
        s.set_profiling(false);
    }
    r?;
    let counted: u64 = out.iter().map(|(_, p)| p.dispatches).sum();
    out.push((
        "other".into(),
        gg_runtime::OpProfile {
            runs: 1,
            dispatches: total.saturating_sub(counted),
            micros: 0,
        },
    ));
    Ok((out, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_ids_start_with_bos_and_stay_in_the_vocabulary() {
        let ids = prompt_ids(600, 1024);
        assert_eq!(ids.len(), 600);
        assert_eq!(ids[0], 2);
        assert!(ids[1..].iter().all(|&i| (3..1024).contains(&i)));
        assert_eq!(ids[1], 3 + 7919 % 1021);
        assert!(prompt_ids(0, 1024).is_empty());
    }

    #[test]
    fn rates() {
        let p = PrefillRun {
            tokens: 128,
            ttft_s: 0.5,
        };
        assert_eq!(p.tok_s(), 256.0);
        let d = DecodeRun {
            context: 128,
            tokens: 10,
            decode_s: 0.0,
            dispatches_per_token: 0.0,
            submits_per_token: 0.0,
            bytes_read_back_per_token: 0.0,
            buffers_created_per_token: 0.0,
            bytes_uploaded_per_token: 0.0,
            bind_groups_created_per_token: 0.0,
            record_ms_per_token: 0.0,
        };
        assert_eq!(d.tok_s(), 0.0);
    }
}

/// One vision encoder measurement: an image of `soft_tokens` soft tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VisionRun {
    /// Soft tokens the image gives (the features' rows).
    pub soft_tokens: usize,
    /// Patch slots fed (`soft_tokens · pool²`: every slot a real patch).
    pub slots: usize,
    /// Seconds from the host patches to the features downloaded (so the GPU has finished; the
    /// download is `soft_tokens · hidden` floats, a small part).
    pub encode_s: f64,
    /// GPU dispatches of the encode.
    pub dispatches: u64,
    /// Queue submits of the encode and the download.
    pub submits: u64,
}

/// A synthetic image of `soft_tokens` soft tokens for an encoder with `pool`×`pool` pooling:
/// the pooled grid as square as `soft_tokens` allows (280 -> 20 × 14 cells, 60 × 42 patches),
/// patches row by row with positions (x, y), values in [0, 1) from a fixed formula. Returns the
/// pixel values, the positions and the slot count.
pub fn synthetic_image(
    soft_tokens: usize,
    patch_values: usize,
    pool: usize,
) -> (Vec<f32>, Vec<i64>, usize) {
    let rows_cells = (1..=soft_tokens)
        .filter(|r| soft_tokens.is_multiple_of(*r) && r * r <= soft_tokens)
        .max()
        .unwrap_or(1);
    let (cols, rows) = (soft_tokens / rows_cells * pool, rows_cells * pool);
    let slots = cols * rows;
    let pixels = (0..slots * patch_values)
        .map(|i| (i.wrapping_mul(2_654_435_761) % 1000) as f32 / 1000.0)
        .collect();
    let positions = (0..slots)
        .flat_map(|k| [(k % cols) as i64, (k / cols) as i64])
        .collect();
    (pixels, positions, slots)
}

/// Encodes a [`synthetic_image`] of `soft_tokens` and times it to the features on the host.
pub async fn vision_encode(
    encoder: &crate::vision::VisionEncoder,
    soft_tokens: usize,
    pool: usize,
) -> Result<VisionRun> {
    let (pixels, positions, slots) =
        synthetic_image(soft_tokens, encoder.layout().patch_values, pool);
    let gpu = &encoder.session().gpu;
    let before = gpu.counters.snapshot();
    let t0 = now_s();
    let features = encoder.encode(&pixels, &positions, slots).await?;
    let host = encoder.read(&features).await?;
    let encode_s = now_s() - t0;
    let after = gpu.counters.snapshot();
    if host.shape.first() != Some(&soft_tokens) {
        return Err(LlmError::Model(format!(
            "the vision encoder gave {:?} features for an image of {soft_tokens} soft tokens (pooling {pool}×{pool})",
            host.shape
        )));
    }
    Ok(VisionRun {
        soft_tokens,
        slots,
        encode_s,
        dispatches: after.dispatches - before.dispatches,
        submits: after.submits - before.submits,
    })
}
