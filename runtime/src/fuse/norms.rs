//! The fused norms op: independent RMS norms (and their tails) in one dispatch.

use super::fallback::Fallback;
use super::gemv::scale_ok;
use super::gemv_wgsl::{packed_store, rd_code};
use super::rewrite::{Build, Find, Rewrite};
use super::spec::{Tail, Unit};
use super::{external_inputs, fallback_for, fused_node, reenters};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::ops::Op;
use crate::tensor::DType;
use std::collections::{HashMap, HashSet};

pub(super) const FUSED_NORMS: &str = include_str!("../kernels/fuse/fused_norms.wgsl");

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
}

/// The most norms of one [`FusedNorms`] dispatch: [`NormsParams`] holds an end and an offset
/// per norm.
const MAX_NORMS: usize = 32;

/// `[p0, p1, .., p31]`: the binding names of norm j's tensors, by `j` (< [`MAX_NORMS`]).
macro_rules! numbered {
    ($p:literal) => {
        numbered!(@ $p; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26
            27 28 29 30 31)
    };
    (@ $p:literal; $($i:literal)*) => {
        [$(concat!($p, $i)),*]
    };
}
/// Norm j's input.
const X_NAMES: [&str; MAX_NORMS] = numbered!("x");
/// Norm j's scale.
const G_NAMES: [&str; MAX_NORMS] = numbered!("g");
/// The other operand of norm j's tail.
const O_NAMES: [&str; MAX_NORMS] = numbered!("o");
/// Norm j's result (a single norm: the packed results are one binding `y`).
const Y_NAMES: [&str; MAX_NORMS] = numbered!("y");

crate::gpu_params! {
    /// [`FusedNorms`]' parameters: the rows of the dispatch are the norms' rows in turn (one
    /// workgroup per row), so that prompts of any length share one pipeline.
    struct NormsParams {
        /// Per norm, the end of its rows.
        ends: [u32; MAX_NORMS],
        /// Per norm, its result's first word in the packed result buffer (several norms).
        offs: [u32; MAX_NORMS],
    }
}

/// What norm j's code depends on.
#[derive(Clone, Copy, Default, Hash)]
struct NormCode {
    /// Row length.
    len: usize,
    /// Epsilon, as bits.
    eps: u32,
    /// Times a scale, and the scale's storage (F32, or F16 in float16 graphs).
    scaled: Option<Storage>,
    /// The storage of the tail's other operand (`None`: no tail).
    other: Option<Storage>,
    /// The tail's scalar factor, as bits.
    scalar: Option<u32>,
}

/// `fused_norms.wgsl`: every norm's code, and the activation type.
#[derive(Hash)]
struct NormsSpec<'a> {
    norms: &'a [NormCode],
    f16: bool,
}

impl crate::gpu::KernelSpec for NormsSpec<'_> {
    const NAME: &'static str = "fused_norms";
    const WGSL: &'static [&'static str] = &[FUSED_NORMS];
    fn build(&self, f: &crate::gpu::Features) -> Kernel {
        let act = if self.f16 { Storage::F16 } else { Storage::F32 };
        let mut kern = Kernel::new("fused_norms", FUSED_NORMS)
            .params::<NormsParams>()
            .workgroup(64)
            .wg_reduce(f.subgroups);
        let mut fns = String::new();
        let mut disp = String::new();
        for (j, c) in self.norms.iter().enumerate() {
            kern = kern.input(X_NAMES[j], act);
            if let Some(g) = c.scaled {
                kern = kern.input(G_NAMES[j], g);
            }
            let scale = |l: &str| {
                if c.scaled.is_some() {
                    format!(" * ld_g{j}({l})")
                } else {
                    String::new()
                }
            };
            // The tail: y = rd(rd(rd(y) + other) [* s]), as the Cast, Add and Mul nodes round.
            let mut tail = "rd(y)".to_string();
            if let Some(o) = c.other {
                tail = format!("rd({tail} + rd(ld_o{j}(i)))");
                if let Some(s) = c.scalar {
                    tail = format!("rd({tail} * {})", crate::gpu::wgsl_f32(f32::from_bits(s)));
                }
                kern = kern.input(O_NAMES[j], o);
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
                l = c.len,
                eps = crate::gpu::wgsl_f32(f32::from_bits(c.eps)),
                s0 = scale("l0"),
                s1 = scale("l1"),
            ));
            // Row ranges come from the parameters (the end of norm j's rows), not the code, so
            // that prompts of any length share one pipeline.
            let start = if j == 0 {
                "0u".to_string()
            } else {
                format!("prm_ends({}u)", j - 1)
            };
            disp.push_str(&format!(
                "if (row < prm_ends({j}u)) {{ norm{j}(row - {start}, t); return; }}\n    "
            ));
        }
        // Several results: ranges of one buffer, one binding (so that three norms fit eight
        // storage buffers), at the offsets in the parameters.
        if self.norms.len() > 1 {
            kern = kern.output("y", act);
            fns.push_str(&packed_stores(self.norms.len()));
        } else {
            kern = kern.output(Y_NAMES[0], act);
        }
        kern.code("NORMS", &fns)
            .code("DISPATCH", &disp)
            .code("RD", rd_code(self.f16))
    }
}

