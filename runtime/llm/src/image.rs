//! Image preprocessing for Gemma 4's vision encoder, value for value what transformers'
//! `Gemma4ImageProcessor` (the torchvision backend, transformers 5's default) produces.
//!
//! 1. Decode PNG, JPEG or WebP bytes ([`decode_rgb`]); anything but RGB is converted the way
//!    transformers' `convert_to_rgb` does it: through RGBA, alpha-composited over white with
//!    Pillow's integer `alpha_composite` (an opaque image keeps its colours).
//! 2. Resize keeping the aspect ratio ([`target_size`]): each side becomes
//!    `floor(f·side / (patch·pool))·(patch·pool)` with `f = sqrt(max_patches·patch² / (H·W))` and
//!    `max_patches = max_soft_tokens·pool²`, so small images are scaled up. The resize is
//!    PyTorch's antialiased bicubic on `uint8` (`interpolate(..., mode="bicubic", antialias=True)`,
//!    which torchvision calls for `uint8` images on the CPU): separable, the width first, Keys'
//!    cubic with `a = -0.5` widened by the scale when shrinking, weights normalised per output
//!    pixel then rounded to `int16` with a per-axis precision, sums rounded and clamped to
//!    `uint8` after each pass ([`resize_bicubic_aa`]). An axis that keeps its size is not touched.
//! 3. Rescale: `f32(v) * f32(rescale_factor)` (1/255; no normalisation).
//! 4. Patches row by row, each flattened as (row in patch, column in patch, channel)
//!    ([`PreparedImage::pixel_values`]), with positions `(x, y)` in patches; zero padding to
//!    `max_patches` slots with positions `(-1, -1)`.
//!
//! The numbers come from the model's processor config ([`ImageConfig::parse`]): ONNX Runtime
//! GenAI's `image_processor.json` or transformers' `preprocessor_config.json` /
//! `processor_config.json`. Soft tokens per image: `(W/(patch·pool))·(H/(patch·pool))`.
//! Checked against transformers' processor by `tests/image_preprocess.rs` on the images in
//! `tests/fixtures/images/` (`tools/fixtures/gen_image_refs.py` writes the references).

use crate::error::{LlmError, Result};
use serde_json::Value;

/// The soft-token budgets transformers' Gemma 4 image processor accepts (`max_soft_tokens`).
pub const SUPPORTED_SOFT_TOKENS: [usize; 5] = [70, 140, 280, 560, 1120];

/// Largest image accepted, in pixels (width × height) before resizing: 64 megapixels (a
/// 8192×8192 screenshot is 64 Mpx; more is refused rather than decoded into gigabytes).
pub const MAX_INPUT_PIXELS: u64 = 64 * 1024 * 1024;

/// The preprocessing numbers of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageConfig {
    /// Side of a square patch in pixels (16 for Gemma 4).
    pub patch_size: usize,
    /// Side of the pooling window in patches (3): one soft token per `pool × pool` patches.
    pub pooling_kernel_size: usize,
    /// Soft tokens per image at most (one of [`SUPPORTED_SOFT_TOKENS`]).
    pub max_soft_tokens: usize,
    /// Factor applied to the 0..=255 values (1/255).
    pub rescale_factor: f32,
}

impl Default for ImageConfig {
    /// transformers' defaults for Gemma 4: patch 16, pooling 3, 280 soft tokens, 1/255.
    fn default() -> Self {
        Self {
            patch_size: 16,
            pooling_kernel_size: 3,
            max_soft_tokens: 280,
            rescale_factor: (1.0f64 / 255.0) as f32,
        }
    }
}

fn usize_of(v: &Value, key: &str) -> Result<Option<usize>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .map(Some)
            .ok_or_else(|| {
                LlmError::Model(format!(
                    "image processor config: {key} is {x}, expected a positive integer"
                ))
            }),
    }
}

