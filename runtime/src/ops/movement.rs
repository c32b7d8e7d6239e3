//! Data movement: Transpose, Slice, Expand, Concat, Split, Gather, OneHot. Views (transpose, slice,
//! expand, split) are one strided copy each through the elementwise kernel.

use super::elementwise::{View, copy_view};
use super::{Attrs, Op, Registry, all_host, axis, host_in, opt_host, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::ops::host;
use crate::tensor::{DType, HostTensor, numel, strides};

const GATHER: &str = include_str!("../kernels/movement/gather.wgsl");
const CONCAT: &str = include_str!("../kernels/movement/concat.wgsl");
const ONEHOT: &str = include_str!("../kernels/movement/onehot.wgsl");

/// A strided view of a value, materialised on its side (host or GPU).
fn view_value(
    cx: &mut Ctx<'_>,
    x: &Value,
    out_shape: Vec<usize>,
    st: Vec<i64>,
    base: i64,
) -> Result<Value> {
    // The whole input in its own order (a full Slice, an Expand to the same shape): no copy.
    let own: Vec<i64> = strides(x.shape()).iter().map(|&s| s as i64).collect();
    if base == 0
        && out_shape == x.shape()
        && out_shape
            .iter()
            .zip(st.iter().zip(&own))
            .all(|(&d, (a, b))| d <= 1 || a == b)
    {
        return Ok(x.clone());
    }
    Ok(match x {
        Value::Host(h) => Value::Host(host::gather_view(h, out_shape, &st, base)),
        Value::Gpu(g) => Value::Gpu(copy_view(
            cx,
            View {
                t: g,
                base,
                strides: st,
            },
            &out_shape,
        )?),
    })
}

struct Transpose {
    perm: Option<Vec<i64>>,
}

impl Op for Transpose {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let r = x.shape().len();
        let perm: Vec<usize> = match &self.perm {
            Some(p) => p.iter().map(|&a| axis(a, r)).collect::<Result<_>>()?,
            None => (0..r).rev().collect(),
        };
        if perm.len() != r {
            return Err(op_err(format!("perm {perm:?} does not match rank {r}")));
        }
        let st = strides(x.shape());
        let shape = perm.iter().map(|&p| x.shape()[p]).collect();
        let pst = perm.iter().map(|&p| st[p] as i64).collect();
        Ok(vec![view_value(cx, x, shape, pst, 0)?])
    }
}

type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

struct Slice {
    /// Opset < 10: (starts, ends, axes) attributes.
    attrs: Option<SliceAttrs>,
}

impl Op for Slice {
    fn host_inputs(&self) -> &[usize] {
        &[1, 2, 3, 4]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let r = x.shape().len();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => (s.clone(), e.clone(), a.clone(), None),
            None => (
                host_in(inputs, 1)?.to_i64(),
                host_in(inputs, 2)?.to_i64(),
                opt_host(inputs, 3)?.map(HostTensor::to_i64),
                opt_host(inputs, 4)?.map(HostTensor::to_i64),
            ),
        };
        let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(op_err("starts/ends/axes/steps lengths differ"));
        }
        let st = strides(x.shape());
        let mut shape = x.shape().to_vec();
        let mut vst: Vec<i64> = st.iter().map(|&s| s as i64).collect();
        let mut base = 0i64;
        for k in 0..starts.len() {
            let a = axis(axes[k], r)?;
            let dim = x.shape()[a] as i64;
            let step = steps[k];
            if step == 0 {
                return Err(op_err("slice step 0"));
            }
            let norm = |v: i64| if v < 0 { v + dim } else { v };
            let (s, e) = if step > 0 {
                (norm(starts[k]).clamp(0, dim), norm(ends[k]).clamp(0, dim))
            } else {
                (
                    norm(starts[k]).clamp(-1, dim - 1),
                    norm(ends[k]).clamp(-1, dim - 1),
                )
            };
            let len = if step > 0 {
                (e - s + step - 1).div_euclid(step).max(0)
            } else {
                (s - e + (-step) - 1).div_euclid(-step).max(0)
            };
            shape[a] = len as usize;
            if len > 0 {
                base += s * st[a] as i64;
            }
            vst[a] = st[a] as i64 * step;
        }
        Ok(vec![view_value(cx, x, shape, vst, base)?])
    }
}

