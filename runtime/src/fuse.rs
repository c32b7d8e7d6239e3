//! Graph fusion at session load: groups of nodes that one kernel can compute are replaced by one
//! fused node, so that a decode step records fewer dispatches.
//!
//! Fused today (each pattern is matched on the real graph structure and guarded by exact checks:
//! op types and domains, attributes, initializer dtypes and shapes, and every intermediate value
//! having only consumers inside the group and not being a graph output):
//!
//! - **FusedGemv**: one or more `MatMulNBits` (4-bit, no bias, no `g_idx`) that read the same
//!   input, or one or more ai.onnx `MatMul` by an f32 initializer `[K, N]` (float projections:
//!   mobius keeps the per-layer input gate and projection float in its int4 exports, and every
//!   weight in fp32; f32 activations only, and a lone float `MatMul` only with a prologue or
//!   epilogue), with
//!   - a norm prologue: the input is `RMSNorm(x)` (consumed only by them), where RMSNorm is
//!     `SimplifiedLayerNormalization` or ai.onnx 23 `RMSNormalization` (fused alike), or
//!     `SkipSimplifiedLayerNormalization(res, RMSNorm(o))` (norm and residual in one node, as
//!     the mobius exporter writes them: its sum output is the residual prologue's `x`);
//!   - a residual prologue: `x = res + RMSNorm(o)` or `(res + ...) * scalar`
//!     (Gemma's post-norm + residual add + layer scalar); `x` stays an output when others read it;
//!   - an epilogue: `Gelu(tanh)(y_gate) * y_up` for two weights (the MLP), or for one weight
//!     `Gelu(tanh)(y) * other` (optionally `other = Gather(per_layer, i, axis=2)`, `i` a scalar
//!     initializer or `Constant`, or the same spelled `Squeeze(Slice(per_layer, [i], [i + 1],
//!     [2]), [2])`), the logit
//!     softcap `Mul(Tanh(Div(y, c)), c)` (the same scalar initializer value twice), or
//!     `Mul(y, s)` (`s` a scalar initializer).
//!   - packed weights: those of a group of several are packed at load (their bits, scales and
//!     zero points in one buffer; [`Fused`]'s last member lists the packs) and its separate
//!     results are ranges of one buffer, so the kernel binds one buffer for the weights and one
//!     for the results whatever their number. A lone weight is packed only when its group would
//!     not fit the adapter's storage buffers otherwise.
//! - **FusedNorms**: the independent RMS norms that follow one FusedGemv's separate results (the
//!   per-head q/k/v norms, a scale-free one spelled out in elementary ops among them: mobius'
//!   value norm) in one dispatch (their results ranges of one buffer, one binding),
//!   and any other norm unit between Casts (f16
//!   activations) or followed by a tail `Add(y, other)` (then `Mul(., scalar)`) (optionally with
//!   `other = Cast(float16)(x)`; Gemma's per-layer inputs), f32 or f16.
//! - **SharedAttn** (`shared_attn.rs`): Gemma 4's KV-shared attention (query norm, rotation by
//!   halves, 5-D MatMul / mask / Softmax / MatMul) as one flash-attention dispatch.
//! - **Spelled-out RMS norms** (`spelled_norm.rs`): `x / sqrt(mean(x²) + eps)` written as `Mul`,
//!   `ReduceMean`, `Add`, `Sqrt`, `Div` (the mobius exports' scale-free value norm): one norm
//!   dispatch (any number of rows).
//! - **Gelu+Gather+Mul** (`gelu_gather.rs`): `Gelu(tanh)(a) * Gather(data, i, axis)` (`i` a
//!   scalar constant) that no GEMV epilogue took (a float projection): one elementwise dispatch
//!   reading the slice through a strided view (f32; other types run the three nodes).
//! - **Attention on transposed caches** (`attn_kv_view.rs`): an ai.onnx `Attention` whose 3-D
//!   key and value are `Reshape(Transpose(cache, perm 0,2,1,3))` of [B, kv_heads, T, D] caches
//!   (the mobius exports' KV-shared layers) reads the caches in place: no Transpose copies.
//! - **Rotary pairs** (`rotary_pair.rs`): two ai.onnx `RotaryEmbedding` nodes on the same cos,
//!   sin and positions (a layer's query and key), one dispatch writing both.
//! - **Scaled lookups** (`gather_scale.rs`): `Mul(Gather(table, ids), s)` of a 2-D f32 table
//!   initializer and an f32 scalar initializer (an embedding times its scale), one dispatch.
//! - **RotaryTables** (`rotary_table.rs`): `Concat(Gather(cache, pos), same)` cos/sin tables read
//!   at the same positions, or two plain `Gather(cache, pos)` of same-shaped 2-D caches, one
//!   dispatch.
//!
//! A fused node runs its one kernel when the shapes allow it (one row, `M == 1`: decoding, the
//! input row fits the workgroup memory, weights not split across buffers except a lone weight's,
//! which takes one dispatch per part); otherwise it runs the original nodes one by one (prefill),
//! so a fusion never changes what a graph computes beyond f32 rounding. Groups that would need
//! more storage bindings than the adapter allows are not formed.

use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, KernelMemo, Value, input_signature};
use crate::gpu::{Gpu, Kernel, Storage};
use crate::model::{Graph, Initializer, Node};
use crate::ops::{Attrs, MS, Op};
use crate::tensor::DType;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

mod attn_kv_view;
mod gather_scale;
mod gelu_gather;
mod rotary_pair;
mod rotary_table;
mod shared_attn;
mod spelled_norm;

const FUSED_GEMV: &str = include_str!("kernels/fused_gemv.wgsl");
/// The fused GEMV's per-column sum of its TPC lanes' partial sums (r0, r1 -> a0, a1): a tree in
/// workgroup memory ...
const REDUCE_TREE: &str = "red[t] = r0;
        red1[t] = r1;
        workgroupBarrier();
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            if (lane < s) {
                red[t] = red[t] + red[t + s];
                red1[t] = red1[t] + red1[t + s];
            }
            workgroupBarrier();
        }
        let a0 = red[t];
        let a1 = red1[t];";
/// ... or a butterfly of subgroup shuffles (the lanes are consecutive in one subgroup).
const REDUCE_SHUFFLE: &str = "var a0 = r0;
        var a1 = r1;
        for (var s = TPC / 2u; s > 0u; s = s / 2u) {
            a0 = a0 + subgroupShuffleXor(a0, s);
            a1 = a1 + subgroupShuffleXor(a1, s);
        }";

/// Domain of fused nodes.
pub const FUSED_DOMAIN: &str = "gg.fused";

/// The node that stands in the graph for a fused group whose first member is named `first`
/// (`fused:FIRST`, op type `kind`, domain [`FUSED_DOMAIN`]), and the group's report line
/// (`KIND at FIRST`).
fn fused_node(
    first: &str,
    kind: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
) -> (Node, String) {
    let desc = format!("{kind} at {first}");
    let node = Node {
        name: format!("fused:{first}"),
        op_type: kind,
        domain: FUSED_DOMAIN.into(),
        inputs,
        outputs,
        attributes: Vec::new(),
    };
    (node, desc)
}

/// Adapter limits the patterns must respect.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Storage buffers one kernel may bind (the parameter buffer included).
    pub storage_buffers: u32,
    /// Workgroup memory in bytes.
    pub workgroup_bytes: u32,
    /// Bytes one binding may cover (weights packed together must fit).
    pub max_binding: u64,
    /// Storage offset alignment: where each packed weight starts.
    pub align: u64,
    /// Threads per output column of the fused GEMV (a divisor of its 64 threads): 8 on GPUs
    /// (the lanes read consecutive quant blocks, then add up), 1 on software adapters (an
    /// invocation per column: no cross-lane sum, and 64 columns share each workgroup's
    /// prologue).
    pub gemv_tpc: u32,
    /// Workgroups the fused GEMV leaves at least when it gives each invocation several columns
    /// (REPS, up to 8): 512 on GPUs, to keep them busy; 4 on software adapters, where a few
    /// cores run the workgroups one after another and each extra column shares every load of
    /// the row (E2B-shaped q4f16 decode on SwiftShader: 0.35 -> 0.55 tok/s).
    pub gemv_min_workgroups: u32,
    /// The fused GEMV reads the weight bits 16 bytes per load ([`Gpu::wide_weight_loads`]).
    pub gemv_wide: bool,
}

impl Limits {
    /// The device's limits.
    pub fn of(gpu: &Gpu) -> Self {
        Self {
            // The parameter block is a uniform buffer: the adapter's storage buffers plus it.
            storage_buffers: gpu.max_bindings() + 1,
            workgroup_bytes: gpu.limits.max_compute_workgroup_storage_size,
            max_binding: gpu.max_weight_part,
            align: u64::from(gpu.limits.min_storage_buffer_offset_alignment).max(4),
            gemv_tpc: gemv_tpc(gpu),
            gemv_min_workgroups: env_u32("GG_GEMV_MIN_WG")
                .filter(|&w| w > 0)
                .unwrap_or(if gpu.software { 4 } else { 512 }),
            gemv_wide: gpu.wide_weight_loads,
        }
    }
}

/// A natively set tuning variable (`GG_GEMV_TPC`, `GG_GEMV_MIN_WG`); never in the browser.
fn env_u32(name: &str) -> Option<u32> {
    #[cfg(not(target_arch = "wasm32"))]
    return std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    #[cfg(target_arch = "wasm32")]
    {
        let _ = name;
        None
    }
}

/// Threads per workgroup of the fused GEMV.
const WG: u32 = 64;

/// Threads per column of the fused GEMV on `gpu` (see [`Limits::gemv_tpc`]); natively
/// `GG_GEMV_TPC` (1, 2, 4, 8 .. 64) overrides it, for comparing both on one adapter.
fn gemv_tpc(gpu: &Gpu) -> u32 {
    env_u32("GG_GEMV_TPC")
        .filter(|t| t.is_power_of_two() && *t <= WG)
        .unwrap_or(if gpu.software { 1 } else { 8 })
}

/// One weight of a fused GEMV: a 4-bit `MatMulNBits` (`qw` its bits, `sc` its scales, `zp` its
/// zero points), or (`float`) an ai.onnx `MatMul` by an f32 initializer `[K, N]` (`qw` names it;
/// `sc` is empty, `block` 8: the row's staging unit).
struct Mat {
    node: usize,
    qw: String,
    sc: String,
    zp: Option<String>,
    n: usize,
    block: usize,
    out: String,
    float: bool,
}

/// An RMS norm, possibly between Casts (f16 activations).
struct Unit {
    nodes: Vec<usize>,
    input: String,
    output: String,
    /// The scale; empty for a scale-free norm spelled out in elementary ops (only among the
    /// sibling norms of a GEMV's results, see `spelled_norm.rs`).
    gamma: String,
    eps: f32,
    f16: bool,
}

/// What follows a norm unit's result `y`: `Add(y, other)`, then optionally `Mul(., scalar)`
/// (Gemma's per-layer inputs: `(norm(projection) + per_layer_inputs) * 1/sqrt(2)`).
struct Tail {
    nodes: Vec<usize>,
    other: String,
    /// `other` is read through a `Cast` to float16 (of a float tensor: the q4f16 exports cast the
    /// per-layer inputs), folded in.
    cast: bool,
    scalar: Option<String>,
    out: String,
}

struct Residual {
    f16: bool,
    nodes: Vec<usize>,
    o: String,
    g1: String,
    eps1: f32,
    res: String,
    scalar: Option<String>,
}

enum Epi {
    Separate,
    GeluMul {
        gate: usize,
        nodes: Vec<usize>,
        out: String,
    },
    GeluOther {
        nodes: Vec<usize>,
        other: String,
        gather: Option<(String, String)>,
        out: String,
    },
    /// `Mul(Tanh(Div(y, c)), c)` (Gemma's logit softcap), one weight; `div` and `mul` name
    /// scalar initializers holding the same value.
    Softcap {
        nodes: Vec<usize>,
        div: String,
        mul: String,
        out: String,
    },
    /// `Mul(y, s)`, one weight, `s` a scalar initializer.
    Scale {
        nodes: Vec<usize>,
        scalar: String,
        out: String,
    },
}

struct Spec {
    /// Whether the norm units say f16 activations (`None`: no norm, decided at run time).
    f16: Option<bool>,
    residual: Option<Residual>,
    /// The input row (the residual prologue's result when there is one).
    x: String,
    norm: Option<Unit>,
    k: usize,
    mats: Vec<Mat>,
    epi: Epi,
    /// The initializers of the weights (bits, scales, zero points) that go into one buffer at
    /// load (`Spec::pack`), bound once by the kernel.
    packed: Option<Vec<String>>,
}

struct Graphs<'a> {
    graph: &'a Graph,
    producer: HashMap<&'a str, usize>,
    consumers: HashMap<&'a str, Vec<usize>>,
    outputs: HashSet<&'a str>,
    inits: HashMap<&'a str, &'a Initializer>,
}

