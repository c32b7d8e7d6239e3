//! Normalisations: LayerNormalization, SimplifiedLayerNormalization and RMSNormalization (RMS),
//! and the contrib SkipSimplifiedLayerNormalization / SkipLayerNormalization (residual add fused
//! in). Statistics are always computed in f32 (`stash_type` 1).

use super::elementwise::{View, cast_gpu, copy_view};
use super::{Attrs, MS, Op, Registry, axis, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::tensor::{DType, numel};

const NORM: &str = include_str!("../kernels/norm/norm.wgsl");

struct Norm {
    simple: bool,
    skip: bool,
    axis: i64,
    eps: f32,
    /// Output positions: (y, mean, inv_std, sum).
    outs: [Option<usize>; 4],
    /// Input positions: (x, skip, gamma, beta, bias).
    ins: [Option<usize>; 5],
    /// The scale broadcasts to the input unidirectionally (ai.onnx RMSNormalization); otherwise it
    /// is read cyclically over each row (`l % len`), as the other norms define it.
    bcast_scale: bool,
}

/// How the norm kernel reads a unidirectionally broadcast scale.
enum ScaleRead {
    /// The scale (leading 1s dropped) is a suffix of the input's shape inside the normalised
    /// dimensions: read at `l % len`, as it is.
    Cyclic,
    /// Expanded to the normalised shape `x[axis..]` (a scale with 1s inside it).
    Row,
    /// Expanded to the whole input (a scale that varies over the leading, non-normalised axes).
    Whole,
}

/// Checks that `scale` broadcasts unidirectionally to `x` and says how the kernel reads it.
fn scale_read(scale: &[usize], x: &[usize], ax: usize) -> Result<ScaleRead> {
    let r = x.len();
    let bad = || {
        op_err(format!(
            "scale shape {scale:?} does not broadcast to the input shape {x:?}"
        ))
    };
    if scale.len() > r {
        return Err(bad());
    }
    let lead = r - scale.len();
    for (d, &w) in scale.iter().enumerate() {
        if w != 1 && w != x[lead + d] {
            return Err(bad());
        }
    }
    let first = scale.iter().position(|&w| w != 1).unwrap_or(scale.len());
    let core = &scale[first..];
    if core.len() <= r - ax && core == &x[r - core.len()..] {
        return Ok(ScaleRead::Cyclic);
    }
    if lead + first >= ax {
        Ok(ScaleRead::Row)
    } else {
        Ok(ScaleRead::Whole)
    }
}

fn opt_gpu(
    cx: &mut Ctx<'_>,
    inputs: &[Option<&Value>],
    i: Option<usize>,
) -> Result<Option<GpuTensor>> {
    match i.and_then(|i| inputs.get(i).copied().flatten()) {
        Some(v) => Ok(Some(cx.to_gpu(v)?)),
        None => Ok(None),
    }
}

impl Op for Norm {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = cx.to_gpu(req(inputs, 0)?)?;
        let shape = x.shape.clone();
        let ax = axis(self.axis, shape.len())?;
        let rows = numel(&shape[..ax]);
        let l = numel(&shape[ax..]);
        let skip = if self.skip {
            opt_gpu(cx, inputs, self.ins[1])?
        } else {
            None
        };
        // No scale input position: a norm without scale (made by the fusion pass).
        let mut gamma = match self.ins[2] {
            Some(_) => Some(
                opt_gpu(cx, inputs, self.ins[2])?
                    .ok_or_else(|| op_err("scale/gamma is required"))?,
            ),
            None => None,
        };
        let mut scale_whole = false;
        if self.bcast_scale
            && let Some(g) = &mut gamma
        {
            match scale_read(&g.shape, &shape, ax)? {
                ScaleRead::Cyclic => {}
                ScaleRead::Row => {
                    let row = &shape[ax..];
                    *g = copy_view(cx, View::bcast(g, row), row)?;
                }
                ScaleRead::Whole => {
                    *g = copy_view(cx, View::bcast(g, &shape), &shape)?;
                    scale_whole = true;
                }
            }
        }
        let beta = opt_gpu(cx, inputs, self.ins[3])?;
        let bias = opt_gpu(cx, inputs, self.ins[4])?;
        if let Some(s) = &skip
            && s.numel() != x.numel()
            && s.numel() != l
        {
            return Err(op_err(format!(
                "skip shape {:?} does not match input {:?}",
                s.shape, shape
            )));
        }
        // RMSNormalization's Y has the scale's type (V); the other norms' Y the input's. An f16
        // Y (and sum) of rows of even length is written by the kernel, word by word; otherwise
        // the kernel writes f32 and a cast follows.
        let out_dtype = match &gamma {
            Some(g) if self.bcast_scale => g.dtype,
            _ => x.dtype,
        };
        let direct = if out_dtype == DType::F16 && l.is_multiple_of(2) {
            DType::F16
        } else {
            DType::F32
        };
        let y = cx.alloc(direct, shape.clone())?;
        let mut stat_shape = shape[..ax].to_vec();
        stat_shape.extend(std::iter::repeat_n(1, shape.len() - ax));
        let mean = self.outs[1]
            .map(|_| cx.alloc(DType::F32, stat_shape.clone()))
            .transpose()?;
        let inv = self.outs[2]
            .map(|_| cx.alloc(DType::F32, stat_shape.clone()))
            .transpose()?;
        let sum = self.outs[3]
            .map(|_| cx.alloc(direct, shape.clone()))
            .transpose()?;

        let spec = NormSpec {
            simple: self.simple,
            eps: self.eps.to_bits(),
            x: x.storage(),
            skip: skip.as_ref().map(|s| (s.storage(), s.numel() == l)),
            bias: bias.as_ref().map(GpuTensor::storage),
            gamma: gamma.as_ref().map(GpuTensor::storage),
            scale_whole,
            beta: beta.as_ref().map(GpuTensor::storage),
            mean: mean.is_some(),
            inv: inv.is_some(),
            sum: sum.is_some(),
            y: y.storage(),
        };
        let p = NormParams {
            rows: rows as u32,
            len: l as u32,
            gamma_len: gamma.as_ref().map_or(1, |g| g.numel().max(1)) as u32,
            beta_len: beta.as_ref().map_or(1, |b| b.numel().max(1)) as u32,
        };
        if rows > 0 && l > 0 {
            let k = cx.gpu.kernel(&spec)?;
            let bound = k
                .bind("x", &x)
                .bind_opt("skip", skip.as_ref())
                .bind_opt("bias", bias.as_ref())
                .bind_opt("gamma", gamma.as_ref())
                .bind_opt("beta", beta.as_ref())
                .bind("y", &y)
                .bind_opt("mean", mean.as_ref())
                .bind_opt("inv", inv.as_ref())
                .bind_opt("sum", sum.as_ref());
            cx.launch(bound, &p, rows as u64 * 64)?;
        }
        let conv = |cx: &mut Ctx<'_>, t: GpuTensor| -> Result<Value> {
            Ok(Value::Gpu(if out_dtype == t.dtype {
                t
            } else {
                cast_gpu(cx, &t, out_dtype)?
            }))
        };
        let n_out = self.outs.iter().flatten().max().map_or(1, |m| m + 1);
        let mut outs: Vec<Option<Value>> = vec![None; n_out];
        if let Some(i) = self.outs[0] {
            outs[i] = Some(conv(cx, y)?);
        }
        if let (Some(i), Some(m)) = (self.outs[1], mean) {
            outs[i] = Some(Value::Gpu(m));
        }
        if let (Some(i), Some(m)) = (self.outs[2], inv) {
            outs[i] = Some(Value::Gpu(m));
        }
        if let (Some(i), Some(m)) = (self.outs[3], sum) {
            outs[i] = Some(conv(cx, m)?);
        }
        // Omitted optional outputs (empty names) get an empty placeholder nobody reads.
        Ok(outs
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Value::Host(crate::tensor::HostTensor::from_f32(vec![0], &[])))
            })
            .collect())
    }
}

