//! Attention: GroupQueryAttention (com.microsoft; rotary, sliding window, softcap, bias, KV cache
//! append) and RotaryEmbedding (com.microsoft and ai.onnx opset 23).

use super::elementwise::cast_gpu;
use super::{Attrs, MS, Op, Registry, host_in, req};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage};
use crate::tensor::DType;

// Both end with the shared rotation (`rotate.wgsl`).
const ROPE: &str = concat!(
    include_str!("../kernels/rope.wgsl"),
    include_str!("../kernels/rotate.wgsl")
);
const KV_APPEND: &str = concat!(
    include_str!("../kernels/kv_append.wgsl"),
    include_str!("../kernels/rotate.wgsl")
);
const KV_APPEND_IN_PLACE: &str = concat!(
    include_str!("../kernels/kv_append.wgsl"),
    include_str!("../kernels/rotate.wgsl"),
    include_str!("../kernels/kv_append_in_place.wgsl")
);
const ROPE_PAIR: &str = concat!(
    include_str!("../kernels/rope_pair.wgsl"),
    include_str!("../kernels/rotate.wgsl")
);
const GQA: &str = include_str!("../kernels/gqa.wgsl");
const Q_PREP: &str = include_str!("../kernels/q_prep.wgsl");
const Q_PREP_ROT: &str = concat!(
    include_str!("../kernels/q_prep.wgsl"),
    include_str!("../kernels/rotate.wgsl")
);
// The attention kernel with the GroupQueryAttention query's rotary.
const GQA_ROT: &str = concat!(
    include_str!("../kernels/gqa.wgsl"),
    include_str!("../kernels/rotate.wgsl")
);
const GQA_COMBINE: &str = include_str!("../kernels/gqa_combine.wgsl");

mod regs;

/// The additive bias of a score (`sc`) of row (b, kvh, head h % G, query s) against key `tt`
/// (prm 7..10, 18, 19: the bias view; see [`Bias`]).
const BIAS_WGSL: &str =
    "sc = sc + ld_bias(prm[19] + b * prm[7] + kvh * prm[18] + (h % G) * prm[8] + s * prm[9] + tt);";

/// Where rotary positions come from.
enum Pos<'a> {
    /// `seqlens_k[b] + 1 - S + s` (GroupQueryAttention).
    Seqlens(&'a GpuTensor),
    /// `position_ids[b, s]`.
    Ids(&'a GpuTensor),
    /// `position_ids[0] + s`.
    Offset(&'a GpuTensor),
    /// cos/sin are already per token: row `b * S + s`.
    PerToken,
}

/// Logical [B, S, H, D] view of `x`: strides (sb, ss, sh) and element offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub b: usize,
    pub s: usize,
    pub h: usize,
    pub d: usize,
    pub strides: [usize; 3],
    pub off: usize,
}

/// Bytes per element of a rotary table that can be read at an element offset.
fn table_elem_bytes(t: &GpuTensor) -> Option<u64> {
    match t.dtype {
        DType::F32 => Some(4),
        DType::F16 => Some(2),
        _ => None,
    }
}

/// Rotary tables that are ranges of one buffer (the cos and sin caches packed at load by the
/// fusion pass), so that a kernel binds them once and reads each at its element offset.
pub(crate) struct CosSinPack {
    /// The whole buffer: the one binding.
    buf: GpuTensor,
    /// Element offsets of the cos and the sin table in it.
    cos: u64,
    sin: u64,
}

/// The pack of the rotary tables `c` and `s` when they are one (see [`CosSinPack`]), or `None`.
pub(crate) fn cos_sin_pack(c: &GpuTensor, s: &GpuTensor) -> Option<CosSinPack> {
    let e = table_elem_bytes(c)?;
    let packed = c.dtype == s.dtype
        && c.byte_offset().is_multiple_of(e)
        && s.byte_offset().is_multiple_of(e)
        && c.view.is_some()
        && s.view.is_some()
        && c.split.is_none()
        && s.split.is_none()
        && c.shares_buffer(s);
    packed.then(|| CosSinPack {
        buf: c.whole(),
        cos: c.byte_offset() / e,
        sin: s.byte_offset() / e,
    })
}

/// Storage buffers the rotary tables take: one when packed, else two.
fn cos_sin_bindings(c: &GpuTensor, s: &GpuTensor) -> u32 {
    if cos_sin_pack(c, s).is_some() { 1 } else { 2 }
}

/// Declares the rotary tables as `ld_cos` / `ld_sin` of `k`: from `pack` (one binding `cs`,
/// each table at its offset) when given, else one binding each.
fn cos_sin_inputs<'a>(
    k: Kernel,
    bind: &mut Vec<&'a GpuTensor>,
    (c, s): (&'a GpuTensor, &'a GpuTensor),
    pack: Option<&'a CosSinPack>,
) -> Kernel {
    match pack {
        Some(p) => {
            bind.push(&p.buf);
            k.input("cs", c.storage())
                .alias("cos", "cs", p.cos)
                .alias("sin", "cs", p.sin)
        }
        None => {
            bind.push(c);
            bind.push(s);
            k.input("cos", c.storage()).input("sin", s.storage())
        }
    }
}

#[allow(clippy::too_many_arguments)] // reason: rotary = input view + caches + position source + flags
fn rope(
    cx: &mut Ctx<'_>,
    x: &GpuTensor,
    l: &Layout,
    cs: Option<(&GpuTensor, &GpuTensor)>,
    pos: Pos<'_>,
    interleaved: bool,
    rot_dim: usize,
    hs_swap: bool,
    out_dtype: DType,
) -> Result<GpuTensor> {
    let shape = if hs_swap {
        vec![l.b, l.h, l.s, l.d]
    } else {
        vec![l.b, l.s, l.h, l.d]
    };
    let out = cx.alloc(out_dtype, shape)?;
    let n = out.numel();
    let (cos_row, pos_t) = match pos {
        Pos::Seqlens(t) => ("u32(ldi_pos(b) + 1 - i32(S) + i32(s))", Some(t)),
        Pos::Ids(t) => ("u32(ldi_pos(b * S + s))", Some(t)),
        Pos::Offset(t) => ("u32(ldi_pos(0u)) + s", Some(t)),
        Pos::PerToken => ("b * S + s", None),
    };
    let cos_row = if cs.is_some() { cos_row } else { "0u" };
    let mut k = Kernel::new("rope", ROPE)
        .bool("ROTARY", cs.is_some())
        .bool("INTERLEAVED", interleaved)
        .bool("HS_SWAP", hs_swap)
        .code("COS_ROW", cos_row)
        .input("x", x.storage());
    let pack = cs.and_then(|(c, s)| cos_sin_pack(c, s));
    let mut bind = vec![x];
    let half = match cs {
        Some((c, s)) => {
            k = cos_sin_inputs(k, &mut bind, (c, s), pack.as_ref());
            c.shape.last().copied().unwrap_or(1)
        }
        None => {
            // No rotary: the (unread) tables alias the input, without bindings.
            k = k.alias("cos", "x", 0).alias("sin", "x", 0);
            1
        }
    };
    match pos_t {
        Some(p) => {
            k = k.input("pos", p.storage());
            bind.push(p);
        }
        None => {
            k = k.input("pos", x.storage());
            bind.push(x);
        }
    }
    let k = k.output("y", out.storage()).mapped("y");
    bind.push(&out);
    let meta = [
        n as u32,
        l.b as u32,
        l.s as u32,
        l.h as u32,
        l.d as u32,
        l.strides[0] as u32,
        l.strides[1] as u32,
        l.strides[2] as u32,
        l.off as u32,
        rot_dim as u32,
        half as u32,
    ];
    cx.dispatch(
        &k,
        &bind,
        &meta,
        n.div_ceil(out.storage().per_word() as usize) as u64,
    )?;
    Ok(out)
}

