//! The attention kernel (`gqa.wgsl`, online softmax over key tiles, one pass or split with a
//! combine pass) and its query forms (plain, packed GQA, shared-KV with per-head norm and
//! rotary), bias views and bindings; prompts on software adapters go to `regs.rs`.

use super::regs;
use super::rotary::{CosSinPack, Layout, cos_sin_bindings, cos_sin_inputs, cos_sin_pack};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::{Kernel, Storage};
use crate::ops::elementwise::cast_gpu;
use crate::tensor::DType;

const GQA: &str = include_str!("../../kernels/gqa.wgsl");
const Q_PREP: &str = include_str!("../../kernels/q_prep.wgsl");
const Q_PREP_ROT: &str = concat!(
    include_str!("../../kernels/q_prep.wgsl"),
    include_str!("../../kernels/rotate.wgsl")
);
// The attention kernel with the GroupQueryAttention query's rotary.
const GQA_ROT: &str = concat!(
    include_str!("../../kernels/gqa.wgsl"),
    include_str!("../../kernels/rotate.wgsl")
);
const GQA_COMBINE: &str = include_str!("../../kernels/gqa_combine.wgsl");
/// The additive bias of a score (`sc`) of row (b, kvh, head h % G, query s) against key `tt`
/// (prm 7..10, 18, 19: the bias view; see [`Bias`]).
const BIAS_WGSL: &str =
    "sc = sc + ld_bias(prm[19] + b * prm[7] + kvh * prm[18] + (h % G) * prm[8] + s * prm[9] + tt);";

/// gqa.wgsl epilogue, one pass: the normalised rows to y [B, S, H, D] (dimension pairs, so an
/// f16 y is written a whole word at a time).
pub(super) const STORE_Y: &str = "
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
pub(super) const STORE_PART: &str = "
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
pub(super) const Q_BASE: &str = "
fn q_base(b: u32, s: u32, h: u32) -> u32 {
    return prm[12] + b * prm[13] + s * prm[14] + h * prm[15];
}";

/// gqa.wgsl query reader without rotary: `x` through its view.
pub(super) const Q_PLAIN: &str = "
fn q_scale(b: u32, s: u32, h: u32) -> f32 { return 1.0; }
fn load_q(b: u32, s: u32, h: u32, d: u32, inv: f32) -> f32 { return ld_x(q_base(b, s, h) + d); }";

/// gqa.wgsl query reader of GroupQueryAttention with rotary: `x` through its view, rotated
/// (rotate.wgsl) at position `seqlens_k[b] + 1 - S + s`.
pub(super) const Q_GQA: &str = "
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
pub(super) const Q_SHARED: &str = "
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
pub(super) struct QueryParams {
    /// Words 12..18 of the parameters: the view (offset, strides) and (rotary dim, half).
    pub(super) view: [u32; 6],
    pub(super) eps: f32,
    /// Words 21..24: cos/sin offset and batch / sequence strides.
    pub(super) cs: [u32; 3],
}

/// Adds the query reader (`Q_FN`) of `q` and its bindings to `k` (gqa.wgsl or q_prep.wgsl).
pub(super) fn query_inputs<'a>(
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
    pub(super) fn cos_sin_pack(&self) -> Option<CosSinPack> {
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
    pub(super) fn causal(&self, k: Kernel, bind: &mut Vec<&'a GpuTensor>) -> Kernel {
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
    pub(super) fn bias_input(&self, k: Kernel, bind: &mut Vec<&'a GpuTensor>) -> Kernel {
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
    pub(super) fn params(&self, qp: &QueryParams, w10_11: [u32; 2]) -> [u32; 24] {
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
