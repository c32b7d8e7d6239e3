//! Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp), Softmax/LogSoftmax
//! and CumSum.

use super::elementwise::cast_gpu;
use super::{Op, Registry, axis, host_dtype, opt_host, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, Value};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::tensor::{DType, HostTensor, numel, strides};

const REDUCE: &str = include_str!("../kernels/reduce/reduce.wgsl");
const SOFTMAX: &str = include_str!("../kernels/reduce/softmax.wgsl");
const CUMSUM: &str = include_str!("../kernels/reduce/cumsum.wgsl");

#[derive(Clone, Copy)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L2,
    SumSquare,
    L1,
    LogSum,
    LogSumExp,
}

impl Kind {
    fn wgsl(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Sum => ("0.0", "acc + v", "acc"),
            Kind::Mean => ("0.0", "acc + v", "acc / cnt"),
            Kind::Max => ("bitcast<f32>(0xff7fffffu)", "max(acc, v)", "acc"),
            Kind::Min => ("bitcast<f32>(0x7f7fffffu)", "min(acc, v)", "acc"),
            Kind::Prod => ("1.0", "acc * v", "acc"),
            Kind::L2 => ("0.0", "acc + v * v", "sqrt(acc)"),
            Kind::SumSquare => ("0.0", "acc + v * v", "acc"),
            Kind::L1 => ("0.0", "acc + abs(v)", "acc"),
            Kind::LogSum => ("0.0", "acc + v", "log(acc)"),
            // Online log-sum-exp: (running max m, sum of exp(v - m)), rescaled when m grows.
            Kind::LogSumExp => (
                "vec2<f32>(bitcast<f32>(0xff7fffffu), 0.0)",
                "select(vec2<f32>(acc.x, acc.y + exp(v - acc.x)), vec2<f32>(v, acc.y * exp(acc.x - v) + 1.0), v > acc.x)",
                "acc.x + log(acc.y)",
            ),
        }
    }
    fn host(self, vals: &[f64]) -> f64 {
        match self {
            Kind::Sum => vals.iter().sum(),
            // The mean of an empty set is undefined (ONNX); NaN, as numpy gives.
            Kind::Mean if vals.is_empty() => f64::NAN,
            Kind::Mean => vals.iter().sum::<f64>() / vals.len() as f64,
            Kind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Kind::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
            Kind::Prod => vals.iter().product(),
            Kind::L2 => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
            Kind::SumSquare => vals.iter().map(|v| v * v).sum(),
            Kind::L1 => vals.iter().map(|v| v.abs()).sum(),
            // ln(0) = -inf over an empty set, as ONNX says.
            Kind::LogSum => vals.iter().sum::<f64>().ln(),
            Kind::LogSumExp if vals.is_empty() => f64::NEG_INFINITY,
            Kind::LogSumExp => {
                let m = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                m + vals.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
            }
        }
    }
}

struct Reduce {
    kind: Kind,
    keepdims: bool,
    noop_empty: bool,
    axes_attr: Option<Vec<i64>>,
}