/// The head size when a GroupQueryAttention node brings zero new K/V tokens (a KV-shared layer:
/// its past is another layer's present, which already holds every token), else `None`. Two
/// forms: key and value `[B, 0, kvH * D]` (what the mobius exporter writes; ONNX Runtime
/// #28242), or both absent with a query of `H * D` only (the head size `D` of the past; a packed
/// query would be `(H + 2 kvH) * D`). Either needs both pasts, `[B, kvH, T, D]`.
fn shared_kv_head_size(
    kv: [Option<&Value>; 2],
    [b, hidden, h, kvh]: [usize; 4],
    past: [Option<&GpuTensor>; 2],
) -> Result<Option<usize>> {
    let past_d = |p: Option<&GpuTensor>| p.filter(|t| t.shape.len() == 4).map(|t| t.shape[3]);
    let empty = |v: &Value| v.shape().get(1) == Some(&0);
    let shared = match kv {
        [Some(k), Some(v)] if empty(k) || empty(v) => {
            for (name, t) in [("key", k), ("value", v)] {
                if t.shape().len() != 3 || t.shape()[0] != b || t.shape()[1] != 0 {
                    return Err(op_err(format!(
                        "{name} {:?}: with no new tokens key and value must both be [{b}, 0, kv_hidden]",
                        t.shape()
                    )));
                }
            }
            true
        }
        [Some(k), None] | [None, Some(k)] if empty(k) => {
            return Err(op_err(
                "with no new tokens key and value must both be [B, 0, kv_hidden]",
            ));
        }
        [None, None] => past_d(past[0]).is_some_and(|d| d > 0 && hidden == h * d),
        _ => false,
    };
    if !shared {
        return Ok(None);
    }
    let (Some(pk), Some(pv)) = (past[0], past[1]) else {
        return Err(op_err(
            "no new key/value tokens: past_key and past_value (the shared cache) are required",
        ));
    };
    let d = past_d(Some(pk)).unwrap_or(0);
    if d == 0 || pk.shape[..2] != [b, kvh] || pv.shape != pk.shape {
        return Err(op_err(format!(
            "shared past_key {:?} / past_value {:?} are not both [{b}, {kvh}, T, D]",
            pk.shape, pv.shape
        )));
    }
    if hidden != h * d {
        return Err(op_err(format!(
            "query hidden size {hidden} does not fit {h} heads of the shared cache's head size {d}"
        )));
    }
    if let [Some(k), _] = kv
        && k.shape().get(2) != Some(&(kvh * d))
    {
        return Err(op_err(format!(
            "empty key {:?} is not [{b}, 0, {}]",
            k.shape(),
            kvh * d
        )));
    }
    Ok(Some(d))
}

struct Gqa {
    heads: usize,
    kv_heads: usize,
    scale: Option<f32>,
    softcap: f32,
    window: i64,
    rotary: bool,
    interleaved: bool,
}

impl Op for Gqa {
    fn host_inputs(&self) -> &[usize] {
        &[6]
    }
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let opt = |cx: &mut Ctx<'_>, i: usize| -> Result<Option<GpuTensor>> {
            match inputs.get(i).copied().flatten() {
                Some(v) if v.numel() > 0 || i == 3 || i == 4 => Ok(Some(cx.to_gpu(v)?)),
                _ => Ok(None),
            }
        };
        // The past K and V given up by their owner (this node's inputs hold them alone): the
        // presents may grow in their buffers.
        let sole = |i: usize| matches!(inputs.get(i).copied().flatten(), Some(Value::Gpu(t)) if t.is_sole_owner());
        let donated = sole(3) && sole(4);
        // Where the new rows start, when the host knows seqlens_k (batch 1).
        let new_from = match inputs.get(5).copied().flatten() {
            Some(Value::Host(h)) if h.numel() == 1 => h.to_i64().first().copied(),
            _ => None,
        };
        let q_in = cx.to_gpu(req(inputs, 0)?)?;
        let key = opt(cx, 1)?;
        let value = opt(cx, 2)?;
        let past_k = opt(cx, 3)?;
        let past_v = opt(cx, 4)?;
        let seqlens = cx.to_gpu(req(inputs, 5)?)?;
        let total = host_in(inputs, 6)?
            .to_i64()
            .first()
            .copied()
            .ok_or_else(|| op_err("total_sequence_length is empty"))?;
        let cos = opt(cx, 7)?;
        let sin = opt(cx, 8)?;
        if inputs.get(9).copied().flatten().is_some() {
            return Err(op_err(
                "position_ids input is not supported (positions come from seqlens_k)",
            ));
        }
        let bias = opt(cx, 10)?;
        if q_in.shape.len() != 3 {
            return Err(op_err(format!(
                "query must be [B, S, hidden], got {:?}",
                q_in.shape
            )));
        }
        let (b, s, hidden) = (q_in.shape[0], q_in.shape[1], q_in.shape[2]);
        let (h, kvh) = (self.heads, self.kv_heads);
        // Zero new K/V tokens (Gemma 4's KV-shared layers, ONNX Runtime #28242): the past is
        // another layer's present and already holds every token, the query's included.
        let shared = shared_kv_head_size(
            [
                inputs.get(1).copied().flatten(),
                inputs.get(2).copied().flatten(),
            ],
            [b, hidden, h, kvh],
            [past_k.as_ref(), past_v.as_ref()],
        )?;
        let packed = key.is_none() && shared.is_none();
        let d = match shared {
            Some(d) => d,
            None if packed => hidden / (h + 2 * kvh),
            None => hidden / h,
        };
        if d == 0 || (packed && hidden != (h + 2 * kvh) * d) || (!packed && hidden != h * d) {
            return Err(op_err(format!(
                "query hidden size {hidden} does not fit {h} heads (+{kvh} kv heads)"
            )));
        }
        let p = past_k
            .as_ref()
            .map_or(0, |t| t.shape.get(2).copied().unwrap_or(0));
        let t_len =
            p.max(usize::try_from(total).map_err(|_| op_err("negative total_sequence_length"))?);
        if shared.is_some() && t_len > p {
            return Err(op_err(format!(
                "total_sequence_length {total} exceeds the shared past's {p} rows (no new tokens)"
            )));
        }
        if seqlens.numel() != b {
            return Err(op_err(format!(
                "seqlens_k has {} entries for batch {b}",
                seqlens.numel()
            )));
        }
        let rot = if self.rotary {
            let (c, sn) = (
                cos.as_ref()
                    .ok_or_else(|| op_err("do_rotary needs cos_cache"))?,
                sin.as_ref()
                    .ok_or_else(|| op_err("do_rotary needs sin_cache"))?,
            );
            Some((c, sn))
        } else {
            None
        };
        let rot_dim = rot.map_or(0, |(c, _)| c.shape.last().copied().unwrap_or(0) * 2);
        if rot_dim > d {
            return Err(op_err(format!(
                "rotary dim {rot_dim} exceeds head size {d}"
            )));
        }
        // The query [B, S, H, D] is read (and rotated) by the attention kernel itself; new K
        // (rotated) and V are read from their [B, S, kvH, D] views by the append.
        let row = if packed { hidden } else { h * d };
        let ql = Layout {
            b,
            s,
            h,
            d,
            strides: [s * row, row, d],
            off: 0,
        };
        let (k_src, k_off, k_row) = match &key {
            Some(k) => (k, 0, kvh * d),
            None => (&q_in, h * d, hidden),
        };
        let (v_src, v_off, v_row) = match &value {
            Some(v) => (v, 0, kvh * d),
            None => (&q_in, (h + kvh) * d, hidden),
        };
        let kv_dtype = past_k.as_ref().map_or(q_in.dtype, |t| t.dtype);
        let kl = Layout {
            b,
            s,
            h: kvh,
            d,
            strides: [s * k_row, k_row, d],
            off: k_off,
        };
        let vl = Layout {
            b,
            s,
            h: kvh,
            d,
            strides: [s * v_row, v_row, d],
            off: v_off,
        };
        let (present_k, present_v) = match (shared, &past_k, &past_v) {
            // Nothing to append: the presents are the pasts (no copy, no dispatch). The keys a
            // query sees end at seqlens_k[b] (its own position), as with new tokens.
            (Some(_), Some(pk), Some(pv)) => {
                if let Some(last) = new_from
                    && !(0..t_len as i64).contains(&last)
                {
                    return Err(op_err(format!(
                        "seqlens_k {last} is outside the shared past of {t_len} rows"
                    )));
                }
                (pk.clone(), pv.clone())
            }
            _ => self.append(
                cx,
                [(k_src, &kl), (v_src, &vl)],
                rot.map(|(c, sn)| (c, sn, rot_dim)),
                [past_k.as_ref(), past_v.as_ref()],
                &seqlens,
                [b, kvh, t_len, d, s, p],
                kv_dtype,
                donated.then(|| new_from.map_or(0, |v| v + 1 - s as i64)),
            )?,
        };
        let bias = match &bias {
            Some(bt) => {
                if bt.shape.len() != 4
                    || bt.shape[2] != s
                    || bt.shape[3] < t_len.min(total as usize)
                {
                    return Err(op_err(format!(
                        "attention_bias {:?} is not [B|1, H|1, {s}, {total}]",
                        bt.shape
                    )));
                }
                let tb = bt.shape[3];
                let sb = if bt.shape[0] == 1 {
                    0
                } else {
                    bt.shape[1] * s * tb
                };
                let sh = if bt.shape[1] == 1 { 0 } else { s * tb };
                Some(Bias {
                    t: bt,
                    off: 0,
                    sb,
                    skv: sh * (h / kvh),
                    sg: sh,
                    ss: tb,
                })
            }
            None => None,
        };
        let mut flash = Flash {
            q: Query::Gqa {
                x: &q_in,
                l: ql,
                rot: rot.map(|(c, sn)| (c, sn, rot_dim)),
                interleaved: self.interleaved,
            },
            k: &present_k,
            v: &present_v,
            seqlens: Some(&seqlens),
            dims: [b, s, h, kvh, d, t_len],
            scale: self.scale.unwrap_or(1.0 / (d as f32).sqrt()),
            softcap: self.softcap,
            window: self.window,
            bias,
            out_dtype: q_in.dtype,
        };
        // Too few storage bindings for the query's rotary inside the kernel: rotate it first.
        let rotated;
        if rot.is_some() && flash.bindings() > cx.gpu.max_bindings() {
            rotated = rope(
                cx,
                &q_in,
                &ql,
                rot,
                Pos::Seqlens(&seqlens),
                self.interleaved,
                rot_dim,
                false,
                DType::F32,
            )?;
            flash.q = Query::Gqa {
                x: &rotated,
                l: Layout {
                    b,
                    s,
                    h,
                    d,
                    strides: [s * h * d, h * d, d],
                    off: 0,
                },
                rot: None,
                interleaved: false,
            };
        }
        let y = flash_attention(cx, &flash)?;
        Ok(vec![
            Value::Gpu(y),
            Value::Gpu(present_k),
            Value::Gpu(present_v),
        ])
    }
}

