//! The KV cache append of GroupQueryAttention: `present` K and V = past, then the new rows
//! (keys rotated when the node does rotary), one dispatch for both when the adapter allows.

use super::gqa::Gqa;
use super::rotary::{
    CosSinPack, Layout, ROTATE_WGSL, Tables, bind_tables, cos_sin_bindings, cos_sin_pack,
};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::tensor::DType;

const KV_APPEND_WGSL: &str = include_str!("../../kernels/attention/kv_append.wgsl");
const KV_APPEND_IN_PLACE_WGSL: &str =
    include_str!("../../kernels/attention/kv_append_in_place.wgsl");
const KV_APPEND: &str = concat!(
    include_str!("../../kernels/attention/kv_append.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl")
);
const KV_APPEND_IN_PLACE: &str = concat!(
    include_str!("../../kernels/attention/kv_append.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl"),
    include_str!("../../kernels/attention/kv_append_in_place.wgsl")
);

/// The sizes of a KV cache append.
#[derive(Debug, Clone, Copy)]
pub(super) struct KvDims {
    pub(super) b: usize,
    pub(super) kv_heads: usize,
    /// Rows of the presents (the total sequence length).
    pub(super) t: usize,
    /// Head size.
    pub(super) d: usize,
    /// New rows (the query's sequence length).
    pub(super) s: usize,
    /// Rows of the pasts.
    pub(super) past: usize,
}

/// What one GroupQueryAttention node appends to its KV cache (see [`Gqa::append`]).
pub(super) struct KvAppend<'a> {
    /// The new keys' and values' sources, each a [B, S, kvH, D] view.
    pub(super) src: [(&'a GpuTensor, &'a Layout); 2],
    /// The keys' rotary: cos, sin and rotary dim.
    pub(super) rot: Option<(&'a GpuTensor, &'a GpuTensor, usize)>,
    /// Where the new rows go: `seqlens_k[b] + 1 - S`.
    pub(super) seqlens: &'a GpuTensor,
    pub(super) dims: KvDims,
}

/// What one append dispatch writes (see [`Gqa::append_one`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Keys (rotated) and values together.
    Both,
    /// The keys alone.
    Keys,
    /// The values alone.
    Values,
}