struct Expand;
impl Op for Expand {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let want: Vec<usize> = host_in(inputs, 1)?
            .to_i64()
            .iter()
            .map(|&d| d.max(0) as usize)
            .collect();
        let out = host::broadcast(&[x.shape(), &want])?;
        let st = host::bcast_strides(x.shape(), &out);
        Ok(vec![view_value(cx, x, out, st, 0)?])
    }
}

struct Concat {
    axis: i64,
}

/// Concatenates GPU tensors along `axis` (at most 6 per dispatch; more are chained).
pub fn concat_gpu(cx: &mut Ctx<'_>, ts: &[GpuTensor], ax: usize) -> Result<GpuTensor> {
    let first = ts.first().ok_or_else(|| op_err("Concat of nothing"))?;
    let mut out_shape = first.shape.clone();
    out_shape[ax] = ts.iter().map(|t| t.shape[ax]).sum();
    let parts: Vec<&GpuTensor> = ts.iter().filter(|t| t.numel() > 0).collect();
    if parts.len() > 6 {
        let head = concat_gpu(
            cx,
            &parts[..6].iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
            ax,
        )?;
        let mut rest = vec![head];
        rest.extend(parts[6..].iter().map(|t| (*t).clone()));
        return concat_gpu(cx, &rest, ax);
    }
    let out = cx.alloc(first.dtype, out_shape.clone())?;
    let n = numel(&out_shape);
    if n == 0 {
        return Ok(out);
    }
    let inner = numel(&out_shape[ax + 1..]);
    let mut p = ConcatParams {
        n: n as u32,
        inner: inner as u32,
        total: out_shape[ax] as u32,
        ..ConcatParams::default()
    };
    let mut inputs = [None; CONCAT_PARTS];
    let mut off = 0usize;
    for (i, t) in parts.iter().enumerate() {
        inputs[i] = Some(t.storage());
        p.offsets[i] = off as u32;
        p.counts[i] = t.shape[ax] as u32;
        off += t.shape[ax];
    }
    let k = cx.gpu.kernel(&ConcatSpec {
        inputs,
        y: out.storage(),
    })?;
    let mut bound = k.bind("y", &out);
    for (t, name) in parts.iter().zip(CONCAT_INPUTS) {
        bound = bound.bind(name, t);
    }
    cx.launch_mapped(bound, &p, n, &out)?;
    Ok(out)
}

/// Inputs of one concat dispatch.
const CONCAT_PARTS: usize = 6;
/// Their binding names.
const CONCAT_INPUTS: [&str; CONCAT_PARTS] = ["x0", "x1", "x2", "x3", "x4", "x5"];

crate::gpu_params! {
    /// Concat: the output viewed as `[outer, total, inner]`; input `k` covers
    /// `[offsets[k], offsets[k] + counts[k])` of the concatenated axis.
    struct ConcatParams {
        n: u32,
        inner: u32,
        total: u32,
        pad0: u32,
        offsets: [u32; 8],
        counts: [u32; 8],
    }
}

/// The concat kernel (`concat.wgsl`): its inputs' storages (up to six) and the output's.
#[derive(Hash)]
struct ConcatSpec {
    inputs: [Option<Storage>; CONCAT_PARTS],
    y: Storage,
}

impl KernelSpec for ConcatSpec {
    const NAME: &'static str = "concat";
    const WGSL: &'static [&'static str] = &[CONCAT];
    fn build(&self, _: &Features) -> Kernel {
        let mut k = Kernel::new("concat", CONCAT).params::<ConcatParams>();
        let mut sel = String::new();
        for (i, s) in self.inputs.iter().enumerate() {
            let Some(s) = s else { break };
            k = k.input(CONCAT_INPUTS[i], *s);
            sel.push_str(&format!(
                "if (c < prm_offsets({i}u) + prm_counts({i}u)) {{ return ld_x{i}((o * prm_counts({i}u) + c - prm_offsets({i}u)) * inner + j); }}\n    "
            ));
        }
        k.code("SELECT", &sel).output("y", self.y).mapped("y")
    }
}

