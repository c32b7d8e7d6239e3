//! The fused GEMV's pattern: what a group of projections reading one row, with its prologues and
//! epilogue, is made of.

use super::Limits;
use super::gemv::{Epilogue, FusedGemv, MatSlots, NormSlots, ResidualSlots, RowsPrologue, Slots};
use super::graph::Graphs;
use super::pack::fits_one_pack;
use super::rewrite::{Build, Find, Rewrite};
use super::{external_inputs, fallback_for, fused_node, reenters};
use crate::ops::MS;
use crate::tensor::DType;
use std::collections::HashSet;

/// One weight of a fused GEMV: a 4-bit `MatMulNBits` (`qw` its bits, `sc` its scales, `zp` its
/// zero points), or (`float`) an ai.onnx `MatMul` by an f32 initializer `[K, N]` (`qw` names it;
/// `sc` is empty, `block` 8: the row's staging unit).
pub(super) struct Mat {
    pub(super) node: usize,
    pub(super) qw: String,
    pub(super) sc: String,
    pub(super) zp: Option<String>,
    pub(super) n: usize,
    pub(super) block: usize,
    pub(super) out: String,
    pub(super) float: bool,
}

/// An RMS norm, possibly between Casts (f16 activations).
pub(super) struct Unit {
    pub(super) nodes: Vec<usize>,
    pub(super) input: String,
    pub(super) output: String,
    /// The scale; empty for a scale-free norm spelled out in elementary ops (only among the
    /// sibling norms of a GEMV's results, see `spelled_norm.rs`).
    pub(super) gamma: String,
    pub(super) eps: f32,
    pub(super) f16: bool,
}

/// What follows a norm unit's result `y`: `Add(y, other)`, then optionally `Mul(., scalar)`
/// (Gemma's per-layer inputs: `(norm(projection) + per_layer_inputs) * 1/sqrt(2)`).
pub(super) struct Tail {
    pub(super) nodes: Vec<usize>,
    pub(super) other: String,
    /// `other` is read through a `Cast` to float16 (of a float tensor: the q4f16 exports cast the
    /// per-layer inputs), folded in.
    pub(super) cast: bool,
    pub(super) scalar: Option<String>,
    pub(super) out: String,
}

pub(super) struct Residual {
    pub(super) f16: bool,
    /// The sum is normalised before it is rounded to the activation type (a
    /// `SkipSimplifiedLayerNormalization` adds in f32 and rounds only the sum it outputs; an
    /// `Add` node rounds its result before the next norm reads it).
    pub(super) skip: bool,
    pub(super) nodes: Vec<usize>,
    pub(super) o: String,
    pub(super) g1: String,
    pub(super) eps1: f32,
    pub(super) res: String,
    pub(super) scalar: Option<String>,
}

