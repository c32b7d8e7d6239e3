//! Elementwise ops (unary, binary with broadcasting, Where, Cast, Clip, the variadic Max, Min, Sum
//! and Mean): one broadcasting WGSL kernel (`kernels/elementwise/ew.wgsl`) parameterised by an
//! expression; int64/f64 math on the host.

use super::host;
use super::{Attrs, MS, Op, Registry, all_host, host_dtype, opt_host, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::tensor::{DType, numel};

const EW: &str = include_str!("../kernels/elementwise/ew.wgsl");

/// One input of [`ew_gpu`]: a tensor read through a strided view.
pub struct View<'a> {
    /// The tensor.
    pub t: &'a GpuTensor,
    /// Base element offset.
    pub base: i64,
    /// Per-output-dimension element strides.
    pub strides: Vec<i64>,
}

impl<'a> View<'a> {
    /// `t` broadcast to `out`.
    pub fn bcast(t: &'a GpuTensor, out: &[usize]) -> Self {
        Self {
            t,
            base: 0,
            strides: host::bcast_strides(&t.shape, out),
        }
    }
}

/// Records `y = EXPR(a, b, c)` over `out_shape` where inputs are strided views.
pub fn ew_gpu(
    cx: &mut Ctx<'_>,
    expr: &str,
    views: &[View<'_>],
    out_shape: &[usize],
    out_dtype: DType,
) -> Result<GpuTensor> {
    let out = cx.alloc(out_dtype, out_shape.to_vec())?;
    let n = numel(out_shape);
    if n == 0 {
        return Ok(out);
    }
    let rank = out_shape.len();
    let contiguous = |v: &View<'_>| {
        v.base == 0
            && v.t.shape == out_shape
            && v.strides == host::bcast_strides(out_shape, out_shape)
    };
    let bcast = !views.iter().all(contiguous);
    let out_storage = Storage::of(out_dtype).ok_or_else(|| op_err("f64 on GPU"))?;
    if rank > EW_RANK {
        return Err(op_err(format!(
            "elementwise kernels take up to {EW_RANK} dimensions, not {rank}"
        )));
    }
    let storages: [Option<Storage>; 3] =
        std::array::from_fn(|i| views.get(i).map(|v| v.t.storage()));
    let k = cx.gpu.kernel(&EwSpec {
        expr,
        bcast,
        inputs: storages,
        out: out_storage,
    })?;
    let mut p = EwParams {
        n: n as u32,
        rank: rank as u32,
        ..EwParams::default()
    };
    for (i, v) in views.iter().enumerate() {
        p.base[i] = v.base as i32;
        for (d, &s) in v.strides.iter().enumerate() {
            p.strides[i * EW_RANK + d] = s as i32;
        }
    }
    for (d, &s) in out_shape.iter().enumerate() {
        p.shape[d] = s as u32;
    }
    let mut bound = k.bind("y", &out);
    for (v, name) in views.iter().zip(EW_INPUTS) {
        bound = bound.bind(name, v.t);
    }
    cx.launch_mapped(bound, &p, n, &out)?;
    Ok(out)
}

/// The largest rank of [`ew_gpu`]'s views.
const EW_RANK: usize = 12;
/// Binding names of [`ew_gpu`]'s inputs.
const EW_INPUTS: [&str; 3] = ["a", "b", "c"];

crate::gpu_params! {
    /// [`ew_gpu`]'s parameters: element count, rank, and per input its base offset and strides
    /// (elements, signed) over the output's shape.
    struct EwParams {
        n: u32,
        rank: u32,
        pad0: u32,
        pad1: u32,
        base: [i32; 4],
        shape: [u32; EW_RANK],
        strides: [i32; 3 * EW_RANK],
    }
}

/// The kernel of [`ew_gpu`]: an expression over up to three inputs, read in place or through
/// broadcast views.
#[derive(Hash)]
struct EwSpec<'a> {
    expr: &'a str,
    bcast: bool,
    inputs: [Option<Storage>; 3],
    out: Storage,
}

impl crate::gpu::KernelSpec for EwSpec<'_> {
    const NAME: &'static str = "ew";
    const WGSL: &'static [&'static str] = &[EW];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        let mut k = Kernel::new("ew", EW)
            .params::<EwParams>()
            .bool("BCAST", self.bcast)
            .u32("MAX_RANK", EW_RANK as u32)
            .code("EXPR", self.expr);
        let mut loads = String::new();
        for (i, (s, name)) in self.inputs.iter().zip(EW_INPUTS).enumerate() {
            if let Some(s) = s {
                k = k.input(name, *s);
                loads.push_str(&format!("let {name} = ld_{name}(off(i, {i}u)); "));
            }
        }
        k.code("LOADS", &loads).output("y", self.out).mapped("y")
    }
}