impl<'a> Graphs<'a> {
    fn new(graph: &'a Graph) -> Self {
        let mut producer = HashMap::new();
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            for o in &n.outputs {
                producer.insert(o.as_str(), i);
            }
            for x in n.inputs.iter().filter(|s| !s.is_empty()) {
                let c = consumers.entry(x.as_str()).or_default();
                if !c.contains(&i) {
                    c.push(i);
                }
            }
        }
        Self {
            graph,
            producer,
            consumers,
            outputs: graph.outputs.iter().map(|o| o.name.as_str()).collect(),
            inits: graph
                .initializers
                .iter()
                .map(|i| (i.name.as_str(), i))
                .collect(),
        }
    }
    fn node(&self, i: usize) -> &'a Node {
        &self.graph.nodes[i]
    }
    fn attrs(&self, i: usize) -> Attrs<'a> {
        let node = self.node(i);
        Attrs {
            node,
            opset: self.graph.opset(&node.domain),
        }
    }
    fn is(&self, i: usize, domain: &str, op: &str) -> bool {
        let n = self.node(i);
        n.op_type == op && (n.domain == domain || (domain.is_empty() && n.domain == "ai.onnx"))
    }
    /// An RMS norm node: `SimplifiedLayerNormalization` (the contrib-era export, registered in
    /// ai.onnx by ONNX Runtime) or ai.onnx 23 `RMSNormalization`; both compute
    /// `x / sqrt(mean(x²) + eps) * scale` over the axes from `axis` on, so they fuse alike.
    fn is_rms(&self, i: usize) -> bool {
        self.is(i, "", "SimplifiedLayerNormalization") || self.is(i, "", "RMSNormalization")
    }
    fn users(&self, v: &str) -> &[usize] {
        self.consumers.get(v).map_or(&[], Vec::as_slice)
    }
    /// `v` is read only by `node` (and is not a graph output).
    fn only_for(&self, v: &str, node: usize) -> bool {
        !self.outputs.contains(v) && self.users(v) == [node]
    }
    /// The one node reading `v` (which is not a graph output).
    fn single(&self, v: &str) -> Option<usize> {
        (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
    }
    fn producer_of(&self, v: &str, domain: &str, op: &str) -> Option<usize> {
        self.producer
            .get(v)
            .copied()
            .filter(|&p| self.is(p, domain, op))
    }
    /// An initializer of `dtype` with `numel` elements.
    fn init_is(&self, name: &str, dtype: DType, numel: usize) -> bool {
        self.inits
            .get(name)
            .is_some_and(|i| i.dtype == dtype && crate::tensor::numel(&i.shape) == numel)
    }
    /// A node with exactly one (non-empty) output, and inputs `n_in` (all present).
    fn plain(&self, i: usize, n_in: usize) -> bool {
        let n = self.node(i);
        n.outputs.len() == 1 && n.inputs.len() == n_in && n.inputs.iter().all(|s| !s.is_empty())
    }
    /// An RMS norm over the last axis with f32 statistics and an f32 `[k]` scale.
    fn rms_norm(&self, i: usize, k: usize) -> Option<(String, f32)> {
        if !self.is_rms(i) || !self.plain(i, 2) {
            return None;
        }
        let a = self.attrs(i);
        if a.i_or("axis", -1) != -1 || a.i_or("stash_type", 1) != 1 {
            return None;
        }
        let g = &self.node(i).inputs[1];
        self.init_is(g, DType::F32, k)
            .then(|| (g.clone(), a.f_or("epsilon", 1e-5)))
    }
    /// A Cast node to `to` (ONNX elem type) with one input and output.
    fn cast_to(&self, i: usize, to: i64) -> bool {
        self.is(i, "", "Cast") && self.plain(i, 1) && self.attrs(i).i("to") == Some(to)
    }
    /// The RMS-norm unit around norm node `p` over rows of `k`: the norm alone (f32 activations),
    /// or `Cast(float) -> norm -> Cast(float16)` (f16 activations, the q4f16 exports).
    fn unit(&self, p: usize, k: usize) -> Option<Unit> {
        let (gamma, eps) = self.rms_norm(p, k)?;
        let n = self.node(p);
        if let Some(c1) = self.producer.get(n.inputs[0].as_str()).copied()
            && self.cast_to(c1, 1)
            && self.only_for(&n.inputs[0], p)
            && self.users(&n.outputs[0]).len() == 1
            && !self.outputs.contains(n.outputs[0].as_str())
            && self.cast_to(self.users(&n.outputs[0])[0], 10)
        {
            let c2 = self.users(&n.outputs[0])[0];
            return Some(Unit {
                nodes: vec![c1, p, c2],
                input: self.node(c1).inputs[0].clone(),
                output: self.node(c2).outputs[0].clone(),
                gamma,
                eps,
                f16: true,
            });
        }
        Some(Unit {
            nodes: vec![p],
            input: n.inputs[0].clone(),
            output: n.outputs[0].clone(),
            gamma,
            eps,
            f16: false,
        })
    }
    /// The norm unit whose output is `v`.
    fn unit_producing(&self, v: &str, k: usize) -> Option<Unit> {
        let p = self.producer.get(v).copied()?;
        let p = if self.cast_to(p, 10) {
            self.producer
                .get(self.node(p).inputs[0].as_str())
                .copied()
                .filter(|&n| self.is_rms(n))?
        } else {
            p
        };
        if !self.is_rms(p) {
            return None;
        }
        self.unit(p, k).filter(|u| u.output == v)
    }
    /// A float initializer with one element (f32 or f16).
    fn scalar_init(&self, name: &str) -> bool {
        self.init_is(name, DType::F32, 1) || self.init_is(name, DType::F16, 1)
    }
    fn gelu_tanh(&self, i: usize) -> bool {
        self.is(i, "", "Gelu")
            && self.plain(i, 1)
            && self.attrs(i).s("approximate").as_deref() == Some("tanh")
    }
    fn matmul(&self, i: usize, x: &str) -> Option<(usize, Mat)> {
        if self.is(i, "", "MatMul") {
            return self.float_matmul(i, x);
        }
        if !self.is(i, MS, "MatMulNBits") || self.node(i).outputs.len() != 1 {
            return None;
        }
        let n = self.node(i);
        let a = self.attrs(i);
        let (k, nn, bits, block) = (a.i("K")?, a.i("N")?, a.i_or("bits", 4), a.i("block_size")?);
        let extra = n.inputs.iter().skip(4).any(|s| !s.is_empty());
        if bits != 4
            || !(16..=256).contains(&block)
            || !(block as u64).is_power_of_two()
            || k <= 0
            || nn <= 0
            || extra
            || n.inputs.len() < 3
            || n.inputs.first().map(String::as_str) != Some(x)
            || n.inputs[1..3].iter().any(String::is_empty)
        {
            return None;
        }
        let (k, nn, block) = (k as usize, nn as usize, block as usize);
        let nb = k.div_ceil(block);
        if !self.init_is(&n.inputs[1], DType::U8, nn * nb * block / 2) {
            return None;
        }
        let sc = self.inits.get(n.inputs[2].as_str())?;
        if !matches!(sc.dtype, DType::F32 | DType::F16)
            || crate::tensor::numel(&sc.shape) != nn * nb
        {
            return None;
        }
        let zp = n.inputs.get(3).filter(|s| !s.is_empty()).cloned();
        if let Some(z) = &zp
            && !self.init_is(z, DType::U8, nn * nb.div_ceil(2))
        {
            return None;
        }
        Some((
            k,
            Mat {
                node: i,
                qw: n.inputs[1].clone(),
                sc: n.inputs[2].clone(),
                zp,
                n: nn,
                block,
                out: n.outputs[0].clone(),
                float: false,
            },
        ))
    }

    /// `MatMul(x, W)` with `W` an f32 initializer `[K, N]` (a float projection: mobius keeps the
    /// per-layer input gate and projection float in its int4 exports, and every weight in fp32).
    fn float_matmul(&self, i: usize, x: &str) -> Option<(usize, Mat)> {
        let n = self.node(i);
        if !self.plain(i, 2) || n.inputs[0] != x || n.inputs[1] == x {
            return None;
        }
        let w = self.inits.get(n.inputs[1].as_str())?;
        if w.dtype != DType::F32 || w.shape.len() != 2 || w.shape[0] == 0 || w.shape[1] == 0 {
            return None;
        }
        Some((
            w.shape[0],
            Mat {
                node: i,
                qw: n.inputs[1].clone(),
                sc: String::new(),
                zp: None,
                n: w.shape[1],
                block: 8,
                out: n.outputs[0].clone(),
                float: true,
            },
        ))
    }

    /// The RMS norm reading `v` (directly or through one Reshape by a constant shape), when it is
    /// the only reader of each value on the way.
    fn norm_after(&self, v: &str) -> Option<Unit> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let mut n = single(v)?;
        if self.is(n, "", "Reshape") {
            let ins = &self.node(n).inputs;
            if !self.plain(n, 2)
                || !self
                    .inits
                    .get(ins[1].as_str())
                    .is_some_and(|i| i.dtype == DType::I64)
            {
                return None;
            }
            n = single(&self.node(n).outputs[0])?;
        }
        let unit_input = self.node(n).inputs.first()?.clone();
        if self.cast_to(n, 1) {
            n = single(&self.node(n).outputs[0])?;
        }
        if !self.is_rms(n) {
            return None;
        }
        let l = self
            .inits
            .get(self.node(n).inputs.get(1)?.as_str())
            .filter(|i| i.shape.len() == 1)?
            .shape[0];
        self.unit(n, l).filter(|u| u.input == unit_input)
    }

    /// `x = res + RMSNorm(o)` or `x = (res + RMSNorm(o)) * scalar`, the norm read only here.
    fn residual(&self, x: &str, k: usize) -> Option<Residual> {
        let mut nodes = Vec::new();
        let mut scalar = None;
        let mut sum = x.to_string();
        if let Some(m) = self.producer_of(x, "", "Mul")
            && self.plain(m, 2)
        {
            let ins = &self.node(m).inputs;
            let (a, s) = if self.scalar_init(&ins[1]) {
                (&ins[0], &ins[1])
            } else if self.scalar_init(&ins[0]) {
                (&ins[1], &ins[0])
            } else {
                return None;
            };
            if !self.only_for(a, m) {
                return None;
            }
            nodes.push(m);
            scalar = Some(s.clone());
            sum = a.clone();
        }
        let add = self.producer_of(&sum, "", "Add")?;
        if !self.plain(add, 2) {
            return None;
        }
        let ins = &self.node(add).inputs;
        for (ni, ri) in [(1, 0), (0, 1)] {
            let normed = &ins[ni];
            let Some(u) = self.unit_producing(normed, k) else {
                continue;
            };
            if ins[0] == ins[1] || !self.only_for(normed, add) {
                continue;
            }
            nodes.push(add);
            nodes.extend(&u.nodes);
            return Some(Residual {
                nodes,
                o: u.input,
                g1: u.gamma,
                eps1: u.eps,
                f16: u.f16,
                res: ins[ri].clone(),
                scalar,
            });
        }
        None
    }

    /// `v = SkipSimplifiedLayerNormalization(res, RMSNorm(o), gamma)[0]` (f32, no bias, its mean
    /// and inverse-deviation outputs unread): the norm unit (the skip node, its input row the
    /// sum output `x`) and the residual `x = res + RMSNorm(o)` of a prologue, as ONNX Runtime
    /// GenAI's exporters (mobius) write the post-norm + residual add + pre-norm step that our
    /// own graphs spell `Add` + `SimplifiedLayerNormalization`.
    fn skip_norm(&self, v: &str, k: usize) -> Option<(Unit, Residual)> {
        let s = self.producer.get(v).copied()?;
        let n = self.node(s);
        if !self.is(s, MS, "SkipSimplifiedLayerNormalization")
            || n.inputs.len() != 3
            || n.inputs.iter().any(String::is_empty)
            || n.outputs.first().map(String::as_str) != Some(v)
            || n.outputs.len() != 4
            || n.outputs[3].is_empty()
            || n.inputs[0] == n.inputs[1]
            || !self.init_is(&n.inputs[2], DType::F32, k)
        {
            return None;
        }
        let unread = |o: &String| {
            o.is_empty() || (self.users(o).is_empty() && !self.outputs.contains(o.as_str()))
        };
        if !n.outputs[1..3].iter().all(unread) {
            return None;
        }
        for (oi, ri) in [(1, 0), (0, 1)] {
            let normed = &n.inputs[oi];
            let Some(u) = self.unit_producing(normed, k).filter(|u| !u.f16) else {
                continue;
            };
            if !self.only_for(normed, s) {
                continue;
            }
            let eps = self.attrs(s).f_or("epsilon", 1e-5);
            let unit = Unit {
                nodes: vec![s],
                input: n.outputs[3].clone(),
                output: v.to_string(),
                gamma: n.inputs[2].clone(),
                eps,
                f16: false,
            };
            let residual = Residual {
                f16: false,
                nodes: u.nodes,
                o: u.input,
                g1: u.gamma,
                eps1: u.eps,
                res: n.inputs[ri].clone(),
                scalar: None,
            };
            return Some((unit, residual));
        }
        None
    }

    /// The other input of binary node `i` (`Mul`/`Div`; `v` must be its first input when
    /// `first`) when it is a scalar float initializer and `v` the operand.
    fn scalar_operand(&self, i: usize, v: &str, first: bool) -> Option<String> {
        let ins = &self.node(i).inputs;
        if !self.plain(i, 2) || ins[0] == ins[1] {
            return None;
        }
        let s = if ins[0] == v {
            &ins[1]
        } else if ins[1] == v && !first {
            &ins[0]
        } else {
            return None;
        };
        self.scalar_init(s).then(|| s.clone())
    }
    /// Whether scalar initializers `a` and `b` hold the same value (same name, or equal inline
    /// bytes of the same type).
    fn same_scalar(&self, a: &str, b: &str) -> bool {
        use crate::model::InitData;
        if a == b {
            return true;
        }
        match (self.inits.get(a), self.inits.get(b)) {
            (Some(x), Some(y)) => {
                x.dtype == y.dtype
                    && matches!((&x.data, &y.data),
                        (InitData::Inline(p), InitData::Inline(q)) if p == q)
            }
            _ => false,
        }
    }
    /// A scalar epilogue of one MatMulNBits result `y` (read only by it): `Mul(y, s)`, or the
    /// softcap `Mul(Tanh(Div(y, c)), c)`; every intermediate read only inside, not an output.
    fn scalar_epilogue(&self, y: &str, free: &dyn Fn(&usize) -> bool) -> Option<Epi> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let n = single(y).filter(free)?;
        if self.is(n, "", "Mul") {
            let scalar = self.scalar_operand(n, y, false)?;
            return Some(Epi::Scale {
                nodes: vec![n],
                scalar,
                out: self.node(n).outputs[0].clone(),
            });
        }
        if !self.is(n, "", "Div") {
            return None;
        }
        let div = self.scalar_operand(n, y, true)?;
        let d = &self.node(n).outputs[0];
        let t = single(d).filter(free)?;
        if !self.is(t, "", "Tanh") || !self.plain(t, 1) {
            return None;
        }
        let tv = &self.node(t).outputs[0];
        let m = single(tv).filter(free)?;
        if !self.is(m, "", "Mul") {
            return None;
        }
        let mul = self.scalar_operand(m, tv, false)?;
        self.same_scalar(&div, &mul).then(|| Epi::Softcap {
            nodes: vec![n, t, m],
            div,
            mul,
            out: self.node(m).outputs[0].clone(),
        })
    }

    /// The `Add(y, other) [-> Mul(., scalar)]` reading the norm unit result `y`, each value on the
    /// way read only by the next node and not a graph output.
    fn norm_tail(&self, y: &str, free: &dyn Fn(&usize) -> bool) -> Option<Tail> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let add = single(y).filter(free)?;
        let ins = &self.node(add).inputs;
        if !self.is(add, "", "Add") || !self.plain(add, 2) || ins[0] == ins[1] {
            return None;
        }
        let other = if ins[0] == y { &ins[1] } else { &ins[0] };
        let mut tail = Tail {
            nodes: vec![add],
            other: other.clone(),
            cast: false,
            scalar: None,
            out: self.node(add).outputs[0].clone(),
        };
        if let Some(c) = self.producer.get(other.as_str()).copied()
            && free(&c)
            && self.cast_to(c, 10)
            && self.only_for(other, add)
        {
            tail.nodes.push(c);
            tail.other = self.node(c).inputs[0].clone();
            tail.cast = true;
        }
        if let Some(m) = single(&tail.out).filter(free)
            && self.is(m, "", "Mul")
            && let Some(s) = self.scalar_operand(m, &tail.out, false)
        {
            tail.nodes.push(m);
            tail.scalar = Some(s);
            tail.out = self.node(m).outputs[0].clone();
        }
        Some(tail)
    }

    /// `v = Squeeze(Slice(data, [i], [i + 1], [2]), [2])` read only by `reader` (`i` >= 0, unit
    /// steps; constants as initializers or `Constant`s): `Gather(data, i, axis = 2)` spelled as
    /// a slice (the mobius split decoder's per-layer input of layer `i`). Returns `data`, the
    /// `starts` value (read as the gather index) and the two nodes.
    fn sliced_row(
        &self,
        v: &str,
        reader: usize,
        free: &dyn Fn(&usize) -> bool,
    ) -> Option<(String, String, [usize; 2])> {
        let ints = |name: &str| {
            self.constant(name)
                .filter(|t| t.dtype == DType::I64)
                .map(|t| t.to_i64())
        };
        let sq = self.producer_of(v, "", "Squeeze").filter(free)?;
        let sn = self.node(sq);
        if !self.only_for(v, reader) || sn.outputs.len() != 1 || sn.inputs.is_empty() {
            return None;
        }
        let axes = if self.attrs(sq).opset < 13 {
            self.attrs(sq).ints("axes")?
        } else {
            ints(sn.inputs.get(1).filter(|s| !s.is_empty())?)?
        };
        let sliced = &sn.inputs[0];
        let sl = self.producer_of(sliced, "", "Slice").filter(free)?;
        let si = &self.node(sl).inputs;
        if axes != [2]
            || !self.only_for(sliced, sq)
            || self.attrs(sl).opset < 10
            || !(4..=5).contains(&si.len())
            || si[..4].iter().any(String::is_empty)
        {
            return None;
        }
        let (starts, ends) = (ints(&si[1])?, ints(&si[2])?);
        let steps_ok = si
            .get(4)
            .filter(|s| !s.is_empty())
            .is_none_or(|s| ints(s).is_some_and(|t| t == [1]));
        if starts.len() != 1
            || starts[0] < 0
            || ends != [starts[0] + 1]
            || ints(&si[3])? != [2]
            || !steps_ok
        {
            return None;
        }
        Some((si[0].clone(), si[1].clone(), [sl, sq]))
    }

    /// The group whose MatMulNBits read `v` (node `anchor` is the first of them).
    fn group(&self, v: &str, used: &HashSet<usize>) -> Option<Spec> {
        let free = |i: &usize| !used.contains(i);
        let mut norm = None;
        let mut x = v.to_string();
        let mut k = None;
        let mut mats = Vec::new();
        for &c in self.users(v).iter().filter(|&&c| free(&c)) {
            if let Some((kk, m)) = self.matmul(c, v)
                && k.is_none_or(|k| k == kk)
                && mats.len() < 3
            {
                k = Some(kk);
                mats.push(m);
            }
        }
        let k = k?;
        // One kind of weight per group (4-bit blocks of one size, or float).
        let first = mats.first()?;
        let (block, float) = (first.block, first.float);
        mats.retain(|m| m.float == float);
        if mats.iter().any(|m| m.block != block) {
            return None;
        }
        // Norm prologue: v = RMSNorm(x), read only by these MatMulNBits; or v =
        // SkipSimplifiedLayerNormalization(res, RMSNorm(o)), norm and residual in one node.
        let mut residual = None;
        let alone = !self.outputs.contains(v) && self.users(v).len() == mats.len();
        if let Some(u) = self.unit_producing(v, k)
            && u.nodes.iter().all(free)
            && alone
        {
            x = u.input.clone();
            norm = Some(u);
        } else if let Some((u, r)) = self.skip_norm(v, k)
            && u.nodes.iter().chain(&r.nodes).all(free)
            && alone
        {
            x = u.input.clone();
            norm = Some(u);
            residual = Some(r);
        }
        let residual =
            residual.or_else(|| self.residual(&x, k).filter(|r| r.nodes.iter().all(&free)));
        // Epilogue.
        let single = |v: &str| self.users(v).len() == 1 && !self.outputs.contains(v);
        let mut epi = Epi::Separate;
        if mats.len() == 2 {
            for gate in 0..2 {
                let (g, u) = (&mats[gate], &mats[1 - gate]);
                let gl = self.users(&g.out);
                if g.n != u.n || !single(&g.out) || !single(&u.out) || !self.gelu_tanh(gl[0]) {
                    continue;
                }
                let gelu = gl[0];
                let gout = &self.node(gelu).outputs[0];
                if !single(gout) {
                    continue;
                }
                let mul = self.users(gout)[0];
                let mi = &self.node(mul).inputs;
                if self.is(mul, "", "Mul")
                    && self.plain(mul, 2)
                    && self.users(&u.out) == [mul]
                    && ((mi[0] == *gout && mi[1] == u.out) || (mi[1] == *gout && mi[0] == u.out))
                    && free(&gelu)
                    && free(&mul)
                {
                    epi = Epi::GeluMul {
                        gate,
                        nodes: vec![gelu, mul],
                        out: self.node(mul).outputs[0].clone(),
                    };
                    break;
                }
            }
        } else if mats.len() == 1 && single(&mats[0].out) {
            let gelu = self.users(&mats[0].out)[0];
            if self.gelu_tanh(gelu) && free(&gelu) {
                let gout = &self.node(gelu).outputs[0];
                if single(gout) {
                    let mul = self.users(gout)[0];
                    let mi = &self.node(mul).inputs;
                    if self.is(mul, "", "Mul") && self.plain(mul, 2) && free(&mul) && mi[0] != mi[1]
                    {
                        let other = if mi[0] == *gout { &mi[1] } else { &mi[0] };
                        let mut nodes = vec![gelu, mul];
                        let mut gather = None;
                        if let Some(g) = self.producer_of(other, "", "Gather")
                            && free(&g)
                            && self.plain(g, 2)
                            && self.only_for(other, mul)
                            && self.attrs(g).i_or("axis", 0) == 2
                            && self
                                .constant(&self.node(g).inputs[1])
                                .is_some_and(|i| i.shape.is_empty() && i.dtype == DType::I64)
                        {
                            nodes.push(g);
                            let gi = &self.node(g).inputs;
                            gather = Some((gi[0].clone(), gi[1].clone()));
                        } else if let Some((data, start, both)) = self.sliced_row(other, mul, &free)
                        {
                            nodes.extend(both);
                            gather = Some((data, start));
                        }
                        epi = Epi::GeluOther {
                            nodes,
                            other: other.clone(),
                            gather,
                            out: self.node(mul).outputs[0].clone(),
                        };
                    }
                }
            }
            if matches!(epi, Epi::Separate) {
                epi = self
                    .scalar_epilogue(&mats[0].out, &free)
                    .unwrap_or(Epi::Separate);
            }
        }
        // All norm units agree on the activation type.
        if let (Some(n), Some(r)) = (&norm, &residual)
            && n.f16 != r.f16
        {
            return None;
        }
        let f16 = norm
            .as_ref()
            .map(|u| u.f16)
            .or(residual.as_ref().map(|r| r.f16));
        // Float weights: f32 activations only, and only with something to fuse (a lone float
        // MatMul would run its own op anyway).
        if float
            && (f16 == Some(true)
                || (mats.len() == 1
                    && norm.is_none()
                    && residual.is_none()
                    && matches!(epi, Epi::Separate)))
        {
            return None;
        }
        let spec = Spec {
            f16,
            residual,
            x,
            norm,
            k,
            mats,
            epi,
            packed: None,
        };
        // A lone MatMulNBits is taken too: with f16 activations the kernel stores f16 directly
        // (the unfused op needs a second dispatch to convert); with f32 it runs the original op.
        Some(spec)
    }
}