impl ImageConfig {
    /// Reads the numbers from a processor config: ONNX Runtime GenAI's `image_processor.json`
    /// (`processor.transforms[].operation.attrs` of the `Gemma4ImageTransform`), or transformers'
    /// `preprocessor_config.json` / `processor_config.json` (the keys at the top level or under
    /// `image_processor`). Missing keys keep transformers' defaults ([`ImageConfig::default`]).
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| LlmError::Model(format!("image processor config: {e}")))?;
        let genai = v
            .pointer("/processor/transforms")
            .and_then(Value::as_array)
            .and_then(|ts| {
                ts.iter().find_map(|t| {
                    let op = t.get("operation")?;
                    let ty = op.get("type")?.as_str()?;
                    ty.contains("Gemma4Image")
                        .then(|| op.get("attrs").cloned())?
                })
            });
        let src = match genai {
            Some(attrs) => attrs,
            None => v.get("image_processor").cloned().unwrap_or(v),
        };
        let mut cfg = Self::default();
        if let Some(n) = usize_of(&src, "patch_size")? {
            cfg.patch_size = n;
        }
        if let Some(n) = usize_of(&src, "pooling_kernel_size")? {
            cfg.pooling_kernel_size = n;
        }
        if let Some(n) = usize_of(&src, "max_soft_tokens")? {
            cfg.max_soft_tokens = n;
        }
        if let Some(f) = src.get("rescale_factor").and_then(Value::as_f64) {
            cfg.rescale_factor = f as f32;
        }
        if src.get("do_normalize").and_then(Value::as_bool) == Some(true) {
            return Err(LlmError::Model(
                "image processor config: do_normalize is set; Gemma 4's processor does not normalise (the encoder maps [0, 1] to [-1, 1] itself)".into(),
            ));
        }
        cfg.check()?;
        Ok(cfg)
    }

    /// The same numbers with another soft-token budget (the caller's per-request choice).
    pub fn with_max_soft_tokens(mut self, max_soft_tokens: usize) -> Result<Self> {
        self.max_soft_tokens = max_soft_tokens;
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> Result<()> {
        if !SUPPORTED_SOFT_TOKENS.contains(&self.max_soft_tokens) {
            return Err(LlmError::Options(format!(
                "image soft tokens must be one of {SUPPORTED_SOFT_TOKENS:?} (Gemma 4's image processor), got {}",
                self.max_soft_tokens
            )));
        }
        if self.patch_size == 0 || self.pooling_kernel_size == 0 {
            return Err(LlmError::Model(
                "image processor config: patch_size and pooling_kernel_size must be positive"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Patch slots per image: `max_soft_tokens · pool²` (2520 at 280).
    pub fn max_patches(&self) -> usize {
        self.max_soft_tokens * self.pooling_kernel_size * self.pooling_kernel_size
    }

    /// Values per patch: `patch² · 3` (768 at patch 16).
    pub fn patch_dim(&self) -> usize {
        self.patch_size * self.patch_size * 3
    }

    /// Soft tokens of an image of `height × width` pixels (before resizing).
    pub fn soft_tokens(&self, height: usize, width: usize) -> Result<usize> {
        let (h, w) = target_size(height, width, self)?;
        let side = self.patch_size * self.pooling_kernel_size;
        Ok((h / side) * (w / side))
    }
}

/// An 8-bit RGB image, rows top to bottom, `[height, width, 3]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height · width · 3` bytes.
    pub data: Vec<u8>,
}

/// Decodes PNG, JPEG or WebP bytes to RGB. Images with alpha (or grey with alpha) are composited
/// over white, as transformers' `convert_to_rgb` does; grey images are replicated to RGB.
/// Errors name the problem: an unknown or corrupt file, a zero-sized or too large image.
pub fn decode_rgb(bytes: &[u8]) -> Result<RgbImage> {
    use image::{ImageFormat, ImageReader};
    let format = image::guess_format(bytes).map_err(|_| {
        LlmError::Options("the image is not a PNG, JPEG or WebP file (unknown format)".into())
    })?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP
    ) {
        return Err(LlmError::Options(format!(
            "the image is {format:?}; PNG, JPEG and WebP are supported"
        )));
    }
    let mut reader = ImageReader::with_format(std::io::Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_INPUT_PIXELS * 8);
    reader.limits(limits);
    let (width, height) = reader
        .into_dimensions()
        .map_err(|e| LlmError::Options(format!("the {format:?} image cannot be read: {e}")))?;
    check_size(width as usize, height as usize)?;
    let mut reader = ImageReader::with_format(std::io::Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(MAX_INPUT_PIXELS * 8);
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| LlmError::Options(format!("the {format:?} image cannot be decoded: {e}")))?;
    let (width, height) = (img.width() as usize, img.height() as usize);
    let data = if img.color().has_alpha() {
        let rgba = img.into_rgba8();
        composite_over_white(rgba.as_raw())
    } else {
        img.into_rgb8().into_raw()
    };
    Ok(RgbImage {
        width,
        height,
        data,
    })
}

fn check_size(width: usize, height: usize) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(LlmError::Options(format!(
            "the image is {width}×{height} pixels: empty"
        )));
    }
    if (width as u64) * (height as u64) > MAX_INPUT_PIXELS {
        return Err(LlmError::Options(format!(
            "the image is {width}×{height} pixels, more than {} megapixels; scale it down first",
            MAX_INPUT_PIXELS / (1024 * 1024)
        )));
    }
    Ok(())
}

