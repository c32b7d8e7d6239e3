//! The fused norms op: independent RMS norms (and their tails) in one dispatch.

use super::fallback::Fallback;
use super::gemv_wgsl::{packed_stores, rd_code};
use super::rewrite::{Build, Find, Rewrite};
use super::spec::{Tail, Unit};
use super::{external_inputs, fallback_for, fused_node, reenters};
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor, KernelMemo, Value, input_signature};
use crate::gpu::{Kernel, Storage};
use crate::ops::Op;
use crate::tensor::DType;
use std::collections::{HashMap, HashSet};

pub(super) const FUSED_NORMS: &str = include_str!("../kernels/fused_norms.wgsl");

/// One norm of a [`FusedNorms`]: its input's slot, row length (0: the input's last dimension,
/// for a scale-free norm), epsilon and scale's slot (`None`: scale-free).
#[derive(Clone, Copy)]
pub(super) struct NormSlot {
    pub(super) x: usize,
    pub(super) len: usize,
    pub(super) eps: f32,
    pub(super) scale: Option<usize>,
}

/// A norm's `Add(y, other)` epilogue with an optional `Mul` by a scalar: the slot of `other`,
/// whether `other` is f32 cast to f16 here, and the scalar's slot.
#[derive(Clone, Copy)]
pub(super) struct TailSlot {
    pub(super) other: usize,
    pub(super) cast: bool,
    pub(super) scalar: Option<usize>,
}

/// Independent RMS norms in one dispatch. A norm without a scale (a scale-free norm spelled out
/// in elementary ops, `spelled_norm.rs`) has row length 0: the input's last dimension.
pub(super) struct FusedNorms {
    pub(super) norms: Vec<NormSlot>,
    /// Per norm, its `Add(y, other) [-> Mul]` epilogue.
    pub(super) tails: Vec<Option<TailSlot>>,
    /// f16 activations (the norms sit between Casts).
    pub(super) f16: bool,
    pub(super) fallback: Fallback,
    /// The last kernel (see [`KernelMemo`]).
    pub(super) memo: KernelMemo,
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
        for (
            j,
            &NormSlot {
                x: xi,
                len: l,
                eps,
                scale: gi,
            },
        ) in self.norms.iter().enumerate()
        {
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
            if let Some(TailSlot {
                other: oi,
                cast,
                scalar: si,
            }) = self.tails.get(j).copied().flatten()
            {
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

/// The norm groups found: each a list of norm units for one dispatch, and the tails of
/// standalone units by the unit's output.
#[derive(Default)]
pub(super) struct NormGroups {
    pub(super) groups: Vec<Vec<Unit>>,
    pub(super) tails: HashMap<String, Tail>,
}

/// The norm rewrite: the groups of the GEMVs' sibling norms (found by [`super::spec::Gemvs`]),
/// and any other norm between Casts or with an `Add [-> Mul]` tail.
pub(super) struct Norms;

impl Rewrite for Norms {
    fn find(&mut self, cx: &mut Find<'_>) {
        let g = cx.g;
        // Any other norm between Casts (f16 activations): one kernel instead of three.
        for (p, node) in g.graph.nodes.iter().enumerate() {
            if cx.used.contains(&p) || !g.is_rms(p) {
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
                && u.nodes.iter().all(|n| !cx.used.contains(n))
            {
                // With an `Add [-> Mul]` tail (f32 or f16): one kernel for the norm, add and scale.
                let free = |i: &usize| !cx.used.contains(i);
                if let Some(t) = g.norm_tail(&u.output, &free) {
                    let set: HashSet<usize> = u.nodes.iter().chain(&t.nodes).copied().collect();
                    if 5 <= cx.limits.storage_buffers && !reenters(g, &set) {
                        cx.used.extend(&set);
                        cx.norms.tails.insert(u.output.clone(), t);
                        cx.norms.groups.push(vec![u]);
                        continue;
                    }
                }
                if u.f16 && 4 <= cx.limits.storage_buffers {
                    cx.used.extend(&u.nodes);
                    cx.norms.groups.push(vec![u]);
                }
            }
        }
    }
    fn build(self: Box<Self>, cx: &mut Build<'_>) {
        let g = cx.g;
        for units in std::mem::take(&mut cx.norms.groups) {
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
                    norms.push(NormSlot {
                        x: xi,
                        len: 0,
                        eps: u.eps,
                        scale: None,
                    });
                    for e in external_inputs(g, &u.nodes) {
                        if e != u.input {
                            ext.push(e);
                        }
                    }
                } else {
                    let l = g.inits[u.gamma.as_str()].shape[0];
                    norms.push(NormSlot {
                        x: xi,
                        len: l,
                        eps: u.eps,
                        scale: Some(ext.len()),
                    });
                    ext.push(u.gamma.clone());
                }
                match cx.norms.tails.remove(&u.output) {
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
                        norm_tails.push(Some(TailSlot {
                            other: oi,
                            cast: t.cast,
                            scalar: si,
                        }));
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
                fallback: fallback_for(g, &members, &ext, &outs, &mut cx.ops),
                memo: KernelMemo::default(),
            };
            let (node, desc) = fused_node(&g.node(members[0]).name, kind, ext, outs);
            let last = *members.last().expect("non-empty group");
            cx.place(last, node, Box::new(op), desc);
        }
    }
}
