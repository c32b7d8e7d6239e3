//! Scaled dot-product attention: ai.onnx `Attention` (opsets 23-25: 3-D and 4-D inputs, grouped
//! heads, boolean/float masks, KV cache, causal and sliding-window masking, softcap,
//! `nonpad_kv_seqlen`, the optional `qk_matmul_output`) and com.microsoft `MultiHeadAttention`
//! (separate BSNH-packed Q/K/V, bias, 2-D/3-D key padding mask, attention bias, KV cache,
//! unidirectional). One kernel (`kernels/attention/sdpa.wgsl`, online softmax) computes the output;
//! `kernels/attention/sdpa_kv.wgsl` builds present K/V, `kernels/attention/sdpa_qk.wgsl` the optional scores.

use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Bound, Compiled, Features, Kernel, KernelSpec, Storage, wgsl_f32};
use crate::ops::elementwise::cast_gpu;
use crate::ops::{Attrs, MS, Op, Registry, req};
use crate::tensor::DType;

pub(super) const SDPA: &str = include_str!("../../kernels/attention/sdpa.wgsl");
pub(super) const SDPA_QK: &str = include_str!("../../kernels/attention/sdpa_qk.wgsl");

pub(super) use super::sdpa_kv::{head_major, head_major_pair};

/// Workgroup size of the attention kernels (keys per online-softmax chunk).
pub(super) const WG: usize = 64;
/// Largest head size the kernels hold in workgroup memory.
pub(super) const MAX_HEAD: usize = 2048;

/// Logical (b, h, t) strides of a [B, H, T, D] view (d is contiguous).
pub(super) type Strides = [usize; 3];

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

/// How the attention kernels read an ai.onnx `attn_mask` of each element type.
#[derive(Clone, Copy, Hash)]
enum OnnxMask {
    /// false = masked.
    Bool,
    /// Added; -inf = masked.
    F32,
    /// Added; -inf = masked.
    F16,
}

/// The mask read by the attention kernels' `key_bias`, with its storage.
#[derive(Clone, Copy, Hash)]
enum MaskCode {
    None,
    Onnx(OnnxMask, Storage),
    KeyPadding(Storage),
}

/// What the attention kernels' code (`sdpa`, `sdpa_qk`) depends on: the head sizes held in
/// workgroup memory, the scale and softcap (bits), the tensors' storages and which of the
/// masks, `nonpad_kv_seqlen` and attention bias exist, and the masking rules of `key_bias`.
#[derive(Clone, Copy, Hash)]
struct SdpaSpec {
    /// `QCAP`: the query row held in workgroup memory (DK, at least 1).
    qcap: u32,
    /// `NACC`: output dims per thread.
    nacc: u32,
    scale: u32,
    softcap: u32,
    q: Storage,
    k: Storage,
    v: Storage,
    mask: MaskCode,
    nonpad: Option<Storage>,
    ab: Option<Storage>,
    causal: bool,
    /// A left / right sliding window bound exists.
    left_window: bool,
    right_window: bool,
    unidirectional: bool,
    /// com.microsoft `mask_filter_value` (bits).
    filter: u32,
    /// `sdpa.wgsl` writes its output in f16 itself (a word, two dims, at a time through
    /// workgroup memory: DV and the output's strides even); otherwise in f32.
    y16: bool,
}

crate::gpu_params! {
    /// The attention kernels' parameters (`sdpa.wgsl`, `sdpa_qk.wgsl`): the sizes, then per
    /// tensor its strides along b, h and the row (`q_s`, `k_t`, ...; d is contiguous), the
    /// mask's and the attention bias's (b, h, s, t) strides, and the causal/window offsets.
    struct SdpaParams {
        batch: u32,
        s: u32,
        hq: u32,
        hkv: u32,
        dk: u32,
        dv: u32,
        t: u32,
        q_b: u32,
        q_h: u32,
        q_s: u32,
        k_b: u32,
        k_h: u32,
        k_t: u32,
        v_b: u32,
        v_h: u32,
        v_t: u32,
        y_b: u32,
        y_h: u32,
        y_s: u32,
        mask_b: u32,
        mask_h: u32,
        mask_s: u32,
        mask_t: u32,
        /// Keys the mask covers (later keys are masked).
        mask_keys: u32,
        /// The causal/window offset: keys after `s + causal_offset` are in the future.
        causal_offset: i32,
        /// Sliding window (-1 = unbounded).
        left_window: i32,
        right_window: i32,
        ab_b: u32,
        ab_h: u32,
        ab_s: u32,
        ab_t: u32,
    }
}

