//! The fused GEMV op: one dispatch for a group of projections of one row (decoding), the rows
//! prologue and the original nodes otherwise.

use super::fallback::Fallback;
use super::gemv_wgsl::{
    EpilogueCode, FusedGemvParams, FusedGemvSpec, MAX_MATS, PackedAt, QW, ResidualCode,
    RowsPrologueParams, RowsPrologueSpec, SC, WeightCode, Y, ZP,
};
use super::{Limits, WG};
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Bound, Compiled, Storage};
use crate::ops::Op;
use crate::tensor::DType;
use std::rc::Rc;

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
    /// A skip norm's residual: the sum normalised before it is rounded.
    pub(super) skip: bool,
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
    /// Float weights (`MatMul` by `[K, N]` of the activation type; `block` is 8).
    pub(super) float: bool,
    pub(super) ns: Vec<usize>,
    pub(super) epi: Epilogue,
    pub(super) slots: Slots,
    pub(super) fallback: Fallback,
    /// The prologue for rows the one-kernel path does not take (`None`: no prologue).
    pub(super) rows: Option<RowsPrologue>,
    pub(super) limits: Limits,
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

/// A norm's scale for rows of `k`: f32, or f16 (mobius's float16 graphs keep their norms' scales
/// in the activation type).
pub(super) fn scale_ok(k: usize) -> impl Fn(&Value) -> bool {
    move |v: &Value| matches!(v.dtype(), DType::F32 | DType::F16) && v.numel() == k
}

/// The checks of one call's input row that the one-kernel path passed.
struct FastCall {
    /// The activation type (F32 or F16).
    act: DType,
    /// The row's shape (its last dimension `k`, one row).
    row_shape: Vec<usize>,
    /// The row is staged in workgroup memory.
    staged: bool,
}

impl FastCall {
    /// Whether the activations are f16.
    fn f16(&self) -> bool {
        self.act == DType::F16
    }

    /// The shape of a result of `n` columns.
    fn out_shape(&self, n: usize) -> Vec<usize> {
        let mut s = self.row_shape.clone();
        if let Some(l) = s.last_mut() {
            *l = n;
        }
        s
    }
}

/// The prologue's row operands on the GPU.
enum RowOperands {
    /// The residual prologue's `o`, `res` and the norm's scale `g1`.
    Residual {
        o: GpuTensor,
        res: GpuTensor,
        g1: GpuTensor,
    },
    /// The input row `x`.
    Plain { x: GpuTensor },
}

impl RowOperands {
    /// The kernel's first bindings: these (`o`, `res`, `g1`, or `x`).
    fn bind<'k, 't>(&'t self, kernel: &'k Compiled) -> Bound<'k, 't> {
        match self {
            Self::Residual { o, res, g1 } => kernel.bind("o", o).bind("res", res).bind("g1", g1),
            Self::Plain { x } => kernel.bind("x", x),
        }
    }
}

/// The prologue's operands: the row's, the norm's scale, and the residual's layer scalar.
struct Prologue {
    row: RowOperands,
    /// The norm prologue's scale.
    g2: Option<GpuTensor>,
    /// The residual prologue's scalar (1 without one).
    scalar: f32,
}

impl Prologue {
    /// The norm prologue's scale's storage (F32 without one: unread).
    fn g2_storage(&self) -> Storage {
        self.g2.as_ref().map_or(Storage::F32, GpuTensor::storage)
    }
}

/// One weight on the GPU: its bits (a float weight's elements), scales (a float weight's
/// elements again, unread) and zero points.
struct Weight {
    q: GpuTensor,
    s: GpuTensor,
    z: Option<GpuTensor>,
}

/// The parts of a weight split by rows across buffers: (first row, part).
type Parts = Rc<Vec<(usize, GpuTensor)>>;

/// The row the `Gelu(y) * other` epilogue multiplies by: a tensor and the element it starts at.
struct OtherRow {
    t: GpuTensor,
    off: u32,
}

