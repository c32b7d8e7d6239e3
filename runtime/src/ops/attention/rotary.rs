//! Rotary embeddings: the tensor views and cos/sin tables they read (`Layout`, `Pos`,
//! `CosSinPack`), the `rope` dispatch, and the RotaryEmbedding ops (com.microsoft and ai.onnx
//! opset 23) with the paired query+key form (`RotaryPair`).

use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::Kernel;
use crate::ops::{Attrs, Op, req};
use crate::tensor::DType;

// Both end with the shared rotation (`rotate.wgsl`).
const ROPE: &str = concat!(
    include_str!("../../kernels/rope.wgsl"),
    include_str!("../../kernels/rotate.wgsl")
);
const ROPE_PAIR: &str = concat!(
    include_str!("../../kernels/rope_pair.wgsl"),
    include_str!("../../kernels/rotate.wgsl")
);

/// Where rotary positions come from.
pub(super) enum Pos<'a> {
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
pub(super) fn table_elem_bytes(t: &GpuTensor) -> Option<u64> {
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
    pub(super) buf: GpuTensor,
    /// Element offsets of the cos and the sin table in it.
    pub(super) cos: u64,
    pub(super) sin: u64,
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
pub(super) fn cos_sin_bindings(c: &GpuTensor, s: &GpuTensor) -> u32 {
    if cos_sin_pack(c, s).is_some() { 1 } else { 2 }
}

/// Declares the rotary tables as `ld_cos` / `ld_sin` of `k`: from `pack` (one binding `cs`,
/// each table at its offset) when given, else one binding each.
pub(super) fn cos_sin_inputs<'a>(
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
pub(super) fn rope(
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

pub(super) struct Rotary {
    pub(super) ms: bool,
    pub(super) interleaved: bool,
    pub(super) heads: usize,
    pub(super) rot_dim: usize,
}

/// One RotaryEmbedding's inputs on the GPU and its view of them: what [`rope`] takes.
pub(crate) struct RopeJob {
    pub(super) x: GpuTensor,
    pub(super) l: Layout,
    pub(super) cos: GpuTensor,
    pub(super) sin: GpuTensor,
    pub(super) pos: Option<GpuTensor>,
    pub(super) rot_dim: usize,
    pub(super) hs_swap: bool,
}

impl RopeJob {
    pub(super) fn pos(&self) -> Pos<'_> {
        match &self.pos {
            Some(p) if p.numel() == 1 && self.l.b * self.l.s != 1 => Pos::Offset(p),
            Some(p) => Pos::Ids(p),
            None => Pos::PerToken,
        }
    }
    pub(super) fn out_shape(&self) -> Vec<usize> {
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
    pub(super) fn job(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<RopeJob> {
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
    pub(super) ops: [Rotary; 2],
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
pub(super) fn rope_pair(
    cx: &mut Ctx<'_>,
    jobs: [&RopeJob; 2],
    interleaved: bool,
) -> Result<Vec<GpuTensor>> {
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

pub(super) fn rotary(a: &Attrs<'_>, ms: bool) -> Result<Box<dyn Op>> {
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
