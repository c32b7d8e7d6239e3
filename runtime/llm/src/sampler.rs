//! Token selection on the GPU: greedy (argmax), or temperature + top-k + top-p with a seeded
//! random draw. One dispatch over the logits; the only read-back is the 4-byte token id.
//!
//! An optional mask (constrained decoding: [`Mask`], one bit per token id) restricts the pick to
//! the tokens whose bit is set, for every mode alike: a masked token's logit counts as minus
//! infinity (never the argmax, no weight, not counted by top-k). Without a mask the kernel
//! variant without the binding runs: no upload, no extra work.

use crate::error::{LlmError, Result};
use gg_runtime::exec::{Ctx, GpuTensor};
use gg_runtime::gpu::{Features, Kernel, KernelSpec, Storage};
use gg_runtime::{DType, HostTensor, Session};

/// Workgroup size of the sampling kernel (WebGPU guarantees 256 invocations per workgroup).
const WG: u32 = 256;

/// How to pick each token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token (lowest id among equal maxima).
    Greedy,
    /// A random draw.
    Sample {
        /// Temperature (> 0).
        temperature: f32,
        /// Keep the `top_k` most likely tokens (0: no limit).
        top_k: u32,
        /// Keep the smallest set with at least this probability (>= 1: no limit).
        top_p: f32,
        /// Seed: the same seed, prompt and options give the same tokens.
        seed: u64,
    },
}

impl Sampling {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<()> {
        if let Sampling::Sample {
            temperature, top_p, ..
        } = *self
        {
            if !temperature.is_finite() || temperature <= 0.0 {
                return Err(LlmError::Options(format!(
                    "temperature must be > 0 (got {temperature}); use greedy for 0"
                )));
            }
            if top_p.is_nan() || top_p <= 0.0 {
                return Err(LlmError::Options(format!(
                    "top_p must be > 0 (got {top_p})"
                )));
            }
        }
        Ok(())
    }
}

/// SplitMix64: the per-step random word from the seed and the step index.
pub fn random_word(seed: u64, step: u64) -> u32 {
    let mut z = seed
        .wrapping_add(step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 32) as u32
}

/// The tokens the sampler may pick: bit `i % 32` of word `i / 32` is token `i` (32 KiB for a
/// 262,144-token vocabulary; `gg_gemma::constrain::Bitset::words`).
#[derive(Debug, Clone, Copy)]
pub struct Mask<'a> {
    /// The words; at least `vocabulary / 32` rounded up.
    pub words: &'a [u32],
}

/// The id the kernel writes when the mask allows no token of the row (never a token id:
/// vocabularies are far smaller).
const NO_TOKEN: i64 = -1;

/// Records the sampling kernel over the last row of `logits` (`[.., V]`, f32 or f16) into `cx`;
/// returns the tensor that receives the token id: int64 `[1, 1]` (held as one i32 word, like
/// every int64 tensor on the GPU), so that it can be the next step's `input_ids` as it is.
pub fn record(
    cx: &mut Ctx<'_>,
    logits: &GpuTensor,
    sampling: &Sampling,
    step: u64,
) -> Result<GpuTensor> {
    record_masked(cx, logits, sampling, step, None)
}

