//! Normalisations: LayerNormalization, SimplifiedLayerNormalization and RMSNormalization (RMS),
//! and the contrib SkipSimplifiedLayerNormalization / SkipLayerNormalization (residual add fused
//! in). Statistics are always computed in f32 (`stash_type` 1).

use super::elementwise::{View, cast_gpu, copy_view};
use super::{Attrs, MS, Op, Registry, axis, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::tensor::{DType, numel};

const NORM: &str = include_str!("../kernels/norm.wgsl");

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
        let mut scale = if gamma.is_some() {
            "* ld_gamma(l % gl)"
        } else {
            ""
        };
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
                    scale = "* ld_gamma(base + l)";
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
        let y = cx.alloc(DType::F32, shape.clone())?;
        let mut stat_shape = shape[..ax].to_vec();
        stat_shape.extend(std::iter::repeat_n(1, shape.len() - ax));
        let mean = self.outs[1]
            .map(|_| cx.alloc(DType::F32, stat_shape.clone()))
            .transpose()?;
        let inv = self.outs[2]
            .map(|_| cx.alloc(DType::F32, stat_shape.clone()))
            .transpose()?;
        let sum = self.outs[3]
            .map(|_| cx.alloc(DType::F32, shape.clone()))
            .transpose()?;

        let mut k = Kernel::new("norm", NORM)
            .workgroup(64)
            .wg_reduce(cx.gpu.subgroups)
            .bool("SIMPLE", self.simple)
            .f32("EPS", self.eps);
        let mut bind: Vec<&GpuTensor> = vec![&x];
        k = k.input("x", x.storage());
        let mut load = "ld_x(i)".to_string();
        if let Some(s) = &skip {
            k = k.input("skip", s.storage());
            bind.push(s);
            load.push_str(if s.numel() == l {
                " + ld_skip(l)"
            } else {
                " + ld_skip(i)"
            });
        }
        if let Some(b) = &bias {
            k = k.input("bias", b.storage());
            bind.push(b);
            load.push_str(" + ld_bias(l)");
        }
        if let Some(g) = &gamma {
            k = k.input("gamma", g.storage());
            bind.push(g);
        }
        if let Some(b) = &beta {
            k = k.input("beta", b.storage());
            bind.push(b);
        }
        k = k.output("y", Storage::F32);
        bind.push(&y);
        let mut stats = String::new();
        if let Some(m) = &mean {
            k = k.output("mean", Storage::F32);
            bind.push(m);
            stats.push_str("stf_mean(row, mean); ");
        }
        if let Some(m) = &inv {
            k = k.output("inv", Storage::F32);
            bind.push(m);
            stats.push_str("stf_inv(row, inv); ");
        }
        if let Some(m) = &sum {
            k = k.output("sum", Storage::F32);
            bind.push(m);
        }
        let k = k
            .code("LOAD_X", &load)
            .code("SCALE", scale)
            .code(
                "BETA",
                if beta.is_some() {
                    "+ ld_beta(l % bl)"
                } else {
                    ""
                },
            )
            .code(
                "STORE_SUM",
                if sum.is_some() {
                    "stf_sum(base + l, v);"
                } else {
                    ""
                },
            )
            .code("STORE_STATS", &stats);
        let meta = [
            rows as u32,
            l as u32,
            gamma.as_ref().map_or(1, |g| g.numel().max(1)) as u32,
            beta.as_ref().map_or(1, |b| b.numel().max(1)) as u32,
        ];
        if rows > 0 && l > 0 {
            cx.dispatch(&k, &bind, &meta, rows as u64 * 64)?;
        }
        // RMSNormalization's Y has the scale's type (V); the other norms' Y the input's.
        let out_dtype = match &gamma {
            Some(g) if self.bcast_scale => g.dtype,
            _ => x.dtype,
        };
        let conv = |cx: &mut Ctx<'_>, t: GpuTensor| -> Result<Value> {
            Ok(Value::Gpu(if out_dtype == DType::F32 {
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
