//! Scaled dot-product attention: ai.onnx `Attention` (opsets 23-25: 3-D and 4-D inputs, grouped
//! heads, boolean/float masks, KV cache, causal and sliding-window masking, softcap,
//! `nonpad_kv_seqlen`, the optional `qk_matmul_output`) and com.microsoft `MultiHeadAttention`
//! (separate BSNH-packed Q/K/V, bias, 2-D/3-D key padding mask, attention bias, KV cache,
//! unidirectional). One kernel (`kernels/sdpa.wgsl`, online softmax) computes the output;
//! `kernels/sdpa_kv.wgsl` builds present K/V, `kernels/sdpa_qk.wgsl` the optional scores.

use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Kernel, Storage, wgsl_f32};
use crate::ops::elementwise::cast_gpu;
use crate::ops::{Attrs, MS, Op, Registry, req};
use crate::tensor::DType;

pub(super) const SDPA: &str = include_str!("../../kernels/sdpa.wgsl");
pub(super) const SDPA_QK: &str = include_str!("../../kernels/sdpa_qk.wgsl");
pub(super) const SDPA_KV: &str = include_str!("../../kernels/sdpa_kv.wgsl");
pub(super) const SDPA_KV_PAIR: &str = include_str!("../../kernels/sdpa_kv_pair.wgsl");

/// Workgroup size of the attention kernels (keys per online-softmax chunk).
pub(super) const WG: usize = 64;
/// Largest head size the kernels hold in workgroup memory.
pub(super) const MAX_HEAD: usize = 2048;

/// Logical (b, h, t) strides of a [B, H, T, D] view (d is contiguous).
type Strides = [usize; 3];

/// Strides of a head-major [B, H, T, D] tensor.
pub(super) fn bnsh(h: usize, t: usize, d: usize) -> Strides {
    [h * t * d, t * d, d]
}

/// Strides of a token-major [B, T, H * D] tensor viewed as [B, H, T, D].
pub(super) fn bsnh(h: usize, t: usize, d: usize) -> Strides {
    [t * h * d, d, h * d]
}