crate::gpu_params! {
    /// The norm kernel's parameters.
    struct NormParams {
        /// Rows (one workgroup each).
        rows: u32,
        /// Row length.
        len: u32,
        /// Elements of the scale (read cyclically over the row).
        gamma_len: u32,
        /// Elements of the bias `beta` (read cyclically over the row).
        beta_len: u32,
    }
}

/// The norm kernel (`norm.wgsl`): which inputs and statistics it has, and its constants.
#[derive(Hash)]
struct NormSpec {
    /// No mean (RMS norm).
    simple: bool,
    /// Epsilon's bits.
    eps: u32,
    x: Storage,
    /// The residual, and whether it is one row (added at `l`) rather than the whole input.
    skip: Option<(Storage, bool)>,
    bias: Option<Storage>,
    gamma: Option<Storage>,
    /// The scale is expanded to the whole input (read at `base + l`, not `l % gamma_len`).
    scale_whole: bool,
    beta: Option<Storage>,
    mean: bool,
    inv: bool,
    sum: bool,
    /// The storage of y and the sum: F32, or F16 written directly (rows of even length).
    y: Storage,
}

impl crate::gpu::KernelSpec for NormSpec {
    const NAME: &'static str = "norm";
    const WGSL: &'static [&'static str] = &[NORM];
    fn build(&self, f: &crate::gpu::Features) -> Kernel {
        let mut k = Kernel::new("norm", NORM)
            .params::<NormParams>()
            .workgroup(64)
            .wg_reduce(f.subgroups)
            .bool("SIMPLE", self.simple)
            .f32("EPS", f32::from_bits(self.eps))
            .input("x", self.x);
        let mut load = "ld_x(i)".to_string();
        if let Some((s, row)) = self.skip {
            k = k.input("skip", s);
            load.push_str(if row {
                " + ld_skip(l)"
            } else {
                " + ld_skip(i)"
            });
        }
        if let Some(b) = self.bias {
            k = k.input("bias", b);
            load.push_str(" + ld_bias(l)");
        }
        let scale = match self.gamma {
            Some(g) => {
                k = k.input("gamma", g);
                if self.scale_whole {
                    "* ld_gamma(i)"
                } else {
                    "* ld_gamma(l % prm.gamma_len)"
                }
            }
            None => "",
        };
        if let Some(b) = self.beta {
            k = k.input("beta", b);
        }
        k = k.output("y", self.y);
        let mut stats = String::new();
        if self.mean {
            k = k.output("mean", Storage::F32);
            stats.push_str("stf_mean(row, mean); ");
        }
        if self.inv {
            k = k.output("inv", Storage::F32);
            stats.push_str("stf_inv(row, inv); ");
        }
        if self.sum {
            k = k.output("sum", self.y);
        }
        let half = self.y == Storage::F16;
        // f32: the sum is stored in the statistics pass, y in the last one, an element a step;
        // f16: both in the last pass, a word (two elements of an even-length row) a step.
        let store = if half {
            format!(
                "for (var l = 2u * t; l < L; l = l + 2u * WG) {{
        let i = base + l;
        let x0 = xin(i, l);
        let x1 = xin(i + 1u, l + 1u);
        {}
        st_y(i / 2u, yout(i, l, x0, mean, inv), yout(i + 1u, l + 1u, x1, mean, inv));
    }}",
                if self.sum {
                    "st_sum(i / 2u, x0, x1);"
                } else {
                    ""
                }
            )
        } else {
            "for (var l = t; l < L; l = l + WG) {
        let i = base + l;
        stf_y(i, yout(i, l, xin(i, l), mean, inv));
    }"
            .to_string()
        };
        k.code("LOAD_X", &load)
            .code("SCALE", scale)
            .code(
                "BETA",
                if self.beta.is_some() {
                    "+ ld_beta(l % prm.beta_len)"
                } else {
                    ""
                },
            )
            .code(
                "STORE_SUM",
                if self.sum && !half {
                    "stf_sum(base + l, v);"
                } else {
                    ""
                },
            )
            .code("STORE", &store)
            .code("STORE_STATS", &stats)
    }
}