impl SdpaSpec {
    /// `fn key_bias(b, h, s, t) -> vec3<f32>`: (added to the score, allowed (0/1), added after).
    fn key_bias_fn(&self) -> String {
        let mut f = String::from(
            "fn key_bias(b: u32, h: u32, s: u32, t: u32) -> vec3<f32> {\n    var ok = true;\n    var bias = 0.0;\n    var late = 0.0;\n",
        );
        let off = if self.nonpad.is_some() {
            "ldi_nonpad(b) - i32(prm.s)"
        } else {
            "prm.causal_offset"
        };
        f.push_str(&format!("    let off = {off};\n"));
        if self.causal {
            f.push_str("    if (i32(t) > i32(s) + off) { ok = false; }\n");
        }
        if self.left_window {
            f.push_str("    if (i32(s) + off - i32(t) > prm.left_window) { ok = false; }\n");
        }
        if self.right_window {
            f.push_str("    if (i32(t) - i32(s) - off > prm.right_window) { ok = false; }\n");
        }
        if self.nonpad.is_some() {
            f.push_str("    if (i32(t) >= ldi_nonpad(b)) { ok = false; }\n");
        }
        let mi = "b * prm.mask_b + h * prm.mask_h + s * prm.mask_s + t * prm.mask_t";
        let filter = wgsl_f32(f32::from_bits(self.filter));
        match self.mask {
            MaskCode::None => {}
            MaskCode::Onnx(m, _) => {
                f.push_str(&format!(
                    "    if (t >= prm.mask_keys) {{ ok = false; }} else {{\n        let mi = {mi};\n"
                ));
                f.push_str(match m {
                    OnnxMask::Bool => "        if (ldw_mask(mi) == 0u) { ok = false; }\n",
                    OnnxMask::F32 => {
                        "        let mw = ldw_mask(mi);\n        if (mw == 0xff800000u) { ok = false; } else { bias = bias + bitcast<f32>(mw); }\n"
                    }
                    OnnxMask::F16 => {
                        "        let hw = (ldw_mask(mi >> 1u) >> ((mi & 1u) * 16u)) & 0xffffu;\n        if (hw == 0xfc00u) { ok = false; } else { bias = bias + ld_mask(mi); }\n"
                    }
                });
                f.push_str("    }\n");
            }
            MaskCode::KeyPadding(_) => f.push_str(&format!(
                "    if (ldi_mask({mi}) <= 0) {{ bias = bias + {filter}; }}\n"
            )),
        }
        if self.unidirectional {
            f.push_str(&format!(
                "    if (i32(t) > i32(s) + off) {{ bias = bias + {filter}; }}\n"
            ));
        }
        if self.ab.is_some() {
            f.push_str(
                "    late = ld_ab(b * prm.ab_b + h * prm.ab_h + s * prm.ab_s + t * prm.ab_t);\n",
            );
        }
        f.push_str("    return vec3<f32>(bias, select(0.0, 1.0, ok), late);\n}\n");
        f
    }

    /// The kernel `name` (body `body`, output `out_name` of storage `out`) with its bindings: q,
    /// k, v, then the present masks, then the output.
    fn kernel(
        &self,
        name: &'static str,
        body: &'static str,
        out_name: &str,
        out: Storage,
        f: &Features,
    ) -> Kernel {
        let softcap = crate::gpu::softcap_wgsl("sc", f32::from_bits(self.softcap));
        let mut k = Kernel::new(name, body)
            .params::<SdpaParams>()
            .workgroup(WG as u32)
            .u32("QCAP", self.qcap)
            .u32("NACC", self.nacc)
            .f32("SCALE", f32::from_bits(self.scale))
            .code("SOFTCAP", &softcap)
            .code("KEY_BIAS", &self.key_bias_fn())
            .input("q", self.q)
            .input("k", self.k)
            .input("v", self.v);
        match self.mask {
            MaskCode::None => {}
            MaskCode::Onnx(_, s) | MaskCode::KeyPadding(s) => k = k.input("mask", s),
        }
        if let Some(s) = self.nonpad {
            k = k.input("nonpad", s);
        }
        if let Some(s) = self.ab {
            k = k.input("ab", s);
        }
        k.output(out_name, out).wg_reduce(f.subgroups)
    }
}

