//! Gemma 4's vision encoder: one image's patches and positions in, its soft-token features out,
//! kept on the GPU for the embedding step.
//!
//! The encoder is a separate graph (`model.vision.filename` of a GenAI package, as mobius-onnx
//! writes it; `onnx/vision_encoder{suffix}.onnx` in the onnx-community layout) loaded on the first
//! image only ([`VisionEncoder::load`]), so text-only use pays nothing. Its inputs are read from
//! the graph ([`VisionLayout`]): the patches `pixel_values` `[batch, slots, patch values]` (f32 or
//! f16; values in [0, 1], the graph rescales them) and `pixel_position_ids` int64
//! `[batch, slots, 2]` as (x, y), padding slots (-1, -1) — no mask input, the graph reads padding
//! from the positions. The output `image_features` is `[soft tokens, hidden]`, its row count
//! computed by the graph at run time (the 3×3 pooling of the real patches). One image per call,
//! as mobius exports it.
//!
//! The whole encoder is one recording and one submit ([`VisionEncoder::encode`]), or part of the
//! caller's ([`VisionEncoder::encode_in`]: e.g. recorded with the embedding step that consumes the
//! features). Its position arithmetic (the padding mask, the pooling cells, the soft-token count)
//! is int64 and runs on the host; nothing is read back from the GPU.

use crate::config::{Dtype, ModelConfig};
use crate::error::{LlmError, Result};
use crate::model::{LoadStage, load_session, names};
use crate::source::ModelRepo;
use gg_runtime::exec::Ctx;
use gg_runtime::model::{Dim, Graph, ValueInfo};
use gg_runtime::{DType, Gpu, GpuTensor, HostTensor, Session, Value};
use std::rc::Rc;

/// The vision encoder's inputs and output, read from its graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisionLayout {
    /// The patches input (`pixel_values`): float, `[batch, slots, patch_values]`.
    pub pixel_values: String,
    /// Its element type (f32 or f16; [`VisionEncoder::encode`] converts).
    pub pixel_dtype: DType,
    /// Values per patch (`patch_size² · 3`: 768 for Gemma 4's 16×16 patches).
    pub patch_values: usize,
    /// The positions input (`pixel_position_ids`): int64 `[batch, slots, 2]`.
    pub positions: String,
    /// The features output (`image_features`).
    pub features: String,
    /// Feature width (the text model's hidden size), when the graph declares it.
    pub hidden: Option<usize>,
}

fn fixed(d: &Dim) -> Option<usize> {
    match d {
        Dim::Fixed(v) => usize::try_from(*v).ok(),
        _ => None,
    }
}

fn last_dim(i: &ValueInfo) -> Option<usize> {
    i.dims.as_deref().and_then(|d| d.last()).and_then(fixed)
}

fn rank(i: &ValueInfo) -> Option<usize> {
    i.dims.as_ref().map(Vec::len)
}