impl Gqa {
    /// `present` K and V = past, then the new rows of `job`, the keys rotated when it has a
    /// rotary, at positions from its `seqlens`. One dispatch for both when the adapter has the
    /// storage bindings, else one each.
    ///
    /// `donated`: the pasts are this node's to reuse, and the first row that may change when
    /// the host knows it (else 0). With one batch and one kv head (Gemma's caches), pasts whose
    /// buffers hold T rows then become the presents in place: only the new rows are written, and
    /// no cache is copied or allocated. Otherwise the presents are new buffers, with room to
    /// grow by a quarter (at least 16 rows) when they could grow in place later, so a cache
    /// is copied once per growth instead of every step.
    pub(super) fn append(
        &self,
        cx: &mut Ctx<'_>,
        job: &KvAppend<'_>,
        past: [Option<&GpuTensor>; 2],
        dtype: DType,
        donated: Option<i64>,
    ) -> Result<(GpuTensor, GpuTensor)> {
        let KvDims {
            b,
            kv_heads: kvh,
            t,
            d,
            past: p,
            ..
        } = job.dims;
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
            self.append_into(cx, job, [None, None], [&out_k, &out_v], Some(from))?;
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
            self.append_into(cx, job, [None, None], [&out_k, &out_v], Some(from))?;
            return Ok((out_k, out_v));
        }
        self.append_into(cx, job, past, [&out_k, &out_v], None)?;
        Ok((out_k, out_v))
    }

    /// The presents' dispatches (see [`Gqa::append`]): one for both when the adapter has the
    /// storage bindings, else one each. `in_place`: the first row to write of presents that
    /// are the pasts' own buffers (no past bindings then).
    fn append_into(
        &self,
        cx: &mut Ctx<'_>,
        job: &KvAppend<'_>,
        past: [Option<&GpuTensor>; 2],
        [out_k, out_v]: [&GpuTensor; 2],
        in_place: Option<usize>,
    ) -> Result<()> {
        // The sources, seqlens, the rotary tables (none without rotary, one when packed) and
        // the two results, plus the pasts.
        let tables = job.rot.map_or(0, |(c, s, _)| cos_sin_bindings(c, s));
        let pair_bindings = 5 + tables + past.iter().flatten().count() as u32;
        if pair_bindings <= cx.gpu.max_bindings() {
            self.append_one(cx, job, Part::Both, past, [out_k, out_v], in_place)
        } else {
            let (keys, values) = ([past[0], None], [past[1], None]);
            self.append_one(cx, job, Part::Keys, keys, [out_k, out_k], in_place)?;
            self.append_one(cx, job, Part::Values, values, [out_v, out_v], in_place)
        }
    }

    /// One kv_append.wgsl dispatch of `part` of `job`: `out[0]` from the keys (rotated when
    /// the job has a rotary; or from the values alone) and `past[0]`; for both, also `out[1]`
    /// from the values and `past[1]`. `in_place`: the outputs are the pasts' buffers, written
    /// from that row on (`kv_append_in_place.wgsl`).
    fn append_one(
        &self,
        cx: &mut Ctx<'_>,
        job: &KvAppend<'_>,
        part: Part,
        past: [Option<&GpuTensor>; 2],
        out: [&GpuTensor; 2],
        in_place: Option<usize>,
    ) -> Result<()> {
        let KvDims {
            kv_heads: kvh,
            t,
            d,
            s,
            past: p,
            ..
        } = job.dims;
        let (src, l) = match part {
            Part::Values => job.src[1],
            Part::Both | Part::Keys => job.src[0],
        };
        let value = (part == Part::Both).then_some(job.src[1]);
        let rot = job.rot.filter(|_| part != Part::Values);
        let past_v = past[1].filter(|_| value.is_some());
        let n = out[0].numel();
        let pack: Option<CosSinPack> = rot.and_then(|(c, s, _)| cos_sin_pack(c, s));
        let k = cx.gpu.kernel(&KvAppendSpec {
            in_place: in_place.is_some(),
            interleaved: self.interleaved,
            rot: rot.map(|(c, sn, _)| Tables::of(c, sn, pack.as_ref())),
            x: src.storage(),
            seqlens: job.seqlens.storage(),
            value: value.map(|(vs, _)| (vs.storage(), out[1].storage())),
            past: past[0].map(GpuTensor::storage),
            past_v: past_v.map(GpuTensor::storage),
            y: out[0].storage(),
        })?;
        let mut bound = k
            .bind("x", src)
            .bind("seqlens", job.seqlens)
            .bind("y", out[0])
            .bind_opt("xv", value.map(|(vs, _)| vs))
            .bind_opt("yv", value.map(|_| out[1]))
            .bind_opt("past", past[0])
            .bind_opt("pastv", past_v);
        if let Some((c, sn, _)) = rot {
            bound = bind_tables(bound, (c, sn), pack.as_ref());
        }
        let (rot_dim, half) = match rot {
            Some((c, _, rot_dim)) => (rot_dim, c.shape.last().copied().unwrap_or(1)),
            None => (0, 1),
        };
        let vl = value.map_or([0; 4], |(_, l)| {
            [l.strides[0], l.strides[1], l.strides[2], l.off].map(|v| v as u32)
        });
        let epw = out[0].storage().per_word() as usize;
        let first = in_place.map_or(0, |row| row * d);
        let p = KvAppendParams {
            n: n as u32,
            kv_heads: kvh as u32,
            t: t as u32,
            d: d as u32,
            s: s as u32,
            past: p as u32,
            sb: l.strides[0] as u32,
            ss: l.strides[1] as u32,
            sh: l.strides[2] as u32,
            off: l.off as u32,
            rot_dim: rot_dim as u32,
            half: half as u32,
            vsb: vl[0],
            vss: vl[1],
            vsh: vl[2],
            voff: vl[3],
            first: first as u32,
        };
        let words = n.div_ceil(epw) - first / epw;
        cx.launch(bound, &p, words as u64)
    }
}

