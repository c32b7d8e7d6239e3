//! Present K/V of the ai.onnx `Attention` and com.microsoft `MultiHeadAttention` ops
//! ([`super::sdpa`]): the new tokens appended head-major after the past (`kernels/attention/sdpa_kv.wgsl`),
//! one tensor at a time or a key and a value in one dispatch (`kernels/attention/sdpa_kv_pair.wgsl`).

use super::sdpa::Strides;
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::tensor::DType;

const SDPA_KV: &str = include_str!("../../kernels/attention/sdpa_kv.wgsl");
const SDPA_KV_PAIR: &str = include_str!("../../kernels/attention/sdpa_kv_pair.wgsl");

crate::gpu_params! {
    /// The `sdpa_kv` kernel's parameters: `y[b, h, t, d]` ([B, heads, len, dim]) is
    /// `past[b, h, t, d]` for `t < past`, else `x[off + b*sb + h*sh + (t - past)*st + d]`
    /// (+ `bias[boff + h*dim + d]`).
    struct SdpaKvParams {
        n: u32,
        heads: u32,
        len: u32,
        dim: u32,
        past: u32,
        sb: u32,
        sh: u32,
        st: u32,
        off: u32,
        boff: u32,
    }
}

/// The `sdpa_kv` kernel ([`head_major`]): the storages of the new tokens, of the past (when
/// there is one) and of the bias (when given), and of the output.
#[derive(Hash)]
struct SdpaKvSpec {
    x: Storage,
    past: Option<Storage>,
    bias: Option<Storage>,
    y: Storage,
}

impl KernelSpec for SdpaKvSpec {
    const NAME: &'static str = "sdpa_kv";
    const WGSL: &'static [&'static str] = &[SDPA_KV];
    fn build(&self, _: &Features) -> Kernel {
        let k = Kernel::new("sdpa_kv", SDPA_KV)
            .params::<SdpaKvParams>()
            .input("x", self.x);
        let k = match self.past {
            Some(s) => k
                .input("past", s)
                .code("PAST", "ld_past(((b * H + h) * P + t) * D + d)"),
            None => k.code("PAST", "0.0"),
        };
        let k = match self.bias {
            Some(s) => k
                .input("bias", s)
                .code("BIAS", " + ld_bias(prm.boff + h * D + d)"),
            None => k.code("BIAS", ""),
        };
        k.output("y", self.y).mapped("y")
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
    let past = past.filter(|_| p > 0);
    let k = cx.gpu.kernel(&SdpaKvSpec {
        x: x.storage(),
        past: past.map(GpuTensor::storage),
        bias: bias.map(|(bt, _)| bt.storage()),
        y: out.storage(),
    })?;
    let bound = k
        .bind("x", x)
        .bind_opt("past", past)
        .bind_opt("bias", bias.map(|(bt, _)| bt))
        .bind("y", &out);
    let u = |v: usize| v as u32;
    let params = SdpaKvParams {
        n: u(n),
        heads: u(h),
        len: u(t),
        dim: u(d),
        past: u(p),
        sb: u(st[0]),
        sh: u(st[1]),
        st: u(st[2]),
        off: u(off),
        boff: u(bias.map_or(0, |(_, o)| o)),
    };
    cx.launch_mapped(bound, &params, n, &out)?;
    Ok(out)
}

crate::gpu_params! {
    /// The `sdpa_kv_pair` kernel's parameters: [`SdpaKvParams`]'s sizes, and the key's and
    /// value's (b, h, t) strides.
    struct SdpaKvPairParams {
        n: u32,
        heads: u32,
        len: u32,
        dim: u32,
        past: u32,
        k_b: u32,
        k_h: u32,
        k_t: u32,
        v_b: u32,
        v_h: u32,
        v_t: u32,
    }
}

/// The `sdpa_kv_pair` kernel ([`head_major_pair`]): the new key's and value's storages, the
/// caches' (when there is a past) and the outputs'.
#[derive(Hash)]
struct SdpaKvPairSpec {
    xk: Storage,
    xv: Storage,
    past: Option<[Storage; 2]>,
    y: Storage,
}

impl KernelSpec for SdpaKvPairSpec {
    const NAME: &'static str = "sdpa_kv_pair";
    const WGSL: &'static [&'static str] = &[SDPA_KV_PAIR];
    fn build(&self, _: &Features) -> Kernel {
        let k = Kernel::new("sdpa_kv_pair", SDPA_KV_PAIR)
            .params::<SdpaKvPairParams>()
            .input("xk", self.xk)
            .input("xv", self.xv);
        let k = match self.past {
            Some([pk, pv]) => k.input("pk", pk).input("pv", pv),
            // No past: the (unread) caches alias the new tokens, without bindings.
            None => k.alias("pk", "xk", 0).alias("pv", "xv", 0),
        };
        k.output("yk", self.y)
            .output("yv", self.y)
            .mapped_pair("yk", "yv")
    }
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
    let past = past.filter(|_| p > 0);
    let kern = cx.gpu.kernel(&SdpaKvPairSpec {
        xk: k.storage(),
        xv: v.storage(),
        past: past.map(|[pk, pv]| [pk.storage(), pv.storage()]),
        y: ko.storage(),
    })?;
    let bound = kern
        .bind("xk", k)
        .bind("xv", v)
        .bind_opt("pk", past.map(|[pk, _]| pk))
        .bind_opt("pv", past.map(|[_, pv]| pv))
        .bind("yk", &ko)
        .bind("yv", &vo);
    let u = |v: usize| v as u32;
    let params = SdpaKvPairParams {
        n: u(n),
        heads: u(h),
        len: u(t),
        dim: u(d),
        past: u(p),
        k_b: u(ks[0]),
        k_h: u(ks[1]),
        k_t: u(ks[2]),
        v_b: u(vs[0]),
        v_h: u(vs[1]),
        v_t: u(vs[2]),
    };
    cx.launch_mapped(bound, &params, n, &ko)?;
    Ok([ko, vo])
}