/// The attention mask of a row: which keys are allowed and what is added to their scores.
pub(super) enum Mask<'a> {
    None,
    /// ai.onnx `attn_mask`, boolean (false = masked) or float (added; -inf = masked).
    /// Strides (b, h, s, t) and the mask's key length (keys beyond it are masked).
    Onnx(&'a GpuTensor, [usize; 4], usize),
    /// com.microsoft `key_padding_mask` (int, <= 0 adds `mask_filter_value`), strides (b, s, t).
    KeyPadding(&'a GpuTensor, [usize; 4]),
}

/// Everything the attention kernels need besides the tensors.
pub(super) struct Plan<'a> {
    pub(super) b: usize,
    pub(super) s: usize,
    pub(super) hq: usize,
    pub(super) hkv: usize,
    pub(super) dk: usize,
    pub(super) dv: usize,
    pub(super) t: usize,
    pub(super) q: (&'a GpuTensor, Strides),
    pub(super) k: (&'a GpuTensor, Strides),
    pub(super) v: (&'a GpuTensor, Strides),
    pub(super) mask: Mask<'a>,
    /// ai.onnx: keys after `s + offset` are masked.
    pub(super) causal: bool,
    /// Causal/window offset: the past length, or per batch `nonpad_kv_seqlen[b] - S`.
    pub(super) offset: usize,
    pub(super) nonpad: Option<&'a GpuTensor>,
    /// ai.onnx sliding window (left, right; -1 = unbounded).
    pub(super) window: (i64, i64),
    /// com.microsoft: `mask_filter_value` added for padded keys and (unidirectional) keys after
    /// `s + offset`.
    pub(super) filter: f32,
    pub(super) unidirectional: bool,
    /// com.microsoft attention_bias, strides (b, h, s, t).
    pub(super) attn_bias: Option<(&'a GpuTensor, [usize; 4])>,
    pub(super) scale: f32,
    pub(super) softcap: f32,
}

impl Plan<'_> {
    /// `fn key_bias(b, h, s, t) -> vec3<f32>`: (added to the score, allowed (0/1), added after).
    pub(super) fn key_bias_fn(&self) -> Result<String> {
        let mut f = String::from(
            "fn key_bias(b: u32, h: u32, s: u32, t: u32) -> vec3<f32> {\n    var ok = true;\n    var bias = 0.0;\n    var late = 0.0;\n",
        );
        let off = if self.nonpad.is_some() {
            "ldi_nonpad(b) - i32(prm[1])"
        } else {
            "bitcast<i32>(prm[24])"
        };
        f.push_str(&format!("    let off = {off};\n"));
        if self.causal {
            f.push_str("    if (i32(t) > i32(s) + off) { ok = false; }\n");
        }
        if self.window.0 >= 0 {
            f.push_str("    if (i32(s) + off - i32(t) > bitcast<i32>(prm[25])) { ok = false; }\n");
        }
        if self.window.1 >= 0 {
            f.push_str("    if (i32(t) - i32(s) - off > bitcast<i32>(prm[26])) { ok = false; }\n");
        }
        if self.nonpad.is_some() {
            f.push_str("    if (i32(t) >= ldi_nonpad(b)) { ok = false; }\n");
        }
        let mi = "b * prm[19] + h * prm[20] + s * prm[21] + t * prm[22]";
        match &self.mask {
            Mask::None => {}
            Mask::Onnx(m, _, _) => {
                f.push_str(&format!(
                    "    if (t >= prm[23]) {{ ok = false; }} else {{\n        let mi = {mi};\n"
                ));
                f.push_str(match m.dtype {
                    DType::Bool => "        if (ldw_mask(mi) == 0u) { ok = false; }\n",
                    DType::F32 => {
                        "        let mw = ldw_mask(mi);\n        if (mw == 0xff800000u) { ok = false; } else { bias = bias + bitcast<f32>(mw); }\n"
                    }
                    DType::F16 => {
                        "        let hw = (ldw_mask(mi >> 1u) >> ((mi & 1u) * 16u)) & 0xffffu;\n        if (hw == 0xfc00u) { ok = false; } else { bias = bias + ld_mask(mi); }\n"
                    }
                    d => {
                        return Err(op_err(format!(
                            "attn_mask of type {} (expected bool, float or float16)",
                            d.name()
                        )));
                    }
                });
                f.push_str("    }\n");
            }
            Mask::KeyPadding(..) => f.push_str(&format!(
                "    if (ldi_mask({mi}) <= 0) {{ bias = bias + {}; }}\n",
                wgsl_f32(self.filter)
            )),
        }
        if self.unidirectional {
            f.push_str(&format!(
                "    if (i32(t) > i32(s) + off) {{ bias = bias + {}; }}\n",
                wgsl_f32(self.filter)
            ));
        }
        if self.attn_bias.is_some() {
            f.push_str(
                "    late = ld_ab(b * prm[27] + h * prm[28] + s * prm[29] + t * prm[30]);\n",
            );
        }
        f.push_str("    return vec3<f32>(bias, select(0.0, 1.0, ok), late);\n}\n");
        Ok(f)
    }

    pub(super) fn meta(&self, y: Strides) -> Vec<u32> {
        let (ms, mt) = match &self.mask {
            Mask::None => ([0; 4], 0),
            Mask::Onnx(_, st, tm) => (*st, *tm),
            Mask::KeyPadding(_, st) => (*st, self.t),
        };
        let ab = self.attn_bias.map_or([0; 4], |(_, st)| st);
        let mut m: Vec<u32> = [self.b, self.s, self.hq, self.hkv, self.dk, self.dv, self.t]
            .iter()
            .chain(&self.q.1)
            .chain(&self.k.1)
            .chain(&self.v.1)
            .chain(&y)
            .chain(&ms)
            .map(|&x| x as u32)
            .collect();
        m.push(mt as u32);
        m.push(self.offset as u32);
        m.push(self.window.0 as i32 as u32);
        m.push(self.window.1 as i32 as u32);
        m.extend(ab.iter().map(|&x| x as u32));
        m
    }

    /// The kernel with its bindings: q, k, v, then the present masks, then the output.
    pub(super) fn kernel<'t>(
        &'t self,
        name: &'static str,
        body: &'static str,
        out: &'t GpuTensor,
        out_name: &str,
    ) -> Result<(Kernel, Vec<&'t GpuTensor>)> {
        if self.dk > MAX_HEAD || self.dv > MAX_HEAD {
            return Err(op_err(format!(
                "head size {} / {} exceeds the supported {MAX_HEAD}",
                self.dk, self.dv
            )));
        }
        let softcap = crate::gpu::softcap_wgsl("sc", self.softcap);
        let mut k = Kernel::new(name, body)
            .workgroup(WG as u32)
            .u32("QCAP", self.dk.max(1) as u32)
            .u32("NACC", self.dv.div_ceil(WG).max(1) as u32)
            .f32("SCALE", self.scale)
            .code("SOFTCAP", &softcap)
            .code("KEY_BIAS", &self.key_bias_fn()?)
            .input("q", self.q.0.storage())
            .input("k", self.k.0.storage())
            .input("v", self.v.0.storage());
        let mut bind = vec![self.q.0, self.k.0, self.v.0];
        match &self.mask {
            Mask::None => {}
            Mask::Onnx(m, ..) | Mask::KeyPadding(m, _) => {
                k = k.input("mask", m.storage());
                bind.push(*m);
            }
        }
        if let Some(n) = self.nonpad {
            k = k.input("nonpad", n.storage());
            bind.push(n);
        }
        if let Some((ab, _)) = self.attn_bias {
            k = k.input("ab", ab.storage());
            bind.push(ab);
        }
        k = k.output(out_name, Storage::F32);
        bind.push(out);
        Ok((k, bind))
    }

    /// The attention output as f32, element (b, h, s, d) at the `y` strides of `shape`.
    pub(super) fn run(&self, cx: &mut Ctx<'_>, shape: Vec<usize>, y: Strides) -> Result<GpuTensor> {
        let out = cx.alloc(DType::F32, shape)?;
        let (k, bind) = self.kernel("sdpa", SDPA, &out, "y")?;
        let k = k.wg_reduce(cx.gpu.subgroups);
        let rows = (self.b * self.hq * self.s) as u64;
        cx.dispatch(&k, &bind, &self.meta(y), rows * WG as u64)?;
        Ok(out)
    }

    /// The qk_matmul_output ([B, HQ, S, T], f32) for `mode` 0..=3.
    pub(super) fn scores(&self, cx: &mut Ctx<'_>, mode: u32) -> Result<GpuTensor> {
        let out = cx.alloc(DType::F32, vec![self.b, self.hq, self.s, self.t])?;
        let (k, bind) = self.kernel("sdpa_qk", SDPA_QK, &out, "out")?;
        let k = k.wg_reduce(cx.gpu.subgroups);
        let k = k.u32("MODE", mode);
        let rows = (self.b * self.hq * self.s) as u64;
        cx.dispatch(&k, &bind, &self.meta([0; 3]), rows * WG as u64)?;
        Ok(out)
    }
}

/// A head-major [B, H, P + L, D] copy of `x` (viewed through `st` from element `off`) after
/// `past` ([B, H, P, D]), plus `bias[boff + h * D + d]` on the new part; stored as `dtype`.
#[allow(clippy::too_many_arguments)] // reason: view + cache + bias + target shape
pub(super) fn head_major(
    cx: &mut Ctx<'_>,
    x: &GpuTensor,
    st: Strides,
    off: usize,
    past: Option<&GpuTensor>,
    bias: Option<(&GpuTensor, usize)>,
    [b, h, l, d]: [usize; 4],
    dtype: DType,
) -> Result<GpuTensor> {
    let p = past.map_or(0, |t| t.shape[2]);
    let t = p + l;
    let out = cx.alloc(dtype, vec![b, h, t, d])?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let mut k = Kernel::new("sdpa_kv", SDPA_KV).input("x", x.storage());
    let mut bind = vec![x];
    match past {
        Some(pt) if p > 0 => {
            k = k
                .input("past", pt.storage())
                .code("PAST", "ld_past(((b * H + h) * P + t) * D + d)");
            bind.push(pt);
        }
        _ => k = k.code("PAST", "0.0"),
    }
    let boff = match bias {
        Some((bt, o)) => {
            k = k
                .input("bias", bt.storage())
                .code("BIAS", " + ld_bias(prm[9] + h * D + d)");
            bind.push(bt);
            o
        }
        None => {
            k = k.code("BIAS", "");
            0
        }
    };
    let k = k.output("y", out.storage()).mapped("y");
    bind.push(&out);
    let meta = [n, h, t, d, p, st[0], st[1], st[2], off, boff].map(|v| v as u32);
    cx.dispatch(
        &k,
        &bind,
        &meta,
        n.div_ceil(out.storage().per_word() as usize) as u64,
    )?;
    Ok(out)
}

/// [`head_major`] of a key and a value of the same shape and element type at once (no bias, no
/// offset): present K and V in one dispatch. `kv` are the new tokens with their strides, `past`
/// the caches ([B, H, P, D] each) when there are any.
pub(super) fn head_major_pair(
    cx: &mut Ctx<'_>,
    kv: [(&GpuTensor, Strides); 2],
    past: Option<[&GpuTensor; 2]>,
    [b, h, l, d]: [usize; 4],
) -> Result<[GpuTensor; 2]> {
    let [(k, ks), (v, vs)] = kv;
    let p = past.map_or(0, |[pk, _]| pk.shape[2]);
    let t = p + l;
    let ko = cx.alloc(k.dtype, vec![b, h, t, d])?;
    let vo = cx.alloc(k.dtype, vec![b, h, t, d])?;
    let n = ko.numel();
    if n == 0 {
        return Ok([ko, vo]);
    }
    let mut kern = Kernel::new("sdpa_kv_pair", SDPA_KV_PAIR)
        .input("xk", k.storage())
        .input("xv", v.storage());
    let mut bind = vec![k, v];
    match past {
        Some([pk, pv]) if p > 0 => {
            kern = kern.input("pk", pk.storage()).input("pv", pv.storage());
            bind.extend([pk, pv]);
        }
        // No past: the (unread) caches alias the new tokens, without bindings.
        _ => kern = kern.alias("pk", "xk", 0).alias("pv", "xv", 0),
    }
    let kern = kern
        .output("yk", ko.storage())
        .output("yv", vo.storage())
        .mapped_pair("yk", "yv");
    bind.extend([&ko, &vo]);
    let meta = [n, h, t, d, p, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2]].map(|v| v as u32);
    cx.dispatch(
        &kern,
        &bind,
        &meta,
        n.div_ceil(ko.storage().per_word() as usize) as u64,
    )?;
    Ok([ko, vo])
}

/// An optional GPU input (absent or empty-named inputs are `None`).
pub(super) fn opt_gpu(
    cx: &mut Ctx<'_>,
    inputs: &[Option<&Value>],
    i: usize,
) -> Result<Option<GpuTensor>> {
    match inputs.get(i).copied().flatten() {
        Some(v) => Ok(Some(cx.to_gpu(v)?)),
        None => Ok(None),
    }
}

/// Strides (b, h, s, t) of a mask broadcast right-aligned to [B, H, S, Tm], where Tm is the
/// mask's own last dimension; `None` when a dimension does not broadcast.
pub(super) fn mask_strides(shape: &[usize], target: [usize; 3]) -> Option<[usize; 4]> {
    let r = shape.len();
    if r == 0 || r > 4 {
        return None;
    }
    let mut st = [0usize; 4];
    st[3] = 1;
    let mut acc = shape[r - 1];
    for i in 1..r {
        let dim = shape[r - 1 - i];
        let want = target[3 - i];
        if dim != 1 && dim != want {
            return None;
        }
        st[3 - i] = if dim == 1 { 0 } else { acc };
        acc *= dim;
    }
    Some(st)
}

pub(super) fn f32_out(cx: &mut Ctx<'_>, y: GpuTensor, dtype: DType) -> Result<GpuTensor> {
    if dtype == DType::F32 {
        Ok(y)
    } else {
        cast_gpu(cx, &y, dtype)
    }
}

/// ai.onnx Attention.
pub(crate) struct Attention {
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    scale: Option<f32>,
    causal: bool,
    softcap: f32,
    qk_mode: u32,
    window: (i64, i64),
    /// Which outputs the node asks for (Y, present_key, present_value, qk_matmul_output).
    wants: [bool; 4],
}

impl Op for Attention {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        let q = cx.to_gpu(req(inputs, 0)?)?;
        let k = cx.to_gpu(req(inputs, 1)?)?;
        let v = cx.to_gpu(req(inputs, 2)?)?;
        let mask = opt_gpu(cx, inputs, 3)?;
        let past_k = opt_gpu(cx, inputs, 4)?;
        let past_v = opt_gpu(cx, inputs, 5)?;
        let nonpad = opt_gpu(cx, inputs, 6)?;
        self.compute(cx, [q, k, v], mask, [past_k, past_v], nonpad, false)
    }
}