/// gqa.wgsl epilogue, one pass: the normalised rows to y [B, S, H, D] (dimension pairs, so an
/// f16 y is written a whole word at a time).
const STORE_Y: &str = "
    for (var i = 0u; i < DPT; i = i + 2u) {
        let d = acc_dim(tid, i);
        if (d < D) {
            for (var q = 0u; q < BQ; q = q + 1u) {
                let row = r0 + q;
                if (row < SG) {
                    let l = row_l[q];
                    let inv = select(0.0, 1.0 / l, l > 0.0);
                    let y0 = acc[q * DPT + i] * inv;
                    let y1 = acc[q * DPT + i + 1u] * inv;
                    let o = ((b * S + row / G) * H + kvh * G + row % G) * D + d;
                    if (EPW_y == 2u) {
                        st_y(o / 2u, y0, y1);
                    } else {
                        st_y(o, y0, 0.0);
                        if (d + 1u < D) { st_y(o + 1u, y1, 0.0); }
                    }
                }
            }
        }
    }";

/// gqa.wgsl epilogue, split keys: (max, sum, acc[D]) per (row, chunk) for gqa_combine.wgsl.
const STORE_PART: &str = "
    let W = D + 2u;
    for (var i = 0u; i < DPT; i = i + 1u) {
        let d = acc_dim(tid, i);
        if (d < D) {
            for (var q = 0u; q < BQ; q = q + 1u) {
                let row = r0 + q;
                if (row < SG) {
                    stf_part(((bk * SG + row) * chunks + chunk) * W + 2u + d, acc[q * DPT + i]);
                }
            }
        }
    }
    if (tid < BQ && r0 + tid < SG) {
        let o = ((bk * SG + r0 + tid) * chunks + chunk) * W;
        stf_part(o, row_m[tid]);
        stf_part(o + 1u, row_l[tid]);
    }";

/// Where the query row (b, s, h) starts in `x` (prm 12..16: offset, strides).
const Q_BASE: &str = "
fn q_base(b: u32, s: u32, h: u32) -> u32 {
    return prm[12] + b * prm[13] + s * prm[14] + h * prm[15];
}";

/// gqa.wgsl query reader without rotary: `x` through its view.
const Q_PLAIN: &str = "
fn q_scale(b: u32, s: u32, h: u32) -> f32 { return 1.0; }
fn load_q(b: u32, s: u32, h: u32, d: u32, inv: f32) -> f32 { return ld_x(q_base(b, s, h) + d); }";

/// gqa.wgsl query reader of GroupQueryAttention with rotary: `x` through its view, rotated
/// (rotate.wgsl) at position `seqlens_k[b] + 1 - S + s`.
const Q_GQA: &str = "
fn q_scale(b: u32, s: u32, h: u32) -> f32 { return 1.0; }
fn load_q(b: u32, s: u32, h: u32, d: u32, inv: f32) -> f32 {
    let base = q_base(b, s, h);
    let rot = prm[16];
    if (d >= rot) { return ld_x(base + d); }
    let pos = u32(ldi_seqlens(b) + 1 - i32(prm[1]) + i32(s));
    return rotate(base, d, rot, pos * prm[17]);
}";

/// gqa.wgsl query reader of the KV-shared layers: RMS norm over the head (statistics in f32,
/// scale `gamma`) when NORM, then `q * cos + rotate_half(q) * sin` with per-token full-width
/// cos/sin at `cos_off + b * cos_sb + s * cos_ss + d`.
const Q_SHARED: &str = "
fn q_scale(b: u32, s: u32, h: u32) -> f32 {
    if (!{{NORM}}) { return 1.0; }
    let base = q_base(b, s, h);
    let D = prm[4];
    var ss = 0.0;
    for (var d = 0u; d < D; d = d + 1u) {
        let v = ld_x(base + d);
        ss = ss + v * v;
    }
    return inverseSqrt(ss / f32(D) + bitcast<f32>(prm[20]));
}
fn qn(base: u32, d: u32, inv: f32) -> f32 {
    var v = ld_x(base + d);
    if ({{NORM}}) { v = v * inv * ld_gamma(d); }
    return v;
}
fn load_q(b: u32, s: u32, h: u32, d: u32, inv: f32) -> f32 {
    let base = q_base(b, s, h);
    let hr = prm[4] / 2u;
    let c = prm[21] + b * prm[22] + s * prm[23] + d;
    var r = 0.0;
    if (d < hr) { r = -qn(base, d + hr, inv); } else { r = qn(base, d - hr, inv); }
    return qn(base, d, inv) * ld_cos(c) + r * ld_sin(c);
}";