/// [`record`] restricted to the tokens of `mask` (uploaded into a pooled buffer: 4 bytes per 32
/// tokens). A mask that allows no token is an error here; the kernel would write
/// [`id_of`]'s "no token" (an error too) rather than a token.
pub fn record_masked(
    cx: &mut Ctx<'_>,
    logits: &GpuTensor,
    sampling: &Sampling,
    step: u64,
    mask: Option<Mask<'_>>,
) -> Result<GpuTensor> {
    let v = *logits
        .shape
        .last()
        .ok_or_else(|| LlmError::Model("logits have no vocabulary dimension".into()))?;
    // A decoder without num_logits_to_keep gives a row per new token: the kernel reads the last.
    let rows = logits.numel() / v.max(1);
    if rows == 0 || rows * v != logits.numel() {
        return Err(LlmError::Model(format!(
            "expected rows of logits, got shape {:?}",
            logits.shape
        )));
    }
    let row = u32::try_from((rows - 1) * v)
        .map_err(|_| LlmError::Model(format!("logits of shape {:?}", logits.shape)))?;
    let storage = match logits.dtype {
        DType::F32 => Storage::F32,
        DType::F16 => Storage::F16,
        other => {
            return Err(LlmError::Model(format!(
                "logits are {}, expected float32 or float16",
                other.name()
            )));
        }
    };
    let mask = match mask {
        None => None,
        Some(m) => {
            if m.words.len() < v.div_ceil(32) {
                return Err(LlmError::Model(format!(
                    "the token mask has {} words, the vocabulary of {v} tokens needs {}",
                    m.words.len(),
                    v.div_ceil(32)
                )));
            }
            let words = &m.words[..v.div_ceil(32)];
            if words.iter().all(|&w| w == 0) {
                return Err(LlmError::Constraint(
                    "the tool-call grammar allows no token here".into(),
                ));
            }
            let host = HostTensor::new(
                DType::I32,
                vec![words.len()],
                bytemuck::cast_slice(words).to_vec(),
            )?;
            Some(cx.upload(&host)?)
        }
    };
    let kernel = cx.gpu.kernel(&SampleSpec {
        logits: storage,
        masked: mask.is_some(),
    })?;
    let out = cx.alloc(DType::I64, vec![1, 1])?;
    let n = u32::try_from(v).map_err(|_| LlmError::Model(format!("vocabulary of {v}")))?;
    let p = match *sampling {
        Sampling::Greedy => SampleParams {
            n,
            row,
            ..SampleParams::default()
        },
        Sampling::Sample {
            temperature,
            top_k,
            top_p,
            seed,
        } => SampleParams {
            n,
            sample: 1,
            inv_temperature: 1.0 / temperature,
            top_k,
            top_p,
            random: random_word(seed, step),
            row,
        },
    };
    let bound = kernel.bind("logits", logits).bind("out", &out);
    cx.launch_groups(bound.bind_opt("mask", mask.as_ref()), &p, (1, 1))?;
    Ok(out)
}

const SAMPLE: &str = include_str!("kernels/sample.wgsl");

gg_runtime::gpu_params! {
    /// The sampling kernel's parameters (`kernels/sample.wgsl`).
    struct SampleParams {
        /// Vocabulary size.
        n: u32,
        /// 0: greedy (argmax), 1: sample.
        sample: u32,
        inv_temperature: f32,
        /// 0: off.
        top_k: u32,
        /// >= 1: off.
        top_p: f32,
        /// A uniform random word (from the seed and the step).
        random: u32,
        /// First element of the row sampled (the last row of `[rows, n]` logits).
        row: u32,
    }
}

/// The sampling kernel: the logits' storage, and whether a token mask is bound.
#[derive(Hash)]
struct SampleSpec {
    logits: Storage,
    masked: bool,
}

/// `allowed(i)`'s body with a mask bound (bit `i % 32` of word `i / 32`), and without.
const MASK_TEST: &str = "return (ldw_mask(i >> 5u) & (1u << (i & 31u))) != 0u;";
const NO_MASK: &str = "return true;";

impl KernelSpec for SampleSpec {
    const NAME: &'static str = "sample";
    const WGSL: &'static [&'static str] = &[SAMPLE];
    fn build(&self, _: &Features) -> Kernel {
        let k = Kernel::new("sample", SAMPLE)
            .params::<SampleParams>()
            .input("logits", self.logits);
        let k = if self.masked {
            k.input("mask", Storage::I32).code("ALLOWED", MASK_TEST)
        } else {
            k.code("ALLOWED", NO_MASK)
        };
        k.output("out", Storage::I32).workgroup(WG)
    }
}

/// Samples one token from `logits` with `session`'s context and reads back only its id.
pub async fn sample(
    session: &Session,
    logits: &GpuTensor,
    sampling: &Sampling,
    step: u64,
) -> Result<u32> {
    let mut cx = session.context();
    let out = record(&mut cx, logits, sampling, step)?;
    read_id(&mut cx, &out).await
}

/// Submits what `cx` recorded and reads back the token id [`record`] left in `out` (4 bytes).
pub async fn read_id(cx: &mut Ctx<'_>, out: &GpuTensor) -> Result<u32> {
    id_of(&cx.download(out).await?)
}

/// The token id in the read-back of [`record`]'s output.
pub fn id_of(host: &HostTensor) -> Result<u32> {
    let id = host
        .to_i64()
        .first()
        .copied()
        .ok_or_else(|| LlmError::Model("sampler returned nothing".into()))?;
    if id == NO_TOKEN {
        return Err(LlmError::Constraint(
            "the sampler found no allowed token (the mask allows none of the row's tokens)".into(),
        ));
    }
    u32::try_from(id).map_err(|_| LlmError::Model(format!("sampler returned id {id}")))
}