/// Copies a strided view into a new contiguous tensor.
pub fn copy_view(cx: &mut Ctx<'_>, v: View<'_>, out_shape: &[usize]) -> Result<GpuTensor> {
    let dtype = v.t.dtype;
    ew_gpu(cx, "a", &[v], out_shape, dtype)
}

/// Converts a GPU tensor to another dtype.
pub fn cast_gpu(cx: &mut Ctx<'_>, t: &GpuTensor, to: DType) -> Result<GpuTensor> {
    let shape = t.shape.clone();
    ew_gpu(cx, "a", &[View::bcast(t, &shape)], &shape, to)
}

/// The most elements a Cast of a host value converts on the host (64 Ki: a decode step's mask
/// over a context of 64K tokens); larger ones are uploaded and cast by a kernel.
pub const HOST_CAST_MAX: usize = 1 << 16;

#[derive(Clone, Copy)]
enum Out {
    Same,
    Bool,
    To(DType),
}

struct Ew {
    wgsl: String,
    fi: Option<fn(&[i64]) -> i64>,
    ff: fn(&[f64]) -> f64,
    out: Out,
    arity: std::ops::RangeInclusive<usize>,
}

impl Op for Ew {
    fn host_inputs(&self) -> &[usize] {
        // Results that only exist on the host (float64) need their inputs there.
        if matches!(self.out, Out::To(DType::F64)) {
            &[0]
        } else {
            &[]
        }
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let ins: Vec<&Value> = inputs.iter().flatten().copied().collect();
        if !self.arity.contains(&ins.len()) || inputs.first().copied().flatten().is_none() {
            return Err(op_err(format!(
                "expected {:?} inputs, got {}",
                self.arity,
                ins.len()
            )));
        }
        let first = req(inputs, 0)?;
        // Data type of the result: Where takes it from its second input.
        let data_dtype = if ins.len() == 3 && first.dtype() == DType::Bool {
            ins[1].dtype()
        } else {
            first.dtype()
        };
        let out_dtype = match self.out {
            Out::Same => data_dtype,
            Out::Bool => DType::Bool,
            Out::To(d) => d,
        };
        // A small Cast of a host value stays there too (a decode step's mask, built on the
        // host from the attention mask and cast to float16): the value is uploaded either way,
        // and rounding it first spares a dispatch and half the upload. A large one (a long
        // prompt's mask) is converted faster by the GPU than element by element here.
        let small_cast = matches!(self.out, Out::To(_)) && ins[0].numel() <= HOST_CAST_MAX;
        let on_host = all_host(inputs)
            && (ins
                .iter()
                .any(|v| host_dtype(v.dtype()) || !v.dtype().is_float())
                || host_dtype(out_dtype)
                || small_cast);
        if on_host || ins.iter().any(|v| v.dtype() == DType::F64) || out_dtype == DType::F64 {
            let hs: Vec<&crate::tensor::HostTensor> = ins
                .iter()
                .map(|v| {
                    v.host()
                        .ok_or_else(|| op_err("float64 tensors must be on the host"))
                })
                .collect::<Result<_>>()?;
            let fi = self.fi.as_ref().map(|f| f as &dyn Fn(&[i64]) -> i64);
            return Ok(vec![Value::Host(host::map(&hs, out_dtype, fi, &self.ff)?)]);
        }
        let ts: Vec<GpuTensor> = ins.iter().map(|v| cx.to_gpu(v)).collect::<Result<_>>()?;
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
        let out_shape = host::broadcast(&shapes)?;
        let views: Vec<View<'_>> = ts.iter().map(|t| View::bcast(t, &out_shape)).collect();
        Ok(vec![Value::Gpu(ew_gpu(
            cx, &self.wgsl, &views, &out_shape, out_dtype,
        )?)])
    }
}

fn erf64(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.3275911 * x.abs());
    let y = 1.0
        - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
            + 0.254829592)
            * t
            * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

fn b(c: bool) -> f64 {
    f64::from(u8::from(c))
}

fn bi(c: bool) -> i64 {
    i64::from(c)
}

macro_rules! unary {
    ($r:expr, $name:literal, $wgsl:literal, $ff:expr) => {
        $r.register("", $name, |_a| {
            Ok(Box::new(Ew {
                wgsl: $wgsl.into(),
                fi: None,
                ff: $ff,
                out: Out::Same,
                arity: 1..=1,
            }))
        });
    };
}