impl VisionLayout {
    /// Reads the layout: exactly two inputs, a float one `[batch, slots, P]` (P fixed) and an
    /// int64 one `[batch, slots, 2]`, and an output named `image_features` (or the only one), of
    /// rank 2 (`[tokens, hidden]`) or 3 (`[1, tokens, hidden]`). Anything else is an error naming
    /// what the graph has.
    pub fn from_graph(g: &Graph) -> Result<Self> {
        let bad = |m: String| LlmError::Model(format!("vision encoder: {m}"));
        if g.inputs.len() != 2 {
            return Err(bad(format!(
                "expected two inputs (pixel values and positions), found {}: {}",
                g.inputs.len(),
                names(&g.inputs)
            )));
        }
        let mut pixels = None;
        let mut positions = None;
        for i in &g.inputs {
            let dtype = i.dtype()?;
            match dtype {
                DType::F32 | DType::F16 if rank(i) == Some(3) && last_dim(i).is_some() => {
                    pixels = Some(i)
                }
                DType::I64 if rank(i) == Some(3) && last_dim(i) == Some(2) => positions = Some(i),
                _ => {
                    return Err(bad(format!(
                        "input {} ({} {}) is neither the patches (float [batch, slots, values]) nor the positions (int64 [batch, slots, 2])",
                        i.name,
                        dtype.name(),
                        i.dims
                            .as_ref()
                            .map_or("without a shape".to_string(), |d| format!("{d:?}"))
                    )));
                }
            }
        }
        let (Some(pixels), Some(positions)) = (pixels, positions) else {
            return Err(bad(format!(
                "needs a float patches input and an int64 positions input; inputs: {}",
                names(&g.inputs)
            )));
        };
        let out = g
            .outputs
            .iter()
            .find(|o| o.name == "image_features")
            .or(match g.outputs.as_slice() {
                [only] => Some(only),
                _ => None,
            })
            .ok_or_else(|| {
                bad(format!(
                    "no output image_features; outputs: {}",
                    names(&g.outputs)
                ))
            })?;
        if !matches!(rank(out), None | Some(2) | Some(3)) {
            return Err(bad(format!(
                "output {} must be [tokens, hidden] or [1, tokens, hidden]",
                out.name
            )));
        }
        Ok(Self {
            pixel_values: pixels.name.clone(),
            pixel_dtype: pixels.dtype()?,
            patch_values: last_dim(pixels).unwrap_or(0),
            positions: positions.name.clone(),
            features: out.name.clone(),
            hidden: last_dim(out),
        })
    }
}

/// A loaded vision encoder session.
pub struct VisionEncoder {
    session: Session,
    layout: VisionLayout,
}

