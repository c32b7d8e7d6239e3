//! The fused GEMV op: one dispatch for a group of projections of one row (decoding), the rows
//! prologue and the original nodes otherwise.

use super::fallback::Fallback;
use super::gemv_wgsl::{
    REDUCE_SHUFFLE, REDUCE_TREE, float_dot, gemv_dot, norm_prologue, packed_loaders, packed_stores,
    rd_code, residual_prologue, scalar_value, x_loaders,
};
use super::{Limits, WG};
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor, KernelMemo, Value, input_signature};
use crate::gpu::{Kernel, Storage};
use crate::ops::Op;
use crate::tensor::DType;

pub(super) const FUSED_GEMV: &str = include_str!("../kernels/fused_gemv.wgsl");

/// Where the fused kernel finds its operands: positions in the fused node's inputs.
pub(super) struct Slots {
    /// The residual prologue's operands.
    pub(super) residual: Option<ResidualSlots>,
    /// The row (without a residual prologue: unread, its shape taken from `o`).
    pub(super) x: usize,
    /// The norm prologue's scale.
    pub(super) norm: Option<NormSlots>,
    /// The weights.
    pub(super) mats: Vec<MatSlots>,
    /// Whether the residual row is an output (first, before the results).
    pub(super) h_out: bool,
    /// Activation type the norm units expect (`None`: either).
    pub(super) f16: Option<bool>,
}

/// The residual prologue `x = res + RMSNorm(o) [* scalar]`.
#[derive(Clone, Copy)]
pub(super) struct ResidualSlots {
    pub(super) o: usize,
    pub(super) res: usize,
    /// The norm's scale.
    pub(super) gamma: usize,
    pub(super) scalar: Option<usize>,
    pub(super) eps: f32,
}

/// The norm prologue's scale and epsilon.
#[derive(Clone, Copy)]
pub(super) struct NormSlots {
    pub(super) gamma: usize,
    pub(super) eps: f32,
}

/// One weight: bits (or the float weight), scales (a float weight's slot stands in, unread),
/// zero points, and its columns.
#[derive(Clone, Copy)]
pub(super) struct MatSlots {
    pub(super) qw: usize,
    pub(super) sc: usize,
    pub(super) zp: Option<usize>,
    pub(super) n: usize,
}

/// What the fused GEMV does with its dot products.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Epilogue {
    /// Each weight's result is an output of its own (ranges of one buffer).
    Separate,
    /// `Gelu(tanh)(y_gate) * y_up` of two weights; `gate` is the gate weight's index.
    GeluMul { gate: usize },
    /// `Gelu(tanh)(y) * other`: `other` the slot of the other operand, or (`gather`, the slot
    /// of the index) of the data it gathers a row of.
    GeluOther { other: usize, gather: Option<usize> },
    /// The logit softcap `Mul(Tanh(Div(y, div)), mul)`: the scalars' slots.
    Softcap { div: usize, mul: usize },
    /// `Mul(y, factor)`: the scalar's slot.
    Scale { factor: usize },
}

pub(super) struct FusedGemv {
    pub(super) kind: String,
    pub(super) k: usize,
    pub(super) block: usize,
    /// Float weights (`MatMul` by f32 `[K, N]`; `block` is 8).
    pub(super) float: bool,
    pub(super) ns: Vec<usize>,
    pub(super) epi: Epilogue,
    pub(super) slots: Slots,
    pub(super) fallback: Fallback,
    /// The prologue for rows the one-kernel path does not take (`None`: no prologue).
    pub(super) rows: Option<RowsPrologue>,
    pub(super) limits: Limits,
    /// The one-kernel path's last kernel (a decode step's inputs look the same every step).
    pub(super) memo: KernelMemo,
}

/// A fused group's prologue (residual and/or norm) as one dispatch over all rows
/// (`rows_prologue.wgsl`), for the shapes the one-kernel path does not take (prefill): its
/// results go into the fallback's environment, which then skips the nodes they replace.
pub(super) struct RowsPrologue {
    /// Per fallback sub: whether the prologue kernel computes its result.
    pub(super) skip: Vec<bool>,
    /// The slot of the residual prologue's result h (with a residual).
    pub(super) h: Option<usize>,
    /// The slot of the normalised row (with a norm).
    pub(super) y: Option<usize>,
}