/// An RMS norm over the last axis without scale, `x / sqrt(mean(x²) + eps)` (f32 statistics, the
/// input's type out): what the fusion pass makes of the spelled-out `Mul`, `ReduceMean`, `Add`,
/// `Sqrt`, `Div` chain (Gemma's scale-free value norm in the mobius exports).
pub fn scale_free_rms(eps: f32) -> Box<dyn Op> {
    Box::new(Norm {
        simple: true,
        skip: false,
        axis: -1,
        eps,
        outs: [Some(0), None, None, None],
        ins: [Some(0), None, None, None, None],
        bcast_scale: false,
    })
}

fn present(a: &Attrs<'_>, i: usize) -> Option<usize> {
    a.node.outputs.get(i).filter(|n| !n.is_empty()).map(|_| i)
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "LayerNormalization", |a| {
        Ok(Box::new(Norm {
            simple: false,
            skip: false,
            axis: a.i_or("axis", -1),
            eps: a.f_or("epsilon", 1e-5),
            outs: [Some(0), present(a, 1), present(a, 2), None],
            ins: [Some(0), None, Some(1), Some(2), None],
            bcast_scale: false,
        }))
    });
    r.register("", "SimplifiedLayerNormalization", |a| {
        Ok(Box::new(Norm {
            simple: true,
            skip: false,
            axis: a.i_or("axis", -1),
            eps: a.f_or("epsilon", 1e-5),
            outs: [Some(0), None, present(a, 1), None],
            ins: [Some(0), None, Some(1), None, None],
            bcast_scale: false,
        }))
    });
    // ai.onnx 23: y = x / sqrt(mean(x², axes axis..) + epsilon) * scale, the scale broadcast
    // unidirectionally to x. Statistics in f32 (stash_type 1, the only precision defined by the
    // reference implementation).
    r.register("", "RMSNormalization", |a| {
        let stash = a.i_or("stash_type", 1);
        if stash != 1 {
            return Err(a.err(format!(
                "stash_type {stash} is not supported (only 1: f32 statistics)"
            )));
        }
        Ok(Box::new(Norm {
            simple: true,
            skip: false,
            axis: a.i_or("axis", -1),
            eps: a.f_or("epsilon", 1e-5),
            outs: [Some(0), None, None, None],
            ins: [Some(0), None, Some(1), None, None],
            bcast_scale: true,
        }))
    });
    r.register(MS, "SkipSimplifiedLayerNormalization", |a| {
        Ok(Box::new(Norm {
            simple: true,
            skip: true,
            axis: -1,
            eps: a.f_or("epsilon", 1e-5),
            outs: [Some(0), present(a, 1), present(a, 2), present(a, 3)],
            ins: [Some(0), Some(1), Some(2), None, Some(3)],
            bcast_scale: false,
        }))
    });
    r.register(MS, "SkipLayerNormalization", |a| {
        Ok(Box::new(Norm {
            simple: false,
            skip: true,
            axis: -1,
            eps: a.f_or("epsilon", 1e-5),
            outs: [Some(0), present(a, 1), present(a, 2), present(a, 3)],
            ins: [Some(0), Some(1), Some(2), Some(3), Some(4)],
            bcast_scale: false,
        }))
    });
}
