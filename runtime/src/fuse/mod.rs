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
//! - **SpelledAttn** (`spelled_attn.rs`): attention spelled out as Transpose / MatMul / Add(mask)
//!   / Softmax / MatMul / Transpose (the mobius vision encoder's) as one flash attention, the mask
//!   an additive bias read by its broadcast strides.
//! - **Rotary2d** (`rotary_2d.rs`): the vision encoder's 2-D rotary (each half of a head rotated
//!   by halves with its own per-token tables, spelled in Slice / Neg / Concat / Mul / Add) as one
//!   elementwise dispatch.
//! - **Spelled-out RMS norms** (`spelled_norm.rs`): `x / sqrt(mean(x²) + eps)` written as `Mul`,
//!   `ReduceMean`, `Add`, `Sqrt`, `Div` (the mobius exports' scale-free value norm): one norm
//!   dispatch (any number of rows).
//! - **Gelu+Gather+Mul** (`gelu_gather.rs`): `Gelu(tanh)(a) * Gather(data, i, axis)` (`i` a
//!   scalar constant) that no GEMV epilogue took (a float projection): one elementwise dispatch
//!   reading the slice through a strided view (f32, or f16 rounding the Gelu result as the f16
//!   graph stores it; mixed types run the three nodes).
//! - **Attention on transposed caches** (`attn_kv_view.rs`): an ai.onnx `Attention` whose 3-D
//!   key and value are `Reshape(Transpose(cache, perm 0,2,1,3))` of [B, kv_heads, T, D] caches
//!   (the mobius exports' KV-shared layers) reads the caches in place: no Transpose copies.
//! - **Rotary pairs** (`rotary_pair.rs`): two ai.onnx `RotaryEmbedding` nodes on the same cos,
//!   sin and positions (a layer's query and key), one dispatch writing both.
//! - **Scaled lookups** (`gather_scale.rs`): `Mul(Gather(table, ids), s)` of a 2-D f32 table
//!   initializer and an f32 scalar initializer (an embedding times its scale), one dispatch.
//! - **Per-layer lookups** (`layer_lookups.rs`): `Concat` on a new axis of `Unsqueeze(Mul(Gather(
//!   T_j, ids), s_j))` (mobius' WebGPU split of Gemma's per-layer table: one table per layer in
//!   the decoder, f32 or f16), the lookups writing their slots of the result directly, as many
//!   tables per dispatch as the adapter's storage bindings allow.
//! - **RotaryTables** (`rotary_table.rs`): `Concat(Gather(cache, pos), same)` cos/sin tables read
//!   at the same positions, or two plain `Gather(cache, pos)` of same-shaped 2-D caches, one
//!   dispatch.
//!
//! A fused node runs its one kernel when the shapes allow it (one row, `M == 1`: decoding, the
//! input row fits the workgroup memory, weights not split across buffers except a lone weight's,
//! which takes one dispatch per part); otherwise it runs the original nodes one by one (prefill),
//! so a fusion never changes what a graph computes beyond f32 rounding. Groups that would need
//! more storage bindings than the adapter allows are not formed.
//!
//! Layout: the pass is the ordered list of rewrites in `rewrite.rs` (each finds its groups, then
//! builds one fused node per group); `graph.rs` holds the node graph and the matchers the
//! patterns share; `spec.rs` the fused GEMV's pattern and rewrite, `gemv.rs` its op and
//! `gemv_wgsl.rs` its WGSL fragments; `norms.rs` the fused norms; `pack.rs` the weight packs;
//! `fallback.rs` the original nodes a fused node runs when its kernel does not apply, and
//! `fused_group`, which builds a pattern's fused node from its `FastPath` (the kernel, or `None`
//! for the original nodes); the other files one pattern each.

use crate::gpu::Gpu;
use crate::model::{Graph, Node};
use crate::ops::Op;
use std::collections::{HashMap, HashSet};

mod attn_kv_view;
mod fallback;
mod gather_scale;
mod gelu_gather;
mod gemv;
mod gemv_wgsl;
mod graph;
mod layer_lookups;
mod norms;
mod pack;
mod rewrite;
mod rotary_2d;
mod rotary_pair;
mod rotary_table;
mod shared_attn;
mod spec;
mod spelled_attn;
mod spelled_norm;

use fallback::{FastPath, fallback_for, fused_group};
use graph::{Graphs, external_inputs, reenters};
use norms::NormGroups;
use pack::rotary_packs;
use rewrite::{Build, Find};
use spec::Unit;

/// Domain of fused nodes.
pub const FUSED_DOMAIN: &str = "gg.fused";

/// The node that stands in the graph for a fused group whose first member is named `first`
/// (`fused:FIRST`, op type `kind`, domain [`FUSED_DOMAIN`]), and the group's report line
/// (`KIND at FIRST`).
pub(super) fn fused_node(
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
    /// Threads per output column of the fused GEMV (a divisor of its 64 threads; see
    /// [`Tuning::gemv_tpc`](field@crate::tuning::Tuning::gemv_tpc)).
    pub gemv_tpc: u32,
    /// Workgroups the fused GEMV leaves at least when it gives each invocation several columns
    /// (see [`Tuning::gemv_min_workgroups`](field@crate::tuning::Tuning::gemv_min_workgroups)).
    pub gemv_min_workgroups: u32,
    /// The fused GEMV reads the weight bits 16 bytes per load
    /// ([`Tuning::wide_weight_loads`](crate::tuning::Tuning::wide_weight_loads)).
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
            gemv_tpc: gpu.tuning.gemv_tpc(),
            gemv_min_workgroups: gpu.tuning.gemv_min_workgroups(),
            gemv_wide: gpu.tuning.wide_weight_loads,
        }
    }
}

/// Threads per workgroup of the fused GEMV.
pub(super) const WG: u32 = crate::tuning::GEMV_WG;

/// What the pass returns: the nodes to execute (fused groups replaced by one node each, placed
/// where the group's last node was), their ops, a description of each fused group, and the
/// initializers to pack into one buffer each (a fused kernel binds each pack once; every other
/// reader binds its own range).
pub type Fused = (Vec<Node>, Vec<Box<dyn Op>>, Vec<String>, Vec<Vec<String>>);

/// Runs the pass: every rewrite of [`rewrite::rewrites`] finds its groups, the rotary caches
/// of the attentions are packed, then every rewrite builds its fused nodes, each placed where
/// its group's last node was.
pub fn fuse(graph: &Graph, ops: Vec<Box<dyn Op>>, limits: &Limits) -> Fused {
    let g = Graphs::new(graph);
    let mut find = Find {
        g: &g,
        limits,
        used: HashSet::new(),
        taken: HashSet::new(),
        norms: NormGroups::default(),
    };
    let mut list = rewrite::rewrites();
    for r in &mut list {
        r.find(&mut find);
    }
    let packs = rotary_packs(&g, limits, &mut find.taken);
    let mut cx = Build {
        g: &g,
        limits,
        ops: ops.into_iter().map(Some).collect(),
        packs,
        norms: find.norms,
        fused: Vec::new(),
        at_last: HashMap::new(),
    };
    for r in list {
        r.build(&mut cx);
    }
    let mut nodes = Vec::new();
    let mut out_ops: Vec<Box<dyn Op>> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some((n, op)) = cx.at_last.remove(&i) {
            nodes.push(n);
            out_ops.push(op);
        } else if let Some(op) = cx.ops[i].take() {
            nodes.push(node.clone());
            out_ops.push(op);
        }
    }
    (nodes, out_ops, cx.fused, cx.packs)
}