crate::gpu_params! {
    /// Gather: data viewed as `[outer, dim, inner]`, `nidx` indices, output
    /// `[outer, nidx, inner]`.
    struct GatherParams {
        n: u32,
        inner: u32,
        nidx: u32,
        dim: u32,
    }
}

/// The gather kernel (`gather.wgsl`): the storages.
#[derive(Hash)]
struct GatherSpec {
    data: Storage,
    idx: Storage,
    y: Storage,
}

impl KernelSpec for GatherSpec {
    const NAME: &'static str = "gather";
    const WGSL: &'static [&'static str] = &[GATHER];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("gather", GATHER)
            .params::<GatherParams>()
            .input("data", self.data)
            .input("idx", self.idx)
            .output("y", self.y)
            .mapped("y")
    }
}

impl Op for Concat {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let ins: Vec<&Value> = inputs.iter().flatten().copied().collect();
        let first = ins.first().ok_or_else(|| op_err("Concat without inputs"))?;
        let r = first.shape().len();
        let ax = axis(self.axis, r)?;
        for v in &ins {
            if v.shape().len() != r || (0..r).any(|d| d != ax && v.shape()[d] != first.shape()[d]) {
                return Err(op_err(format!(
                    "cannot concat {:?} with {:?} on axis {ax}",
                    first.shape(),
                    v.shape()
                )));
            }
        }
        // All inputs but one empty: the result is that input (no copy).
        let mut full = ins.iter().filter(|v| numel(v.shape()) > 0);
        if let (Some(only), None) = (full.next(), full.next())
            && ins.iter().all(|v| v.dtype() == only.dtype())
        {
            return Ok(vec![(*only).clone()]);
        }
        if all_host(inputs) {
            let es = first.dtype().size();
            let mut shape = first.shape().to_vec();
            shape[ax] = ins.iter().map(|v| v.shape()[ax]).sum();
            let outer = numel(&shape[..ax]);
            let mut data = Vec::with_capacity(numel(&shape) * es);
            for o in 0..outer {
                for v in &ins {
                    let h = v.host().ok_or_else(|| op_err("host input expected"))?;
                    let blk = numel(&h.shape[ax..]) * es;
                    data.extend_from_slice(&h.data[o * blk..(o + 1) * blk]);
                }
            }
            return Ok(vec![Value::Host(HostTensor::new(
                first.dtype(),
                shape,
                data,
            )?)]);
        }
        let ts: Vec<GpuTensor> = ins.iter().map(|v| cx.to_gpu(v)).collect::<Result<_>>()?;
        Ok(vec![Value::Gpu(concat_gpu(cx, &ts, ax)?)])
    }
}

struct Split {
    axis: i64,
    split: Option<Vec<i64>>,
    num_outputs: Option<usize>,
}

impl Op for Split {
    fn host_inputs(&self) -> &[usize] {
        &[1]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let x = req(inputs, 0)?;
        let ax = axis(self.axis, x.shape().len())?;
        let dim = x.shape()[ax];
        let sizes: Vec<usize> = match (&self.split, opt_host(inputs, 1)?) {
            (Some(s), _) => s.iter().map(|&v| v.max(0) as usize).collect(),
            (None, Some(t)) => t.to_i64().iter().map(|&v| v.max(0) as usize).collect(),
            (None, None) => {
                let n = self
                    .num_outputs
                    .ok_or_else(|| op_err("Split needs split sizes or num_outputs"))?;
                let chunk = dim.div_ceil(n);
                (0..n)
                    .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                    .collect()
            }
        };
        if sizes.iter().sum::<usize>() != dim {
            return Err(op_err(format!("split sizes {sizes:?} do not sum to {dim}")));
        }
        let st: Vec<i64> = strides(x.shape()).iter().map(|&s| s as i64).collect();
        let mut outs = Vec::new();
        let mut off = 0;
        for s in sizes {
            let mut shape = x.shape().to_vec();
            shape[ax] = s;
            outs.push(view_value(cx, x, shape, st.clone(), off as i64 * st[ax])?);
            off += s;
        }
        Ok(outs)
    }
}

struct Gather {
    axis: i64,
}