/// WGSL `st_y{j}` (and `EPW_y{j}`) for `n` results packed into one binding `y`: result j starts
/// at word `prm_offs(j)`.
fn packed_stores(n: usize) -> String {
    (0..n)
        .map(|j| packed_store(j, &format!("prm_offs({j}u)")))
        .collect()
}

impl Op for FusedNorms {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let act = if self.f16 { DType::F16 } else { DType::F32 };
        let count = self.norms.len();
        if count > MAX_NORMS {
            return Err(op_err(format!(
                "{count} fused norms exceed {MAX_NORMS} in one dispatch"
            )));
        }
        let mut codes = [NormCode::default(); MAX_NORMS];
        let mut params = NormsParams::default();
        // Per norm its input, scale and tail operand.
        let mut bind: Vec<(GpuTensor, Option<GpuTensor>, Option<GpuTensor>)> =
            Vec::with_capacity(count);
        let mut shapes = Vec::with_capacity(count);
        let mut row0 = 0usize;
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
                    Some(gv) if scale_ok(l)(gv) => Some(gv),
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
            let mut code = NormCode {
                len: l,
                eps: eps.to_bits(),
                scaled: g.as_ref().map(GpuTensor::storage),
                other: None,
                scalar: None,
            };
            let mut o = None;
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
                let ot = cx.to_gpu(ov)?;
                if ot.split.is_some() {
                    return self.fallback.run(cx, inputs);
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
                    code.scalar = Some(s.to_bits());
                }
                code.other = Some(ot.storage());
                o = Some(ot);
            }
            codes[j] = code;
            bind.push((x, g, o));
            row0 += rows;
            params.ends[j] = row0 as u32;
        }
        // Several results: ranges of one buffer, one binding; their offsets in the parameters.
        let (outs, packed) = if count > 1 {
            let ys = cx.alloc_pack(act, &shapes)?;
            for (j, y) in ys.iter().enumerate() {
                params.offs[j] = (y.byte_offset() / 4) as u32;
            }
            // The whole buffer as one tensor of the results' type (the binding's declared
            // storage).
            let whole = ys[0].whole();
            (ys, Some(whole))
        } else {
            let outs = shapes
                .into_iter()
                .map(|shape| cx.alloc(act, shape))
                .collect::<Result<Vec<_>>>()?;
            (outs, None)
        };
        let kern = cx.gpu.kernel(&NormsSpec {
            norms: &codes[..count],
            f16: self.f16,
        })?;
        let mut bound = kern.bindings();
        for (j, (x, g, o)) in bind.iter().enumerate() {
            bound = bound
                .bind(X_NAMES[j], x)
                .bind_opt(G_NAMES[j], g.as_ref())
                .bind_opt(O_NAMES[j], o.as_ref());
        }
        bound = match &packed {
            Some(ys) => bound.bind("y", ys),
            None => outs
                .iter()
                .zip(Y_NAMES)
                .fold(bound, |b, (y, name)| b.bind(name, y)),
        };
        cx.launch(bound, &params, row0 as u64 * 64)?;
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
        // Any other norm between Casts (f16 activations): one kernel instead of three; any norm
        // with an `Add [-> Mul]` tail: one instead of two or three.
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
                // Between Casts: their two dispatches saved (a float16 norm alone is one
                // dispatch already).
                if u.f16 && u.nodes.len() > 1 && 4 <= cx.limits.storage_buffers {
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
            };
            let (node, desc) = fused_node(&g.node(members[0]).name, kind, ext, outs);
            let last = *members.last().expect("non-empty group");
            cx.place(last, node, Box::new(op), desc);
        }
    }
}