/// Pillow's `Image.alpha_composite(white, rgba).convert("RGB")` on 8-bit RGBA pixels: the
/// integer blend of `AlphaComposite.c` (7 extra bits of precision, rounded divisions by 255).
fn composite_over_white(rgba: &[u8]) -> Vec<u8> {
    const PRECISION_BITS: u32 = 7;
    let div255 = |a: u32| ((a >> 8) + a) >> 8;
    let mut out = Vec::with_capacity(rgba.len() / 4 * 3);
    for px in rgba.chunks_exact(4) {
        let a = u32::from(px[3]);
        if a == 0 {
            out.extend_from_slice(&[255, 255, 255]);
            continue;
        }
        // The background is opaque white: dst.a = 255, dst.rgb = 255.
        let blend = 255 * (255 - a);
        let outa255 = a * 255 + blend;
        let coef1 = a * 255 * 255 * (1 << PRECISION_BITS) / outa255;
        let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
        for &c in &px[..3] {
            let t = u32::from(c) * coef1 + 255 * coef2;
            out.push((div255(t + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8);
        }
    }
    out
}

/// The size an image of `height × width` is resized to (`(height, width)`), as transformers'
/// `get_aspect_ratio_preserving_size`: both sides multiples of `patch · pool`, at most
/// `max_patches` patches; a side that would round to 0 becomes one `patch · pool` (the other
/// then follows the aspect ratio, capped).
pub fn target_size(height: usize, width: usize, cfg: &ImageConfig) -> Result<(usize, usize)> {
    check_size(width, height)?;
    let max_patches = cfg.max_patches();
    let target_px = (max_patches * cfg.patch_size * cfg.patch_size) as f64;
    let factor = (target_px / (height as f64 * width as f64)).sqrt();
    let side = cfg.patch_size * cfg.pooling_kernel_size;
    let ideal_h = factor * height as f64;
    let ideal_w = factor * width as f64;
    let mut th = (ideal_h / side as f64).floor() as usize * side;
    let mut tw = (ideal_w / side as f64).floor() as usize * side;
    let max_side = (max_patches / (cfg.pooling_kernel_size * cfg.pooling_kernel_size)) * side;
    if th == 0 && tw == 0 {
        return Err(LlmError::Options(format!(
            "the image ({width}×{height}) cannot be resized to a multiple of {side} pixels"
        )));
    }
    if th == 0 {
        th = side;
        tw = ((width as f64 / height as f64).floor() as usize * side).min(max_side);
    } else if tw == 0 {
        tw = side;
        th = ((height as f64 / width as f64).floor() as usize * side).min(max_side);
    }
    if (th * tw) as f64 > target_px {
        return Err(LlmError::Options(format!(
            "the image ({width}×{height}) resized to {tw}×{th} exceeds {max_patches} patches of {}",
            cfg.patch_size
        )));
    }
    Ok((th, tw))
}

/// Keys' cubic convolution with `a = -0.5` (PyTorch's antialiased bicubic filter, as Pillow's).
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// The taps of one axis: per output index the first input index and its `int16` weights, and
/// the precision (bits) of the weights.
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<i32>>,
    precision: u32,
}

/// PyTorch's `_compute_index_ranges_int16_weights` for the antialiased bicubic filter
/// (`align_corners=False`, no explicit scale).
fn taps(input: usize, output: usize) -> Taps {
    let scale = input as f64 / output as f64;
    let support = if scale >= 1.0 { 2.0 * scale } else { 2.0 };
    let max_taps = (support.ceil() as usize) * 2 + 1;
    let inv_scale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let mut first = Vec::with_capacity(output);
    let mut float_weights = Vec::with_capacity(output);
    let mut wt_max = 0.0f64;
    for i in 0..output {
        let center = scale * (i as f64 + 0.5);
        // C++ casts truncate toward zero
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(input as i64);
        let size = (xmax - xmin).clamp(0, max_taps as i64) as usize;
        let xmin = xmin as usize;
        let mut w: Vec<f64> = (0..size)
            .map(|j| cubic(((j + xmin) as f64 - center + 0.5) * inv_scale))
            .collect();
        let total: f64 = w.iter().fold(0.0, |acc, v| acc + v);
        if total != 0.0 {
            for v in &mut w {
                *v /= total;
                wt_max = wt_max.max(*v);
            }
        }
        first.push(xmin);
        float_weights.push(w);
    }
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wt_max * f64::from(1u32 << (precision + 1))) as i32;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let unit = f64::from(1u32 << precision);
    let weights = float_weights
        .into_iter()
        .map(|w| {
            w.into_iter()
                .map(|v| {
                    let v = v * unit;
                    // rounded half away from zero, then stored as int16
                    let r = if v < 0.0 {
                        (-0.5 + v) as i32
                    } else {
                        (0.5 + v) as i32
                    };
                    i32::from(r as i16)
                })
                .collect()
        })
        .collect();
    Taps {
        first,
        weights,
        precision,
    }
}