impl Op for Reduce {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let r = x.shape().len();
        let axes = match &self.axes_attr {
            Some(a) => a.clone(),
            None => opt_host(inputs, 1)?
                .map(HostTensor::to_i64)
                .unwrap_or_default(),
        };
        if axes.is_empty() && self.noop_empty {
            return Ok(vec![x.clone()]);
        }
        let red: Vec<usize> = if axes.is_empty() {
            (0..r).collect()
        } else {
            axes.iter().map(|&a| axis(a, r)).collect::<Result<_>>()?
        };
        let in_shape = x.shape().to_vec();
        let kept: Vec<usize> = (0..r)
            .map(|d| if red.contains(&d) { 1 } else { in_shape[d] })
            .collect();
        let red_shape: Vec<usize> = (0..r)
            .map(|d| if red.contains(&d) { in_shape[d] } else { 1 })
            .collect();
        let out_shape: Vec<usize> = if self.keepdims {
            kept.clone()
        } else {
            (0..r)
                .filter(|d| !red.contains(d))
                .map(|d| in_shape[d])
                .collect()
        };
        let count = numel(&red_shape);
        let st = strides(&in_shape);
        if count == 0 {
            // Over an empty set every output is the reduction's identity (ONNX): 0 for the sums,
            // 1 for Prod, -inf / +inf for Max / Min (the type's minimum / maximum for integers,
            // false / true for bools), -inf for LogSum / LogSumExp, undefined (NaN) for Mean.
            // No data is read: a constant.
            let fill = self.kind.host(&[]);
            let n = numel(&out_shape);
            let dtype = x.dtype();
            let t = if dtype == DType::Bool {
                HostTensor::from_i64_as(dtype, out_shape, &vec![i64::from(fill > 0.0); n])
            } else {
                HostTensor::from_f64_as(dtype, out_shape, &vec![fill; n])
            };
            return Ok(vec![Value::Host(t)]);
        }
        if let Value::Host(h) = x
            && (host_dtype(h.dtype) || !h.dtype.is_float())
        {
            let v = h.to_f64();
            let n = numel(&kept);
            let kst = strides(&kept);
            let rst = strides(&red_shape);
            let out: Vec<f64> = (0..n)
                .map(|i| {
                    let base: usize = (0..r).map(|d| (i / kst[d]) % kept[d] * st[d]).sum();
                    let vals: Vec<f64> = (0..count)
                        .map(|k| {
                            v[base
                                + (0..r)
                                    .map(|d| (k / rst[d]) % red_shape[d] * st[d])
                                    .sum::<usize>()]
                        })
                        .collect();
                    self.kind.host(&vals)
                })
                .collect();
            let t = if h.dtype == DType::Bool {
                // Empty Max/Min of bools are false/true (the identities of or/and).
                HostTensor::from_i64_as(
                    h.dtype,
                    out_shape,
                    &out.iter()
                        .map(|&f| i64::from(if f.is_infinite() { f > 0.0 } else { f != 0.0 }))
                        .collect::<Vec<_>>(),
                )
            } else if h.dtype.is_float() {
                HostTensor::from_f64_as(h.dtype, out_shape, &out)
            } else {
                HostTensor::from_i64_as(
                    h.dtype,
                    out_shape,
                    &out.iter().map(|&f| f as i64).collect::<Vec<_>>(),
                )
            };
            return Ok(vec![Value::Host(t)]);
        }
        let t = cx.to_gpu(x)?;
        let out = cx.alloc(t.dtype, out_shape)?;
        let n = out.numel();
        if r > REDUCE_RANK {
            return Err(op_err(format!(
                "reductions take up to {REDUCE_RANK} dimensions, not {r}"
            )));
        }
        let k = cx.gpu.kernel(&ReduceSpec {
            code: self.kind.wgsl(),
            x: t.storage(),
            y: out.storage(),
        })?;
        let mut p = ReduceParams {
            n: n as u32,
            rank: r as u32,
            count: count as u32,
            ..ReduceParams::default()
        };
        for d in 0..r {
            p.out_shape[d] = kept[d] as u32;
            p.in_strides[d] = st[d] as u32;
            p.red_shape[d] = red_shape[d] as u32;
        }
        cx.launch_mapped(k.bind("x", &t).bind("y", &out), &p, n, &out)?;
        Ok(vec![Value::Gpu(out)])
    }
}

struct Softmax {
    axis: i64,
    legacy: bool,
    log: bool,
}

