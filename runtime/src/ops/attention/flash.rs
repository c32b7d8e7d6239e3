//! The attention kernel (`gqa.wgsl`, online softmax over key tiles, one pass or split with a
//! combine pass) and its query forms (plain, packed GQA, shared-KV with per-head norm and
//! rotary), bias views and bindings; prompts on software adapters go to `regs.rs`.

use super::regs;
use super::rotary::{
    CosSinPack, Layout, ROTATE_WGSL, Tables, bind_tables, cos_sin_bindings, cos_sin_pack,
};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::{Bound, Features, Kernel, KernelSpec, Storage};
use crate::ops::elementwise::cast_gpu;
use crate::tensor::DType;

const GQA: &str = include_str!("../../kernels/attention/gqa.wgsl");
const Q_PREP: &str = include_str!("../../kernels/attention/q_prep.wgsl");
const Q_PREP_ROT: &str = concat!(
    include_str!("../../kernels/attention/q_prep.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl")
);
// The attention kernel with the GroupQueryAttention query's rotary.
const GQA_ROT: &str = concat!(
    include_str!("../../kernels/attention/gqa.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl")
);
const GQA_COMBINE: &str = include_str!("../../kernels/attention/gqa_combine.wgsl");
/// The additive bias of a score (`sc`) of row (b, kvh, head h % G, query s) against key `tt`
/// (`AttnParams::bias_*`: the bias view; see [`Bias`]).
const BIAS_WGSL: &str = "sc = sc + ld_bias(prm.bias_off + b * prm.bias_sb + kvh * prm.bias_skv + (h % G) * prm.bias_sg + s * prm.bias_ss + tt);";

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

/// Where the query row (b, s, h) starts in `x` (`AttnParams::q_*`: offset, strides).
pub(super) const Q_BASE: &str = "
fn q_base(b: u32, s: u32, h: u32) -> u32 {
    return prm.q_off + b * prm.q_sb + s * prm.q_ss + h * prm.q_sh;
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
    let rot = prm.rot_dim;
    if (d >= rot) { return ld_x(base + d); }
    let pos = u32(ldi_seqlens(b) + 1 - i32(prm.s) + i32(s));
    return rotate(base, d, rot, pos * prm.half);
}";

/// gqa.wgsl query reader of the KV-shared layers: RMS norm over the head (statistics in f32,
/// scale `gamma`) when NORM, then `q * cos + rotate_half(q) * sin` with per-token full-width
/// cos/sin at `cos_off + b * cos_sb + s * cos_ss + d`.
pub(super) const Q_SHARED: &str = "
fn q_scale(b: u32, s: u32, h: u32) -> f32 {
    if (!{{NORM}}) { return 1.0; }
    let base = q_base(b, s, h);
    let D = prm.d;
    var ss = 0.0;
    for (var d = 0u; d < D; d = d + 1u) {
        let v = ld_x(base + d);
        ss = ss + v * v;
    }
    return inverseSqrt(ss / f32(D) + prm.eps);
}
fn qn(base: u32, d: u32, inv: f32) -> f32 {
    var v = ld_x(base + d);
    if ({{NORM}}) { v = v * inv * ld_gamma(d); }
    return v;
}
fn load_q(b: u32, s: u32, h: u32, d: u32, inv: f32) -> f32 {
    let base = q_base(b, s, h);
    let hr = prm.d / 2u;
    let c = prm.cos_off + b * prm.cos_sb + s * prm.cos_ss + d;
    var r = 0.0;
    if (d < hr) { r = -qn(base, d + hr, inv); } else { r = qn(base, d - hr, inv); }
    return qn(base, d, inv) * ld_cos(c) + r * ld_sin(c);
}";

/// The query reader's parameters (see [`Query::params`]).
pub(super) struct QueryParams {
    /// The view (offset, batch / sequence / head strides) and (rotary dim, table row width).
    pub(super) view: [u32; 6],
    pub(super) eps: f32,
    /// The cos/sin offset and batch / sequence strides.
    pub(super) cs: [u32; 3],
}