impl std::fmt::Debug for VisionEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionEncoder")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl VisionEncoder {
    /// Loads the vision encoder of the model in `repo` (the configuration the text model was
    /// loaded with: [`crate::GemmaModel::config`]; `dtype` picks the onnx-community variant,
    /// [`crate::GemmaModel::dtype`], and is ignored by a GenAI package).
    pub async fn load(
        gpu: Rc<Gpu>,
        repo: &ModelRepo,
        config: &ModelConfig,
        dtype: Dtype,
    ) -> Result<Self> {
        Self::load_with_progress(gpu, repo, config, dtype, &mut |_| {}).await
    }

    /// [`VisionEncoder::load`], reporting [`LoadStage::Session`] (the graph's path) and
    /// [`LoadStage::Ready`].
    pub async fn load_with_progress(
        gpu: Rc<Gpu>,
        repo: &ModelRepo,
        config: &ModelConfig,
        dtype: Dtype,
        progress: &mut dyn FnMut(LoadStage),
    ) -> Result<Self> {
        let path = config.vision_file(dtype).ok_or_else(|| {
            LlmError::Model(
                "the model has no vision encoder (genai_config.json names no model.vision.filename)"
                    .into(),
            )
        })?;
        progress(LoadStage::Session(path.clone()));
        let session = load_session(&gpu, repo, config, &path, false).await?;
        let encoder = Self::from_session(session)?;
        progress(LoadStage::Ready);
        Ok(encoder)
    }

    /// Wraps a loaded session, reading its layout from the graph.
    pub fn from_session(session: Session) -> Result<Self> {
        let layout = VisionLayout::from_graph(&session.graph)?;
        Ok(Self { session, layout })
    }

    /// The inputs and output.
    pub fn layout(&self) -> &VisionLayout {
        &self.layout
    }

    /// The session (profiling, fused groups, the graph).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Encodes one image: `pixel_values` holds `num_slots` patches of
    /// [`VisionLayout::patch_values`] values each, `positions` their `num_slots` (x, y) pairs
    /// (padding slots (-1, -1)). Returns the features `[soft tokens, hidden]` on the GPU (in the
    /// graph's output type), submitted; [`VisionEncoder::read`] downloads them.
    pub async fn encode(
        &self,
        pixel_values: &[f32],
        positions: &[i64],
        num_slots: usize,
    ) -> Result<GpuTensor> {
        let mut cx = self.session.context();
        let features = self
            .encode_in(&mut cx, pixel_values, positions, num_slots)
            .await?;
        cx.flush();
        self.session.gpu.take_error()?;
        Ok(features)
    }

    /// [`VisionEncoder::encode`] recorded into `cx` (a context of any session on the same GPU)
    /// and not submitted: the caller's next flush submits it with whatever else it recorded.
    pub async fn encode_in(
        &self,
        cx: &mut Ctx<'_>,
        pixel_values: &[f32],
        positions: &[i64],
        num_slots: usize,
    ) -> Result<GpuTensor> {
        let l = &self.layout;
        if num_slots == 0 {
            return Err(LlmError::Options(
                "an image needs at least one patch".into(),
            ));
        }
        if pixel_values.len() != num_slots * l.patch_values {
            return Err(LlmError::Options(format!(
                "{} pixel values for {num_slots} patch slots of {} values (expected {})",
                pixel_values.len(),
                l.patch_values,
                num_slots * l.patch_values
            )));
        }
        if positions.len() != num_slots * 2 {
            return Err(LlmError::Options(format!(
                "{} position values for {num_slots} patch slots (expected {}: x and y each)",
                positions.len(),
                num_slots * 2
            )));
        }
        if let Some((k, p)) = positions
            .chunks_exact(2)
            .enumerate()
            .find(|(_, p)| !(p[0] >= 0 && p[1] >= 0 || p[0] == -1 && p[1] == -1))
        {
            return Err(LlmError::Options(format!(
                "patch slot {k} has position ({}, {}): positions are (x, y) >= 0, or (-1, -1) for padding",
                p[0], p[1]
            )));
        }
        let pixel_shape = vec![1, num_slots, l.patch_values];
        let pixels = match l.pixel_dtype {
            DType::F16 => HostTensor::new(
                DType::F16,
                pixel_shape,
                gg_runtime::exec::f16_bytes(pixel_values),
            )?,
            _ => HostTensor::from_f32(pixel_shape, pixel_values),
        };
        let pos = HostTensor::from_i64(vec![1, num_slots, 2], positions);
        let outs = self
            .session
            .run_in(
                cx,
                vec![
                    (l.pixel_values.clone(), Value::Host(pixels)),
                    (l.positions.clone(), Value::Host(pos)),
                ],
            )
            .await?;
        let value = outs
            .into_iter()
            .find(|(n, _)| *n == l.features)
            .map(|(_, v)| v)
            .ok_or_else(|| LlmError::Model(format!("vision encoder: no output {}", l.features)))?;
        let t = match value {
            Value::Gpu(t) => t,
            Value::Host(h) => cx.upload(&h)?,
        };
        let shape = match t.shape.as_slice() {
            [n, h] => vec![*n, *h],
            [1, n, h] => vec![*n, *h],
            other => {
                return Err(LlmError::Model(format!(
                    "vision encoder: {} has shape {other:?}, not [tokens, hidden]",
                    l.features
                )));
            }
        };
        if let Some(h) = l.hidden
            && shape[1] != h
        {
            return Err(LlmError::Model(format!(
                "vision encoder: {} is {} wide, the graph declares {h}",
                l.features, shape[1]
            )));
        }
        Ok(if shape == t.shape {
            t
        } else {
            t.reshaped(shape)
        })
    }

    /// Downloads features (tests, debugging).
    pub async fn read(&self, features: &GpuTensor) -> Result<HostTensor> {
        Ok(self.session.read(&Value::Gpu(features.clone())).await?)
    }
}

/// The vision encoder as a generation uses it ([`crate::GemmaBackend::with_image_encoder`]):
/// one preprocessed image in, its features on the GPU out.
impl crate::images::ImageEncoder for VisionEncoder {
    fn encode<'a>(
        &'a self,
        image: &'a crate::image::PreparedImage,
    ) -> futures::future::LocalBoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            if image.patch_dim != self.layout.patch_values {
                return Err(LlmError::Model(format!(
                    "the image processor config makes patches of {} values but the vision encoder takes {} (patch size and encoder disagree)",
                    image.patch_dim, self.layout.patch_values
                )));
            }
            let features = VisionEncoder::encode(
                self,
                &image.pixel_values,
                &image.positions,
                image.max_patches,
            )
            .await?;
            Ok(Value::Gpu(features))
        })
    }
}