impl Op for Softmax {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = cx.to_gpu(req(inputs, 0)?)?;
        let shape = x.shape.clone();
        let ax = axis(self.axis, shape.len())?;
        let (outer, l, inner) = if self.legacy {
            (numel(&shape[..ax]), numel(&shape[ax..]), 1)
        } else {
            (numel(&shape[..ax]), shape[ax], numel(&shape[ax + 1..]))
        };
        let out = cx.alloc(DType::F32, shape.clone())?;
        let rows = outer * inner;
        if numel(&shape) > 0 {
            let k = cx.gpu.kernel(&SoftmaxSpec {
                log: self.log,
                x: x.storage(),
            })?;
            let p = SoftmaxParams {
                rows: rows as u32,
                len: l as u32,
                inner: inner as u32,
            };
            cx.launch(k.bind("x", &x).bind("y", &out), &p, rows as u64 * 64)?;
        }
        let out = if x.dtype == DType::F32 {
            out
        } else {
            cast_gpu(cx, &out, x.dtype)?
        };
        Ok(vec![Value::Gpu(out)])
    }
}

struct CumSum {
    exclusive: bool,
    reverse: bool,
}

impl Op for CumSum {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let a = opt_host(inputs, 1)?
            .ok_or_else(|| op_err("axis input is required"))?
            .to_i64();
        let ax = axis(
            *a.first().ok_or_else(|| op_err("empty axis"))?,
            x.shape().len(),
        )?;
        let shape = x.shape().to_vec();
        let (l, inner) = (shape[ax], numel(&shape[ax + 1..]));
        if let Value::Host(h) = x
            && (host_dtype(h.dtype) || !h.dtype.is_float())
        {
            let v = h.to_i64();
            let n = v.len();
            let out: Vec<i64> = (0..n)
                .map(|i| {
                    let (j, li, o) = (i % inner, (i / inner) % l, i / (inner * l));
                    (0..l)
                        .filter(|&k| if self.reverse { k >= li } else { k <= li })
                        .filter(|&k| !(self.exclusive && k == li))
                        .map(|k| v[(o * l + k) * inner + j])
                        .sum()
                })
                .collect();
            return Ok(vec![Value::Host(HostTensor::from_i64_as(
                h.dtype, shape, &out,
            ))]);
        }
        let t = cx.to_gpu(x)?;
        let out = cx.alloc(t.dtype, shape)?;
        let n = out.numel();
        let k = cx.gpu.kernel(&CumSumSpec {
            reverse: self.reverse,
            exclusive: self.exclusive,
            x: t.storage(),
            y: out.storage(),
        })?;
        let p = CumSumParams {
            n: n as u32,
            len: l as u32,
            inner: inner as u32,
        };
        cx.launch_mapped(k.bind("x", &t).bind("y", &out), &p, n, &out)?;
        Ok(vec![Value::Gpu(out)])
    }
}

/// The largest rank of a reduction on the GPU.
const REDUCE_RANK: usize = 16;

crate::gpu_params! {
    /// The reduction's parameters: per dimension (of the input's rank) the output's shape
    /// (reduced dimensions 1), the input's strides and the reduced shape (kept dimensions 1).
    struct ReduceParams {
        n: u32,
        rank: u32,
        /// Elements reduced into each output.
        count: u32,
        pad0: u32,
        out_shape: [u32; REDUCE_RANK],
        in_strides: [u32; REDUCE_RANK],
        red_shape: [u32; REDUCE_RANK],
    }
}

/// The reduction kernel (`reduce.wgsl`): its initial value, accumulation and final
/// expressions, and the storages.
#[derive(Hash)]
struct ReduceSpec {
    code: (&'static str, &'static str, &'static str),
    x: Storage,
    y: Storage,
}

impl KernelSpec for ReduceSpec {
    const NAME: &'static str = "reduce";
    const WGSL: &'static [&'static str] = &[REDUCE];
    fn build(&self, _: &Features) -> Kernel {
        let (init, acc, fin) = self.code;
        Kernel::new("reduce", REDUCE)
            .params::<ReduceParams>()
            .code("INIT", init)
            .code("ACC", acc)
            .code("FIN", fin)
            .input("x", self.x)
            .output("y", self.y)
            .mapped("y")
    }
}