impl KernelSpec for SdpaSpec {
    const NAME: &'static str = "sdpa";
    const WGSL: &'static [&'static str] = &[SDPA];
    fn build(&self, f: &Features) -> Kernel {
        let nacc = self.nacc;
        // f32: each thread stores its dims. f16: they go through workgroup memory, then each
        // word is stored whole.
        let (decl, put, words) = if self.y16 {
            (
                format!("var<workgroup> ys: array<f32, {}>;\n", nacc as usize * WG),
                "ys[d] = (*o)[j];",
                "workgroupBarrier();
    for (var w = tid; w < prm.dv / 2u; w = w + WG) {
        st_y(yb / 2u + w, ys[2u * w], ys[2u * w + 1u]);
    }",
            )
        } else {
            (String::new(), "stf_y(yb + d, (*o)[j]);", "")
        };
        let store = format!(
            "{decl}fn store_y(yb: u32, tid: u32, o: ptr<function, array<f32, {nacc}>>) {{
    for (var j = 0u; j < {nacc}u; j = j + 1u) {{
        let d = tid + j * WG;
        if (d < prm.dv) {{ {put} }}
    }}
    {words}
}}"
        );
        let y = if self.y16 { Storage::F16 } else { Storage::F32 };
        self.kernel("sdpa", SDPA, "y", y, f).code("STORE_Y", &store)
    }
}

/// The qk_matmul_output kernel (`sdpa_qk.wgsl`): [`SdpaSpec`]'s values and the output `mode`
/// 0..=3.
#[derive(Hash)]
struct SdpaQkSpec {
    attn: SdpaSpec,
    mode: u32,
}

impl KernelSpec for SdpaQkSpec {
    const NAME: &'static str = "sdpa_qk";
    const WGSL: &'static [&'static str] = &[SDPA_QK];
    fn build(&self, f: &Features) -> Kernel {
        self.attn
            .kernel("sdpa_qk", SDPA_QK, "out", Storage::F32, f)
            .u32("MODE", self.mode)
    }
}

