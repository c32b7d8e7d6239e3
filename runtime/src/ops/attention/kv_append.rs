//! The KV cache append of GroupQueryAttention: `present` K and V = past, then the new rows
//! (keys rotated when the node does rotary), one dispatch for both when the adapter allows.

use super::gqa::Gqa;
use super::rotary::{Layout, cos_sin_bindings, cos_sin_inputs, cos_sin_pack};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::Storage;
use crate::tensor::DType;

const KV_APPEND: &str = concat!(
    include_str!("../../kernels/kv_append.wgsl"),
    include_str!("../../kernels/rotate.wgsl")
);
const KV_APPEND_IN_PLACE: &str = concat!(
    include_str!("../../kernels/kv_append.wgsl"),
    include_str!("../../kernels/rotate.wgsl"),
    include_str!("../../kernels/kv_append_in_place.wgsl")
);

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
    pub(super) fn append(
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
    pub(super) fn append_into(
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
    pub(super) fn append_one(
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