/// The query reader's storage and parameters, as set up by `query_inputs`.
struct QueryParams {
    /// Words 12..18 of the parameters: the view (offset, strides) and (rotary dim, half).
    view: [u32; 6],
    eps: f32,
    /// Words 21..24: cos/sin offset and batch / sequence strides.
    cs: [u32; 3],
}

/// Adds the query reader (`Q_FN`) of `q` and its bindings to `k` (gqa.wgsl or q_prep.wgsl).
fn query_inputs<'a>(
    q: &Query<'a>,
    mut k: Kernel,
    bind: &mut Vec<&'a GpuTensor>,
    pack: Option<&'a CosSinPack>,
) -> (Kernel, QueryParams) {
    let view = |l: &Layout, rot: [u32; 2]| {
        [
            l.off as u32,
            l.strides[0] as u32,
            l.strides[1] as u32,
            l.strides[2] as u32,
            rot[0],
            rot[1],
        ]
    };
    match q {
        Query::Gqa {
            x,
            l,
            rot,
            interleaved,
        } => {
            let code = if rot.is_some() { Q_GQA } else { Q_PLAIN };
            k = k
                .code("Q_FN", &format!("{Q_BASE}{code}"))
                .bool("INTERLEAVED", *interleaved)
                .input("x", x.storage());
            bind.push(x);
            let mut r = [0, 1];
            if let Some((c, sn, rot_dim)) = rot {
                k = cos_sin_inputs(k, bind, (c, sn), pack);
                r = [*rot_dim as u32, c.shape.last().copied().unwrap_or(1) as u32];
            }
            (
                k,
                QueryParams {
                    view: view(l, r),
                    eps: 0.0,
                    cs: [0; 3],
                },
            )
        }
        Query::Shared {
            x,
            l,
            norm,
            cos,
            sin,
            cs,
        } => {
            k = k
                .code("Q_FN", &format!("{Q_BASE}{Q_SHARED}"))
                .bool("NORM", norm.is_some())
                .input("x", x.storage());
            bind.push(x);
            let mut eps = 0.0;
            if let Some((gm, e)) = norm {
                k = k.input("gamma", gm.storage());
                bind.push(gm);
                eps = *e;
            }
            k = cos_sin_inputs(k, bind, (cos, sin), pack);
            (
                k,
                QueryParams {
                    view: view(l, [0, 1]),
                    eps,
                    cs: [cs[0] as u32, cs[1] as u32, cs[2] as u32],
                },
            )
        }
    }
}

/// Where the flash attention kernel reads the queries.
pub(crate) enum Query<'a> {
    /// GroupQueryAttention: `x` through `l`, rotated with the half-width caches (cos, sin,
    /// rotary dim) at positions from `seqlens_k` when `rot` is given.
    Gqa {
        x: &'a GpuTensor,
        l: Layout,
        rot: Option<(&'a GpuTensor, &'a GpuTensor, usize)>,
        interleaved: bool,
    },
    /// The KV-shared layers of Gemma 4: `x` through `l`, RMS-normed per head (scale, epsilon)
    /// when `norm` is given, then rotated by halves with per-token full-width `cos`/`sin` at
    /// `cs[0] + b * cs[1] + s * cs[2] + d`.
    Shared {
        x: &'a GpuTensor,
        l: Layout,
        norm: Option<(&'a GpuTensor, f32)>,
        cos: &'a GpuTensor,
        sin: &'a GpuTensor,
        cs: [usize; 3],
    },
}

impl Query<'_> {
    /// The one binding of its rotary tables when they are packed (see [`cos_sin_pack`]).
    fn cos_sin_pack(&self) -> Option<CosSinPack> {
        match self {
            Query::Gqa { rot, .. } => rot.and_then(|(c, s, _)| cos_sin_pack(c, s)),
            Query::Shared { cos, sin, .. } => cos_sin_pack(cos, sin),
        }
    }
}

/// An additive attention bias read at `off + b * sb + kvh * skv + g * sg + s * ss + t`.
pub(crate) struct Bias<'a> {
    pub t: &'a GpuTensor,
    pub off: usize,
    pub sb: usize,
    pub skv: usize,
    pub sg: usize,
    pub ss: usize,
}

/// One flash attention (gqa.wgsl): queries [B, S, H, D] against `k`, `v` [B, kvH, T, D].
/// With `seqlens` the keys visible to a query are causal (bottom-right aligned at
/// `seqlens_k[b] + 1`, within `window` when > 0); without, all T keys (the bias masks).
pub(crate) struct Flash<'a> {
    pub q: Query<'a>,
    pub k: &'a GpuTensor,
    pub v: &'a GpuTensor,
    pub seqlens: Option<&'a GpuTensor>,
    /// [B, S, H, kvH, D, T].
    pub dims: [usize; 6],
    pub scale: f32,
    pub softcap: f32,
    pub window: i64,
    pub bias: Option<Bias<'a>>,
    pub out_dtype: DType,
}

impl Flash<'_> {
    /// Storage buffers of the attention kernel (the parameter block is a uniform).
    pub(crate) fn bindings(&self) -> u32 {
        let q = match &self.q {
            Query::Gqa { rot, .. } => 1 + rot.map_or(0, |(c, s, _)| cos_sin_bindings(c, s)),
            Query::Shared { norm, cos, sin, .. } => {
                shared_query_bindings(norm.is_some(), cos_sin_bindings(cos, sin))
            }
        };
        flash_bindings(q, self.seqlens.is_some(), self.bias.is_some())
    }
}

impl<'a> Flash<'a> {
    /// `CAUSAL` and `PAST_B` (where query 0 sits in the keys: from `seqlens_k`) of the
    /// attention kernels (gqa.wgsl, attention/regs.rs), and their `seqlens_k` input when causal.
    fn causal(&self, k: Kernel, bind: &mut Vec<&'a GpuTensor>) -> Kernel {
        let k = k.bool("CAUSAL", self.seqlens.is_some()).code(
            "PAST_B",
            if self.seqlens.is_some() {
                "ldi_seqlens(b) + 1 - i32(S)"
            } else {
                "0"
            },
        );
        match self.seqlens {
            Some(sl) => {
                bind.push(sl);
                k.input("seqlens", sl.storage())
            }
            None => k,
        }
    }

    /// The bias input and its `BIAS` statement (empty without one).
    fn bias_input(&self, k: Kernel, bind: &mut Vec<&'a GpuTensor>) -> Kernel {
        match &self.bias {
            Some(bs) => {
                bind.push(bs.t);
                k.input("bias", bs.t.storage()).code("BIAS", BIAS_WGSL)
            }
            None => k.code("BIAS", ""),
        }
    }