macro_rules! binary {
    ($r:expr, $name:literal, $wgsl:literal, $fi:expr, $ff:expr, $out:expr) => {
        $r.register("", $name, |_a| {
            Ok(Box::new(Ew {
                wgsl: $wgsl.into(),
                fi: $fi,
                ff: $ff,
                out: $out,
                arity: 2..=2,
            }))
        });
    };
}

fn gelu(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let approx = a.s("approximate").unwrap_or_else(|| "none".into());
    let (wgsl, ff): (&str, fn(&[f64]) -> f64) = match approx.as_str() {
        "none" => ("gelu_erf(a)", |v| {
            0.5 * v[0] * (1.0 + erf64(v[0] * std::f64::consts::FRAC_1_SQRT_2))
        }),
        "tanh" => ("gelu_tanh(a)", |v| {
            let x = v[0];
            0.5 * x * (1.0 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh())
        }),
        other => return Err(a.err(format!("unknown approximate={other}"))),
    };
    Ok(Box::new(Ew {
        wgsl: wgsl.into(),
        fi: None,
        ff,
        out: Out::Same,
        arity: 1..=1,
    }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "Neg", |_a| {
        Ok(Box::new(Ew {
            wgsl: "-a".into(),
            fi: Some(|v| -v[0]),
            ff: |v| -v[0],
            out: Out::Same,
            arity: 1..=1,
        }))
    });
    r.register("", "Abs", |_a| {
        Ok(Box::new(Ew {
            wgsl: "abs(a)".into(),
            fi: Some(|v| v[0].abs()),
            ff: |v| v[0].abs(),
            out: Out::Same,
            arity: 1..=1,
        }))
    });
    unary!(r, "Sqrt", "sqrt(a)", |v| v[0].sqrt());
    unary!(r, "Reciprocal", "1.0 / a", |v| 1.0 / v[0]);
    unary!(r, "Exp", "exp(a)", |v| v[0].exp());
    unary!(r, "Log", "log(a)", |v| v[0].ln());
    unary!(r, "Tanh", "tanh_(a)", |v| v[0].tanh());
    unary!(r, "Sigmoid", "1.0 / (1.0 + exp(-a))", |v| 1.0
        / (1.0 + (-v[0]).exp()));
    unary!(r, "Erf", "erf_(a)", |v| erf64(v[0]));
    unary!(r, "Relu", "max(a, 0.0)", |v| v[0].max(0.0));
    unary!(r, "Floor", "floor(a)", |v| v[0].floor());
    unary!(r, "Ceil", "ceil(a)", |v| v[0].ceil());
    unary!(r, "Sin", "sin(a)", |v| v[0].sin());
    unary!(r, "Cos", "cos(a)", |v| v[0].cos());
    r.register("", "Not", |_a| {
        Ok(Box::new(Ew {
            wgsl: "b2f(a == 0.0)".into(),
            fi: Some(|v| bi(v[0] == 0)),
            ff: |v| b(v[0] == 0.0),
            out: Out::Bool,
            arity: 1..=1,
        }))
    });
    r.register("", "Gelu", gelu);
    r.register(MS, "Gelu", |_a| {
        Ok(Box::new(Ew {
            wgsl: "gelu_erf(a)".into(),
            fi: None,
            ff: |v| 0.5 * v[0] * (1.0 + erf64(v[0] * std::f64::consts::FRAC_1_SQRT_2)),
            out: Out::Same,
            arity: 1..=1,
        }))
    });
    r.register("", "Cast", |a| {
        let to = crate::tensor::DType::from_onnx(
            a.i("to").ok_or_else(|| a.err("missing attribute to"))? as i32,
        )
        .map_err(|e| a.err(e.to_string()))?;
        a.reject_nonzero(&["round_mode_unused"])?;
        Ok(Box::new(Ew {
            wgsl: "a".into(),
            fi: Some(|v| v[0]),
            ff: |v| v[0],
            out: Out::To(to),
            arity: 1..=1,
        }))
    });
    binary!(
        r,
        "Add",
        "a + b",
        Some(|v| v[0].wrapping_add(v[1])),
        |v| v[0] + v[1],
        Out::Same
    );
    binary!(
        r,
        "Sub",
        "a - b",
        Some(|v| v[0].wrapping_sub(v[1])),
        |v| v[0] - v[1],
        Out::Same
    );
    binary!(
        r,
        "Mul",
        "a * b",
        Some(|v| v[0].wrapping_mul(v[1])),
        |v| v[0] * v[1],
        Out::Same
    );
    binary!(
        r,
        "Div",
        "a / b",
        Some(|v| if v[1] == 0 {
            0
        } else {
            v[0].wrapping_div(v[1])
        }),
        |v| v[0] / v[1],
        Out::Same
    );
    binary!(r, "Pow", "pow_(a, b)", None, |v| v[0].powf(v[1]), Out::Same);
    binary!(
        r,
        "Equal",
        "b2f(a == b)",
        Some(|v| bi(v[0] == v[1])),
        |v| b(v[0] == v[1]),
        Out::Bool
    );
    binary!(
        r,
        "Less",
        "b2f(a < b)",
        Some(|v| bi(v[0] < v[1])),
        |v| b(v[0] < v[1]),
        Out::Bool
    );
    binary!(
        r,
        "Greater",
        "b2f(a > b)",
        Some(|v| bi(v[0] > v[1])),
        |v| b(v[0] > v[1]),
        Out::Bool
    );
    binary!(
        r,
        "LessOrEqual",
        "b2f(a <= b)",
        Some(|v| bi(v[0] <= v[1])),
        |v| b(v[0] <= v[1]),
        Out::Bool
    );
    binary!(
        r,
        "GreaterOrEqual",
        "b2f(a >= b)",
        Some(|v| bi(v[0] >= v[1])),
        |v| b(v[0] >= v[1]),
        Out::Bool
    );
    binary!(
        r,
        "And",
        "b2f(a != 0.0 && b != 0.0)",
        Some(|v| bi(v[0] != 0 && v[1] != 0)),
        |v| b(v[0] != 0.0 && v[1] != 0.0),
        Out::Bool
    );
    binary!(
        r,
        "Or",
        "b2f(a != 0.0 || b != 0.0)",
        Some(|v| bi(v[0] != 0 || v[1] != 0)),
        |v| b(v[0] != 0.0 || v[1] != 0.0),
        Out::Bool
    );
    binary!(
        r,
        "Xor",
        "b2f((a != 0.0) != (b != 0.0))",
        Some(|v| bi((v[0] != 0) != (v[1] != 0))),
        |v| b((v[0] != 0.0) != (v[1] != 0.0)),
        Out::Bool
    );
    binary!(
        r,
        "PRelu",
        "select(a, a * b, a < 0.0)",
        None,
        |v| if v[0] < 0.0 { v[0] * v[1] } else { v[0] },
        Out::Same
    );
    r.register("", "Where", |_a| {
        Ok(Box::new(Ew {
            wgsl: "select(c, b, a != 0.0)".into(),
            fi: Some(|v| if v[0] != 0 { v[1] } else { v[2] }),
            ff: |v| if v[0] != 0.0 { v[1] } else { v[2] },
            out: Out::Same,
            arity: 3..=3,
        }))
    });
    r.register("", "Clip", clip);
    r.register("", "Max", |_a| Ok(Box::new(Variadic::Max)));
    r.register("", "Min", |_a| Ok(Box::new(Variadic::Min)));
    r.register("", "Sum", |_a| Ok(Box::new(Variadic::Sum)));
    r.register("", "Mean", |_a| Ok(Box::new(Variadic::Mean)));
}

/// ai.onnx `Max`, `Min`, `Sum`, `Mean`: one or more inputs, broadcast together (numpy rules), the
/// result of the inputs' type. Max and Min propagate NaN (as ONNX Runtime does: a NaN in any
/// input gives NaN). On the GPU up to three inputs are combined per dispatch; integer and float64
/// values on the host are combined there (integers exactly, in i64).
#[derive(Clone, Copy)]
enum Variadic {
    Max,
    Min,
    Sum,
    Mean,
}

impl Variadic {
    /// The WGSL combining two values (`ew.wgsl`'s NaN-propagating `max_`/`min_`).
    fn wgsl2(self, x: &str, y: &str) -> String {
        match self {
            Self::Max => format!("max_({x}, {y})"),
            Self::Min => format!("min_({x}, {y})"),
            Self::Sum | Self::Mean => format!("({x} + {y})"),
        }
    }
    fn int(self, v: &[i64]) -> i64 {
        match self {
            Self::Max => v.iter().copied().max().unwrap_or(0),
            Self::Min => v.iter().copied().min().unwrap_or(0),
            Self::Sum => v.iter().fold(0i64, |a, &b| a.wrapping_add(b)),
            // Mean is defined for floats only; integers divide truncating, as C++ would.
            Self::Mean => v.iter().fold(0i64, |a, &b| a.wrapping_add(b)) / v.len().max(1) as i64,
        }
    }
    fn float(self, v: &[f64]) -> f64 {
        let nan = v.iter().any(|x| x.is_nan());
        match self {
            Self::Max if nan => f64::NAN,
            Self::Min if nan => f64::NAN,
            Self::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Self::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
            Self::Sum => v.iter().sum(),
            Self::Mean => v.iter().sum::<f64>() / v.len() as f64,
        }
    }
}

impl Op for Variadic {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let ins: Vec<&Value> = inputs.iter().flatten().copied().collect();
        let Some(first) = ins.first() else {
            return Err(op_err("expected at least one input"));
        };
        let dtype = first.dtype();
        if let Some(v) = ins.iter().find(|v| v.dtype() != dtype) {
            return Err(op_err(format!(
                "inputs must share one type: {} and {}",
                dtype.name(),
                v.dtype().name()
            )));
        }
        let shapes: Vec<&[usize]> = ins.iter().map(|v| v.shape()).collect();
        let out_shape = host::broadcast(&shapes)?;
        if all_host(inputs) && (host_dtype(dtype) || !dtype.is_float()) || dtype == DType::F64 {
            let hs: Vec<&crate::tensor::HostTensor> = ins
                .iter()
                .map(|v| {
                    v.host()
                        .ok_or_else(|| op_err("float64 tensors must be on the host"))
                })
                .collect::<Result<_>>()?;
            let kind = *self;
            let fi: host::IntFn<'_> = &move |v| kind.int(v);
            let ff = move |v: &[f64]| kind.float(v);
            return Ok(vec![Value::Host(host::map(&hs, dtype, Some(fi), &ff)?)]);
        }
        if ins.len() == 1 {
            return Ok(vec![(*first).clone()]);
        }
        let ts: Vec<GpuTensor> = ins.iter().map(|v| cx.to_gpu(v)).collect::<Result<_>>()?;
        // The first dispatch combines up to three inputs, each next one the result so far and
        // up to two more.
        let mut acc: Option<GpuTensor> = None;
        let mut rest = ts.as_slice();
        while !rest.is_empty() {
            let prev = acc.take();
            let take = if prev.is_some() { 2 } else { 3 }.min(rest.len());
            let (now, later) = rest.split_at(take);
            let views: Vec<View<'_>> = prev
                .iter()
                .chain(now)
                .map(|t| View::bcast(t, &out_shape))
                .collect();
            let names = &EW_INPUTS[..views.len()];
            let mut expr = names[0].to_string();
            for n in &names[1..] {
                expr = self.wgsl2(&expr, n);
            }
            if later.is_empty() && matches!(self, Self::Mean) {
                expr = format!("{expr} / {}", crate::gpu::wgsl_f32(ts.len() as f32));
            }
            acc = Some(ew_gpu(cx, &expr, &views, &out_shape, dtype)?);
            rest = later;
        }
        let out = acc.ok_or_else(|| op_err("no inputs were combined"))?;
        Ok(vec![Value::Gpu(out)])
    }
}