impl Attention {
    /// The node's outputs from its GPU inputs. With `kv_heads_major`, a 3-D query's key and
    /// value come as the [B, kv_heads, L, D] tensors they are the transposed reshape of
    /// (`Transpose(perm 0,2,1,3)` then `Reshape` to [B, L, kv_heads * D], folded by the fusion
    /// pass: `fuse/attn_kv_view.rs`), read in place: the same elements, no copy.
    #[allow(clippy::too_many_arguments)] // reason: the op's seven inputs and the folded view
    pub(crate) fn compute(
        &self,
        cx: &mut Ctx<'_>,
        [q, k, v]: [GpuTensor; 3],
        mask: Option<GpuTensor>,
        [past_k, past_v]: [Option<GpuTensor>; 2],
        nonpad: Option<GpuTensor>,
        kv_heads_major: bool,
    ) -> Result<Vec<Value>> {
        let rank = q.shape.len();
        let kv_rank = if kv_heads_major { 4 } else { rank };
        if kv_heads_major && (rank != 3 || past_k.is_some() || self.wants[1..].contains(&true)) {
            return Err(op_err(
                "a heads-major key/value view needs a 3-D query, no past and no present outputs",
            ));
        }
        if k.shape.len() != kv_rank || v.shape.len() != kv_rank || !(rank == 3 || rank == 4) {
            return Err(op_err(format!(
                "Q, K, V must all be 3-D or all 4-D, got {:?}, {:?}, {:?}",
                q.shape, k.shape, v.shape
            )));
        }
        let (b, s, l, hq, hkv, dk, dv, qs, ks, vs, y_shape, ys);
        if rank == 3 {
            let (Some(nq), Some(nkv)) = (self.q_heads, self.kv_heads) else {
                return Err(op_err(
                    "3-D inputs need the q_num_heads and kv_num_heads attributes",
                ));
            };
            // The key and value hidden sizes (kv_heads * D) and token counts.
            let (kh, vh, kl, vl) = if kv_heads_major {
                if k.shape[1] != nkv || v.shape[1] != nkv {
                    return Err(op_err(format!(
                        "key {:?} / value {:?} do not have {nkv} heads",
                        k.shape, v.shape
                    )));
                }
                (nkv * k.shape[3], nkv * v.shape[3], k.shape[2], v.shape[2])
            } else {
                (k.shape[2], v.shape[2], k.shape[1], v.shape[1])
            };
            (b, s, l, hq, hkv) = (q.shape[0], q.shape[1], kl, nq, nkv);
            if q.shape[2] % hq != 0 || kh % hkv != 0 || vh % hkv != 0 || vl != l {
                return Err(op_err(format!(
                    "hidden sizes {} / {} / {} do not split into {hq} / {hkv} heads",
                    q.shape[2], kh, vh
                )));
            }
            (dk, dv) = (q.shape[2] / hq, vh / hkv);
            if kh / hkv != dk {
                return Err(op_err(format!(
                    "key head size {} differs from the query head size {dk}",
                    kh / hkv
                )));
            }
            (qs, ks, vs) = if kv_heads_major {
                (bsnh(hq, s, dk), bnsh(hkv, l, dk), bnsh(hkv, l, dv))
            } else {
                (bsnh(hq, s, dk), bsnh(hkv, l, dk), bsnh(hkv, l, dv))
            };
            y_shape = vec![b, s, hq * dv];
            ys = bsnh(hq, s, dv);
        } else {
            (b, hq, s, dk) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
            (hkv, l, dv) = (k.shape[1], k.shape[2], v.shape[3]);
            if k.shape[3] != dk || v.shape[1] != hkv || v.shape[2] != l {
                return Err(op_err(format!(
                    "K {:?} / V {:?} do not fit Q {:?}",
                    k.shape, v.shape, q.shape
                )));
            }
            (qs, ks, vs) = (bnsh(hq, s, dk), bnsh(hkv, l, dk), bnsh(hkv, l, dv));
            y_shape = vec![b, hq, s, dv];
            ys = bnsh(hq, s, dv);
        }
        if k.shape[0] != b || v.shape[0] != b || (rank == 3 && !kv_heads_major && v.shape[1] != l) {
            return Err(op_err(format!(
                "K {:?} / V {:?} do not fit Q {:?}",
                k.shape, v.shape, q.shape
            )));
        }
        if hkv == 0 || hq % hkv != 0 {
            return Err(op_err(format!(
                "{hq} query heads are not a multiple of {hkv} key/value heads"
            )));
        }
        if past_k.is_some() != past_v.is_some() {
            return Err(op_err("past_key and past_value must be given together"));
        }
        if nonpad.is_some() && past_k.is_some() {
            return Err(op_err(
                "nonpad_kv_seqlen cannot be combined with past_key/past_value",
            ));
        }
        let p = past_k
            .as_ref()
            .map_or(0, |t| t.shape.get(2).copied().unwrap_or(0));
        if let (Some(pk), Some(pv)) = (&past_k, &past_v)
            && (pk.shape != [b, hkv, p, dk] || pv.shape != [b, hkv, p, dv])
        {
            return Err(op_err(format!(
                "past_key {:?} / past_value {:?} are not [{b}, {hkv}, P, {dk}] / [.., {dv}]",
                pk.shape, pv.shape
            )));
        }
        if let Some(n) = &nonpad
            && n.numel() != b
        {
            return Err(op_err(format!(
                "nonpad_kv_seqlen has {} entries for batch {b}",
                n.numel()
            )));
        }
        let t = p + l;
        // Present K/V (head-major, after the past) when there is a past or they are asked for.
        let present = |cx: &mut Ctx<'_>,
                       x: &GpuTensor,
                       st: Strides,
                       past: Option<&GpuTensor>,
                       d: usize|
         -> Result<GpuTensor> {
            if past.is_none() && rank == 4 {
                return Ok(x.clone());
            }
            head_major(cx, x, st, 0, past, None, [b, hkv, l, d], x.dtype)
        };
        let (kp, vp) = if past_k.is_some() || self.wants[1] || self.wants[2] {
            let copies = past_k.is_some() || rank == 3;
            if copies && dk == dv && k.dtype == v.dtype {
                // Both caches in one dispatch.
                let past = past_k
                    .as_ref()
                    .zip(past_v.as_ref())
                    .map(|(pk, pv)| [pk, pv]);
                let [kp, vp] = head_major_pair(cx, [(&k, ks), (&v, vs)], past, [b, hkv, l, dk])?;
                (kp, vp)
            } else {
                (
                    present(cx, &k, ks, past_k.as_ref(), dk)?,
                    present(cx, &v, vs, past_v.as_ref(), dv)?,
                )
            }
        } else {
            (k.clone(), v.clone())
        };
        let (ks, vs) = if past_k.is_some() || rank == 4 || self.wants[1] || self.wants[2] {
            (bnsh(hkv, t, dk), bnsh(hkv, t, dv))
        } else {
            (ks, vs)
        };
        let mask = match &mask {
            None => Mask::None,
            Some(m) => {
                let st = mask_strides(&m.shape, [b, hq, s]).ok_or_else(|| {
                    op_err(format!(
                        "attn_mask {:?} does not broadcast to [{b}, {hq}, {s}, {t}]",
                        m.shape
                    ))
                })?;
                let tm = m.shape[m.shape.len() - 1];
                if tm > t {
                    return Err(op_err(format!(
                        "attn_mask covers {tm} keys but there are only {t}"
                    )));
                }
                Mask::Onnx(m, st, tm)
            }
        };
        let plan = Plan {
            b,
            s,
            hq,
            hkv,
            dk,
            dv,
            t,
            q: (&q, qs),
            k: (&kp, ks),
            v: (&vp, vs),
            mask,
            causal: self.causal,
            offset: p,
            nonpad: nonpad.as_ref(),
            window: self.window,
            filter: 0.0,
            unidirectional: false,
            attn_bias: None,
            scale: self.scale.unwrap_or(1.0 / (dk as f32).sqrt()),
            softcap: self.softcap,
        };
        let y = plan.run(cx, y_shape, ys)?;
        let y = f32_out(cx, y, q.dtype)?;
        let mut outs = vec![Value::Gpu(y)];
        if self.wants[1] || self.wants[2] || self.wants[3] {
            outs.push(Value::Gpu(kp.clone()));
            outs.push(Value::Gpu(vp.clone()));
        }
        if self.wants[3] {
            let sc = plan.scores(cx, self.qk_mode)?;
            outs.push(Value::Gpu(f32_out(cx, sc, q.dtype)?));
        }
        Ok(outs)
    }
}