impl Spec {
    /// Storage bindings of the fused kernel: operands, outputs and the parameter block.
    /// (Several separate results are ranges of one buffer, bound once.)
    fn bindings(&self) -> usize {
        self.bindings_as(self.packed.is_some())
    }
    /// [`Spec::bindings`] with the weights packed or not.
    fn bindings_as(&self, packed: bool) -> usize {
        let zps = self.mats.iter().filter(|m| m.zp.is_some()).count();
        // A 4-bit weight binds its bits and scales (and zero points), a float one itself.
        let own: usize = self.mats.iter().map(|m| if m.float { 1 } else { 2 }).sum();
        let mut b = 2 + if packed { 1 } else { own + zps };
        b += if self.residual.is_some() { 3 } else { 1 };
        b += usize::from(self.norm.is_some());
        b + match self.epi {
            Epi::Separate | Epi::GeluMul { .. } | Epi::Softcap { .. } | Epi::Scale { .. } => 1,
            Epi::GeluOther { .. } => 2,
        }
    }
    /// The pack this group's weights would form: the initializers of their bits, scales and
    /// zero points, to be one buffer. `None` when they cannot be packed: a single weight, an
    /// operand that is not an initializer or is already in a pack, zero points for some weights
    /// only, or a pack above the binding limit.
    ///
    /// A single weight is packed (its bits and scales in one binding) only when the group
    /// would not fit the adapter's storage buffers otherwise (WebGPU's default of 8).
    fn pack(
        &self,
        g: &Graphs<'_>,
        limits: &Limits,
        taken: &HashSet<String>,
    ) -> Option<Vec<String>> {
        if self.mats.len() < 2
            && (self.mats.is_empty() || self.bindings_as(false) as u32 <= limits.storage_buffers)
        {
            return None;
        }
        let zps: Vec<String> = self.mats.iter().filter_map(|m| m.zp.clone()).collect();
        if !zps.is_empty() && zps.len() != self.mats.len() {
            return None;
        }
        let names: Vec<String> = self
            .mats
            .iter()
            .map(|m| m.qw.clone())
            .chain(self.mats.iter().filter(|m| !m.float).map(|m| m.sc.clone()))
            .chain(zps)
            .collect();
        fits_one_pack(g, &names, limits, taken).then_some(names)
    }
    fn nodes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.mats.iter().map(|m| m.node).collect();
        if let Some(u) = &self.norm {
            v.extend(&u.nodes);
        }
        if let Some(r) = &self.residual {
            v.extend(&r.nodes);
        }
        match &self.epi {
            Epi::Separate => {}
            Epi::GeluMul { nodes, .. }
            | Epi::GeluOther { nodes, .. }
            | Epi::Softcap { nodes, .. }
            | Epi::Scale { nodes, .. } => v.extend(nodes),
        }
        v.sort_unstable();
        v
    }
    fn kind(&self) -> String {
        let mut s = String::from("Fused[");
        if let Some(r) = &self.residual {
            s.push_str(if r.scalar.is_some() {
                "Norm+Add+Mul+"
            } else {
                "Norm+Add+"
            });
        }
        if self.norm.is_some() {
            s.push_str("Norm+");
        }
        let op = if self.mats[0].float {
            "MatMul"
        } else {
            "MatMulNBits"
        };
        s.push_str(&format!("{}x{op}", self.mats.len()));
        match &self.epi {
            Epi::Separate => {}
            Epi::GeluMul { .. } => s.push_str("+Gelu+Mul"),
            Epi::GeluOther { gather, .. } => s.push_str(if gather.is_some() {
                "+Gelu+Gather+Mul"
            } else {
                "+Gelu+Mul"
            }),
            Epi::Softcap { .. } => s.push_str("+Div+Tanh+Mul"),
            Epi::Scale { .. } => s.push_str("+Mul"),
        }
        s.push(']');
        s
    }
}

