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

use crate::exec::KernelMemo;
use crate::gpu::Gpu;
use crate::model::{Graph, Node};
use crate::ops::{MS, Op};
use std::collections::{HashMap, HashSet};

mod attn_kv_view;
mod fallback;
mod gather_scale;
mod gelu_gather;
mod gemv;
mod gemv_wgsl;
mod graph;
mod norms;
mod pack;
mod rotary_pair;
mod rotary_table;
mod shared_attn;
mod spec;
mod spelled_norm;

use fallback::{Fallback, fallback_for};
use gemv::{FusedGemv, RowsPrologue, Slots};
use graph::{Graphs, external_inputs, reenters};
use norms::FusedNorms;
use pack::fits_one_pack;
use spec::{Epi, Spec, Tail, Unit};

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
pub(super) const WG: u32 = 64;

/// Threads per column of the fused GEMV on `gpu` (see [`Limits::gemv_tpc`]); natively
/// `GG_GEMV_TPC` (1, 2, 4, 8 .. 64) overrides it, for comparing both on one adapter.
pub(super) fn gemv_tpc(gpu: &Gpu) -> u32 {
    env_u32("GG_GEMV_TPC")
        .filter(|t| t.is_power_of_two() && *t <= WG)
        .unwrap_or(if gpu.software { 1 } else { 8 })
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