/// Which of the node's outputs are named.
pub(super) fn wanted<const N: usize>(a: &Attrs<'_>) -> [bool; N] {
    std::array::from_fn(|i| a.node.outputs.get(i).is_some_and(|o| !o.is_empty()))
}

pub(super) fn attention(a: &Attrs<'_>) -> Result<Box<dyn Op>> {
    Ok(Box::new(attention_op(a)?))
}

/// The ai.onnx Attention op of a node (its attributes checked).
pub(crate) fn attention_op(a: &Attrs<'_>) -> Result<Attention> {
    let heads = |n: &str| -> Result<Option<usize>> {
        match a.i(n) {
            None => Ok(None),
            Some(v) if v > 0 => Ok(Some(v as usize)),
            Some(v) => Err(a.err(format!("{n} must be positive, got {v}"))),
        }
    };
    let qk_mode = a.i_or("qk_matmul_output_mode", 0);
    if !(0..=3).contains(&qk_mode) {
        return Err(a.err(format!("qk_matmul_output_mode {qk_mode} is not 0..3")));
    }
    let window = (
        a.i_or("left_window_size", -1),
        a.i_or("right_window_size", -1),
    );
    if window.0 < -1 || window.1 < -1 {
        return Err(a.err(format!(
            "window sizes must be -1 or nonnegative, got {window:?}"
        )));
    }
    let scale = a.has("scale").then(|| a.f_or("scale", 1.0));
    // softmax_precision only names a type at least as wide as the input's: we use f32 anyway.
    Ok(Attention {
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        scale,
        causal: a.i_or("is_causal", 0) != 0,
        softcap: a.f_or("softcap", 0.0),
        qk_mode: qk_mode as u32,
        window,
        wants: wanted(a),
    })
}

/// Registers the family.
pub fn register(r: &mut Registry) {
    r.register("", "Attention", attention);
    r.register(MS, "MultiHeadAttention", super::mha::mha);
}

#[cfg(test)]
mod tests {
    use super::mask_strides;

    #[test]
    fn masks_broadcast_right_aligned() {
        // [S, T] over [B, H, S, T]
        assert_eq!(mask_strides(&[4, 6], [2, 3, 4]), Some([0, 0, 6, 1]));
        // rank 3 is (heads, q, kv)
        assert_eq!(mask_strides(&[3, 4, 8], [2, 3, 4]), Some([0, 32, 8, 1]));
        assert_eq!(mask_strides(&[2, 1, 4, 6], [2, 3, 4]), Some([24, 0, 6, 1]));
        assert_eq!(mask_strides(&[6], [2, 3, 4]), Some([0, 0, 0, 1]));
        assert_eq!(mask_strides(&[5, 6], [2, 3, 4]), None);
        assert_eq!(mask_strides(&[], [2, 3, 4]), None);
    }
}