/// One pass over an axis of `[outer, len, inner]` bytes (`inner` = the stride of the axis).
fn resample_axis(src: &[u8], outer: usize, len: usize, inner: usize, new_len: usize) -> Vec<u8> {
    let t = taps(len, new_len);
    // the precision is at least 14 bits for any scale (weights are at most ~1.1)
    let round = 1i64 << t.precision.saturating_sub(1);
    let mut out = vec![0u8; outer * new_len * inner];
    for o in 0..outer {
        let base = o * len * inner;
        let obase = o * new_len * inner;
        for (i, (first, w)) in t.first.iter().zip(&t.weights).enumerate() {
            for k in 0..inner {
                let mut acc = round;
                for (j, wj) in w.iter().enumerate() {
                    acc += i64::from(src[base + (first + j) * inner + k]) * i64::from(*wj);
                }
                out[obase + i * inner + k] = (acc >> t.precision).clamp(0, 255) as u8;
            }
        }
    }
    out
}

/// PyTorch's antialiased bicubic resize of `uint8` RGB (`torch.nn.functional.interpolate(x,
/// size, mode="bicubic", antialias=True)` on the CPU, align_corners off): the width pass first,
/// then the height pass, each rounding to `uint8`; an axis of unchanged size is skipped.
pub fn resize_bicubic_aa(img: &RgbImage, height: usize, width: usize) -> RgbImage {
    let mut data = img.data.clone();
    if width != img.width {
        data = resample_axis(&data, img.height, img.width, 3, width);
    }
    if height != img.height {
        data = resample_axis(&data, 1, img.height, width * 3, height);
    }
    RgbImage {
        width,
        height,
        data,
    }
}

/// One image ready for the vision encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedImage {
    /// `[max_patches, patch² · 3]`: the patches row by row (each as row in patch, column in
    /// patch, channel), values in [0, 1], then zero rows.
    pub pixel_values: Vec<f32>,
    /// `[max_patches, 2]`: `(x, y)` of each patch in patches, `(-1, -1)` for padding.
    pub positions: Vec<i64>,
    /// Real patches (the rest is padding).
    pub num_patches: usize,
    /// Patch slots (`max_soft_tokens · pool²`).
    pub max_patches: usize,
    /// Values per patch.
    pub patch_dim: usize,
    /// Soft tokens the encoder makes of it: `num_patches / pool²`.
    pub soft_tokens: usize,
    /// Resized height in pixels.
    pub height: usize,
    /// Resized width in pixels.
    pub width: usize,
}

/// Decodes and preprocesses image bytes (PNG, JPEG, WebP) with `cfg`.
pub fn preprocess(bytes: &[u8], cfg: &ImageConfig) -> Result<PreparedImage> {
    preprocess_rgb(&decode_rgb(bytes)?, cfg)
}

/// Preprocesses a decoded RGB image with `cfg`.
pub fn preprocess_rgb(img: &RgbImage, cfg: &ImageConfig) -> Result<PreparedImage> {
    cfg.check()?;
    if img.data.len() != img.width * img.height * 3 {
        return Err(LlmError::Options(format!(
            "an RGB image of {}×{} needs {} bytes, got {}",
            img.width,
            img.height,
            img.width * img.height * 3,
            img.data.len()
        )));
    }
    let (h, w) = target_size(img.height, img.width, cfg)?;
    let resized;
    let img = if (h, w) == (img.height, img.width) {
        img
    } else {
        resized = resize_bicubic_aa(img, h, w);
        &resized
    };
    let p = cfg.patch_size;
    let (ph, pw) = (h / p, w / p);
    let num_patches = ph * pw;
    let max_patches = cfg.max_patches();
    let patch_dim = cfg.patch_dim();
    let mut pixel_values = vec![0f32; max_patches * patch_dim];
    let mut positions = vec![-1i64; max_patches * 2];
    let scale = cfg.rescale_factor;
    for py in 0..ph {
        for px in 0..pw {
            let n = py * pw + px;
            let dst = &mut pixel_values[n * patch_dim..(n + 1) * patch_dim];
            for r in 0..p {
                let row = (py * p + r) * w + px * p;
                let src = &img.data[row * 3..(row + p) * 3];
                for (d, s) in dst[r * p * 3..(r + 1) * p * 3].iter_mut().zip(src) {
                    *d = f32::from(*s) * scale;
                }
            }
            positions[n * 2] = px as i64;
            positions[n * 2 + 1] = py as i64;
        }
    }
    let pool = cfg.pooling_kernel_size;
    Ok(PreparedImage {
        pixel_values,
        positions,
        num_patches,
        max_patches,
        patch_dim,
        soft_tokens: num_patches / (pool * pool),
        height: h,
        width: w,
    })
}