struct Clip {
    min: Option<f32>,
    max: Option<f32>,
}

fn clip(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    if a.opset < 11 {
        return Ok(Box::new(Clip {
            min: Some(a.f_or("min", f32::MIN)),
            max: Some(a.f_or("max", f32::MAX)),
        }));
    }
    Ok(Box::new(Clip {
        min: None,
        max: None,
    }))
}

impl Op for Clip {
    fn host_inputs(&self) -> &[usize] {
        &[1, 2]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let scalar = |i: usize| -> Result<Option<f64>> {
            Ok(opt_host(inputs, i)?.and_then(|t| t.to_f64().first().copied()))
        };
        let lo = self.min.map(f64::from).or(scalar(1)?);
        let hi = self.max.map(f64::from).or(scalar(2)?);
        if let Value::Host(h) = x
            && (host_dtype(h.dtype) || !h.dtype.is_float())
        {
            let (lo, hi) = (lo.unwrap_or(f64::MIN), hi.unwrap_or(f64::MAX));
            let r = host::map(&[h], h.dtype, None, &|v: &[f64]| v[0].max(lo).min(hi))?;
            return Ok(vec![Value::Host(r)]);
        }
        let t = cx.to_gpu(x)?;
        let lit = |v: f64| crate::gpu::wgsl_f32(v as f32);
        let mut e = "a".to_string();
        if let Some(lo) = lo {
            e = format!("max({e}, {})", lit(lo));
        }
        if let Some(hi) = hi {
            e = format!("min({e}, {})", lit(hi));
        }
        let shape = t.shape.clone();
        Ok(vec![Value::Gpu(ew_gpu(
            cx,
            &e,
            &[View::bcast(&t, &shape)],
            &shape,
            t.dtype,
        )?)])
    }
}