crate::gpu_params! {
    /// Softmax over rows of `len` elements `inner` apart.
    struct SoftmaxParams {
        rows: u32,
        len: u32,
        inner: u32,
    }
}

/// The softmax kernel (`softmax.wgsl`), or log-softmax.
#[derive(Hash)]
struct SoftmaxSpec {
    log: bool,
    x: Storage,
}

impl KernelSpec for SoftmaxSpec {
    const NAME: &'static str = "softmax";
    const WGSL: &'static [&'static str] = &[SOFTMAX];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("softmax", SOFTMAX)
            .params::<SoftmaxParams>()
            .workgroup(64)
            .code(
                "OUT",
                if self.log {
                    "v - log(sum)"
                } else {
                    "exp(v) / sum"
                },
            )
            .input("x", self.x)
            .output("y", Storage::F32)
    }
}

crate::gpu_params! {
    /// CumSum over the middle axis of `x` viewed as `[outer, len, inner]`.
    struct CumSumParams {
        n: u32,
        len: u32,
        inner: u32,
    }
}

/// The CumSum kernel (`cumsum.wgsl`): its direction, whether it excludes the element itself,
/// and the storages.
#[derive(Hash)]
struct CumSumSpec {
    reverse: bool,
    exclusive: bool,
    x: Storage,
    y: Storage,
}

impl KernelSpec for CumSumSpec {
    const NAME: &'static str = "cumsum";
    const WGSL: &'static [&'static str] = &[CUMSUM];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("cumsum", CUMSUM)
            .params::<CumSumParams>()
            .bool("REVERSE", self.reverse)
            .bool("EXCLUSIVE", self.exclusive)
            .input("x", self.x)
            .output("y", self.y)
            .mapped("y")
    }
}

fn reduce(a: &super::Attrs<'_>, kind: Kind, axes_input_since: i64) -> Result<Box<dyn Op>> {
    Ok(Box::new(Reduce {
        kind,
        keepdims: a.i_or("keepdims", 1) != 0,
        noop_empty: a.i_or("noop_with_empty_axes", 0) != 0,
        axes_attr: if a.opset < axes_input_since {
            Some(a.ints("axes").unwrap_or_default())
        } else {
            None
        },
    }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "ReduceSum", |a| reduce(a, Kind::Sum, 13));
    r.register("", "ReduceMean", |a| reduce(a, Kind::Mean, 18));
    r.register("", "ReduceMax", |a| reduce(a, Kind::Max, 18));
    r.register("", "ReduceMin", |a| reduce(a, Kind::Min, 18));
    r.register("", "ReduceProd", |a| reduce(a, Kind::Prod, 18));
    r.register("", "ReduceL2", |a| reduce(a, Kind::L2, 18));
    r.register("", "ReduceSumSquare", |a| reduce(a, Kind::SumSquare, 18));
    r.register("", "ReduceL1", |a| reduce(a, Kind::L1, 18));
    r.register("", "ReduceLogSum", |a| reduce(a, Kind::LogSum, 18));
    r.register("", "ReduceLogSumExp", |a| reduce(a, Kind::LogSumExp, 18));
    r.register("", "Softmax", |a| {
        Ok(Box::new(Softmax {
            axis: a.i_or("axis", if a.opset < 13 { 1 } else { -1 }),
            legacy: a.opset < 13,
            log: false,
        }))
    });
    r.register("", "LogSoftmax", |a| {
        Ok(Box::new(Softmax {
            axis: a.i_or("axis", if a.opset < 13 { 1 } else { -1 }),
            legacy: a.opset < 13,
            log: true,
        }))
    });
    r.register("", "CumSum", |a| {
        Ok(Box::new(CumSum {
            exclusive: a.i_or("exclusive", 0) != 0,
            reverse: a.i_or("reverse", 0) != 0,
        }))
    });
}