impl Op for Gather {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let data = req(inputs, 0)?;
        let idx = req(inputs, 1)?;
        let ax = axis(self.axis, data.shape().len())?;
        let dim = data.shape()[ax];
        let mut shape = data.shape()[..ax].to_vec();
        shape.extend_from_slice(idx.shape());
        shape.extend_from_slice(&data.shape()[ax + 1..]);
        let inner = numel(&data.shape()[ax + 1..]);
        // Host indices outside [-dim, dim) are an error on either path.
        super::check_host_indices(idx, dim, "index")?;
        if let (Value::Host(d), Value::Host(i)) = (data, idx) {
            let es = d.dtype.size();
            // In range (checked above); negative ones count from the end.
            let ids: Vec<usize> = i
                .to_i64()
                .into_iter()
                .map(|q| (if q < 0 { q + dim as i64 } else { q }) as usize)
                .collect();
            let outer = numel(&d.shape[..ax]);
            let mut out = Vec::with_capacity(numel(&shape) * es);
            for o in 0..outer {
                for &q in &ids {
                    let s = ((o * dim + q) * inner) * es;
                    out.extend_from_slice(&d.data[s..s + inner * es]);
                }
            }
            return Ok(vec![Value::Host(HostTensor::new(d.dtype, shape, out)?)]);
        }
        let d = cx.to_gpu(data)?;
        let i = cx.to_gpu(idx)?;
        let out = cx.alloc(d.dtype, shape)?;
        let n = out.numel();
        let k = cx.gpu.kernel(&GatherSpec {
            data: d.storage(),
            idx: i.storage(),
            y: out.storage(),
        })?;
        let p = GatherParams {
            n: n as u32,
            inner: inner as u32,
            nidx: i.numel() as u32,
            dim: dim as u32,
        };
        cx.launch_mapped(
            k.bind("data", &d).bind("idx", &i).bind("y", &out),
            &p,
            n,
            &out,
        )?;
        Ok(vec![Value::Gpu(out)])
    }
}