/// Where the fused kernel finds its operands: positions in the fused node's inputs.
struct Slots {
    o: Option<(usize, usize, usize, Option<usize>, f32)>,
    x: usize,
    g2: Option<(usize, f32)>,
    mats: Vec<(usize, usize, Option<usize>, usize)>,
    other: Option<(usize, Option<usize>)>,
    /// The epilogue's scalars (softcap: divisor and multiplier; scale: the factor twice).
    scalars: Option<(usize, usize)>,
    /// Whether the residual row is an output (first, before the results).
    h_out: bool,
    /// Activation type the norm units expect (`None`: either).
    f16: Option<bool>,
}

/// One node of the unfused fallback: its op, input and output slots of the local environment.
struct Sub {
    /// The graph node it runs.
    node: usize,
    op: Box<dyn Op>,
    ins: Vec<Option<usize>>,
    outs: Vec<usize>,
}

struct FusedGemv {
    kind: String,
    k: usize,
    block: usize,
    /// Float weights (`MatMul` by f32 `[K, N]`; `block` is 8).
    float: bool,
    ns: Vec<usize>,
    epi: u8, // 0 separate, 1 gelu*mul (gate index in `gate`), 2 gelu*other, 3 softcap, 4 scale
    gate: usize,
    slots: Slots,
    fallback: Fallback,
    /// The prologue for rows the one-kernel path does not take (`None`: no prologue).
    rows: Option<RowsPrologue>,
    limits: Limits,
    /// The one-kernel path's last kernel (a decode step's inputs look the same every step).
    memo: KernelMemo,
}

/// A fused group's prologue (residual and/or norm) as one dispatch over all rows
/// (`rows_prologue.wgsl`), for the shapes the one-kernel path does not take (prefill): its
/// results go into the fallback's environment, which then skips the nodes they replace.
struct RowsPrologue {
    /// Per fallback sub: whether the prologue kernel computes its result.
    skip: Vec<bool>,
    /// The slot of the residual prologue's result h (with a residual).
    h: Option<usize>,
    /// The slot of the normalised row (with a norm).
    y: Option<usize>,
}

/// An operand on the GPU, `None` when it is missing, i64, fails `ok`, or is split across buffers.
fn gpu_operand(
    cx: &mut Ctx<'_>,
    inputs: &[Option<&Value>],
    i: usize,
    ok: impl Fn(&Value) -> bool,
) -> Result<Option<GpuTensor>> {
    match inputs.get(i).copied().flatten() {
        Some(v) if v.dtype() != DType::I64 && ok(v) => {
            let t = cx.to_gpu(v)?;
            Ok(t.split.is_none().then_some(t))
        }
        _ => Ok(None),
    }
}

/// A graph scalar: a host value of the activation type, one element, of rank at most `rank`.
fn host_scalar(inputs: &[Option<&Value>], i: usize, act: DType, rank: usize) -> Option<f32> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Host(h)) if h.dtype == act && h.numel() == 1 && h.shape.len() <= rank => {
            Some(h.to_f32()[0])
        }
        _ => None,
    }
}

/// The body of the fused kernels' `rd()`: rounding to f16 for f16 activations (the unfused
/// graph stores every result as f16), the identity for f32.
fn rd_code(f16: bool) -> &'static str {
    if f16 {
        "return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;"
    } else {
        "return x;"
    }
}

const ROWS_PROLOGUE: &str = include_str!("kernels/rows_prologue.wgsl");

impl FusedGemv {
    /// The prologue over every row in one dispatch: the environment values it provides, or
    /// `None` when the operands do not fit it (the fallback then runs every node).
    fn rows_prologue(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
    ) -> Result<Option<Vec<(usize, Value)>>> {
        let Some(rows) = &self.rows else {
            return Ok(None);
        };
        let k = self.k;
        let Some(x) = inputs.get(self.slots.x).copied().flatten() else {
            return Ok(None);
        };
        let act = x.dtype();
        let f16 = act == DType::F16;
        if !matches!(act, DType::F32 | DType::F16)
            || self.slots.f16.is_some_and(|m| m != f16)
            || k == 0
            || x.shape().last() != Some(&k)
            || (f16 && !k.is_multiple_of(2))
        {
            return Ok(None);
        }
        let shape = x.shape().to_vec();
        let m = x.numel() / k;
        if m == 0 {
            return Ok(None);
        }
        let row = |v: &Value| v.dtype() == act && v.shape() == shape.as_slice();
        let gamma = |v: &Value| v.dtype() == DType::F32 && v.numel() == k;
        let st = Storage::of(act).unwrap_or(Storage::F32);
        let mut kern = Kernel::new("rows_prologue", ROWS_PROLOGUE)
            .workgroup(WG)
            .wg_reduce(cx.gpu.subgroups);
        let mut bind: Vec<GpuTensor> = Vec::new();
        let mut body = String::new();
        let mut scalar = 1.0f32;
        let res = self.slots.o.is_some();
        if let Some((o, r, g1, sc, eps1)) = self.slots.o {
            let (Some(o), Some(r), Some(g1)) = (
                gpu_operand(cx, inputs, o, row)?,
                gpu_operand(cx, inputs, r, row)?,
                gpu_operand(cx, inputs, g1, gamma)?,
            ) else {
                return Ok(None);
            };
            if let Some(sc) = sc {
                let Some(v) = host_scalar(inputs, sc, act, shape.len()) else {
                    return Ok(None);
                };
                scalar = v;
            }
            kern = kern
                .input("o", st)
                .input("res", st)
                .input("g1", Storage::F32);
            bind.extend([o, r, g1]);
            let h = |l: &str| {
                let h =
                    format!("rd(ld_res(base + {l}) + rd(ld_o(base + {l}) * inv1 * ld_g1({l})))");
                if sc.is_some() {
                    format!("rd({h} * scalar)")
                } else {
                    h
                }
            };
            body.push_str(&format!(
                "var ss = 0.0;
    for (var l = t; l < K; l = l + WG) {{ let u = ld_o(base + l); ss = ss + u * u; }}
    let inv1 = inverseSqrt(wg_sum(t, ss) / f32(K) + {eps});
    var s2 = 0.0;
    for (var w = t; w < K / EPW; w = w + WG) {{
        let l = w * EPW;
        let l1 = min(l + 1u, K - 1u);
        let h0 = {h0};
        let h1 = {h1};
        st_h(base / EPW + w, h0, h1);
        s2 = s2 + h0 * h0;
        if (EPW == 2u) {{ s2 = s2 + h1 * h1; }}
    }}
    ",
                eps = crate::gpu::wgsl_f32(eps1),
                h0 = h("l"),
                h1 = h("l1"),
            ));
        } else {
            let Some(xt) = gpu_operand(cx, inputs, self.slots.x, row)? else {
                return Ok(None);
            };
            kern = kern.input("x", st);
            bind.push(xt);
            body.push_str(
                "var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) { let u = ld_x(base + l); s2 = s2 + u * u; }
    ",
            );
        }
        if let Some((g2, eps2)) = self.slots.g2 {
            let Some(g) = gpu_operand(cx, inputs, g2, gamma)? else {
                return Ok(None);
            };
            kern = kern.input("g2", Storage::F32);
            bind.push(g);
            let src = if res { "ld_h" } else { "ld_x" };
            body.push_str(&format!(
                "let inv2 = inverseSqrt(wg_sum(t, s2) / f32(K) + {eps});
    for (var w = t; w < K / EPW; w = w + WG) {{
        let l = w * EPW;
        let l1 = min(l + 1u, K - 1u);
        st_y(base / EPW + w, rd({src}(base + l) * inv2 * ld_g2(l)), rd({src}(base + l1) * inv2 * ld_g2(l1)));
    }}",
                eps = crate::gpu::wgsl_f32(eps2),
            ));
        }
        let mut preset = Vec::new();
        let mut outs = Vec::new();
        if let Some(slot) = rows.h.filter(|_| res) {
            let h = cx.alloc(act, shape.clone())?;
            kern = kern.output("h", st);
            outs.push((slot, h));
        }
        if let Some(slot) = rows.y.filter(|_| self.slots.g2.is_some()) {
            let y = cx.alloc(act, shape.clone())?;
            kern = kern.output("y", st);
            outs.push((slot, y));
        }
        let kern = kern
            .u32("K", k as u32)
            .u32("EPW", if f16 { 2 } else { 1 })
            .code("RD", rd_code(f16))
            .code("BODY", &body);
        let mut refs: Vec<&GpuTensor> = bind.iter().collect();
        refs.extend(outs.iter().map(|(_, t)| t));
        const MAX_X: usize = 65535;
        let grid = (m.min(MAX_X) as u32, m.div_ceil(MAX_X) as u32);
        cx.dispatch_groups(&kern, &refs, &[m as u32, scalar.to_bits()], grid)?;
        preset.extend(outs.into_iter().map(|(slot, t)| (slot, Value::Gpu(t))));
        Ok(Some(preset))
    }