crate::gpu_params! {
    /// kv_append.wgsl's (and kv_append_in_place.wgsl's) parameters: the present's element
    /// count and sizes, the new keys' source view (`sb`, `ss`, `sh`, `off`) and rotary, the
    /// values' view, and the first element the in-place form visits.
    struct KvAppendParams {
        n: u32,
        kv_heads: u32,
        /// Rows of the present.
        t: u32,
        d: u32,
        /// New rows.
        s: u32,
        /// Rows of the past.
        past: u32,
        sb: u32,
        ss: u32,
        sh: u32,
        off: u32,
        rot_dim: u32,
        /// The rotary tables' row width.
        half: u32,
        vsb: u32,
        vss: u32,
        vsh: u32,
        voff: u32,
        /// The in-place form's first element (a multiple of the row size).
        first: u32,
    }
}

/// One KV append kernel: in place or copying, its storages, the rotary, whether it appends the
/// values too and which pasts it reads.
#[derive(Hash)]
struct KvAppendSpec {
    /// The presents are the pasts' buffers (kv_append_in_place.wgsl's `main`).
    in_place: bool,
    interleaved: bool,
    /// The keys' rotary tables (none: no rotary).
    rot: Option<Tables>,
    x: Storage,
    seqlens: Storage,
    /// The values' source and result storages, when one dispatch appends both.
    value: Option<(Storage, Storage)>,
    past: Option<Storage>,
    /// The values' past (only with `value`).
    past_v: Option<Storage>,
    y: Storage,
}

impl KernelSpec for KvAppendSpec {
    const NAME: &'static str = "kv_append";
    const WGSL: &'static [&'static str] = &[KV_APPEND_WGSL, ROTATE_WGSL, KV_APPEND_IN_PLACE_WGSL];
    fn build(&self, _: &Features) -> Kernel {
        let (name, body) = if self.in_place {
            ("kv_append_in_place", KV_APPEND_IN_PLACE)
        } else {
            ("kv_append", KV_APPEND)
        };
        let mut k = Kernel::new(name, body)
            .params::<KvAppendParams>()
            .bool("ROTARY", self.rot.is_some())
            .bool("INTERLEAVED", self.interleaved)
            .input("x", self.x)
            .input("seqlens", self.seqlens);
        k = match &self.rot {
            Some(t) => t.declare(k),
            // No rotary: the (unread) tables alias the source, without bindings.
            None => k.alias("cos", "x", 0).alias("sin", "x", 0),
        };
        k = match self.value {
            Some((xv, _)) => k.input("xv", xv).code("NEW_V", "ld_xv(vbase + d)"),
            None => k.code("NEW_V", "0.0"),
        };
        k = match self.past {
            Some(st) => k
                .input("past", st)
                .code("PAST", "ld_past(((b * H + h) * P + t) * D + d)"),
            None => k.code("PAST", "0.0"),
        };
        k = match self.past_v {
            Some(st) => k
                .input("pastv", st)
                .code("PAST_V", "ld_pastv(((b * H + h) * P + t) * D + d)"),
            None => k.code("PAST_V", "0.0"),
        };
        k = k.output("y", self.y);
        match (self.value, self.in_place) {
            (Some((_, yv)), false) => k.output("yv", yv).mapped_pair("y", "yv"),
            (None, false) => k.mapped("y"),
            (Some((_, yv)), true) => k.output("yv", yv).code("STORE_V", "st_yv(w, a.y, b.y);"),
            (None, true) => k.code("STORE_V", ""),
        }
    }
}