/// The one-kernel path's inputs on the GPU and the host values it reads.
struct Operands {
    prologue: Prologue,
    weights: [Option<Weight>; MAX_MATS],
    /// The weights' one binding `wts` when they are ranges of one buffer.
    packed: Option<GpuTensor>,
    /// A lone weight split by rows across buffers: its parts (first row, part).
    split: Option<Parts>,
    /// The `Gelu(y) * other` epilogue's row.
    other: Option<OtherRow>,
    /// The scalar epilogues' constant.
    constant: Option<f32>,
}

/// The one-kernel path's outputs.
struct Outputs {
    /// The residual row h.
    h: Option<GpuTensor>,
    /// The results.
    results: Vec<GpuTensor>,
    /// Several separate results: their one buffer, bound whole as `y`.
    packed: Option<GpuTensor>,
}

impl Outputs {
    /// The op's outputs: h first (when it is one), then the results.
    fn into_values(self) -> Vec<Value> {
        self.h
            .into_iter()
            .chain(self.results)
            .map(Value::Gpu)
            .collect()
    }
}

impl FusedGemv {
    /// The prologue's operands, `None` when they do not fit: the residual prologue's (`o` and
    /// `res` passing `row`, the scale `g1` passing `gamma`, the layer scalar a host value of
    /// type `act` and rank at most `rank`) or the row `x` (passing `row`), and the norm's scale
    /// (passing `gamma`).
    fn prologue_operands(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        row: impl Fn(&Value) -> bool,
        gamma: impl Fn(&Value) -> bool,
        act: DType,
        rank: usize,
    ) -> Result<Option<Prologue>> {
        macro_rules! operand {
            ($i:expr, $ok:expr) => {
                match gpu_operand(cx, inputs, $i, $ok)? {
                    Some(t) => t,
                    None => return Ok(None),
                }
            };
        }
        let mut scalar = 1.0f32;
        let row_operands = match self.slots.residual {
            Some(r) => {
                let o = operand!(r.o, &row);
                let res = operand!(r.res, &row);
                let g1 = operand!(r.gamma, &gamma);
                if res.shape != o.shape {
                    return Ok(None);
                }
                if let Some(sc) = r.scalar {
                    let Some(v) = host_scalar(inputs, sc, act, rank) else {
                        return Ok(None);
                    };
                    scalar = v;
                }
                RowOperands::Residual { o, res, g1 }
            }
            None => RowOperands::Plain {
                x: operand!(self.slots.x, &row),
            },
        };
        let g2 = match self.slots.norm {
            Some(n) => Some(operand!(n.gamma, &gamma)),
            None => None,
        };
        Ok(Some(Prologue {
            row: row_operands,
            g2,
            scalar,
        }))
    }