impl Plan<'_> {
    /// The attention kernels' spec (head sizes and mask type checked).
    fn spec(&self) -> Result<SdpaSpec> {
        if self.dk > MAX_HEAD || self.dv > MAX_HEAD {
            return Err(op_err(format!(
                "head size {} / {} exceeds the supported {MAX_HEAD}",
                self.dk, self.dv
            )));
        }
        let mask = match &self.mask {
            Mask::None => MaskCode::None,
            Mask::Onnx(m, _, _) => {
                let code = match m.dtype {
                    DType::Bool => OnnxMask::Bool,
                    DType::F32 => OnnxMask::F32,
                    DType::F16 => OnnxMask::F16,
                    d => {
                        return Err(op_err(format!(
                            "attn_mask of type {} (expected bool, float or float16)",
                            d.name()
                        )));
                    }
                };
                MaskCode::Onnx(code, m.storage())
            }
            Mask::KeyPadding(m, _) => MaskCode::KeyPadding(m.storage()),
        };
        Ok(SdpaSpec {
            qcap: self.dk.max(1) as u32,
            nacc: self.dv.div_ceil(WG).max(1) as u32,
            scale: self.scale.to_bits(),
            softcap: self.softcap.to_bits(),
            q: self.q.0.storage(),
            k: self.k.0.storage(),
            v: self.v.0.storage(),
            mask,
            nonpad: self.nonpad.map(GpuTensor::storage),
            ab: self.attn_bias.map(|(ab, _)| ab.storage()),
            causal: self.causal,
            left_window: self.window.0 >= 0,
            right_window: self.window.1 >= 0,
            unidirectional: self.unidirectional,
            filter: self.filter.to_bits(),
            y16: false,
        })
    }

    /// The kernel's parameters, the output at the `y` strides.
    fn params(&self, y: Strides) -> SdpaParams {
        let (ms, mt) = match &self.mask {
            Mask::None => ([0; 4], 0),
            Mask::Onnx(_, st, tm) => (*st, *tm),
            Mask::KeyPadding(_, st) => (*st, self.t),
        };
        let ab = self.attn_bias.map_or([0; 4], |(_, st)| st);
        let u = |x: usize| x as u32;
        SdpaParams {
            batch: u(self.b),
            s: u(self.s),
            hq: u(self.hq),
            hkv: u(self.hkv),
            dk: u(self.dk),
            dv: u(self.dv),
            t: u(self.t),
            q_b: u(self.q.1[0]),
            q_h: u(self.q.1[1]),
            q_s: u(self.q.1[2]),
            k_b: u(self.k.1[0]),
            k_h: u(self.k.1[1]),
            k_t: u(self.k.1[2]),
            v_b: u(self.v.1[0]),
            v_h: u(self.v.1[1]),
            v_t: u(self.v.1[2]),
            y_b: u(y[0]),
            y_h: u(y[1]),
            y_s: u(y[2]),
            mask_b: u(ms[0]),
            mask_h: u(ms[1]),
            mask_s: u(ms[2]),
            mask_t: u(ms[3]),
            mask_keys: u(mt),
            causal_offset: self.offset as i32,
            left_window: self.window.0 as i32,
            right_window: self.window.1 as i32,
            ab_b: u(ab[0]),
            ab_h: u(ab[1]),
            ab_s: u(ab[2]),
            ab_t: u(ab[3]),
        }
    }

    /// The plan's tensors bound to `k` (declared by [`SdpaSpec::kernel`]), the output `out` as
    /// `out_name`.
    fn bind<'k, 't>(
        &'t self,
        k: &'k Compiled,
        out: &'t GpuTensor,
        out_name: &str,
    ) -> Bound<'k, 't> {
        let mask = match &self.mask {
            Mask::None => None,
            Mask::Onnx(m, ..) | Mask::KeyPadding(m, _) => Some(*m),
        };
        k.bind("q", self.q.0)
            .bind("k", self.k.0)
            .bind("v", self.v.0)
            .bind_opt("mask", mask)
            .bind_opt("nonpad", self.nonpad)
            .bind_opt("ab", self.attn_bias.map(|(ab, _)| ab))
            .bind(out_name, out)
    }

    /// The attention output, element (b, h, s, d) at the `y` strides of `shape`: in `dtype` when
    /// that is f16 and DV and the strides are even (written by the kernel), else in f32.
    pub(super) fn run(
        &self,
        cx: &mut Ctx<'_>,
        shape: Vec<usize>,
        y: Strides,
        dtype: DType,
    ) -> Result<GpuTensor> {
        let mut spec = self.spec()?;
        spec.y16 = dtype == DType::F16 && self.dv.is_multiple_of(2) && y.iter().all(|s| s % 2 == 0);
        let out = cx.alloc(if spec.y16 { DType::F16 } else { DType::F32 }, shape)?;
        let k = cx.gpu.kernel(&spec)?;
        let rows = (self.b * self.hq * self.s) as u64;
        cx.launch(self.bind(&k, &out, "y"), &self.params(y), rows * WG as u64)?;
        Ok(out)
    }

    /// The qk_matmul_output ([B, HQ, S, T], f32) for `mode` 0..=3.
    pub(super) fn scores(&self, cx: &mut Ctx<'_>, mode: u32) -> Result<GpuTensor> {
        let attn = self.spec()?;
        let out = cx.alloc(DType::F32, vec![self.b, self.hq, self.s, self.t])?;
        let k = cx.gpu.kernel(&SdpaQkSpec { attn, mode })?;
        let rows = (self.b * self.hq * self.s) as u64;
        cx.launch(
            self.bind(&k, &out, "out"),
            &self.params([0; 3]),
            rows * WG as u64,
        )?;
        Ok(out)
    }
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

/// The attention result `y` (f32, or already f16 when the kernel wrote it so) in `dtype`.
pub(super) fn f32_out(cx: &mut Ctx<'_>, y: GpuTensor, dtype: DType) -> Result<GpuTensor> {
    if dtype == y.dtype {
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
        let y = plan.run(cx, y_shape, ys, q.dtype)?;
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
