//! Image features into the prompt: where the embedding graph cannot take them (onnx-community's
//! `embed_tokens` has only `input_ids`), the features replace the `inputs_embeds` rows of the
//! image tokens on the GPU, in order, one dispatch (`kernels/merge_rows.wgsl`); the ids fed to
//! the embedding carry the pad id at those positions, so the per-layer inputs are the pad's, as in
//! transformers' `Gemma4Model.forward`. A mobius split package's embedding graph has an
//! `image_features` input and does both itself.

use crate::error::{LlmError, Result};
use gg_runtime::exec::{Ctx, GpuTensor};
use gg_runtime::gpu::{Features, Kernel, KernelSpec, Storage};
use gg_runtime::{DType, HostTensor, Value};

/// Rows of the image tokens in `ids` and, per position, the feature row it takes (`-1`: none).
/// `features` must have exactly one row per image token.
pub fn feature_rows(ids: &[u32], image_token: u32, features: usize) -> Result<Vec<i64>> {
    let mut next = 0i64;
    let rows: Vec<i64> = ids
        .iter()
        .map(|&id| {
            if id == image_token {
                next += 1;
                next - 1
            } else {
                -1
            }
        })
        .collect();
    if next as usize != features {
        return Err(LlmError::Options(format!(
            "the prompt has {next} image tokens but the image features have {features} rows; each image's soft-token count must equal its encoder output's rows"
        )));
    }
    Ok(rows)
}

/// The ids fed to an embedding graph without a feature input: image tokens become `pad`.
pub fn pad_image_tokens(ids: &[u32], image_token: u32, pad: u32) -> Vec<u32> {
    ids.iter()
        .map(|&i| if i == image_token { pad } else { i })
        .collect()
}

/// The images' features as one `[rows, hidden]` value: one image's as it is, host ones
/// concatenated on the host, otherwise on the GPU.
pub fn concat_rows(cx: &mut Ctx<'_>, mut features: Vec<Value>) -> Result<Value> {
    if features.len() == 1 {
        return Ok(features.remove(0));
    }
    let first = features
        .first()
        .ok_or_else(|| LlmError::Options("no image features".into()))?;
    let (dtype, hidden) = (first.dtype(), first.shape().get(1).copied().unwrap_or(0));
    if let Some(f) = features
        .iter()
        .find(|f| f.dtype() != dtype || f.shape().len() != 2 || f.shape()[1] != hidden)
    {
        return Err(LlmError::Options(format!(
            "image features {} {:?} do not stack with {} [_, {hidden}]",
            f.dtype().name(),
            f.shape(),
            dtype.name()
        )));
    }
    let rows: usize = features.iter().map(|f| f.shape()[0]).sum();
    if features.iter().all(|f| matches!(f, Value::Host(_))) {
        let mut data = Vec::new();
        for f in &features {
            if let Value::Host(h) = f {
                data.extend_from_slice(&h.data);
            }
        }
        return Ok(Value::Host(HostTensor::new(
            dtype,
            vec![rows, hidden],
            data,
        )?));
    }
    let gpu: Vec<GpuTensor> = features
        .iter()
        .map(|f| cx.to_gpu(f))
        .collect::<gg_runtime::Result<_>>()?;
    Ok(Value::Gpu(gg_runtime::ops::movement::concat_gpu(
        cx, &gpu, 0,
    )?))
}

/// Records the merge: a new `[.., S, hidden]` tensor (the dtype of `embeds`) whose rows `s` with
/// `rows[s] >= 0` are `features[rows[s]]` and the others `embeds[s]`.
pub fn record(
    cx: &mut Ctx<'_>,
    embeds: &GpuTensor,
    features: &Value,
    rows: &[i64],
) -> Result<GpuTensor> {
    let hidden = *embeds
        .shape
        .last()
        .ok_or_else(|| LlmError::Model("inputs_embeds has no hidden dimension".into()))?;
    if embeds.numel() != rows.len() * hidden {
        return Err(LlmError::Model(format!(
            "inputs_embeds {:?} does not have {} rows",
            embeds.shape,
            rows.len()
        )));
    }
    let fshape = features.shape();
    if fshape.len() != 2 || fshape[1] != hidden {
        return Err(LlmError::Options(format!(
            "image features of shape {fshape:?}; expected [rows, {hidden}] (the model's hidden size)"
        )));
    }
    let storage = |d: DType, what: &str| match d {
        DType::F32 => Ok(Storage::F32),
        DType::F16 => Ok(Storage::F16),
        other => Err(LlmError::Model(format!(
            "{what} are {}, expected float32 or float16",
            other.name()
        ))),
    };
    let spec = MergeSpec {
        embeds: storage(embeds.dtype, "inputs_embeds")?,
        features: storage(features.dtype(), "image features")?,
    };
    let features = cx.to_gpu(features)?;
    let rows = cx.upload(&HostTensor::from_i64(vec![rows.len()], rows))?;
    let kernel = cx.gpu.kernel(&spec)?;
    let out = cx.alloc(embeds.dtype, embeds.shape.clone())?;
    let n = out.numel();
    let p = MergeParams {
        n: u32::try_from(n).map_err(|_| LlmError::Model(format!("{n} embedding values")))?,
        hidden: hidden as u32,
    };
    cx.launch_mapped(
        kernel
            .bind("embeds", embeds)
            .bind("features", &features)
            .bind("rows", &rows)
            .bind("y", &out),
        &p,
        n,
        &out,
    )?;
    Ok(out)
}

const MERGE: &str = include_str!("kernels/merge_rows.wgsl");

gg_runtime::gpu_params! {
    /// The merge kernel's parameters (`kernels/merge_rows.wgsl`).
    struct MergeParams {
        /// Elements of the output.
        n: u32,
        /// Values per row.
        hidden: u32,
    }
}

/// The merge kernel: the storages of the embeddings (and output) and of the features.
#[derive(Hash)]
struct MergeSpec {
    embeds: Storage,
    features: Storage,
}

impl KernelSpec for MergeSpec {
    const NAME: &'static str = "merge_rows";
    const WGSL: &'static [&'static str] = &[MERGE];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("merge_rows", MERGE)
            .params::<MergeParams>()
            .input("embeds", self.embeds)
            .input("features", self.features)
            .input("rows", Storage::I32)
            .output("y", self.embeds)
            .mapped("y")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_the_image_tokens() {
        assert_eq!(
            feature_rows(&[2, 9, 9, 5, 9], 9, 3).expect("rows"),
            [-1, 0, 1, -1, 2]
        );
        let e = feature_rows(&[2, 9, 9], 9, 3).unwrap_err().to_string();
        assert!(e.contains("2 image tokens") && e.contains("3 rows"), "{e}");
        assert_eq!(pad_image_tokens(&[2, 9, 5], 9, 0), [2, 0, 5]);
    }
}