    /// The attention kernels' parameter block (layout in gqa.wgsl); words 10 and 11 are the
    /// kernel's own (`w10_11`: the split's chunks and chunk length, or regs.rs' row range).
    fn params(&self, qp: &QueryParams, w10_11: [u32; 2]) -> [u32; 24] {
        let [b, s, h, kvh, d, t_len] = self.dims;
        let window = if self.seqlens.is_some() && self.window > 0 {
            self.window as i32
        } else {
            -1
        };
        let bstr = self.bias.as_ref().map_or([0; 5], |bs| {
            [bs.sb, bs.sg, bs.ss, bs.skv, bs.off].map(|v| v as u32)
        });
        let (v, cs) = (qp.view, qp.cs);
        [
            b as u32,
            s as u32,
            h as u32,
            kvh as u32,
            d as u32,
            t_len as u32,
            window as u32,
            bstr[0],
            bstr[1],
            bstr[2],
            w10_11[0],
            w10_11[1],
            v[0],
            v[1],
            v[2],
            v[3],
            v[4],
            v[5],
            bstr[3],
            bstr[4],
            qp.eps.to_bits(),
            cs[0],
            cs[1],
            cs[2],
        ]
    }
}

/// Storage buffers of the attention kernel whose query reader takes `q`: those, K, V, the
/// optional `seqlens_k` and bias, and y.
pub(crate) fn flash_bindings(q: u32, seqlens: bool, bias: bool) -> u32 {
    q + 2 + u32::from(seqlens) + u32::from(bias) + 1
}

/// Storage buffers of the KV-shared query reader ([`Query::Shared`]): the query, the rotary
/// tables' `tables` (1 when packed, else 2) and the norm's scale when it norms.
pub(crate) fn shared_query_bindings(norm: bool, tables: u32) -> u32 {
    1 + tables + u32::from(norm)
}

/// Runs `f`: one dispatch, or two when a decode's long key range is split (flash-decoding).
/// Returns y [B, S, H * D] in `f.out_dtype`.
pub(crate) fn flash_attention(cx: &mut Ctx<'_>, f: &Flash<'_>) -> Result<GpuTensor> {
    let [b, s, h, kvh, d, t_len] = f.dims;
    if f.bindings() > cx.gpu.max_bindings() {
        return Err(op_err(format!(
            "attention needs {} storage buffers, the adapter allows {}",
            f.bindings(),
            cx.gpu.max_bindings()
        )));
    }
    let softcap = crate::gpu::softcap_wgsl("sc", f.softcap);
    // Rows of one kv head: (query, head of the group); BQ rows per workgroup, BQ * BKV = 128.
    let g = h / kvh;
    let rows = s * g;
    let bq = rows.next_power_of_two().clamp(4, 16);
    let bkv = 128 / bq;
    // Accumulator slots per invocation: dimension pairs, 256 dimensions per pair of slots.
    let dpt = 2 * d.div_ceil(256);
    let row_tiles = rows.div_ceil(bq);
    // Flash-decoding: when fewer than 64 workgroups would be busy (decode) and the key range
    // is long (256 keys or more), split it into chunks of at least 64 keys, combined by a
    // second pass. Shorter ranges stay one pass (one dispatch).
    let span = if f.seqlens.is_some() && f.window > 0 {
        t_len.min(f.window as usize + s - 1)
    } else {
        t_len
    };
    let groups = row_tiles * b * kvh;
    let chunks = if groups >= 64 || span < 256 {
        1
    } else {
        span.div_ceil(64).min(64usize.div_ceil(groups.max(1)))
    };
    let (chunks, chunk_len) = if chunks > 1 {
        let len = span.div_ceil(chunks).next_multiple_of(bkv);
        (span.div_ceil(len), len)
    } else {
        (1, t_len.max(1))
    };
    // f16 results are written a word (two dimensions) at a time, so D must be even.
    let y_dtype = if f.out_dtype == DType::F16 && d.is_multiple_of(2) {
        DType::F16
    } else {
        DType::F32
    };
    let y = cx.alloc(y_dtype, vec![b, s, h * d])?;
    // A prompt's query is prepared once (q_prep.wgsl); the attention then reads it plainly.
    let prepped = if s > 1 && !matches!(f.q, Query::Gqa { rot: None, .. }) {
        let y = cx.alloc(DType::F32, vec![b, s, h, d])?;
        let pack = f.q.cos_sin_pack();
        let mut bind: Vec<&GpuTensor> = Vec::new();
        let (name, body) = match &f.q {
            Query::Gqa { .. } => ("q_prep_rot", Q_PREP_ROT),
            Query::Shared { .. } => ("q_prep", Q_PREP),
        };
        let (mut k, qp) = query_inputs(
            &f.q,
            Kernel::new(name, body).workgroup(64),
            &mut bind,
            pack.as_ref(),
        );
        if let (Query::Gqa { .. }, Some(sl)) = (&f.q, f.seqlens) {
            k = k.input("seqlens", sl.storage());
            bind.push(sl);
        }
        let k = k.output("y", Storage::F32);
        bind.push(&y);
        let mut meta = [0u32; 24];
        meta[..6].copy_from_slice(&[
            b as u32,
            s as u32,
            h as u32,
            kvh as u32,
            d as u32,
            t_len as u32,
        ]);
        meta[12..18].copy_from_slice(&qp.view);
        meta[20] = qp.eps.to_bits();
        meta[21..24].copy_from_slice(&qp.cs);
        cx.dispatch(&k, &bind, &meta, (b * s * h * 64) as u64)?;
        Some(y)
    } else {
        None
    };
    let plain;
    let q = match &prepped {
        Some(y) => {
            plain = Query::Gqa {
                x: y,
                l: Layout {
                    b,
                    s,
                    h,
                    d,
                    strides: [s * h * d, h * d, d],
                    off: 0,
                },
                rot: None,
                interleaved: false,
            };
            &plain
        }
        None => &f.q,
    };
    // Software adapters: a prompt in three register-blocked passes (attention/regs.rs).
    if regs::prompt_attention(cx, f, q, &y)? {
        return if y.dtype == f.out_dtype {
            Ok(y)
        } else {
            cast_gpu(cx, &y, f.out_dtype)
        };
    }
    let (name, body) = match q {
        Query::Gqa { rot: Some(_), .. } => ("gqa_rot", GQA_ROT),
        Query::Gqa { rot: None, .. } => ("gqa", GQA),
        Query::Shared { .. } => ("gqa_shared", GQA),
    };
    let part = if chunks > 1 {
        Some(cx.alloc(DType::F32, vec![b * h * s * chunks * (d + 2)])?)
    } else {
        None
    };
    let q_pack = q.cos_sin_pack();
    // The code depends on these only (sizes and offsets are parameters): a kernel made for
    // them is run again without writing it (every layer of a kind, every decode step).
    // The query reader's form: which variant, its storages and flags.
    let q_form = match q {
        Query::Gqa {
            x,
            rot,
            interleaved,
            ..
        } => (
            0u8,
            x.storage(),
            *interleaved,
            rot.map(|(c, sn, _)| (c.storage(), sn.storage())),
            None,
        ),
        Query::Shared {
            x, norm, cos, sin, ..
        } => (
            1u8,
            x.storage(),
            false,
            Some((cos.storage(), sin.storage())),
            norm.map(|(g, _)| g.storage()),
        ),
    };
    let recipe = crate::exec::hash128((
        (name, bq, bkv, dpt, f.scale.to_bits(), f.softcap.to_bits()),
        q_form,
        q_pack.as_ref().map(|p| (p.cos, p.sin)),
        (f.k.storage(), f.v.storage()),
        f.seqlens.map(GpuTensor::storage),
        f.bias.as_ref().map(|bs| bs.t.storage()),
        part.is_some(),
        y.storage(),
    ));
    let hit = crate::exec::recipe_kernel("flash_attention", recipe);
    let kern = crate::exec::recipe_builder(&hit, name, body)
        .workgroup(128)
        .u32("BQ", bq as u32)
        .u32("BKV", bkv as u32)
        .u32("DPT", dpt as u32)
        .u32("QS_LEN", (bq * 65) as u32)
        .u32("KS_LEN", (bkv * 65) as u32)
        .u32("ACC_LEN", (bq * dpt) as u32)
        .f32("SCALE", f.scale)
        .code("SOFTCAP", &softcap);
    let mut bind: Vec<&GpuTensor> = Vec::new();
    let (k2, qp) = query_inputs(q, kern, &mut bind, q_pack.as_ref());
    let mut kern = k2.input("k", f.k.storage()).input("v", f.v.storage());
    bind.push(f.k);
    bind.push(f.v);
    kern = f.causal(kern, &mut bind);
    kern = f.bias_input(kern, &mut bind);
    let kern = match &part {
        Some(pt) => {
            bind.push(pt);
            kern.code("STORE", STORE_PART).output("part", Storage::F32)
        }
        None => {
            bind.push(&y);
            kern.code("STORE", STORE_Y).output("y", y.storage())
        }
    };
    let kern = crate::exec::recipe_keep("flash_attention", recipe, hit, kern);
    let meta = f.params(&qp, [chunks as u32, chunk_len as u32]);
    cx.dispatch_groups(
        &kern,
        &bind,
        &meta,
        (row_tiles as u32, (b * kvh * chunks) as u32),
    )?;
    if let Some(pt) = &part {
        let comb =
            crate::exec::recipe_made("gqa_combine", crate::exec::hash128(y.storage()), || {
                Kernel::new("gqa_combine", GQA_COMBINE)
                    .workgroup(64)
                    .input("part", Storage::F32)
                    .output("y", y.storage())
            });
        let meta = [
            b as u32,
            s as u32,
            h as u32,
            kvh as u32,
            d as u32,
            chunks as u32,
        ];
        cx.dispatch(&comb, &[pt, &y], &meta, (b * h * s) as u64 * 64)?;
    }
    if y.dtype == f.out_dtype {
        Ok(y)
    } else {
        cast_gpu(cx, &y, f.out_dtype)
    }
}