/// An operand on the GPU, `None` when it is missing, i64, fails `ok`, or is split across buffers.
pub(super) fn gpu_operand(
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
pub(super) fn host_scalar(
    inputs: &[Option<&Value>],
    i: usize,
    act: DType,
    rank: usize,
) -> Option<f32> {
    match inputs.get(i).copied().flatten() {
        Some(Value::Host(h)) if h.dtype == act && h.numel() == 1 && h.shape.len() <= rank => {
            Some(h.to_f32()[0])
        }
        _ => None,
    }
}

pub(super) const ROWS_PROLOGUE: &str = include_str!("../kernels/rows_prologue.wgsl");

impl FusedGemv {
    /// The prologue over every row in one dispatch: the environment values it provides, or
    /// `None` when the operands do not fit it (the fallback then runs every node).
    pub(super) fn rows_prologue(
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
        let res = self.slots.residual.is_some();
        if let Some(ResidualSlots {
            o,
            res: r,
            gamma: g1,
            scalar: sc,
            eps: eps1,
        }) = self.slots.residual
        {
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
        if let Some(NormSlots {
            gamma: g2,
            eps: eps2,
        }) = self.slots.norm
        {
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
        if let Some(slot) = rows.y.filter(|_| self.slots.norm.is_some()) {
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

    /// The `Gelu(y) * other` epilogue's operand (slot `other`) and the offset of the row it reads:
    /// `other` shaped as the results, or (`gather`, the index's slot) the row
    /// `Gather(data [1, 1, L, N], i, axis=2)`; `None` for any other shape.
    fn other_operand(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        other: usize,
        gather: Option<usize>,
        act: DType,
        row_shape: &[usize],
    ) -> Result<Option<(GpuTensor, u32)>> {
        let n = self.ns[0];
        let Some(ot) = gpu_operand(cx, inputs, other, |v: &Value| v.dtype() == act)? else {
            return Ok(None);
        };
        match gather {
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
                Ok(Some((ot, (i as usize * n) as u32)))
            }
            None => {
                let mut want = row_shape.to_vec();
                if let Some(l) = want.last_mut() {
                    *l = n;
                }
                if ot.shape != want {
                    return Ok(None);
                }
                Ok(Some((ot, 0)))
            }
        }
    }

    /// The one-kernel path, or `None` when the shapes need the fallback.
    pub(super) fn fast(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
    ) -> Result<Option<Vec<Value>>> {
        let k = self.k;
        let prologue = self.slots.residual.is_some() || self.slots.norm.is_some();
        let lone = !prologue && self.epi == Epilogue::Separate && self.ns.len() == 1;
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
        if let Some(ResidualSlots {
            o,
            res,
            gamma: g1,
            scalar: sc,
            eps: eps1,
        }) = self.slots.residual
        {
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
                pro.push_str(&residual_prologue(eps1, sc.is_some(), self.slots.h_out));
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
        if let Some(NormSlots {
            gamma: g2,
            eps: eps2,
        }) = self.slots.norm
        {
            let g = operand!(g2, gamma);
            bind.push(g);
            if build {
                kern = kern.input("g2", Storage::F32);
                pro.push_str(&norm_prologue(eps2));
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
        let nv = if self.epi == Epilogue::Separate {
            self.ns.iter().sum()
        } else {
            self.ns[0]
        };
        let reps = if self.epi == Epilogue::Separate && self.ns.len() > 1 {
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
        for &MatSlots { qw, sc, zp, n } in &self.slots.mats {
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
                dots.push_str(&packed_loaders(j, &q, &s, z.as_ref(), wide));
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
        if let Epilogue::GeluOther { other, gather } = self.epi {
            let Some((ot, off)) = self.other_operand(cx, inputs, other, gather, act, &row_shape)?
            else {
                return Ok(None);
            };
            other_off = off;
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
            Epilogue::Separate => {
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
            Epilogue::GeluMul { gate } => {
                let n = self.ns[0];
                let y = cx.alloc(act, out_shape(n))?;
                kern = kern.output("y", st(act));
                bind.push(y.clone());
                results.push(y);
                (
                    format!("p0 = dot{}(v, lane); p1 = dot{}(v, lane);", gate, 1 - gate),
                    "rd(rd(gelu_tanh(rd(a0))) * rd(a1))".to_string(),
                    "st_y(v / EPW, x0, x1);".to_string(),
                )
            }
            e
            @ (Epilogue::GeluOther { .. } | Epilogue::Softcap { .. } | Epilogue::Scale { .. }) => {
                let n = self.ns[0];
                let y = cx.alloc(act, out_shape(n))?;
                kern = kern.output("y", st(act));
                bind.push(y.clone());
                results.push(y);
                let value = match e {
                    Epilogue::GeluOther { .. } => {
                        "rd(rd(gelu_tanh(rd(a0))) * ld_other(other_off + v))".to_string()
                    }
                    _ => match scalar_value(e, inputs, act, row_shape.len()) {
                        Some(v) => v,
                        None => return Ok(None),
                    },
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
            let xl = x_loaders(staged, k, f16);
            kern = kern
                .u32("K", k as u32)
                .u32("NB", nb as u32)
                .u32("BLOCK", self.block as u32)
                .u32("ZROW", zrow as u32)
                .u32("NV", nv as u32)
                .u32("TPC", tpc)
                .u32("REPS", reps)
                .u32("EPW", if f16 { 2 } else { 1 })
                .code("RD", rd_code(f16))
                .u32(
                    "XS_LEN",
                    if staged {
                        (nb * self.block / 4) as u32
                    } else {
                        2
                    },
                )
                .code("XM", xl.xm)
                .code("XE", xl.xe)
                .code("XO", xl.xo)
                .code("XEO", xl.xeo)
                .code("NIBBLES", crate::ops::quant::NIBBLES_WGSL)
                .code("DOTS", &dots)
                .code("PROLOGUE", &pro)
                .code("COMPUTE", &compute)
                .code("VALUE", &value)
                .code(
                    "ORDER",
                    if shuffle {
                        "sg_id * sg_size + sg_lane"
                    } else {
                        "t"
                    },
                )
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