    /// The residual prologue's code values (its scale as bound in `pro`).
    fn residual_code(&self, pro: &Prologue) -> Option<ResidualCode> {
        let g1 = match &pro.row {
            RowOperands::Residual { g1, .. } => g1.storage(),
            RowOperands::Plain { .. } => return None,
        };
        self.slots.residual.map(|r| ResidualCode {
            eps: r.eps.to_bits(),
            scaled: r.scalar.is_some(),
            skip: r.skip,
            g1,
        })
    }

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
        let Some(pro) = self.prologue_operands(cx, inputs, row, scale_ok(k), act, shape.len())?
        else {
            return Ok(None);
        };
        let spec = RowsPrologueSpec {
            k,
            f16,
            residual: self.residual_code(&pro),
            norm_eps: self.slots.norm.map(|n| n.eps.to_bits()),
            g2: pro.g2_storage(),
            h: rows.h.is_some() && self.slots.residual.is_some(),
            y: rows.y.is_some() && self.slots.norm.is_some(),
        };
        let h = match rows.h.filter(|_| spec.h) {
            Some(slot) => Some((slot, cx.alloc(act, shape.clone())?)),
            None => None,
        };
        let y = match rows.y.filter(|_| spec.y) {
            Some(slot) => Some((slot, cx.alloc(act, shape.clone())?)),
            None => None,
        };
        let kernel = cx.gpu.kernel(&spec)?;
        let bound = pro
            .row
            .bind(&kernel)
            .bind_opt("g2", pro.g2.as_ref())
            .bind_opt("h", h.as_ref().map(|(_, t)| t))
            .bind_opt("y", y.as_ref().map(|(_, t)| t));
        const MAX_X: usize = 65535;
        let grid = (m.min(MAX_X) as u32, m.div_ceil(MAX_X) as u32);
        let params = RowsPrologueParams {
            rows: m as u32,
            scalar: pro.scalar,
        };
        cx.launch_groups(bound, &params, grid)?;
        Ok(Some(
            h.into_iter()
                .chain(y)
                .map(|(slot, t)| (slot, Value::Gpu(t)))
                .collect(),
        ))
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
        call: &FastCall,
    ) -> Result<Option<OtherRow>> {
        let n = self.ns[0];
        let act = call.act;
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
                    || call.row_shape.len() != 3
                {
                    return Ok(None);
                }
                let i = ih.to_i64()[0];
                let i = if i < 0 { i + s[2] as i64 } else { i };
                if i < 0 || i as usize >= s[2] {
                    return Ok(None);
                }
                Ok(Some(OtherRow {
                    t: ot,
                    off: (i as usize * n) as u32,
                }))
            }
            None => {
                if ot.shape != call.out_shape(n) {
                    return Ok(None);
                }
                Ok(Some(OtherRow { t: ot, off: 0 }))
            }
        }
    }

    /// Columns per workgroup pass (`WG / TPC`).
    fn cols(&self) -> usize {
        (WG / self.limits.gemv_tpc) as usize
    }

    /// The one-kernel path's checks of the input row, `None` when the shapes need the fallback.
    fn fast_call(&self, inputs: &[Option<&Value>]) -> Option<FastCall> {
        let k = self.k;
        let prologue = self.slots.residual.is_some() || self.slots.norm.is_some();
        let lone = !prologue && self.epi == Epilogue::Separate && self.ns.len() == 1;
        let nb = k.div_ceil(self.block);
        // The row is staged in workgroup memory (padded to whole blocks) when it fits, and must be
        // for a prologue; otherwise it is read from memory.
        let staged = ((nb * self.block + nb + self.cols()) as u64 + 2 * u64::from(WG)) * 4
            <= u64::from(self.limits.workgroup_bytes);
        if !staged && prologue {
            return None;
        }
        let x = inputs.get(self.slots.x).copied().flatten()?;
        // M == 1: the row is the whole input. Activations f32, or f16 (rounded like the graph).
        let act = x.dtype();
        let f16 = act == DType::F16;
        if x.shape().last() != Some(&k)
            || x.numel() != k
            || !matches!(act, DType::F32 | DType::F16)
            || self.slots.f16.is_some_and(|m| m != f16)
            || (f16 && (!k.is_multiple_of(2) || self.ns.iter().any(|n| !n.is_multiple_of(2))))
            || (lone && !f16)
        {
            return None;
        }
        Some(FastCall {
            act,
            row_shape: x.shape().to_vec(),
            staged,
        })
    }

    /// Weight `m` on the GPU (and the parts of a lone weight split by rows across buffers),
    /// `None` when it does not fit.
    fn weight(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        m: &MatSlots,
        f16: bool,
    ) -> Result<Option<(Weight, Option<Parts>)>> {
        let (k, n) = (self.k, m.n);
        let nb = k.div_ceil(self.block);
        if self.float {
            // [K, N] in the activation type, in one buffer (split weights take the fallback).
            let want = if f16 { DType::F16 } else { DType::F32 };
            let ok = |v: &Value| v.dtype() == want && v.numel() == k * n;
            let Some(w) = gpu_operand(cx, inputs, m.qw, ok)? else {
                return Ok(None);
            };
            let weight = Weight {
                q: w.clone(),
                s: w,
                z: None,
            };
            return Ok(Some((weight, None)));
        }
        let mut split = None;
        let q = match inputs.get(m.qw).copied().flatten() {
            Some(v) if v.dtype() == DType::U8 && v.numel() == n * nb * self.block / 2 => {
                let t = cx.to_gpu(v)?;
                if let Some(parts) = &t.split {
                    let odd = |x: usize| f16 && !x.is_multiple_of(2);
                    if self.ns.len() != 1
                        || parts
                            .iter()
                            .any(|(r0, p)| odd(*r0) || odd(p.shape.first().copied().unwrap_or(1)))
                    {
                        return Ok(None);
                    }
                    split = Some(parts.clone());
                }
                t
            }
            _ => return Ok(None),
        };
        let scales =
            |v: &Value| matches!(v.dtype(), DType::F32 | DType::F16) && v.numel() == n * nb;
        let Some(s) = gpu_operand(cx, inputs, m.sc, scales)? else {
            return Ok(None);
        };
        let z = match m.zp {
            None => None,
            Some(z) => {
                let zrow = nb.div_ceil(2);
                let ok = |v: &Value| v.dtype() == DType::U8 && v.numel() == n * zrow;
                match gpu_operand(cx, inputs, z, ok)? {
                    Some(t) => Some(t),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some((Weight { q, s, z }, split)))
    }

    /// The scalar epilogues' constant: their scalars are host constants of the activation type,
    /// one element of rank at most the row's (and the softcap's two the same); `Some(None)`
    /// for the other epilogues, `None` when they do not fit.
    fn epilogue_constant(&self, inputs: &[Option<&Value>], call: &FastCall) -> Option<Option<f32>> {
        let (d, m) = match self.epi {
            Epilogue::Softcap { div, mul } => (div, mul),
            Epilogue::Scale { factor } => (factor, factor),
            _ => return Some(None),
        };
        let rank = call.row_shape.len();
        let c = host_scalar(inputs, d, call.act, rank)?;
        let c2 = host_scalar(inputs, m, call.act, rank)?;
        (c.to_bits() == c2.to_bits()).then_some(Some(c))
    }

    /// The one-kernel path's operands, in the order the graph's values are taken to the GPU;
    /// `None` when one does not fit.
    fn operands(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        call: &FastCall,
    ) -> Result<Option<Operands>> {
        let (k, act) = (self.k, call.act);
        // Operands on the GPU (small constants live on the host and are uploaded).
        let row = |v: &Value| v.dtype() == act && v.numel() == k;
        let rank = call.row_shape.len();
        let Some(prologue) = self.prologue_operands(cx, inputs, row, scale_ok(k), act, rank)?
        else {
            return Ok(None);
        };
        let mut weights: [Option<Weight>; MAX_MATS] = Default::default();
        let mut split = None;
        for (j, m) in self.slots.mats.iter().enumerate() {
            let Some((w, parts)) = self.weight(cx, inputs, m, call.f16())? else {
                return Ok(None);
            };
            split = split.or(parts);
            weights[j] = Some(w);
        }
        // Weights packed at load (ranges of one buffer, `fuse`'s packs) are bound once and read
        // at their offsets: one binding for the group's bits, scales and zero points.
        let Some(Weight { q: q0, z: z0, .. }) = &weights[0] else {
            return Ok(None);
        };
        let shared = |t: &GpuTensor| t.view.is_some() && t.shares_buffer(q0);
        let packed = weights.iter().flatten().all(|w| {
            shared(&w.q)
                && shared(&w.s)
                && w.z.as_ref().map_or(z0.is_none(), shared)
                && w.z.is_some() == z0.is_some()
        });
        let packed = packed.then(|| q0.whole_bytes());
        let other = match self.epi {
            Epilogue::GeluOther { other, gather } => {
                match self.other_operand(cx, inputs, other, gather, call)? {
                    Some(o) => Some(o),
                    None => return Ok(None),
                }
            }
            _ => None,
        };
        let Some(constant) = self.epilogue_constant(inputs, call) else {
            return Ok(None);
        };
        Ok(Some(Operands {
            prologue,
            weights,
            packed,
            split,
            other,
            constant,
        }))
    }

    /// The one-kernel path's outputs: h (when the graph reads it), then the results (several
    /// separate ones as ranges of one buffer).
    fn outputs(&self, cx: &mut Ctx<'_>, call: &FastCall) -> Result<Outputs> {
        let act = call.act;
        let h = if self.slots.h_out {
            Some(cx.alloc(act, call.row_shape.clone())?)
        } else {
            None
        };
        let (results, packed) = match self.epi {
            Epilogue::Separate if self.ns.len() > 1 => {
                let shapes: Vec<Vec<usize>> = self.ns.iter().map(|&n| call.out_shape(n)).collect();
                let ys = cx.alloc_pack(act, &shapes)?;
                let whole = ys[0].whole();
                (ys, Some(whole))
            }
            _ => (vec![cx.alloc(act, call.out_shape(self.ns[0]))?], None),
        };
        Ok(Outputs { h, results, packed })
    }

    /// The kernel's spec for this call: the op's configuration and what the operands, the
    /// outputs and the device make of it.
    fn spec(
        &self,
        cx: &Ctx<'_>,
        call: &FastCall,
        ops: &Operands,
        outs: &Outputs,
    ) -> FusedGemvSpec<'_> {
        let packed = ops.packed.is_some();
        let weights = std::array::from_fn(|j| {
            ops.weights[j].as_ref().map(|w| WeightCode {
                scales: w.s.storage(),
                zp: w.z.is_some(),
                packed: packed.then(|| PackedAt {
                    bits: w.q.byte_offset(),
                    scales: w.s.byte_offset(),
                    zp: w.z.as_ref().map_or(0, GpuTensor::byte_offset),
                }),
            })
        });
        // The weight bits are read 16 bytes (four words of a quant block) per load where the
        // blocks are whole multiples of 16 bytes and every weight starts on a 16-byte boundary
        // (packed slots and buffers start at multiples of the storage offset alignment).
        let wide = self.limits.gemv_wide
            && !self.float
            && self.block.is_multiple_of(32)
            && ops
                .weights
                .iter()
                .flatten()
                .all(|w| w.q.byte_offset().is_multiple_of(16));
        let c = || ops.constant.unwrap_or(1.0).to_bits();
        let epi = match self.epi {
            Epilogue::Separate => EpilogueCode::Separate {
                packed: outs.packed.as_ref().map(|_| {
                    std::array::from_fn(|j| {
                        outs.results
                            .get(j)
                            .map_or(0, |y| (y.byte_offset() / 4) as u32)
                    })
                }),
            },
            Epilogue::GeluMul { gate } => EpilogueCode::GeluMul { gate },
            Epilogue::GeluOther { .. } => EpilogueCode::GeluOther {
                other: ops.other.as_ref().map_or(Storage::F32, |o| o.t.storage()),
            },
            Epilogue::Softcap { .. } => EpilogueCode::Softcap { c: c() },
            Epilogue::Scale { .. } => EpilogueCode::Scale { c: c() },
        };
        // A column's lanes add up through subgroup shuffles when they fit in one subgroup and
        // the workgroup is whole subgroups (see `Gpu::subgroup_sizes`).
        let tpc = self.limits.gemv_tpc;
        let (sg_min, sg_max) = cx.gpu.subgroup_sizes;
        let shuffle = cx.gpu.subgroups && tpc > 1 && tpc <= sg_min && WG.is_multiple_of(sg_max);
        let mut spec = FusedGemvSpec {
            k: self.k,
            block: self.block,
            float: self.float,
            ns: &self.ns,
            f16: call.f16(),
            staged: call.staged,
            residual: self.residual_code(&ops.prologue),
            h_out: self.slots.h_out,
            norm_eps: self.slots.norm.map(|n| n.eps.to_bits()),
            g2: ops.prologue.g2_storage(),
            weights,
            wide,
            epi,
            tpc,
            reps: 1,
            shuffle,
        };
        // Wide outputs (the vocabulary, the wide MLPs): each invocation computes REPS columns at
        // once (COLS apart, sharing each load of the row), so a workgroup's prologue serves
        // COLS * REPS columns, while leaving at least `gemv_min_workgroups` workgroups. Several
        // separate outputs (their columns in consecutive ranges) keep one column per invocation.
        if !(self.epi == Epilogue::Separate && self.ns.len() > 1) {
            spec.reps = (spec.nv() / (self.cols() * self.limits.gemv_min_workgroups as usize))
                .clamp(1, 8)
                .next_power_of_two() as u32;
        }
        spec
    }

    /// The kernel's bindings, `part` bound in place of a split weight.
    fn bound<'k, 't>(
        &self,
        kernel: &'k Compiled,
        ops: &'t Operands,
        outs: &'t Outputs,
        part: Option<&'t GpuTensor>,
    ) -> Bound<'k, 't> {
        let pro = &ops.prologue;
        let mut b = pro.row.bind(kernel).bind_opt("g2", pro.g2.as_ref());
        match &ops.packed {
            Some(wts) => b = b.bind("wts", part.unwrap_or(wts)),
            None => {
                for (j, w) in ops.weights.iter().enumerate() {
                    let Some(w) = w else { continue };
                    let q = if j == 0 { part.unwrap_or(&w.q) } else { &w.q };
                    b = b.bind(QW[j], q);
                    if !self.float {
                        b = b.bind(SC[j], &w.s).bind_opt(ZP[j], w.z.as_ref());
                    }
                }
            }
        }
        b = b
            .bind_opt("other", ops.other.as_ref().map(|o| &o.t))
            .bind_opt("h", outs.h.as_ref());
        match (&outs.packed, self.epi) {
            (Some(y), _) => b.bind("y", y),
            (None, Epilogue::Separate) => outs
                .results
                .iter()
                .zip(Y)
                .fold(b, |b, (y, name)| b.bind(name, y)),
            (None, _) => b.bind("y", &outs.results[0]),
        }
    }

    /// Records the kernel's dispatches: one over every column, or one per part of a split
    /// weight (its columns).
    fn launch(
        &self,
        cx: &mut Ctx<'_>,
        kernel: &Compiled,
        spec: &FusedGemvSpec<'_>,
        ops: &Operands,
        outs: &Outputs,
    ) -> Result<()> {
        let per_group = self.cols() * spec.reps as usize;
        let mut params = FusedGemvParams {
            scalar: ops.prologue.scalar,
            other_off: ops.other.as_ref().map_or(0, |o| o.off),
            ..FusedGemvParams::default()
        };
        let mut run = |cx: &mut Ctx<'_>, v0: usize, cnt: usize, part| {
            params.first_col = v0 as u32;
            params.end_col = (v0 + cnt) as u32;
            let groups = cnt.div_ceil(per_group) as u64;
            cx.launch(
                self.bound(kernel, ops, outs, part),
                &params,
                groups * u64::from(WG),
            )
        };
        match &ops.split {
            Some(parts) => {
                for (r0, p) in parts.iter() {
                    run(cx, *r0, p.shape.first().copied().unwrap_or(0), Some(p))?;
                }
                Ok(())
            }
            None => run(cx, 0, spec.nv(), None),
        }
    }

    /// The one-kernel path, or `None` when the shapes need the fallback.
    pub(super) fn fast(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
    ) -> Result<Option<Vec<Value>>> {
        let Some(call) = self.fast_call(inputs) else {
            return Ok(None);
        };
        let Some(ops) = self.operands(cx, inputs, &call)? else {
            return Ok(None);
        };
        let outs = self.outputs(cx, &call)?;
        let spec = self.spec(cx, &call, &ops, &outs);
        if spec.bindings() as u32 + 1 > self.limits.storage_buffers {
            return Ok(None);
        }
        let kernel = cx.gpu.kernel(&spec)?;
        self.launch(cx, &kernel, &spec, &ops, &outs)?;
        Ok(Some(outs.into_values()))
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