impl Gqa {
    /// `present` K and V = past, then the new rows read from the sources (each a
    /// [B, S, kvH, D] view), the keys rotated when `rot` (cos, sin, rotary dim) is given, at
    /// positions from `seqlens`. One dispatch for both when the adapter has the storage
    /// bindings, else one each.
    ///
    /// `donated`: the pasts are this node's to reuse, and the first row that may change when
    /// the host knows it (else 0). With one batch and one kv head (Gemma's caches), pasts whose
    /// buffers hold T rows then become the presents in place: only the new rows are written, and
    /// no cache is copied or allocated. Otherwise the presents are new buffers, with room to
    /// grow by a quarter (at least 16 rows) when they could grow in place later, so a cache
    /// is copied once per growth instead of every step.
    #[allow(clippy::too_many_arguments)] // reason: source views + rotary + pasts + sizes
    fn append(
        &self,
        cx: &mut Ctx<'_>,
        src: [(&GpuTensor, &Layout); 2],
        rot: Option<(&GpuTensor, &GpuTensor, usize)>,
        past: [Option<&GpuTensor>; 2],
        seqlens: &GpuTensor,
        dims: [usize; 6],
        dtype: DType,
        donated: Option<i64>,
    ) -> Result<(GpuTensor, GpuTensor)> {
        let [b, kvh, t, d, _, p] = dims;
        let shape = vec![b, kvh, t, d];
        let one_row_block = b * kvh == 1;
        for pt in past.iter().flatten() {
            if p > 0 && pt.shape != [b, kvh, p, d] {
                return Err(op_err(format!(
                    "past KV {:?} is not [{b}, {kvh}, {p}, {d}]",
                    pt.shape
                )));
            }
        }
        // Pasts given away that the in-place kernel can write: from their first row that may
        // change.
        let reusable = match (donated, past) {
            (Some(from), [Some(pk), Some(pv)])
                if one_row_block
                    && p > 0
                    && pk.dtype == dtype
                    && pv.dtype == dtype
                    && d % Storage::of(dtype).map_or(1, |st| st.per_word() as usize) == 0 =>
            {
                Some((usize::try_from(from).unwrap_or(0).min(p), pk, pv))
            }
            _ => None,
        };
        if let Some((from, pk, pv)) = reusable
            && let (Ok(out_k), Ok(out_v)) = (pk.regrown(shape.clone()), pv.regrown(shape.clone()))
        {
            let outs = [&out_k, &out_v];
            self.append_into(cx, src, rot, [None, None], seqlens, dims, outs, Some(from))?;
            return Ok((out_k, out_v));
        }
        let past = past.map(|pt| pt.filter(|_| p > 0));
        let spare = if one_row_block {
            (t / 4).max(16) * d
        } else {
            0
        };
        let out_k = cx.alloc_spare(dtype, shape.clone(), spare)?;
        let out_v = cx.alloc_spare(dtype, shape, spare)?;
        // A donated cache that outgrew its buffer: its rows (contiguous with one row block) are
        // copied into the new buffers, and the new rows appended in place there, by the same
        // kernel as every other step (no kernel of its own to compile in the middle of a
        // generation).
        let copied =
            |pt: &GpuTensor| pt.view.is_none() && pt.storage().bytes(p * d).is_multiple_of(4);
        if let Some((from, pk, pv)) = reusable
            && copied(pk)
            && copied(pv)
        {
            cx.copy(pk, &out_k)?;
            cx.copy(pv, &out_v)?;
            let outs = [&out_k, &out_v];
            self.append_into(cx, src, rot, [None, None], seqlens, dims, outs, Some(from))?;
            return Ok((out_k, out_v));
        }
        self.append_into(cx, src, rot, past, seqlens, dims, [&out_k, &out_v], None)?;
        Ok((out_k, out_v))
    }

    /// The presents' dispatches (see [`Gqa::append`]): one for both when the adapter has the
    /// storage bindings, else one each. `in_place`: the first row to write of presents that
    /// are the pasts' own buffers (no past bindings then).
    #[allow(clippy::too_many_arguments)] // reason: source views + rotary + pasts + sizes
    fn append_into(
        &self,
        cx: &mut Ctx<'_>,
        src: [(&GpuTensor, &Layout); 2],
        rot: Option<(&GpuTensor, &GpuTensor, usize)>,
        past: [Option<&GpuTensor>; 2],
        seqlens: &GpuTensor,
        dims: [usize; 6],
        [out_k, out_v]: [&GpuTensor; 2],
        in_place: Option<usize>,
    ) -> Result<()> {
        // The sources, seqlens, the rotary tables (none without rotary, one when packed) and
        // the two results, plus the pasts.
        let tables = rot.map_or(0, |(c, s, _)| cos_sin_bindings(c, s));
        let pair_bindings = 5 + tables + past.iter().flatten().count() as u32;
        if pair_bindings <= cx.gpu.max_bindings() {
            self.append_one(
                cx,
                src[0],
                Some(src[1]),
                rot,
                past,
                seqlens,
                dims,
                [out_k, out_v],
                in_place,
            )
        } else {
            self.append_one(
                cx,
                src[0],
                None,
                rot,
                [past[0], None],
                seqlens,
                dims,
                [out_k, out_k],
                in_place,
            )?;
            self.append_one(
                cx,
                src[1],
                None,
                None,
                [past[1], None],
                seqlens,
                dims,
                [out_v, out_v],
                in_place,
            )
        }
    }