    /// The one-kernel path, or `None` when the shapes need the fallback.
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let k = self.k;
        let prologue = self.slots.o.is_some() || self.slots.g2.is_some();
        let lone = !prologue && self.epi == 0 && self.ns.len() == 1;
        let nb = k.div_ceil(self.block);
        // The row is staged in workgroup memory (padded to whole blocks) when it fits, and must be
        // for a prologue; otherwise it is read from memory.
        let tpc = self.limits.gemv_tpc;
        let cols = (WG / tpc) as usize;
        let staged = ((nb * self.block + nb + cols) as u64 + 2 * u64::from(WG)) * 4
            <= u64::from(self.limits.workgroup_bytes);
        if !staged && prologue {
            return Ok(None);
        }
        let Some(x) = inputs.get(self.slots.x).copied().flatten() else {
            return Ok(None);
        };
        // M == 1: the row is the whole input. Activations f32, or f16 (rounded like the graph).
        let act = x.dtype();
        let f16 = act == DType::F16;
        if x.shape().last() != Some(&k)
            || x.numel() != k
            || !matches!(act, DType::F32 | DType::F16)
            || self.slots.f16.is_some_and(|m| m != f16)
            || (f16 && (!k.is_multiple_of(2) || self.ns.iter().any(|n| !n.is_multiple_of(2))))
            || (lone && !f16)
            || (self.float && f16)
        {
            return Ok(None);
        }
        let row_shape = x.shape().to_vec();
        // The code depends on the inputs' types, shapes, offsets and scalars only: when they
        // look as they did last time, the last kernel is run again without writing its code.
        let sig = input_signature(inputs);
        let hit = self.memo.get(sig);
        let build = KernelMemo::must_build(&hit);
        // Operands on the GPU (small constants live on the host and are uploaded).
        macro_rules! operand {
            ($i:expr, $ok:expr) => {
                match gpu_operand(cx, inputs, $i, $ok)? {
                    Some(t) => t,
                    None => return Ok(None),
                }
            };
        }
        let row = |v: &Value| v.dtype() == act && v.numel() == k;
        let gamma = |v: &Value| v.dtype() == DType::F32 && v.numel() == k;
        let mut bind: Vec<GpuTensor> = Vec::new();
        // On a hit the kernel builder records nothing (its code is skipped below too).
        let mut kern = if build {
            Kernel::new("fused_gemv", FUSED_GEMV)
        } else {
            Kernel::discard()
        }
        .workgroup(WG)
        .wg_reduce(cx.gpu.subgroups);
        let mut scalar = 1.0f32;
        let mut pro = String::new();
        let st = |d: DType| Storage::of(d).unwrap_or(Storage::F32);
        if let Some((o, res, g1, sc, eps1)) = self.slots.o {
            let o = operand!(o, row);
            let res = operand!(res, row);
            let g1 = operand!(g1, gamma);
            if res.shape != o.shape {
                return Ok(None);
            }
            if let Some(sc) = sc {
                let Some(v) = host_scalar(inputs, sc, act, row_shape.len()) else {
                    return Ok(None);
                };
                scalar = v;
            }
            bind.extend([o, res, g1]);
            if build {
                kern = kern
                    .input("o", st(act))
                    .input("res", st(act))
                    .input("g1", Storage::F32);
                pro.push_str(&format!(
                    "var ss = 0.0;
    for (var l = t; l < K; l = l + WG) {{ let u = ld_o(l); ss = ss + u * u; }}
    let inv1 = inverseSqrt(wg_sum(t, ss) / f32(K) + {eps});
    var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) {{
        let h = {h};
        xs_set(l, h);
        s2 = s2 + h * h;
    }}
    workgroupBarrier();
    {store}
    ",
                    eps = crate::gpu::wgsl_f32(eps1),
                    h = if sc.is_some() {
                        "rd(rd(ld_res(l) + rd(ld_o(l) * inv1 * ld_g1(l))) * scalar)"
                    } else {
                        "rd(ld_res(l) + rd(ld_o(l) * inv1 * ld_g1(l)))"
                    },
                    store = if self.slots.h_out {
                        "if (flat == 0u) {
        for (var w = t; w < K / EPW_h; w = w + WG) {
            st_h(w, xs_get(w * EPW_h), xs_get(min(w * EPW_h + 1u, K - 1u)));
        }
    }"
                    } else {
                        ""
                    },
                ));
            }
        } else {
            let xt = operand!(self.slots.x, row);
            bind.push(xt);
            kern = kern.input("x", st(act));
            if staged && build {
                pro.push_str(
                    "var s2 = 0.0;
    for (var l = t; l < K; l = l + WG) { let h = ld_x(l); xs_set(l, h); s2 = s2 + h * h; }
    ",
                );
            }
        }
        if let Some((g2, eps2)) = self.slots.g2 {
            let g = operand!(g2, gamma);
            bind.push(g);
            if build {
                kern = kern.input("g2", Storage::F32);
                pro.push_str(&format!(
                    "let inv2 = inverseSqrt(wg_sum(t, s2) / f32(K) + {});
    for (var l = t; l < K; l = l + WG) {{ xs_set(l, rd(xs_get(l) * inv2 * ld_g2(l))); }}",
                    crate::gpu::wgsl_f32(eps2)
                ));
            }
        }
        if staged && build {
            // The padding of the last block meets the weights' padding nibbles.
            pro.push_str(
                "
    for (var l = K + t; l < NB * BLOCK; l = l + WG) { xs_set(l, 0.0); }",
            );
        }
        let zrow = nb.div_ceil(2);
        // Wide outputs (the vocabulary, the wide MLPs): each invocation computes REPS columns at
        // once (COLS apart, sharing each load of the row), so a workgroup's prologue serves
        // COLS * REPS columns, while leaving at least `gemv_min_workgroups` workgroups. Several separate outputs
        // (their columns in consecutive ranges) keep one column per invocation.
        let nv = if self.epi == 0 {
            self.ns.iter().sum()
        } else {
            self.ns[0]
        };
        let reps = if self.epi == 0 && self.ns.len() > 1 {
            1
        } else {
            (nv / (cols * self.limits.gemv_min_workgroups as usize))
                .clamp(1, 8)
                .next_power_of_two() as u32
        };
        let mut dots = String::new();
        // A lone weight may be split by rows across buffers (a large vocabulary): one dispatch
        // per part, each computing that part's columns (`prm[2]..prm[3]`).
        let mut split: Option<(usize, Vec<(usize, GpuTensor)>)> = None;
        let mut weights: Vec<(GpuTensor, GpuTensor, Option<GpuTensor>)> = Vec::new();
        for &(qw, sc, zp, n) in &self.slots.mats {
            if self.float {
                // f32 [K, N], in one buffer (split weights take the fallback).
                let w = operand!(qw, |v: &Value| v.dtype() == DType::F32
                    && v.numel() == k * n);
                weights.push((w.clone(), w, None));
                continue;
            }
            let q = match inputs.get(qw).copied().flatten() {
                Some(v) if v.dtype() == DType::U8 && v.numel() == n * nb * self.block / 2 => {
                    let t = cx.to_gpu(v)?;
                    if let Some(parts) = &t.split {
                        let odd = |x: usize| f16 && !x.is_multiple_of(2);
                        if self.ns.len() != 1
                            || parts.iter().any(|(r0, p)| {
                                odd(*r0) || odd(p.shape.first().copied().unwrap_or(1))
                            })
                        {
                            return Ok(None);
                        }
                        split = Some((bind.len(), parts.as_ref().clone()));
                    }
                    t
                }
                _ => return Ok(None),
            };
            let s = operand!(sc, |v: &Value| matches!(v.dtype(), DType::F32 | DType::F16)
                && v.numel() == n * nb);
            let z = match zp {
                None => None,
                Some(z) => Some(operand!(z, |v: &Value| v.dtype() == DType::U8
                    && v.numel() == n * zrow)),
            };
            weights.push((q, s, z));
        }
        // Weights packed at load (ranges of one buffer, `fuse`'s packs) are bound once and read
        // at their offsets: one binding for the group's bits, scales and zero points.
        let (q0, _, z0) = &weights[0];
        let packed = !weights.is_empty()
            && weights.iter().all(|(q, s, z)| {
                let shared = |t: &GpuTensor| t.view.is_some() && t.shares_buffer(q0);
                shared(q)
                    && shared(s)
                    && z.as_ref().map_or(z0.is_none(), shared)
                    && z.is_some() == z0.is_some()
            });
        // The weight bits are read 16 bytes (four words of a quant block) per load where the
        // blocks are whole multiples of 16 bytes and every weight starts on a 16-byte boundary
        // (packed slots and buffers start at multiples of the storage offset alignment).
        let wide = self.limits.gemv_wide
            && !self.float
            && self.block.is_multiple_of(32)
            && weights
                .iter()
                .all(|(q, _, _)| q.byte_offset().is_multiple_of(16));
        let bits_input = |k: Kernel, name: &str| {
            if wide {
                k.input_wide(name, Storage::U8)
            } else {
                k.input(name, Storage::U8)
            }
        };
        if packed {
            kern = bits_input(kern, "wts");
            bind.push(q0.whole());
        }
        for (j, (q, s, z)) in weights.into_iter().enumerate() {
            if self.float {
                if !packed {
                    bind.push(q.clone());
                }
                if build {
                    let ld = if packed {
                        format!("bitcast<f32>(ldw_wts(i + {}u))", q.byte_offset() / 4)
                    } else {
                        kern = kern.input(&format!("qw{j}"), Storage::F32);
                        format!("ld_qw{j}(i)")
                    };
                    dots.push_str(&float_dot(j, reps, self.ns[j], &ld));
                }
                continue;
            }
            if !build {
                if !packed {
                    bind.extend([q, s]);
                    bind.extend(z);
                }
                continue;
            }
            if packed {
                // The loaders of gpu.rs's bindings, at this weight's offsets in `w`.
                let sc = if s.dtype == DType::F16 {
                    format!(
                        "let k = i + {}u; return unpack2x16float(ldw_wts(k >> 1u))[k & 1u];",
                        s.byte_offset() / 2
                    )
                } else {
                    format!(
                        "return bitcast<f32>(ldw_wts(i + {}u));",
                        s.byte_offset() / 4
                    )
                };
                dots.push_str(&format!(
                    "fn ldw_qw{j}(w: u32) -> u32 {{ return ldw_wts(w + {}u); }}
fn ld_sc{j}(i: u32) -> f32 {{ {sc} }}
",
                    q.byte_offset() / 4,
                ));
                if wide {
                    dots.push_str(&format!(
                        "fn ldv_qw{j}(v: u32) -> vec4<u32> {{ return ldv_wts(v + {}u); }}\n",
                        q.byte_offset() / 16,
                    ));
                }
                if let Some(z) = &z {
                    dots.push_str(&format!(
                        "fn ldi_zp{j}(i: u32) -> i32 {{ let k = i + {}u; return i32((ldw_wts(k >> 2u) >> ((k & 3u) * 8u)) & 0xffu); }}\n",
                        z.byte_offset()
                    ));
                }
            } else {
                kern = bits_input(kern, &format!("qw{j}")).input(&format!("sc{j}"), s.storage());
                bind.extend([q, s]);
                if let Some(z) = &z {
                    kern = kern.input(&format!("zp{j}"), Storage::U8);
                    bind.push(z.clone());
                }
            }
            let zp_code = if z.is_some() {
                format!("f32((u32(ldi_zp{j}(n * ZROW + b / 2u)) >> ((b & 1u) * 4u)) & 15u)")
            } else {
                "8.0".to_string()
            };
            dots.push_str(&format!(
                "fn zero{j}(n: u32, b: u32) -> f32 {{ return {zp_code}; }}\n"
            ));
            dots.push_str(&gemv_dot(j, reps, wide));
        }
        let mut other_off = 0u32;
        if let Some((other, gather_idx)) = self.slots.other {
            let n = self.ns[0];
            let ot = operand!(other, |v: &Value| v.dtype() == act);
            match gather_idx {
                Some(gi) => {
                    // Gather(data [1, 1, L, N], i, axis=2) for one row.
                    let Some(Value::Host(ih)) = inputs.get(gi).copied().flatten() else {
                        return Ok(None);
                    };
                    let s = &ot.shape;
                    if s.len() != 4
                        || s[0] * s[1] != 1
                        || s[3] != n
                        || ih.numel() != 1
                        || row_shape.len() != 3
                    {
                        return Ok(None);
                    }
                    let i = ih.to_i64()[0];
                    let i = if i < 0 { i + s[2] as i64 } else { i };
                    if i < 0 || i as usize >= s[2] {
                        return Ok(None);
                    }
                    other_off = (i as usize * n) as u32;
                }
                None => {
                    let mut want = row_shape.clone();
                    if let Some(l) = want.last_mut() {
                        *l = n;
                    }
                    if ot.shape != want {
                        return Ok(None);
                    }
                }
            }
            kern = kern.input("other", ot.storage());
            bind.push(ot);
        }
        // Outputs.
        let out_shape = |n: usize| {
            let mut s = row_shape.clone();
            if let Some(l) = s.last_mut() {
                *l = n;
            }
            s
        };
        let mut results: Vec<GpuTensor> = Vec::new();
        let mut h_out = None;
        if self.slots.h_out {
            let h = cx.alloc(act, row_shape.clone())?;
            kern = kern.output("h", st(act));
            bind.push(h.clone());
            h_out = Some(h);
        }
        let (compute, value, store) = match self.epi {
            0 => {
                let mut compute = String::new();
                let mut store = String::new();
                let mut start = 0usize;
                // Several results: ranges of one buffer, one binding.
                let shapes: Vec<Vec<usize>> = self.ns.iter().map(|&n| out_shape(n)).collect();
                let pack = if shapes.len() > 1 {
                    let ys = cx.alloc_pack(act, &shapes)?;
                    bind.push(ys[0].whole());
                    if build {
                        kern = kern.output("y", st(act));
                        dots.push_str(&packed_stores(&ys, None));
                    }
                    Some(ys)
                } else {
                    None
                };
                for (j, &n) in self.ns.iter().enumerate() {
                    let y = match &pack {
                        Some(ys) => ys[j].clone(),
                        None => {
                            let y = cx.alloc(act, out_shape(n))?;
                            if build {
                                kern = kern.output(&format!("y{j}"), st(act));
                            }
                            bind.push(y.clone());
                            y
                        }
                    };
                    results.push(y);
                    let end = start + n;
                    if !build {
                        start = end;
                        continue;
                    }
                    let (cond, els) = if j + 1 == self.ns.len() {
                        (String::new(), "")
                    } else {
                        (format!("if (v < {end}u) "), "else ")
                    };
                    compute.push_str(&format!(
                        "{cond}{{ p0 = dot{j}(v - {start}u, lane); }} {els}"
                    ));
                    store.push_str(&format!(
                        "{cond}{{ st_y{j}((v - {start}u) / EPW, x0, x1); }} {els}"
                    ));
                    start = end;
                }
                (compute, "rd(a0)".to_string(), store)
            }
            1 => {
                let n = self.ns[0];
                let y = cx.alloc(act, out_shape(n))?;
                kern = kern.output("y", st(act));
                bind.push(y.clone());
                results.push(y);
                (
                    format!(
                        "p0 = dot{}(v, lane); p1 = dot{}(v, lane);",
                        self.gate,
                        1 - self.gate
                    ),
                    "rd(rd(gelu_tanh(rd(a0))) * rd(a1))".to_string(),
                    "st_y(v / EPW, x0, x1);".to_string(),
                )
            }
            e => {
                let n = self.ns[0];
                let y = cx.alloc(act, out_shape(n))?;
                kern = kern.output("y", st(act));
                bind.push(y.clone());
                results.push(y);
                let value = match e {
                    2 => "rd(rd(gelu_tanh(rd(a0))) * ld_other(other_off + v))".to_string(),
                    _ => {
                        // The scalars: host constants of the activation type, one element.
                        let Some((d, m)) = self.slots.scalars else {
                            return Ok(None);
                        };
                        let scalar = |i: usize| match inputs.get(i).copied().flatten() {
                            Some(Value::Host(h))
                                if h.dtype == act
                                    && h.numel() == 1
                                    && h.shape.len() <= row_shape.len() =>
                            {
                                h.to_f32().first().copied()
                            }
                            _ => None,
                        };
                        let (Some(c), Some(c2)) = (scalar(d), scalar(m)) else {
                            return Ok(None);
                        };
                        let c = crate::gpu::wgsl_f32(c);
                        if e == 3 {
                            if c != crate::gpu::wgsl_f32(c2) {
                                return Ok(None);
                            }
                            // As the Div, Tanh (ew.wgsl's clamped tanh_) and Mul nodes.
                            format!("rd(rd(tanh_(rd(rd(a0) / {c}))) * {c})")
                        } else {
                            format!("rd(rd(a0) * {c})")
                        }
                    }
                };
                (
                    "p0 = dot0(v, lane);".to_string(),
                    value,
                    "st_y(v / EPW, x0, x1);".to_string(),
                )
            }
        };
        if bind.len() as u32 + 1 > self.limits.storage_buffers {
            return Ok(None);
        }
        // A column's lanes add up through subgroup shuffles when they fit in one subgroup and
        // the workgroup is whole subgroups (see `Gpu::subgroup_sizes`).
        let (sg_min, sg_max) = cx.gpu.subgroup_sizes;
        let shuffle = cx.gpu.subgroups && tpc > 1 && tpc <= sg_min && WG.is_multiple_of(sg_max);
        if build {
            kern = kern
                .u32("K", k as u32)
                .u32("NB", nb as u32)
                .u32("BLOCK", self.block as u32)
                .u32("ZROW", zrow as u32)
                .u32("NV", nv as u32)
                .u32("TPC", tpc)
                .u32("REPS", reps)
                .u32("EPW", if f16 { 2 } else { 1 })
                .code(
                    "RD",
                    rd_code(f16),
                )
                .u32("XS_LEN", if staged { (nb * self.block / 4) as u32 } else { 2 })
                .code(
                    "XM",
                    if staged {
                        "return 0.0;"
                    } else if k.is_multiple_of(8) {
                        "return ld_x(k);"
                    } else {
                        "return select(0.0, ld_x(min(k, K - 1u)), k < K);"
                    },
                )
                .code(
                    "XE",
                    if staged {
                        "return xs[2u * i];"
                    } else {
                        "let k = 8u * i; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
                    },
                )
                .code(
                    "XO",
                    if staged {
                        "return xs[2u * i + 1u];"
                    } else {
                        "let k = 8u * i + 1u; return vec4<f32>(xm(k), xm(k + 2u), xm(k + 4u), xm(k + 6u));"
                    },
                )
                .code(
                    "XEO",
                    if staged {
                        "return mat2x4<f32>(xs[2u * i], xs[2u * i + 1u]);"
                    } else if f16 && k.is_multiple_of(8) {
                        // Four words hold the eight elements: each unpacked once for both halves.
                        "let a = unpack2x16float(ldw_x(4u * i));
    let b = unpack2x16float(ldw_x(4u * i + 1u));
    let c = unpack2x16float(ldw_x(4u * i + 2u));
    let d = unpack2x16float(ldw_x(4u * i + 3u));
    return mat2x4<f32>(vec4<f32>(a.x, b.x, c.x, d.x), vec4<f32>(a.y, b.y, c.y, d.y));"
                    } else {
                        "return mat2x4<f32>(xe(i), xo(i));"
                    },
                )
                .code("NIBBLES", crate::ops::quant::NIBBLES_WGSL)
                .code("DOTS", &dots)
                .code("PROLOGUE", &pro)
                .code("COMPUTE", &compute)
                .code("VALUE", &value)
                .code("ORDER", if shuffle { "sg_id * sg_size + sg_lane" } else { "t" })
                .code("REDUCE", if shuffle { REDUCE_SHUFFLE } else { REDUCE_TREE })
                .code("STORE", &store);
        }
        let kern = self.memo.check(sig, hit, kern);
        let split_at = split.as_ref().map(|(at, _)| *at);
        let ranges: Vec<(usize, usize, Option<GpuTensor>)> = match split {
            Some((_, parts)) => parts
                .into_iter()
                .map(|(r0, p)| (r0, p.shape.first().copied().unwrap_or(0), Some(p)))
                .collect(),
            None => vec![(0, nv, None)],
        };
        for (v0, cnt, part) in ranges {
            let mut refs: Vec<&GpuTensor> = bind.iter().collect();
            if let (Some(p), Some(at)) = (&part, split_at) {
                refs[at] = p;
            }
            let groups = cnt.div_ceil(cols * reps as usize) as u64;
            cx.dispatch(
                &kern,
                &refs,
                &[scalar.to_bits(), other_off, v0 as u32, (v0 + cnt) as u32],
                groups * u64::from(WG),
            )?;
        }
        let mut outs = Vec::new();
        if let Some(h) = h_out {
            outs.push(Value::Gpu(h));
        }
        outs.extend(results.into_iter().map(Value::Gpu));
        Ok(Some(outs))
    }
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>`: lane `lane`'s share (blocks lane, lane + TPC, ..)
/// of the dot products of weight `j`'s columns n, n + COLS, .. (REPS of them, clamped to the
/// dispatch's last column) with the staged row, written out for distinct accumulators so that each
/// load of the row serves every column. `wide`: the bits are read four words per load
/// (`ldv_qw{j}`, whole quant blocks of 16 bytes), otherwise a word per load.
fn gemv_dot(j: usize, reps: u32, wide: bool) -> Rc<str> {
    thread_local! {
        /// The functions made so far: a decode step asks for the same few every time.
        static MADE: RefCell<HashMap<(usize, u32, bool), Rc<str>>> = RefCell::default();
    }
    MADE.with(|m| {
        m.borrow_mut()
            .entry((j, reps, wide))
            .or_insert_with(|| make_gemv_dot(j, reps, wide).into())
            .clone()
    })
}

fn make_gemv_dot(j: usize, reps: u32, wide: bool) -> String {
    let rs = 0..reps;
    let each = |f: &dyn Fn(u32) -> String| rs.clone().map(f).collect::<Vec<_>>().join("\n");
    let body = if wide {
        let words = (0..4)
            .map(|c| {
                format!(
                    "{{
                let eo = xeo(i0 + {c}u);
                let e = eo[0];
                let o = eo[1];
                {}
            }}",
                    each(&|r| format!(
                        "s{r} = s{r} + dot(nib_lo(q{r}[{c}]), e) + dot(nib_hi(q{r}[{c}]), o);"
                    ))
                )
            })
            .collect::<Vec<_>>()
            .join("\n            ");
        format!(
            "for (var u = 0u; u < BLOB_WORDS / 4u; u = u + 1u) {{
            let i0 = b * BLOB_WORDS + 4u * u;
            {loads}
            {words}
        }}",
            loads = each(&|r| format!("let q{r} = ldv_qw{j}((wb{r} >> 2u) + u);")),
        )
    } else {
        format!(
            "for (var w = 0u; w < BLOB_WORDS; w = w + 1u) {{
            let i = b * BLOB_WORDS + w;
            let eo = xeo(i);
            let e = eo[0];
            let o = eo[1];
            {}
        }}",
            each(&|r| format!(
                "let q{r} = ldw_qw{j}(wb{r} + w); s{r} = s{r} + dot(nib_lo(q{r}), e) + dot(nib_hi(q{r}), o);"
            ))
        )
    };
    format!(
        "fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        {wbs}
        {body}
        let bs = bsum[b];
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm[3] - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        wbs = each(&|r| format!(
            "let wb{r} = ((n{r} - prm[2]) * NB + b) * BLOB_WORDS; var s{r} = 0.0;"
        )),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + ld_sc{j}(n{r} * NB + b) * (s{r} - zero{j}(n{r}, b) * bs);"
        )),
        ret = rs
            .clone()
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// WGSL `dot{j}(n, lane) -> array<f32, REPS>` for float weight `j` (`[K, N]` f32, `N` = `n`,
/// element `i` read by the expression `ld`): as [`gemv_dot`], lane `lane`'s share (row words
/// lane, lane + TPC, .. of 8 elements each) of the dot products of columns n, n + COLS, .. with
/// the staged row. Elements past `K` (the staging's padding) count as zero.
fn float_dot(j: usize, reps: u32, n: usize, ld: &str) -> String {
    let each = |f: &dyn Fn(u32) -> String| (0..reps).map(f).collect::<Vec<_>>().join("\n        ");
    let w = |r: u32, o: [u32; 4]| {
        format!(
            "vec4<f32>(wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}), wf{j}(k0 + {}u, n{r}))",
            o[0], o[1], o[2], o[3]
        )
    };
    format!(
        "fn wf{j}(k: u32, c: u32) -> f32 {{
    let i = min(k, K - 1u) * {n}u + c;
    return select(0.0, {ld}, k < K);
}}
fn dot{j}(n: u32, lane: u32) -> array<f32, REPS> {{
    {cols}
    {accs}
    for (var b = lane; b < NB; b = b + TPC) {{
        let eo = xeo(b);
        let k0 = 8u * b;
        {acc}
    }}
    return array<f32, REPS>({ret});
}}
",
        cols = each(&|r| format!("let n{r} = min(n + {r}u * COLS, prm[3] - 1u);")),
        accs = each(&|r| format!("var acc{r} = 0.0;")),
        acc = each(&|r| format!(
            "acc{r} = acc{r} + dot({}, eo[0]) + dot({}, eo[1]);",
            w(r, [0, 2, 4, 6]),
            w(r, [1, 3, 5, 7])
        )),
        ret = (0..reps)
            .map(|r| format!("acc{r}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The original nodes of a group, run one by one over a local environment.
struct Fallback {
    subs: Vec<Sub>,
    n_in: usize,
    out_slots: Vec<usize>,
    n_slots: usize,
    /// The slot of every value name of the group.
    local: HashMap<String, usize>,
}

impl Fallback {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        self.run_with(cx, inputs, Vec::new(), &[])
    }

    /// Runs the subs not marked in `skip`, with `preset` values (slot, value) in the environment
    /// first: the results of a kernel that replaced the skipped ones.
    fn run_with(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        preset: Vec<(usize, Value)>,
        skip: &[bool],
    ) -> Result<Vec<Value>> {
        // Values produced here (and the preset ones); the fused node's own inputs are passed
        // on by reference, not copied (so that host constants keep their identity: their GPU
        // copies are reused, see `Ctx::upload`).
        let mut env: Vec<Option<Value>> = vec![None; self.n_slots];
        for (slot, v) in preset {
            env[slot] = Some(v);
        }
        let input = |i: usize| {
            if i < self.n_in {
                inputs.get(i).copied().flatten()
            } else {
                None
            }
        };
        for (i, s) in self.subs.iter().enumerate() {
            if skip.get(i).copied().unwrap_or(false) {
                continue;
            }
            let outs = {
                let refs: Vec<Option<&Value>> = s
                    .ins
                    .iter()
                    .map(|i| i.and_then(|i| env[i].as_ref().or_else(|| input(i))))
                    .collect();
                s.op.run(cx, &refs)?
            };
            for (slot, v) in s.outs.iter().zip(outs) {
                env[*slot] = Some(v);
            }
        }
        self.out_slots
            .iter()
            .map(|&s| {
                env[s]
                    .take()
                    .or_else(|| input(s).cloned())
                    .ok_or_else(|| op_err("fused fallback did not produce an output"))
            })
            .collect()
    }
}

const FUSED_NORMS: &str = include_str!("kernels/fused_norms.wgsl");

/// Independent RMS norms in one dispatch: (input slot, row length, epsilon, scale slot). A norm
/// without a scale (a scale-free norm spelled out in elementary ops, `spelled_norm.rs`) has row
/// length 0: the input's last dimension.
struct FusedNorms {
    norms: Vec<(usize, usize, f32, Option<usize>)>,
    /// Per norm, an `Add(y, other)` epilogue with an optional `Mul` by a scalar: (other slot,
    /// whether `other` is f32 cast to f16 here, scalar slot).
    tails: Vec<Option<(usize, bool, Option<usize>)>>,
    /// f16 activations (the norms sit between Casts).
    f16: bool,
    fallback: Fallback,
    /// The last kernel (see [`KernelMemo`]).
    memo: KernelMemo,
}

impl Op for FusedNorms {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let act = if self.f16 { DType::F16 } else { DType::F32 };
        let mut bind = Vec::new();
        let mut shapes = Vec::new();
        let sig = input_signature(inputs);
        let hit = self.memo.get(sig);
        let build = KernelMemo::must_build(&hit);
        // On a hit the kernel builder records nothing (its code is skipped below too).
        let mut kern = if build {
            Kernel::new("fused_norms", FUSED_NORMS)
        } else {
            Kernel::discard()
        }
        .workgroup(64)
        .wg_reduce(cx.gpu.subgroups);
        let mut fns = String::new();
        let mut disp = String::new();
        let mut row0 = 0usize;
        let mut ends: Vec<u32> = Vec::new();
        for (j, &(xi, l, eps, gi)) in self.norms.iter().enumerate() {
            let Some(xv) = inputs.get(xi).copied().flatten() else {
                return self.fallback.run(cx, inputs);
            };
            let l = match gi {
                Some(_) => l,
                None => xv.shape().last().copied().unwrap_or(0),
            };
            let gv = match gi {
                Some(gi) => match inputs.get(gi).copied().flatten() {
                    Some(gv) if gv.dtype() == DType::F32 && gv.numel() == l => Some(gv),
                    _ => return self.fallback.run(cx, inputs),
                },
                None => None,
            };
            if xv.dtype() != act
                || xv.shape().last() != Some(&l)
                || l == 0
                || (self.f16 && !l.is_multiple_of(2))
            {
                return self.fallback.run(cx, inputs);
            }
            let x = cx.to_gpu(xv)?;
            let g = match gv {
                Some(gv) => Some(cx.to_gpu(gv)?),
                None => None,
            };
            if x.split.is_some() {
                return self.fallback.run(cx, inputs);
            }
            let rows = x.numel() / l;
            shapes.push(x.shape.clone());
            if build {
                kern = kern.input(&format!("x{j}"), x.storage());
                if g.is_some() {
                    kern = kern.input(&format!("g{j}"), Storage::F32);
                }
            }
            let scaled = g.is_some();
            let scale = |l: &str| {
                if scaled {
                    format!(" * ld_g{j}({l})")
                } else {
                    String::new()
                }
            };
            // The tail: y = rd(rd(rd(y) + other) [* s]), as the Cast, Add and Mul nodes round.
            let mut tail = "rd(y)".to_string();
            if let Some((oi, cast, si)) = self.tails.get(j).copied().flatten() {
                let Some(ov) = inputs.get(oi).copied().flatten() else {
                    return self.fallback.run(cx, inputs);
                };
                let want = if cast { DType::F32 } else { act };
                if ov.dtype() != want
                    || (cast && act != DType::F16)
                    || ov.shape() != x.shape.as_slice()
                {
                    return self.fallback.run(cx, inputs);
                }
                let o = cx.to_gpu(ov)?;
                if o.split.is_some() {
                    return self.fallback.run(cx, inputs);
                }
                if build {
                    tail = format!("rd({tail} + rd(ld_o{j}(i)))");
                }
                if let Some(si) = si {
                    let s = match inputs.get(si).copied().flatten() {
                        Some(Value::Host(h))
                            if h.dtype == act
                                && h.numel() == 1
                                && h.shape.len() <= x.shape.len() =>
                        {
                            h.to_f32()[0]
                        }
                        _ => return self.fallback.run(cx, inputs),
                    };
                    if build {
                        tail = format!("rd({tail} * {})", crate::gpu::wgsl_f32(s));
                    }
                }
                if build {
                    kern = kern.input(&format!("o{j}"), o.storage());
                }
                bind.push(x);
                bind.extend(g);
                bind.push(o);
            } else {
                bind.push(x);
                bind.extend(g);
            }
            row0 += rows;
            ends.push(row0 as u32);
            if !build {
                continue;
            }
            fns.push_str(&format!(
                "fn tail{j}(i: u32, y: f32) -> f32 {{
    return {tail};
}}
"
            ));
            fns.push_str(&format!(
                "fn norm{j}(row: u32, t: u32) {{
    let L = {l}u;
    let base = row * L;
    var s2 = 0.0;
    for (var l = t; l < L; l = l + WG) {{ let v = ld_x{j}(base + l); s2 = s2 + v * v; }}
    let inv = inverseSqrt(wg_sum(t, s2) / f32(L) + {eps});
    for (var w = t; w < L / EPW_y{j}; w = w + WG) {{
        let l0 = w * EPW_y{j};
        let l1 = min(l0 + 1u, L - 1u);
        st_y{j}(base / EPW_y{j} + w, tail{j}(base + l0, ld_x{j}(base + l0) * inv{s0}), tail{j}(base + l1, ld_x{j}(base + l1) * inv{s1}));
    }}
}}
",
                eps = crate::gpu::wgsl_f32(eps),
                s0 = scale("l0"),
                s1 = scale("l1"),
            ));
            // Row ranges come from the parameters (prm[j]: the end of norm j's rows), not the
            // code, so that prompts of any length share one pipeline.
            let start = if j == 0 {
                "0u".to_string()
            } else {
                format!("prm[{}]", j - 1)
            };
            disp.push_str(&format!(
                "if (row < prm[{j}]) {{ norm{j}(row - {start}, t); return; }}\n    "
            ));
        }
        // Several results: ranges of one buffer, one binding (so that three norms fit eight
        // storage buffers).
        // The results' offsets in a pack follow the norms' ends (prm[n + j]).
        let mut meta = ends;
        let outs = if shapes.len() > 1 {
            let ys = cx.alloc_pack(act, &shapes)?;
            bind.push(ys[0].whole());
            if build {
                kern = kern.output("y", Storage::of(act).unwrap_or(Storage::F32));
                fns.push_str(&packed_stores(&ys, Some(meta.len())));
            }
            meta.extend(ys.iter().map(|y| (y.byte_offset() / 4) as u32));
            ys
        } else {
            let mut outs = Vec::new();
            for (j, shape) in shapes.into_iter().enumerate() {
                let y = cx.alloc(act, shape)?;
                if build {
                    kern = kern.output(&format!("y{j}"), y.storage());
                }
                bind.push(y.clone());
                outs.push(y);
            }
            outs
        };
        if build {
            kern = kern
                .code("NORMS", &fns)
                .code("DISPATCH", &disp)
                .code("RD", rd_code(self.f16));
        }
        let kern = self.memo.check(sig, hit, kern);
        let refs: Vec<&GpuTensor> = bind.iter().collect();
        cx.dispatch(&kern, &refs, &meta, row0 as u64 * 64)?;
        Ok(outs.into_iter().map(Value::Gpu).collect())
    }
}

impl Op for FusedGemv {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        if let Some(v) = self.fast(cx, inputs)? {
            return Ok(v);
        }
        match (self.rows_prologue(cx, inputs)?, &self.rows) {
            (Some(preset), Some(rows)) => self.fallback.run_with(cx, inputs, preset, &rows.skip),
            _ => self.fallback.run(cx, inputs),
        }
    }
}

impl std::fmt::Debug for FusedGemv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.kind)
    }
}

/// WGSL for results that are ranges of one output binding `y` (from `Ctx::alloc_pack`): for
/// result `j`, `st_y{j}(w, v0, v1)` stores word `w` of its range, and `EPW_y{j}` is `EPW_y`.
/// `meta`: the ranges' first words are read from the parameters (`prm[meta + j]`, for results
/// whose sizes change from run to run, e.g. with the prompt's length) instead of written into
/// the code.
fn packed_stores(ys: &[GpuTensor], meta: Option<usize>) -> String {
    ys.iter()
        .enumerate()
        .map(|(j, y)| {
            let at = match meta {
                Some(m) => format!("prm[{}]", m + j),
                None => format!("{}u", y.byte_offset() / 4),
            };
            format!(
                "const EPW_y{j}: u32 = EPW_y;\nfn st_y{j}(w: u32, v0: f32, v1: f32) {{ st_y(w + {at}, v0, v1); }}\n"
            )
        })
        .collect()
}

/// Whether the initializers `names` can be one pack (one buffer, each at an offset aligned to
/// the adapter's storage-offset alignment) within the binding limit: each an initializer of a
/// storable type, named once and not already in a pack (`taken`).
fn fits_one_pack(
    g: &Graphs<'_>,
    names: &[String],
    limits: &Limits,
    taken: &HashSet<String>,
) -> bool {
    let mut total = 0u64;
    let mut seen = HashSet::new();
    for n in names {
        let Some(i) = g.inits.get(n.as_str()) else {
            return false;
        };
        let Some(st) = Storage::of(i.dtype) else {
            return false;
        };
        if taken.contains(n) || !seen.insert(n) {
            return false;
        }
        total += st
            .bytes(i.shape.iter().product())
            .max(4)
            .next_multiple_of(limits.align);
    }
    total <= limits.max_binding
}

/// Whether a path leads from `group`'s outputs, through nodes outside it, back into it (fusing
/// it would then create a cycle).
fn reenters(g: &Graphs<'_>, group: &HashSet<usize>) -> bool {
    let mut stack: Vec<usize> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    for &n in group {
        for o in &g.node(n).outputs {
            stack.extend(g.users(o).iter().filter(|u| !group.contains(u)));
        }
    }
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        for o in &g.node(n).outputs {
            for &u in g.users(o) {
                if group.contains(&u) {
                    return true;
                }
                stack.push(u);
            }
        }
    }
    false
}

/// `members` ordered so that each node comes after the members producing its inputs.
fn topo(g: &Graphs<'_>, members: &[usize]) -> Vec<usize> {
    let mut done: Vec<usize> = Vec::new();
    let mut left: Vec<usize> = members.to_vec();
    while !left.is_empty() {
        let ready = left.iter().position(|&n| {
            g.node(n).inputs.iter().all(|s| {
                g.producer
                    .get(s.as_str())
                    .is_none_or(|p| !left.contains(p) || *p == n)
            })
        });
        // A cycle inside one group cannot happen in a valid graph; keep file order then.
        let i = ready.unwrap_or(0);
        done.push(left.remove(i));
    }
    done
}

/// The values a group of nodes reads from outside it, in first-use order (the fused node's
/// inputs).
fn external_inputs(g: &Graphs<'_>, members: &[usize]) -> Vec<String> {
    let produced: HashSet<&str> = members
        .iter()
        .flat_map(|&n| g.node(n).outputs.iter().map(String::as_str))
        .collect();
    let mut ext: Vec<String> = Vec::new();
    for &n in members {
        for s in g.node(n).inputs.iter().filter(|s| !s.is_empty()) {
            if !produced.contains(s.as_str()) && !ext.contains(s) {
                ext.push(s.clone());
            }
        }
    }
    ext
}

/// The fallback of a group: its nodes in order over a local environment whose first slots are
/// the fused node's inputs `ext`; the fused node's outputs are `outs`.
fn fallback_for(
    g: &Graphs<'_>,
    members: &[usize],
    ext: &[String],
    outs: &[String],
    ops: &mut [Option<Box<dyn Op>>],
) -> Fallback {
    let mut local: HashMap<String, usize> = HashMap::new();
    for (i, s) in ext.iter().enumerate() {
        local.entry(s.clone()).or_insert(i);
    }
    let mut next = ext.len();
    let mut subs = Vec::new();
    for n in topo(g, members) {
        let node = g.node(n);
        let ins = node
            .inputs
            .iter()
            .map(|s| (!s.is_empty()).then(|| local[s]))
            .collect();
        let o: Vec<usize> = node
            .outputs
            .iter()
            .map(|s| {
                *local.entry(s.clone()).or_insert_with(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        subs.push(Sub {
            node: n,
            op: ops[n].take().expect("op not yet taken"),
            ins,
            outs: o,
        });
    }
    Fallback {
        out_slots: outs.iter().map(|s| local[s]).collect(),
        n_slots: next,
        n_in: ext.len(),
        subs,
        local,
    }
}

/// What the pass returns: the nodes to execute (fused groups replaced by one node each, placed
/// where the group's last node was), their ops, a description of each fused group, and the
/// initializers to pack into one buffer each (a fused kernel binds each pack once; every other
/// reader binds its own range).
pub type Fused = (Vec<Node>, Vec<Box<dyn Op>>, Vec<String>, Vec<Vec<String>>);

/// Runs the pass.
pub fn fuse(graph: &Graph, ops: Vec<Box<dyn Op>>, limits: &Limits) -> Fused {
    let g = Graphs::new(graph);
    let mut used: HashSet<usize> = HashSet::new();
    // KV-shared attention groups first: they hold per-head norms the norm pass would take.
    // (Each only when its attention kernel fits the adapter's storage buffers.)
    let shared: Vec<_> = shared_attn::find(&g, &used)
        .into_iter()
        .filter(|p| p.bindings() < limits.storage_buffers)
        .collect();
    for p in &shared {
        used.extend(&p.nodes);
    }
    let tables = rotary_table::find(&g, &used);
    for p in &tables {
        used.extend(&p.nodes);
    }
    let kv_views = attn_kv_view::find(&g, &used);
    for p in &kv_views {
        used.extend(&p.nodes);
    }
    let rotary_pairs = rotary_pair::find(&g, &used);
    for p in &rotary_pairs {
        used.extend(&p.nodes);
    }
    let gather_scales = gather_scale::find(&g, &used);
    for p in &gather_scales {
        used.extend(&p.nodes);
    }
    let mut specs: Vec<Spec> = Vec::new();
    // Initializers of the groups' weight packs (see `Spec::pack`).
    let mut taken: HashSet<String> = HashSet::new();
    let mut norm_groups: Vec<Vec<Unit>> = Vec::new();
    // Tails of standalone norm units, by the unit's output.
    let mut tails: HashMap<String, Tail> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if used.contains(&i) || !(g.is(i, MS, "MatMulNBits") || g.is(i, "", "MatMul")) {
            continue;
        }
        let Some(x) = node.inputs.first() else {
            continue;
        };
        let Some(mut spec) = g.group(x, &used) else {
            continue;
        };
        // The results' sibling norms are looked for among all the weights sharing the input,
        // also when the group is narrowed below.
        let outs_all: Vec<String> = spec.mats.iter().map(|m| m.out.clone()).collect();
        // Storage bindings: operands, outputs and the parameter block. A group that needs more
        // than the adapter allows is narrowed until it fits: first without the residual
        // prologue (left to the norm-tail pass), then without the norm prologue, then without
        // the epilogue, then with fewer weights (the others form groups of their own).
        spec.packed = spec.pack(&g, limits, &taken);
        while spec.bindings() as u32 > limits.storage_buffers {
            if spec.residual.is_some() {
                spec.residual = None;
            } else if spec.norm.is_some() {
                spec.norm = None;
                spec.x = x.clone();
            } else if !matches!(spec.epi, Epi::Separate) {
                spec.epi = Epi::Separate;
            } else if spec.mats.len() > 1 {
                spec.mats.pop();
                spec.packed = spec.pack(&g, limits, &taken);
            } else {
                break;
            }
            spec.f16 = spec
                .norm
                .as_ref()
                .map(|u| u.f16)
                .or(spec.residual.as_ref().map(|r| r.f16));
        }
        if spec.bindings() as u32 > limits.storage_buffers {
            continue;
        }
        let set: HashSet<usize> = spec.nodes().into_iter().collect();
        if set.iter().any(|n| used.contains(n)) || reenters(&g, &set) {
            continue;
        }
        used.extend(&set);
        if let Some(p) = &spec.packed {
            taken.extend(p.iter().cloned());
        }
        // Sibling norms of the results (per-head q/k/v norms): one more kernel for all of them.
        if matches!(spec.epi, Epi::Separate) && outs_all.len() >= 2 {
            let norms: Vec<Unit> = outs_all
                .iter()
                .filter_map(|o| g.norm_after(o).or_else(|| g.spelled_after(o)))
                .filter(|u| u.nodes.iter().all(|p| !used.contains(p)))
                .collect();
            let nset: HashSet<usize> = norms.iter().flat_map(|u| u.nodes.clone()).collect();
            // Each norm's input and scale, the results (one buffer) and the parameter block.
            let scales = norms.iter().filter(|u| !u.gamma.is_empty()).count();
            let bindings = norms.len() + scales + 2;
            if norms.len() >= 2
                && norms.iter().all(|u| u.f16 == norms[0].f16)
                && !reenters(&g, &nset)
                && bindings as u32 <= limits.storage_buffers
            {
                used.extend(&nset);
                norm_groups.push(norms);
            }
        }
        specs.push(spec);
    }
    // Any other norm between Casts (f16 activations): one kernel instead of three.
    for (p, node) in graph.nodes.iter().enumerate() {
        if used.contains(&p) || !g.is_rms(p) {
            continue;
        }
        let Some(l) = node
            .inputs
            .get(1)
            .and_then(|gm| g.inits.get(gm.as_str()))
            .filter(|i| i.shape.len() == 1)
            .map(|i| i.shape[0])
        else {
            continue;
        };
        if let Some(u) = g.unit(p, l)
            && u.nodes.iter().all(|n| !used.contains(n))
        {
            // With an `Add [-> Mul]` tail (f32 or f16): one kernel for the norm, add and scale.
            let free = |i: &usize| !used.contains(i);
            if let Some(t) = g.norm_tail(&u.output, &free) {
                let set: HashSet<usize> = u.nodes.iter().chain(&t.nodes).copied().collect();
                if 5 <= limits.storage_buffers && !reenters(&g, &set) {
                    used.extend(&set);
                    tails.insert(u.output.clone(), t);
                    norm_groups.push(vec![u]);
                    continue;
                }
            }
            if u.f16 && 4 <= limits.storage_buffers {
                used.extend(&u.nodes);
                norm_groups.push(vec![u]);
            }
        }
    }
    // Scale-free RMS norms spelled out in elementary ops: one norm dispatch each.
    let mut spelled = Vec::new();
    for i in 0..graph.nodes.len() {
        if used.contains(&i) {
            continue;
        }
        if let Some(p) = g.spelled_rms(i)
            && p.nodes.iter().all(|n| !used.contains(n))
        {
            used.extend(&p.nodes);
            spelled.push(p);
        }
    }
    // Gelu(a) * Gather(data, i) left by the GEMV epilogues (float projections): one dispatch.
    let mut gelu_gathers = Vec::new();
    for i in 0..graph.nodes.len() {
        if let Some(p) = g.gelu_gather(i)
            && p.nodes.iter().all(|n| !used.contains(n))
        {
            used.extend(&p.nodes);
            gelu_gathers.push(p);
        }
    }
    // The rotary cos and sin caches of the attentions: one pack each pair, bound once by the
    // attention and KV-append kernels (so that GroupQueryAttention with its rotary, both
    // caches' appends and a bias fits WebGPU's default 8 storage buffers).
    let mut packs: Vec<Vec<String>> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if !g.is(i, MS, "GroupQueryAttention") {
            continue;
        }
        let (Some(c), Some(s)) = (node.inputs.get(7), node.inputs.get(8)) else {
            continue;
        };
        let pair = vec![c.clone(), s.clone()];
        if c.is_empty() || s.is_empty() || c == s || packs.contains(&pair) {
            continue;
        }
        let (Some(ci), Some(si)) = (g.inits.get(c.as_str()), g.inits.get(s.as_str())) else {
            continue;
        };
        // Both are read at one element type (`Kernel::alias`).
        if ci.dtype == si.dtype && fits_one_pack(&g, &pair, limits, &taken) {
            taken.extend(pair.iter().cloned());
            packs.push(pair);
        }
    }
    if specs.is_empty()
        && norm_groups.is_empty()
        && shared.is_empty()
        && tables.is_empty()
        && kv_views.is_empty()
        && rotary_pairs.is_empty()
        && gather_scales.is_empty()
        && spelled.is_empty()
        && gelu_gathers.is_empty()
    {
        return (graph.nodes.clone(), ops, Vec::new(), packs);
    }
    let mut ops: Vec<Option<Box<dyn Op>>> = ops.into_iter().map(Some).collect();
    let mut at_last: HashMap<usize, (Node, Box<dyn Op>)> = HashMap::new();
    let mut fused = Vec::new();
    for p in shared {
        let last = *p.nodes.last().expect("non-empty group");
        let (node, op, desc) = shared_attn::build(&g, p, &mut ops);
        fused.push(desc);
        at_last.insert(last, (node, op));
    }
    for p in tables {
        let last = *p.nodes.last().expect("non-empty group");
        let (node, op, desc) = rotary_table::build(&g, p, &mut ops);
        fused.push(desc);
        at_last.insert(last, (node, op));
    }
    for p in kv_views {
        let last = *p.nodes.last().expect("non-empty group");
        if let Some((node, op, desc)) = attn_kv_view::build(&g, p, &mut ops) {
            fused.push(desc);
            at_last.insert(last, (node, op));
        }
    }
    for p in rotary_pairs {
        let last = *p.nodes.last().expect("two nodes");
        if let Some((node, op, desc)) = rotary_pair::build(&g, p, &mut ops) {
            fused.push(desc);
            at_last.insert(last, (node, op));
        }
    }
    for p in gather_scales {
        let last = *p.nodes.last().expect("two nodes");
        let (node, op, desc) = gather_scale::build(&g, p, &mut ops);
        fused.push(desc);
        at_last.insert(last, (node, op));
    }
    for spec in specs {
        let members = spec.nodes();
        let set: HashSet<usize> = members.iter().copied().collect();
        let ext = external_inputs(&g, &members);
        let pos = |name: &str| ext.iter().position(|e| e == name);
        // Outputs read outside the group (or graph outputs), in node order.
        let mut outs: Vec<String> = Vec::new();
        for &n in &members {
            for o in &g.node(n).outputs {
                if g.outputs.contains(o.as_str()) || g.users(o).iter().any(|u| !set.contains(u)) {
                    outs.push(o.clone());
                }
            }
        }
        // The fast path's outputs must be exactly these.
        let mut fast_outs: Vec<String> = Vec::new();
        let h_exposed = outs.contains(&spec.x);
        if h_exposed {
            fast_outs.push(spec.x.clone());
        }
        match &spec.epi {
            Epi::Separate => fast_outs.extend(spec.mats.iter().map(|m| m.out.clone())),
            Epi::GeluMul { out, .. }
            | Epi::GeluOther { out, .. }
            | Epi::Softcap { out, .. }
            | Epi::Scale { out, .. } => fast_outs.push(out.clone()),
        }
        let mut sorted_outs = outs.clone();
        sorted_outs.sort();
        let mut sorted_fast = fast_outs.clone();
        sorted_fast.sort();
        if sorted_outs != sorted_fast || (h_exposed && spec.residual.is_none()) {
            // Something in the group is read elsewhere: leave it unfused.
            continue;
        }
        packs.extend(spec.packed.clone());
        let need = |name: &str| pos(name).expect("external input");
        let slots = Slots {
            o: spec.residual.as_ref().map(|r| {
                (
                    need(&r.o),
                    need(&r.res),
                    need(&r.g1),
                    r.scalar.as_deref().map(need),
                    r.eps1,
                )
            }),
            x: if spec.residual.is_some() {
                // Unused by the fast path (the row comes from the prologue); shape from `o`.
                spec.residual.as_ref().map_or(0, |r| need(&r.o))
            } else {
                need(&spec.x)
            },
            g2: spec.norm.as_ref().map(|u| (need(&u.gamma), u.eps)),
            mats: spec
                .mats
                .iter()
                .map(|m| {
                    // A float weight has no scales: its slot stands in (unread).
                    let sc = if m.float { &m.qw } else { &m.sc };
                    (need(&m.qw), need(sc), m.zp.as_deref().map(need), m.n)
                })
                .collect(),
            other: match &spec.epi {
                Epi::GeluOther { other, gather, .. } => Some(match gather {
                    Some((data, idx)) => (need(data), Some(need(idx))),
                    None => (need(other), None),
                }),
                _ => None,
            },
            scalars: match &spec.epi {
                Epi::Softcap { div, mul, .. } => Some((need(div), need(mul))),
                Epi::Scale { scalar, .. } => Some((need(scalar), need(scalar))),
                _ => None,
            },
            h_out: h_exposed,
            f16: spec.f16,
        };
        let fallback = fallback_for(&g, &members, &ext, &fast_outs, &mut ops);
        let prologue: HashSet<usize> = spec
            .norm
            .iter()
            .flat_map(|u| u.nodes.iter().copied())
            .chain(spec.residual.iter().flat_map(|r| r.nodes.iter().copied()))
            .collect();
        let rows = (!prologue.is_empty()).then(|| RowsPrologue {
            skip: fallback
                .subs
                .iter()
                .map(|s| prologue.contains(&s.node))
                .collect(),
            h: spec
                .residual
                .as_ref()
                .and_then(|_| fallback.local.get(&spec.x).copied()),
            y: spec
                .norm
                .as_ref()
                .and_then(|u| fallback.local.get(&u.output).copied()),
        });
        let kind = spec.kind();
        let (epi, gate) = match &spec.epi {
            Epi::Separate => (0, 0),
            Epi::GeluMul { gate, .. } => (1, *gate),
            Epi::GeluOther { .. } => (2, 0),
            Epi::Softcap { .. } => (3, 0),
            Epi::Scale { .. } => (4, 0),
        };
        let op = FusedGemv {
            kind: kind.clone(),
            k: spec.k,
            block: spec.mats[0].block,
            float: spec.mats[0].float,
            ns: spec.mats.iter().map(|m| m.n).collect(),
            epi,
            gate,
            slots,
            fallback,
            rows,
            limits: *limits,
            memo: KernelMemo::default(),
        };
        let (node, desc) = fused_node(&g.node(members[0]).name, kind, ext, fast_outs);
        fused.push(desc);
        let last = *members.last().expect("non-empty group");
        at_last.insert(last, (node, Box::new(op)));
    }
    for units in norm_groups {
        let mut members: Vec<usize> = units.iter().flat_map(|u| u.nodes.clone()).collect();
        let mut norms = Vec::new();
        let mut ext: Vec<String> = Vec::new();
        let mut outs = Vec::new();
        let mut norm_tails = Vec::new();
        let mut suffix = "";
        for u in &units {
            let xi = ext.len();
            ext.push(u.input.clone());
            if u.gamma.is_empty() {
                // Scale-free (spelled out): its constants (epsilon, axes) are inputs of the
                // fallback; the kernel reads the row length from the input.
                norms.push((xi, 0, u.eps, None));
                for e in external_inputs(&g, &u.nodes) {
                    if e != u.input {
                        ext.push(e);
                    }
                }
            } else {
                let l = g.inits[u.gamma.as_str()].shape[0];
                norms.push((xi, l, u.eps, Some(ext.len())));
                ext.push(u.gamma.clone());
            }
            match tails.remove(&u.output) {
                Some(t) => {
                    members.extend(&t.nodes);
                    let oi = ext.len();
                    ext.push(t.other.clone());
                    let si = t.scalar.map(|s| {
                        ext.push(s);
                        ext.len() - 1
                    });
                    suffix = match (t.cast, si.is_some()) {
                        (false, false) => "+Add",
                        (false, true) => "+Add+Mul",
                        (true, false) => "+Cast+Add",
                        (true, true) => "+Cast+Add+Mul",
                    };
                    norm_tails.push(Some((oi, t.cast, si)));
                    outs.push(t.out);
                }
                None => {
                    norm_tails.push(None);
                    outs.push(u.output.clone());
                }
            }
        }
        members.sort_unstable();
        // Named after the norm op the graph uses (SimplifiedLayerNormalization or RMSNormalization).
        let norm_op = units
            .iter()
            .flat_map(|u| u.nodes.iter())
            .find(|&&n| g.is_rms(n))
            .map_or("RMSNorm", |&n| g.node(n).op_type.as_str());
        let spelled_out = units.iter().filter(|u| u.gamma.is_empty()).count();
        let kind = if spelled_out == 0 {
            format!("Fused[{}x{norm_op}{suffix}]", units.len())
        } else {
            format!(
                "Fused[{}x{norm_op}+{spelled_out}xSpelledRMSNorm{suffix}]",
                units.len() - spelled_out
            )
        };
        let op = FusedNorms {
            norms,
            tails: norm_tails,
            f16: units[0].f16,
            fallback: fallback_for(&g, &members, &ext, &outs, &mut ops),
            memo: KernelMemo::default(),
        };
        let (node, desc) = fused_node(&g.node(members[0]).name, kind, ext, outs);
        fused.push(desc);
        let last = *members.last().expect("non-empty group");
        at_last.insert(last, (node, Box::new(op)));
    }
    for p in spelled {
        // The norm kernel takes every shape: no fallback to keep.
        for &n in &p.nodes {
            ops[n] = None;
        }
        let (node, desc) = fused_node(
            &g.node(p.nodes[0]).name,
            "Fused[Mul+ReduceMean+Add+Sqrt+Div=RMSNorm]".into(),
            vec![p.x.clone()],
            vec![p.y.clone()],
        );
        fused.push(desc);
        let last = *p.nodes.last().expect("five nodes");
        at_last.insert(last, (node, p.op()));
    }
    for p in gelu_gathers {
        let ext = external_inputs(&g, &p.nodes);
        let outs = vec![p.out.clone()];
        let pos = |name: &str| ext.iter().position(|e| e == name).expect("external input");
        let op = gelu_gather::FusedGeluGather {
            a: pos(&p.a),
            data: pos(&p.data),
            axis: p.axis,
            index: p.index,
            fallback: fallback_for(&g, &p.nodes, &ext, &outs, &mut ops),
        };
        let (node, desc) = fused_node(
            &g.node(p.nodes[0]).name,
            "Fused[Gelu+Gather+Mul]".into(),
            ext,
            outs,
        );
        fused.push(desc);
        let last = *p.nodes.last().expect("three nodes");
        at_last.insert(last, (node, Box::new(op)));
    }
    let mut nodes = Vec::new();
    let mut out_ops: Vec<Box<dyn Op>> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some((n, op)) = at_last.remove(&i) {
            nodes.push(n);
            out_ops.push(op);
        } else if let Some(op) = ops[i].take() {
            nodes.push(node.clone());
            out_ops.push(op);
        }
    }
    (nodes, out_ops, fused, packs)
}