/// The query reader as the kernel's code depends on it ([`Query::form`]): the variant, its
/// storages and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum QueryForm {
    /// [`Query::Gqa`]: rotated with `rot` when given.
    Gqa {
        x: Storage,
        rot: Option<Tables>,
        interleaved: bool,
    },
    /// [`Query::Shared`]: normed when `norm` (the scale's storage) is given.
    Shared {
        x: Storage,
        norm: Option<Storage>,
        tables: Tables,
    },
}

impl QueryForm {
    /// Adds the query reader (`Q_FN`) and its inputs to `k` (gqa.wgsl, q_prep.wgsl or
    /// attn_scores_regs.wgsl); [`Query::bind`] binds them.
    pub(super) fn declare(&self, k: Kernel) -> Kernel {
        match *self {
            QueryForm::Gqa {
                x,
                rot,
                interleaved,
            } => {
                let code = if rot.is_some() { Q_GQA } else { Q_PLAIN };
                let k = k
                    .code("Q_FN", &format!("{Q_BASE}{code}"))
                    .bool("INTERLEAVED", interleaved)
                    .input("x", x);
                match rot {
                    Some(t) => t.declare(k),
                    None => k,
                }
            }
            QueryForm::Shared { x, norm, tables } => {
                let mut k = k
                    .code("Q_FN", &format!("{Q_BASE}{Q_SHARED}"))
                    .bool("NORM", norm.is_some())
                    .input("x", x);
                if let Some(g) = norm {
                    k = k.input("gamma", g);
                }
                tables.declare(k)
            }
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

impl<'a> Query<'a> {
    /// The one binding of its rotary tables when they are packed (see [`cos_sin_pack`]).
    pub(super) fn cos_sin_pack(&self) -> Option<CosSinPack> {
        match self {
            Query::Gqa { rot, .. } => rot.and_then(|(c, s, _)| cos_sin_pack(c, s)),
            Query::Shared { cos, sin, .. } => cos_sin_pack(cos, sin),
        }
    }

    /// The reader's form, its tables read through `pack` when given (see
    /// [`Query::cos_sin_pack`]).
    pub(super) fn form(&self, pack: Option<&CosSinPack>) -> QueryForm {
        match self {
            Query::Gqa {
                x,
                rot,
                interleaved,
                ..
            } => QueryForm::Gqa {
                x: x.storage(),
                rot: rot.map(|(c, sn, _)| Tables::of(c, sn, pack)),
                interleaved: *interleaved,
            },
            Query::Shared {
                x, norm, cos, sin, ..
            } => QueryForm::Shared {
                x: x.storage(),
                norm: norm.map(|(g, _)| g.storage()),
                tables: Tables::of(cos, sin, pack),
            },
        }
    }

    /// Binds the inputs [`QueryForm::declare`] declared for [`Query::form`]`(pack)`.
    pub(super) fn bind<'k, 't>(
        &self,
        bound: Bound<'k, 't>,
        pack: Option<&'t CosSinPack>,
    ) -> Bound<'k, 't>
    where
        'a: 't,
    {
        match self {
            Query::Gqa { x, rot, .. } => {
                let bound = bound.bind("x", x);
                match rot {
                    Some((c, sn, _)) => bind_tables(bound, (c, sn), pack),
                    None => bound,
                }
            }
            Query::Shared {
                x, norm, cos, sin, ..
            } => {
                let bound = bound.bind("x", x).bind_opt("gamma", norm.map(|(g, _)| g));
                bind_tables(bound, (cos, sin), pack)
            }
        }
    }

    /// The reader's parameters: its view, rotary sizes, norm epsilon and table strides.
    pub(super) fn params(&self) -> QueryParams {
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
        match self {
            Query::Gqa { l, rot, .. } => {
                let r = match rot {
                    Some((c, _, rot_dim)) => {
                        [*rot_dim as u32, c.shape.last().copied().unwrap_or(1) as u32]
                    }
                    None => [0, 1],
                };
                QueryParams {
                    view: view(l, r),
                    eps: 0.0,
                    cs: [0; 3],
                }
            }
            Query::Shared { l, norm, cs, .. } => QueryParams {
                view: view(l, [0, 1]),
                eps: norm.map_or(0.0, |(_, e)| e),
                cs: [cs[0] as u32, cs[1] as u32, cs[2] as u32],
            },
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

crate::gpu_params! {
    /// The attention kernels' parameters: gqa.wgsl's, and those of the kernels that read the
    /// query as it does (q_prep.wgsl, the passes of regs.rs). Set by [`Flash::params`] but for
    /// the kernels' own fields (`chunks`, `chunk_len`; `row0`, `rows`).
    pub(super) struct AttnParams {
        b: u32,
        s: u32,
        h: u32,
        kv_heads: u32,
        d: u32,
        /// Keys.
        t: u32,
        /// The causal sliding window (-1: none).
        window: i32,
        /// gqa.wgsl's split of the key range: the chunks (1: one pass) ...
        chunks: u32,
        /// ... and keys per chunk.
        chunk_len: u32,
        /// The passes of regs.rs: the first query row (r = s * G + g) of the chunk ...
        row0: u32,
        /// ... and its rows.
        rows: u32,
        /// The query view: element offset, batch, sequence and head strides.
        q_off: u32,
        q_sb: u32,
        q_ss: u32,
        q_sh: u32,
        /// GroupQueryAttention's query rotary: rotary dim and the tables' row width.
        rot_dim: u32,
        half: u32,
        /// The bias view (see [`Bias`]): offset, strides of batch, kv head, head of the group
        /// and query.
        bias_off: u32,
        bias_sb: u32,
        bias_skv: u32,
        bias_sg: u32,
        bias_ss: u32,
        /// The KV-shared query's norm epsilon.
        eps: f32,
        /// The KV-shared query's cos/sin: offset, batch and sequence strides.
        cos_off: u32,
        cos_sb: u32,
        cos_ss: u32,
    }
}

/// The masking the attention kernels' code depends on: `seqlens_k`'s storage when causal, the
/// bias's when there is one ([`Flash::masking`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Masking {
    pub(super) seqlens: Option<Storage>,
    pub(super) bias: Option<Storage>,
}

impl Masking {
    /// `CAUSAL` and `PAST_B` (where query 0 sits in the keys: from `seqlens_k`) of the
    /// attention kernels (gqa.wgsl, attention/regs.rs), and their `seqlens` input when causal
    /// (bound by [`Flash::bind_causal`]).
    pub(super) fn causal(&self, k: Kernel) -> Kernel {
        let k = k.bool("CAUSAL", self.seqlens.is_some()).code(
            "PAST_B",
            if self.seqlens.is_some() {
                "ldi_seqlens(b) + 1 - i32(S)"
            } else {
                "0"
            },
        );
        match self.seqlens {
            Some(st) => k.input("seqlens", st),
            None => k,
        }
    }

    /// The `bias` input and its `BIAS` statement (empty without one; bound by
    /// [`Flash::bind_bias`]).
    pub(super) fn bias(&self, k: Kernel) -> Kernel {
        match self.bias {
            Some(st) => k.input("bias", st).code("BIAS", BIAS_WGSL),
            None => k.code("BIAS", ""),
        }
    }
}

impl<'a> Flash<'a> {
    /// The masking its kernels declare.
    pub(super) fn masking(&self) -> Masking {
        Masking {
            seqlens: self.seqlens.map(GpuTensor::storage),
            bias: self.bias.as_ref().map(|bs| bs.t.storage()),
        }
    }

    /// Binds `seqlens_k` when causal (see [`Masking::causal`]).
    pub(super) fn bind_causal<'k, 't>(&self, bound: Bound<'k, 't>) -> Bound<'k, 't>
    where
        'a: 't,
    {
        bound.bind_opt("seqlens", self.seqlens)
    }

    /// Binds the bias when there is one (see [`Masking::bias`]).
    pub(super) fn bind_bias<'k, 't>(&self, bound: Bound<'k, 't>) -> Bound<'k, 't>
    where
        'a: 't,
    {
        bound.bind_opt("bias", self.bias.as_ref().map(|bs| bs.t))
    }

    /// The attention kernels' parameters (layout in [`AttnParams`]) with the query reader's
    /// `qp`; the kernels' own fields are left 0.
    pub(super) fn params(&self, qp: &QueryParams) -> AttnParams {
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
        AttnParams {
            b: b as u32,
            s: s as u32,
            h: h as u32,
            kv_heads: kvh as u32,
            d: d as u32,
            t: t_len as u32,
            window,
            q_off: v[0],
            q_sb: v[1],
            q_ss: v[2],
            q_sh: v[3],
            rot_dim: v[4],
            half: v[5],
            bias_sb: bstr[0],
            bias_sg: bstr[1],
            bias_ss: bstr[2],
            bias_skv: bstr[3],
            bias_off: bstr[4],
            eps: qp.eps,
            cos_off: cs[0],
            cos_sb: cs[1],
            cos_ss: cs[2],
            ..AttnParams::default()
        }
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
        let seqlens = match f.q {
            Query::Gqa { .. } => f.seqlens,
            Query::Shared { .. } => None,
        };
        let k = cx.gpu.kernel(&QPrepSpec {
            q: f.q.form(pack.as_ref()),
            seqlens: seqlens.map(GpuTensor::storage),
        })?;
        let bound = f.q.bind(k.bind("y", &y), pack.as_ref());
        let bound = bound.bind_opt("seqlens", seqlens);
        let p = f.params(&f.q.params());
        cx.launch(bound, &p, (b * s * h * 64) as u64)?;
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
    let part = if chunks > 1 {
        Some(cx.alloc(DType::F32, vec![b * h * s * chunks * (d + 2)])?)
    } else {
        None
    };
    let q_pack = q.cos_sin_pack();
    // The code depends on these only (sizes and offsets are parameters): a kernel made for
    // them is run again without writing it (every layer of a kind, every decode step).
    let kern = cx.gpu.kernel(&FlashSpec {
        q: q.form(q_pack.as_ref()),
        k: f.k.storage(),
        v: f.v.storage(),
        masking: f.masking(),
        bq: bq as u32,
        bkv: bkv as u32,
        dpt: dpt as u32,
        scale: f.scale.to_bits(),
        softcap: f.softcap.to_bits(),
        y: part.is_none().then(|| y.storage()),
    })?;
    let bound = q.bind(kern.bind("k", f.k).bind("v", f.v), q_pack.as_ref());
    let bound = f.bind_bias(f.bind_causal(bound));
    let bound = match &part {
        Some(pt) => bound.bind("part", pt),
        None => bound.bind("y", &y),
    };
    let p = AttnParams {
        chunks: chunks as u32,
        chunk_len: chunk_len as u32,
        ..f.params(&q.params())
    };
    cx.launch_groups(bound, &p, (row_tiles as u32, (b * kvh * chunks) as u32))?;
    if let Some(pt) = &part {
        let comb = cx.gpu.kernel(&CombineSpec { y: y.storage() })?;
        let p = CombineParams {
            b: b as u32,
            s: s as u32,
            h: h as u32,
            kv_heads: kvh as u32,
            d: d as u32,
            chunks: chunks as u32,
        };
        cx.launch(
            comb.bind("part", pt).bind("y", &y),
            &p,
            (b * h * s) as u64 * 64,
        )?;
    }
    if y.dtype == f.out_dtype {
        Ok(y)
    } else {
        cast_gpu(cx, &y, f.out_dtype)
    }
}

/// The attention kernel (gqa.wgsl) of [`flash_attention`]: its query reader, storages,
/// masking, tiling and the constants baked into its code.
#[derive(Hash)]
struct FlashSpec {
    q: QueryForm,
    k: Storage,
    v: Storage,
    masking: Masking,
    /// Rows per workgroup, keys per tile, accumulator slots per invocation.
    bq: u32,
    bkv: u32,
    dpt: u32,
    /// The score scale and softcap (f32 bits).
    scale: u32,
    softcap: u32,
    /// y's storage when the kernel writes y (one pass); `None`: the split's partial results.
    y: Option<Storage>,
}

impl KernelSpec for FlashSpec {
    const NAME: &'static str = "gqa";
    const WGSL: &'static [&'static str] = &[GQA, ROTATE_WGSL];
    fn build(&self, _: &Features) -> Kernel {
        let (name, body) = match self.q {
            QueryForm::Gqa { rot: Some(_), .. } => ("gqa_rot", GQA_ROT),
            QueryForm::Gqa { rot: None, .. } => ("gqa", GQA),
            QueryForm::Shared { .. } => ("gqa_shared", GQA),
        };
        let (bq, bkv, dpt) = (self.bq, self.bkv, self.dpt);
        let softcap = crate::gpu::softcap_wgsl("sc", f32::from_bits(self.softcap));
        let k = Kernel::new(name, body)
            .params::<AttnParams>()
            .workgroup(128)
            .u32("BQ", bq)
            .u32("BKV", bkv)
            .u32("DPT", dpt)
            .u32("QS_LEN", bq * 65)
            .u32("KS_LEN", bkv * 65)
            .u32("ACC_LEN", bq * dpt)
            .f32("SCALE", f32::from_bits(self.scale))
            .code("SOFTCAP", &softcap);
        let k = self.q.declare(k).input("k", self.k).input("v", self.v);
        let k = self.masking.bias(self.masking.causal(k));
        match self.y {
            Some(y) => k.code("STORE", STORE_Y).output("y", y),
            None => k.code("STORE", STORE_PART).output("part", Storage::F32),
        }
    }
}

/// A prompt's query preparation (q_prep.wgsl, see [`flash_attention`]): its reader, and
/// `seqlens_k`'s storage when GroupQueryAttention's rotary reads it.
#[derive(Hash)]
struct QPrepSpec {
    q: QueryForm,
    seqlens: Option<Storage>,
}

impl KernelSpec for QPrepSpec {
    const NAME: &'static str = "q_prep";
    const WGSL: &'static [&'static str] = &[Q_PREP, ROTATE_WGSL];
    fn build(&self, _: &Features) -> Kernel {
        let (name, body) = match self.q {
            QueryForm::Gqa { .. } => ("q_prep_rot", Q_PREP_ROT),
            QueryForm::Shared { .. } => ("q_prep", Q_PREP),
        };
        let k = self
            .q
            .declare(Kernel::new(name, body).params::<AttnParams>().workgroup(64));
        let k = match self.seqlens {
            Some(st) => k.input("seqlens", st),
            None => k,
        };
        k.output("y", Storage::F32)
    }
}

crate::gpu_params! {
    /// gqa_combine.wgsl's parameters: the attention's sizes and the key range's chunks.
    struct CombineParams {
        b: u32,
        s: u32,
        h: u32,
        kv_heads: u32,
        d: u32,
        chunks: u32,
    }
}

/// The combine pass of a split attention (gqa_combine.wgsl): y's storage.
#[derive(Hash)]
struct CombineSpec {
    y: Storage,
}

impl KernelSpec for CombineSpec {
    const NAME: &'static str = "gqa_combine";
    const WGSL: &'static [&'static str] = &[GQA_COMBINE];
    fn build(&self, _: &Features) -> Kernel {
        Kernel::new("gqa_combine", GQA_COMBINE)
            .params::<CombineParams>()
            .workgroup(64)
            .input("part", Storage::F32)
            .output("y", self.y)
    }
}