pub(super) enum Epi {
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

pub(super) struct Spec {
    /// Whether the norm units say f16 activations (`None`: no norm, decided at run time).
    pub(super) f16: Option<bool>,
    pub(super) residual: Option<Residual>,
    /// The input row (the residual prologue's result when there is one).
    pub(super) x: String,
    pub(super) norm: Option<Unit>,
    pub(super) k: usize,
    pub(super) mats: Vec<Mat>,
    pub(super) epi: Epi,
    /// The initializers of the weights (bits, scales, zero points) that go into one buffer at
    /// load (`Spec::pack`), bound once by the kernel.
    pub(super) packed: Option<Vec<String>>,
}

impl<'a> Graphs<'a> {
    /// The group whose MatMulNBits read `v` (node `anchor` is the first of them).
    pub(super) fn group(&self, v: &str, used: &HashSet<usize>) -> Option<Spec> {
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
        // Float weights: only with something to fuse (a lone float MatMul would run its own op
        // anyway).
        if float
            && mats.len() == 1
            && norm.is_none()
            && residual.is_none()
            && matches!(epi, Epi::Separate)
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
    pub(super) fn bindings(&self) -> usize {
        self.bindings_as(self.packed.is_some())
    }
    /// [`Spec::bindings`] with the weights packed or not.
    pub(super) fn bindings_as(&self, packed: bool) -> usize {
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
    pub(super) fn pack(
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
    pub(super) fn nodes(&self) -> Vec<usize> {
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
    pub(super) fn kind(&self) -> String {
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

/// The fused GEMV rewrite: the groups of projections of one row (see [`Graphs::group`]),
/// narrowed to the adapter's storage buffers; their results' sibling norms go to the norm
/// rewrite.
#[derive(Default)]
pub(super) struct Gemvs(Vec<Spec>);

impl Rewrite for Gemvs {
    fn find(&mut self, cx: &mut Find<'_>) {
        let g = cx.g;
        for (i, node) in g.graph.nodes.iter().enumerate() {
            if cx.used.contains(&i) || !(g.is(i, MS, "MatMulNBits") || g.is(i, "", "MatMul")) {
                continue;
            }
            let Some(x) = node.inputs.first() else {
                continue;
            };
            let Some(mut spec) = g.group(x, &cx.used) else {
                continue;
            };
            // The results' sibling norms are looked for among all the weights sharing the input,
            // also when the group is narrowed below.
            let outs_all: Vec<String> = spec.mats.iter().map(|m| m.out.clone()).collect();
            // Storage bindings: operands, outputs and the parameter block. A group that needs more
            // than the adapter allows is narrowed until it fits: first without the residual
            // prologue (left to the norm-tail pass), then without the norm prologue, then without
            // the epilogue, then with fewer weights (the others form groups of their own).
            spec.packed = spec.pack(g, cx.limits, &cx.taken);
            while spec.bindings() as u32 > cx.limits.storage_buffers {
                if spec.residual.is_some() {
                    spec.residual = None;
                } else if spec.norm.is_some() {
                    spec.norm = None;
                    spec.x = x.clone();
                } else if !matches!(spec.epi, Epi::Separate) {
                    spec.epi = Epi::Separate;
                } else if spec.mats.len() > 1 {
                    spec.mats.pop();
                    spec.packed = spec.pack(g, cx.limits, &cx.taken);
                } else {
                    break;
                }
                spec.f16 = spec
                    .norm
                    .as_ref()
                    .map(|u| u.f16)
                    .or(spec.residual.as_ref().map(|r| r.f16));
            }
            if spec.bindings() as u32 > cx.limits.storage_buffers {
                continue;
            }
            let set: HashSet<usize> = spec.nodes().into_iter().collect();
            if set.iter().any(|n| cx.used.contains(n)) || reenters(g, &set) {
                continue;
            }
            cx.used.extend(&set);
            if let Some(p) = &spec.packed {
                cx.taken.extend(p.iter().cloned());
            }
            // Sibling norms of the results (per-head q/k/v norms): one more kernel for all of them.
            if matches!(spec.epi, Epi::Separate) && outs_all.len() >= 2 {
                let norms: Vec<Unit> = outs_all
                    .iter()
                    .filter_map(|o| g.norm_after(o).or_else(|| g.spelled_after(o)))
                    .filter(|u| u.nodes.iter().all(|p| !cx.used.contains(p)))
                    .collect();
                let nset: HashSet<usize> = norms.iter().flat_map(|u| u.nodes.clone()).collect();
                // Each norm's input and scale, the results (one buffer) and the parameter block.
                let scales = norms.iter().filter(|u| !u.gamma.is_empty()).count();
                let bindings = norms.len() + scales + 2;
                if norms.len() >= 2
                    && norms.iter().all(|u| u.f16 == norms[0].f16)
                    && !reenters(g, &nset)
                    && bindings as u32 <= cx.limits.storage_buffers
                {
                    cx.used.extend(&nset);
                    cx.norms.groups.push(norms);
                }
            }
            self.0.push(spec);
        }
    }
    fn build(self: Box<Self>, cx: &mut Build<'_>) {
        let g = cx.g;
        for spec in self.0 {
            let members = spec.nodes();
            let set: HashSet<usize> = members.iter().copied().collect();
            let ext = external_inputs(g, &members);
            let pos = |name: &str| ext.iter().position(|e| e == name);
            // Outputs read outside the group (or graph outputs), in node order.
            let mut outs: Vec<String> = Vec::new();
            for &n in &members {
                for o in &g.node(n).outputs {
                    if g.outputs.contains(o.as_str()) || g.users(o).iter().any(|u| !set.contains(u))
                    {
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
            cx.packs.extend(spec.packed.clone());
            let need = |name: &str| pos(name).expect("external input");
            let slots = Slots {
                residual: spec.residual.as_ref().map(|r| ResidualSlots {
                    o: need(&r.o),
                    res: need(&r.res),
                    gamma: need(&r.g1),
                    scalar: r.scalar.as_deref().map(need),
                    eps: r.eps1,
                    skip: r.skip,
                }),
                x: if spec.residual.is_some() {
                    // Unused by the fast path (the row comes from the prologue); shape from `o`.
                    spec.residual.as_ref().map_or(0, |r| need(&r.o))
                } else {
                    need(&spec.x)
                },
                norm: spec.norm.as_ref().map(|u| NormSlots {
                    gamma: need(&u.gamma),
                    eps: u.eps,
                }),
                mats: spec
                    .mats
                    .iter()
                    .map(|m| {
                        // A float weight has no scales: its slot stands in (unread).
                        let sc = if m.float { &m.qw } else { &m.sc };
                        MatSlots {
                            qw: need(&m.qw),
                            sc: need(sc),
                            zp: m.zp.as_deref().map(need),
                            n: m.n,
                        }
                    })
                    .collect(),
                h_out: h_exposed,
                f16: spec.f16,
            };
            let fallback = fallback_for(g, &members, &ext, &fast_outs, &mut cx.ops);
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
            let epi = match &spec.epi {
                Epi::Separate => Epilogue::Separate,
                Epi::GeluMul { gate, .. } => Epilogue::GeluMul { gate: *gate },
                Epi::GeluOther { other, gather, .. } => match gather {
                    Some((data, idx)) => Epilogue::GeluOther {
                        other: need(data),
                        gather: Some(need(idx)),
                    },
                    None => Epilogue::GeluOther {
                        other: need(other),
                        gather: None,
                    },
                },
                Epi::Softcap { div, mul, .. } => Epilogue::Softcap {
                    div: need(div),
                    mul: need(mul),
                },
                Epi::Scale { scalar, .. } => Epilogue::Scale {
                    factor: need(scalar),
                },
            };
            let op = FusedGemv {
                kind: kind.clone(),
                k: spec.k,
                block: spec.mats[0].block,
                float: spec.mats[0].float,
                ns: spec.mats.iter().map(|m| m.n).collect(),
                epi,
                slots,
                fallback,
                rows,
                limits: *cx.limits,
            };
            let (node, desc) = fused_node(&g.node(members[0]).name, kind, ext, fast_outs);
            let last = *members.last().expect("non-empty group");
            cx.place(last, node, Box::new(op), desc);
        }
    }
}