    /// One kv_append.wgsl dispatch: `out[0]` from `key` (rotated when `rot`) and `past[0]`;
    /// with `value`, also `out[1]` from it and `past[1]`. `in_place`: the outputs are the
    /// pasts' buffers, written from that row on (`kv_append_in_place.wgsl`).
    #[allow(clippy::too_many_arguments)] // reason: source views + rotary + pasts + sizes
    fn append_one(
        &self,
        cx: &mut Ctx<'_>,
        (src, l): (&GpuTensor, &Layout),
        value: Option<(&GpuTensor, &Layout)>,
        rot: Option<(&GpuTensor, &GpuTensor, usize)>,
        past: [Option<&GpuTensor>; 2],
        seqlens: &GpuTensor,
        dims: [usize; 6],
        out: [&GpuTensor; 2],
        in_place: Option<usize>,
    ) -> Result<()> {
        let [_, kvh, t, d, s, p] = dims;
        let n = out[0].numel();
        let body = if in_place.is_some() {
            KV_APPEND_IN_PLACE
        } else {
            KV_APPEND
        };
        let pack = rot.and_then(|(c, s, _)| cos_sin_pack(c, s));
        // What the code depends on (see `flash_attention`).
        let recipe = crate::exec::hash128((
            in_place.is_some(),
            self.interleaved,
            rot.map(|(c, sn, _)| (c.storage(), sn.storage())),
            pack.as_ref().map(|p| (p.cos, p.sin)),
            (src.storage(), seqlens.storage()),
            value.map(|(vs, _)| (vs.storage(), out[1].storage())),
            past[0].map(GpuTensor::storage),
            past[1].filter(|_| value.is_some()).map(GpuTensor::storage),
            out[0].storage(),
        ));
        let hit = crate::exec::recipe_kernel("kv_append", recipe);
        let mut k = crate::exec::recipe_builder(&hit, "kv_append", body)
            .bool("ROTARY", rot.is_some())
            .bool("INTERLEAVED", self.interleaved)
            .input("x", src.storage())
            .input("seqlens", seqlens.storage());
        let mut bind = vec![src, seqlens];
        let (rot_dim, half) = match rot {
            Some((c, sn, rot_dim)) => {
                k = cos_sin_inputs(k, &mut bind, (c, sn), pack.as_ref());
                (rot_dim, c.shape.last().copied().unwrap_or(1))
            }
            None => {
                // No rotary: the (unread) tables alias the source, without bindings.
                k = k.alias("cos", "x", 0).alias("sin", "x", 0);
                (0, 1)
            }
        };
        let mut vl = [0u32; 4];
        if let Some((vs, l)) = value {
            k = k
                .input("xv", vs.storage())
                .code("NEW_V", "ld_xv(vbase + d)");
            bind.push(vs);
            vl = [
                l.strides[0] as u32,
                l.strides[1] as u32,
                l.strides[2] as u32,
                l.off as u32,
            ];
        } else {
            k = k.code("NEW_V", "0.0");
        }
        match past[0] {
            Some(pt) => {
                k = k
                    .input("past", pt.storage())
                    .code("PAST", "ld_past(((b * H + h) * P + t) * D + d)");
                bind.push(pt);
            }
            None => k = k.code("PAST", "0.0"),
        }
        match past[1] {
            Some(pt) if value.is_some() => {
                k = k
                    .input("pastv", pt.storage())
                    .code("PAST_V", "ld_pastv(((b * H + h) * P + t) * D + d)");
                bind.push(pt);
            }
            _ => k = k.code("PAST_V", "0.0"),
        }
        k = k.output("y", out[0].storage());
        bind.push(out[0]);
        let epw = out[0].storage().per_word() as usize;
        let first = in_place.map_or(0, |row| row * d);
        match (value.is_some(), in_place.is_some()) {
            (true, false) => k = k.output("yv", out[1].storage()).mapped_pair("y", "yv"),
            (false, false) => k = k.mapped("y"),
            (true, true) => {
                k = k
                    .output("yv", out[1].storage())
                    .code("STORE_V", "st_yv(w, a.y, b.y);")
            }
            (false, true) => k = k.code("STORE_V", ""),
        }
        if value.is_some() {
            bind.push(out[1]);
        }
        let k = crate::exec::recipe_keep("kv_append", recipe, hit, k);
        let words = n.div_ceil(epw) - first / epw;
        cx.dispatch(
            &k,
            &bind,
            &[
                n as u32,
                kvh as u32,
                t as u32,
                d as u32,
                s as u32,
                p as u32,
                l.strides[0] as u32,
                l.strides[1] as u32,
                l.strides[2] as u32,
                l.off as u32,
                rot_dim as u32,
                half as u32,
                vl[0],
                vl[1],
                vl[2],
                vl[3],
                first as u32,
            ],
            words as u64,
        )?;
        Ok(())
    }
}

fn gqa(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    let heads = a.i("num_heads").ok_or_else(|| a.err("missing num_heads"))?;
    let kv_heads = a
        .i("kv_num_heads")
        .ok_or_else(|| a.err("missing kv_num_heads"))?;
    if heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 {
        return Err(a.err(format!(
            "num_heads {heads} is not a multiple of kv_num_heads {kv_heads}"
        )));
    }
    a.reject_nonzero(&["smooth_softmax", "qk_output"])?;
    for (i, what) in [(9usize, "position_ids"), (11, "head_sink")] {
        if a.node.inputs.get(i).is_some_and(|s| !s.is_empty()) {
            return Err(a.err(format!("{what} input is not supported")));
        }
    }
    let scale = a.f_or("scale", 0.0);
    Ok(Box::new(Gqa {
        heads: heads as usize,
        kv_heads: kv_heads as usize,
        scale: (scale != 0.0).then_some(scale),
        softcap: a.f_or("softcap", 0.0),
        window: a.i_or("local_window_size", -1),
        rotary: a.i_or("do_rotary", 0) != 0,
        interleaved: a.i_or("rotary_interleaved", 0) != 0,
    }))
}

struct Rotary {
    ms: bool,
    interleaved: bool,
    heads: usize,
    rot_dim: usize,
}

/// One RotaryEmbedding's inputs on the GPU and its view of them: what [`rope`] takes.
pub(crate) struct RopeJob {
    x: GpuTensor,
    l: Layout,
    cos: GpuTensor,
    sin: GpuTensor,
    pos: Option<GpuTensor>,
    rot_dim: usize,
    hs_swap: bool,
}

impl RopeJob {
    fn pos(&self) -> Pos<'_> {
        match &self.pos {
            Some(p) if p.numel() == 1 && self.l.b * self.l.s != 1 => Pos::Offset(p),
            Some(p) => Pos::Ids(p),
            None => Pos::PerToken,
        }
    }
    fn out_shape(&self) -> Vec<usize> {
        self.x.shape.clone()
    }
}

impl Op for Rotary {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let j = self.job(cx, inputs)?;
        let y = rope(
            cx,
            &j.x,
            &j.l,
            Some((&j.cos, &j.sin)),
            j.pos(),
            self.interleaved,
            j.rot_dim,
            j.hs_swap,
            j.x.dtype,
        )?;
        Ok(vec![Value::Gpu(y.reshaped(j.out_shape()))])
    }
}