fn slice(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let attrs = if a.opset < 10 {
        Some((
            a.ints("starts").ok_or_else(|| a.err("missing starts"))?,
            a.ints("ends").ok_or_else(|| a.err("missing ends"))?,
            a.ints("axes"),
        ))
    } else {
        None
    };
    Ok(Box::new(Slice { attrs }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "Transpose", |a| {
        Ok(Box::new(Transpose {
            perm: a.ints("perm"),
        }))
    });
    r.register("", "Slice", slice);
    r.register("", "Expand", |_| Ok(Box::new(Expand)));
    r.register("", "Concat", |a| {
        Ok(Box::new(Concat {
            axis: a.i("axis").ok_or_else(|| a.err("missing axis"))?,
        }))
    });
    r.register("", "Split", |a| {
        Ok(Box::new(Split {
            axis: a.i_or("axis", 0),
            split: if a.opset < 13 { a.ints("split") } else { None },
            num_outputs: Some(
                a.i("num_outputs")
                    .map_or(a.node.outputs.len(), |v| v.max(1) as usize),
            ),
        }))
    });
    r.register("", "Gather", |a| {
        Ok(Box::new(Gather {
            axis: a.i_or("axis", 0),
        }))
    });
    r.register("", "OneHot", |a| {
        Ok(Box::new(OneHot {
            axis: a.i_or("axis", -1),
        }))
    });
}

/// ai.onnx `OneHot` (opsets 9, 11): `depth` and `values` are read on the host, so the depth (the
/// output's new axis) may be computed at run time (the Gemma 4 vision pooler's soft-token count).
/// Indices of any numeric type, float ones truncated toward zero and `depth` cast to an integer
/// (as ONNX Runtime does); negative indices count from `depth`, any other outside `[0, depth)`
/// gives a row of `off`. The result has the values' type: on the GPU (one dispatch), except
/// float64 values (host only) and int64 values of host indices, computed on the host.
struct OneHot {
    axis: i64,
}

impl Op for OneHot {
    fn host_inputs(&self) -> &[usize] {
        &[1, 2]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let idx = req(inputs, 0)?;
        let depth_t = host_in(inputs, 1)?;
        let values = host_in(inputs, 2)?;
        if depth_t.numel() != 1 {
            return Err(op_err(format!(
                "depth must be a scalar or hold one element, not shape {:?}",
                depth_t.shape
            )));
        }
        // Non-integer depths are cast to int64 (truncated), as the spec says.
        let depth = match depth_t.dtype {
            d if d.is_float() => depth_t.to_f64()[0] as i64,
            _ => depth_t.to_i64()[0],
        };
        if depth < 1 {
            return Err(op_err(format!("depth must be positive, got {depth}")));
        }
        if values.shape.len() != 1 || values.numel() != 2 {
            return Err(op_err(format!(
                "values must be [off, on] (shape [2]), not shape {:?}",
                values.shape
            )));
        }
        let r = idx.shape().len();
        let ax = if self.axis < 0 {
            self.axis + r as i64 + 1
        } else {
            self.axis
        };
        if ax < 0 || ax > r as i64 {
            return Err(op_err(format!(
                "axis {} out of range for indices of rank {r}",
                self.axis
            )));
        }
        let ax = ax as usize;
        let depth_u = usize::try_from(depth).map_err(|_| op_err("depth too large"))?;
        let mut shape = idx.shape().to_vec();
        shape.insert(ax, depth_u);
        let inner = numel(&idx.shape()[ax..]);
        let dtype = values.dtype;
        let host_result = dtype == DType::F64 || (dtype == DType::I64 && idx.host().is_some());
        if host_result {
            let ids = idx
                .host()
                .ok_or_else(|| op_err("float64 values need indices on the host"))?;
            let ids: Vec<i64> = if ids.dtype.is_float() {
                ids.to_f64().iter().map(|&v| v as i64).collect()
            } else {
                ids.to_i64()
            };
            let n = numel(&shape);
            let hit = |i: usize| {
                let (o, d, j) = (i / (inner * depth_u), (i / inner) % depth_u, i % inner);
                let q = ids[o * inner + j];
                (if q < 0 { q + depth } else { q }) == d as i64
            };
            let t = if dtype == DType::F64 {
                let v = values.to_f64();
                let out: Vec<f64> = (0..n).map(|i| if hit(i) { v[1] } else { v[0] }).collect();
                HostTensor::from_f64_as(dtype, shape, &out)
            } else {
                let v = values.to_i64();
                let out: Vec<i64> = (0..n).map(|i| if hit(i) { v[1] } else { v[0] }).collect();
                HostTensor::from_i64_as(dtype, shape, &out)
            };
            return Ok(vec![Value::Host(t)]);
        }
        // Host indices go up as i32 (floats truncated here, int64 narrowed by the upload, which
        // saturates: an index beyond i32 is out of range either way).
        let i = match idx {
            Value::Host(h) if h.dtype == DType::F64 => {
                let v: Vec<i64> = h.to_f64().iter().map(|&x| x as i64).collect();
                cx.upload(&HostTensor::from_i64(h.shape.clone(), &v))?
            }
            v => cx.to_gpu(v)?,
        };
        let out = cx.alloc(dtype, shape)?;
        let n = out.numel();
        if n == 0 {
            return Ok(vec![Value::Gpu(out)]);
        }
        let v = values.to_f64();
        let k = cx.gpu.kernel(&OneHotSpec {
            idx: i.storage(),
            y: out.storage(),
        })?;
        let p = OneHotParams {
            n: n as u32,
            inner: inner as u32,
            depth: u32::try_from(depth).map_err(|_| op_err("depth too large"))?,
            pad: 0,
            off: v[0] as f32,
            on: v[1] as f32,
        };
        cx.launch_mapped(k.bind("idx", &i).bind("y", &out), &p, n, &out)?;
        Ok(vec![Value::Gpu(out)])
    }
}

crate::gpu_params! {
    /// OneHot: y viewed as `[outer, depth, inner]`, `off` / `on` its two values.
    struct OneHotParams {
        n: u32,
        inner: u32,
        depth: u32,
        pad: u32,
        off: f32,
        on: f32,
    }
}

/// The OneHot kernel (`onehot.wgsl`): the storages.
#[derive(Hash)]
struct OneHotSpec {
    idx: Storage,
    y: Storage,
}

impl KernelSpec for OneHotSpec {
    const NAME: &'static str = "onehot";
    const WGSL: &'static [&'static str] = &[ONEHOT];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("onehot", ONEHOT)
            .params::<OneHotParams>()
            .input("idx", self.idx)
            .output("y", self.y)
            .mapped("y")
    }
}