impl Rotary {
    /// The node's inputs as a [`RopeJob`] (shapes checked).
    fn job(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<RopeJob> {
        let x = cx.to_gpu(req(inputs, 0)?)?;
        // com.microsoft: (input, position_ids, cos, sin); ai.onnx: (X, cos, sin, position_ids?)
        let (pos_v, cos, sin) = if self.ms {
            (
                inputs.get(1).copied().flatten(),
                cx.to_gpu(req(inputs, 2)?)?,
                cx.to_gpu(req(inputs, 3)?)?,
            )
        } else {
            (
                inputs.get(3).copied().flatten(),
                cx.to_gpu(req(inputs, 1)?)?,
                cx.to_gpu(req(inputs, 2)?)?,
            )
        };
        let half = *cos
            .shape
            .last()
            .ok_or_else(|| op_err("cos_cache must not be a scalar"))?;
        let (b, s, h, d, hs_swap, strides) = match x.shape.len() {
            4 if self.ms => {
                let (b, h, s, d) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
                (b, s, h, d, true, [h * s * d, d, s * d])
            }
            4 => {
                let (b, h, s, d) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
                (b, s, h, d, true, [h * s * d, d, s * d])
            }
            3 => {
                let (b, s, hidden) = (x.shape[0], x.shape[1], x.shape[2]);
                // Without num_heads, the head size is the full rotary width (2 * cache width).
                let h = if self.heads > 0 {
                    self.heads
                } else {
                    hidden.checked_div(2 * half).unwrap_or(0)
                };
                if h == 0 || hidden % h != 0 {
                    return Err(op_err(format!(
                        "hidden {hidden} is not divisible into heads"
                    )));
                }
                (b, s, h, hidden / h, false, [s * hidden, hidden, hidden / h])
            }
            _ => {
                return Err(op_err(format!(
                    "input must be 3-D or 4-D, got {:?}",
                    x.shape
                )));
            }
        };
        let rot_dim = if self.rot_dim > 0 {
            self.rot_dim
        } else {
            (2 * half).min(d)
        };
        let pos = match pos_v {
            Some(v) => Some(cx.to_gpu(v)?),
            None => None,
        };
        let l = Layout {
            b,
            s,
            h,
            d,
            strides,
            off: 0,
        };
        Ok(RopeJob {
            x,
            l,
            cos,
            sin,
            pos,
            rot_dim,
            hs_swap,
        })
    }
}

/// Two ai.onnx RotaryEmbedding nodes that share their cos, sin and position inputs and
/// attributes but for `num_heads` (a layer's query and key: `fuse/rotary_pair.rs`) in one
/// dispatch, their results ranges of one buffer. `None` when the two do not fit one kernel
/// (their batch and sequence, element types or tables differ): then run each.
pub(crate) struct RotaryPair {
    ops: [Rotary; 2],
}

impl RotaryPair {
    /// The pair of the nodes' attributes (`a` and `b` must agree but for `num_heads`).
    pub(crate) fn new(a: &Attrs<'_>, b: &Attrs<'_>) -> Result<Self> {
        let mk = |a: &Attrs<'_>| Rotary {
            ms: false,
            interleaved: a.i_or("interleaved", 0) != 0,
            heads: a.i_or("num_heads", 0).max(0) as usize,
            rot_dim: a.i_or("rotary_embedding_dim", 0).max(0) as usize,
        };
        let ops = [mk(a), mk(b)];
        if ops[0].interleaved != ops[1].interleaved {
            return Err(a.err("the paired rotations differ in interleaving"));
        }
        Ok(Self { ops })
    }

    /// Both results, from each node's inputs (X, cos, sin, position_ids?).
    pub(crate) fn run(
        &self,
        cx: &mut Ctx<'_>,
        inputs: [&[Option<&Value>]; 2],
    ) -> Result<Option<Vec<Value>>> {
        let a = self.ops[0].job(cx, inputs[0])?;
        let b = self.ops[1].job(cx, inputs[1])?;
        let same = |x: &GpuTensor, y: &GpuTensor| {
            x.shares_buffer(y) && x.range() == y.range() && x.shape == y.shape
        };
        let same_pos = match (&a.pos, &b.pos) {
            (None, None) => true,
            (Some(p), Some(q)) => same(p, q),
            _ => false,
        };
        if a.x.dtype != b.x.dtype
            || !matches!(a.x.dtype, DType::F32 | DType::F16)
            || (a.l.b, a.l.s) != (b.l.b, b.l.s)
            || !same(&a.cos, &b.cos)
            || !same(&a.sin, &b.sin)
            || !same_pos
        {
            return Ok(None);
        }
        let ys = rope_pair(cx, [&a, &b], self.ops[0].interleaved)?;
        Ok(Some(ys.into_iter().map(Value::Gpu).collect()))
    }
}

/// [`rope`] of two jobs sharing their tables and positions (and batch and sequence) in one
/// dispatch: `rope_pair.wgsl`, the same rotation (`rotate.wgsl`) of each element.
fn rope_pair(cx: &mut Ctx<'_>, jobs: [&RopeJob; 2], interleaved: bool) -> Result<Vec<GpuTensor>> {
    let [a, b] = jobs;
    let shape = |j: &RopeJob| {
        let l = &j.l;
        if j.hs_swap {
            vec![l.b, l.h, l.s, l.d]
        } else {
            vec![l.b, l.s, l.h, l.d]
        }
    };
    let dtype = a.x.dtype;
    let ys = cx.alloc_pack(dtype, &[shape(a), shape(b)])?;
    let e = ys[0].storage().bytes(2) / 2;
    let start_b = (ys[1].byte_offset() / e) as usize;
    let n = start_b + ys[1].numel();
    let cos_row = match a.pos() {
        Pos::Ids(_) => "u32(ldi_pos(b * S + s))",
        Pos::Offset(_) => "u32(ldi_pos(0u)) + s",
        Pos::PerToken | Pos::Seqlens(_) => "b * S + s",
    };
    let mut k = Kernel::new("rope_pair", ROPE_PAIR)
        .bool("INTERLEAVED", interleaved)
        .code("COS_ROW", cos_row)
        .input("xa", a.x.storage())
        .input("xb", b.x.storage());
    let mut bind = vec![&a.x, &b.x];
    let pack = cos_sin_pack(&a.cos, &a.sin);
    k = cos_sin_inputs(k, &mut bind, (&a.cos, &a.sin), pack.as_ref());
    let pos = a.pos.as_ref().unwrap_or(&a.x);
    k = k.input("pos", pos.storage());
    bind.push(pos);
    let whole = ys[0].whole();
    let k = k.output("y", ys[0].storage()).mapped("y");
    bind.push(&whole);
    let half = a.cos.shape.last().copied().unwrap_or(1);
    let mut meta = vec![n as u32, a.l.s as u32];
    for j in [a, b] {
        let l = &j.l;
        meta.extend(
            [
                l.b,
                l.h,
                l.d,
                l.strides[0],
                l.strides[1],
                l.strides[2],
                l.off,
                j.rot_dim,
                usize::from(j.hs_swap),
            ]
            .map(|v| v as u32),
        );
    }
    meta.extend([half, a.x.numel(), start_b, ys[0].numel()].map(|v| v as u32));
    cx.dispatch(
        &k,
        &bind,
        &meta,
        n.div_ceil(ys[0].storage().per_word() as usize) as u64,
    )?;
    Ok(ys
        .into_iter()
        .zip([a, b])
        .map(|(y, j)| y.reshaped(j.out_shape()))
        .collect())
}

fn rotary(a: &Attrs<'_>, ms: bool) -> Result<Box<dyn Op>> {
    if ms {
        a.reject_nonzero(&["is_packed_batching"])?;
        if (a.f_or("scale", 1.0) - 1.0).abs() > f32::EPSILON {
            return Err(a.err("scale != 1 is not supported"));
        }
    }
    Ok(Box::new(Rotary {
        ms,
        interleaved: a.i_or("interleaved", 0) != 0,
        heads: a.i_or("num_heads", 0).max(0) as usize,
        rot_dim: a.i_or("rotary_embedding_dim", 0).max(0) as usize,
    }))
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register(MS, "GroupQueryAttention", gqa);
    r.register(MS, "RotaryEmbedding", |a| rotary(a, true));
    r.register("", "RotaryEmbedding", |a| rotary(a, false));
}
