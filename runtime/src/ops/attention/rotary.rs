//! Rotary embeddings: the tensor views and cos/sin tables they read (`Layout`, `Pos`,
//! `CosSinPack`), the `rope` dispatch, and the RotaryEmbedding ops (com.microsoft and ai.onnx
//! opset 23) with the paired query+key form (`RotaryPair`).

use crate::error::{Result, op_err};
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Bound, Features, Kernel, KernelSpec, Storage};
use crate::ops::{Attrs, Op, req};
use crate::tensor::DType;

const ROPE_WGSL: &str = include_str!("../../kernels/attention/rope.wgsl");
const ROPE_PAIR_WGSL: &str = include_str!("../../kernels/attention/rope_pair.wgsl");
/// The shared rotation, appended to the bodies that rotate.
pub(super) const ROTATE_WGSL: &str = include_str!("../../kernels/attention/rotate.wgsl");
// Both end with the shared rotation (`rotate.wgsl`).
const ROPE: &str = concat!(
    include_str!("../../kernels/attention/rope.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl")
);
const ROPE_PAIR: &str = concat!(
    include_str!("../../kernels/attention/rope_pair.wgsl"),
    include_str!("../../kernels/attention/rotate.wgsl")
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

/// The rotary tables as a kernel declares them: their storages, and where each sits in their
/// one binding when they are packed (see [`CosSinPack`]). Part of the specs of the kernels
/// that read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Tables {
    cos: Storage,
    sin: Storage,
    /// Element offsets of the cos and the sin table in the packed binding `cs`.
    packed: Option<(u64, u64)>,
}

impl Tables {
    /// The tables `c` and `s`, read through `pack` when given (see [`cos_sin_pack`]).
    pub(super) fn of(c: &GpuTensor, s: &GpuTensor, pack: Option<&CosSinPack>) -> Self {
        Self {
            cos: c.storage(),
            sin: s.storage(),
            packed: pack.map(|p| (p.cos, p.sin)),
        }
    }

    /// Declares the tables as `ld_cos` / `ld_sin` of `k`: one binding `cs` with each table at
    /// its offset when packed, else the bindings `cos` and `sin` (bound by [`bind_tables`]).
    pub(super) fn declare(&self, k: Kernel) -> Kernel {
        match self.packed {
            Some((cos, sin)) => k
                .input("cs", self.cos)
                .alias("cos", "cs", cos)
                .alias("sin", "cs", sin),
            None => k.input("cos", self.cos).input("sin", self.sin),
        }
    }
}

/// Binds the rotary tables `c` and `s` as [`Tables::declare`] declared them: `pack`'s buffer
/// when given, else each table.
pub(super) fn bind_tables<'k, 't>(
    bound: Bound<'k, 't>,
    (c, s): (&'t GpuTensor, &'t GpuTensor),
    pack: Option<&'t CosSinPack>,
) -> Bound<'k, 't> {
    match pack {
        Some(p) => bound.bind("cs", &p.buf),
        None => bound.bind("cos", c).bind("sin", s),
    }
}

/// Which position source a rotary kernel reads (see [`Pos`]): the code's form of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PosKind {
    Seqlens,
    Ids,
    Offset,
    PerToken,
}

impl Pos<'_> {
    /// The source's kind and its tensor (none for per-token tables).
    fn kind(&self) -> (PosKind, Option<&GpuTensor>) {
        match *self {
            Pos::Seqlens(t) => (PosKind::Seqlens, Some(t)),
            Pos::Ids(t) => (PosKind::Ids, Some(t)),
            Pos::Offset(t) => (PosKind::Offset, Some(t)),
            Pos::PerToken => (PosKind::PerToken, None),
        }
    }
}

crate::gpu_params! {
    /// rope.wgsl's parameters: the element count, the input's logical [B, S, H, D] view
    /// (strides `sb`, `ss`, `sh` and element offset `off`), the rotary dim and the tables'
    /// row width (`half`).
    struct RopeParams {
        n: u32,
        b: u32,
        s: u32,
        h: u32,
        d: u32,
        sb: u32,
        ss: u32,
        sh: u32,
        off: u32,
        rot_dim: u32,
        half: u32,
    }
}

/// The kernel of [`rope`]: storages, tables, position source and flags.
#[derive(Hash)]
struct RopeSpec {
    x: Storage,
    /// The rotary tables (none: no rotary, a strided copy).
    tables: Option<Tables>,
    pos: PosKind,
    /// The positions' storage (`x`'s when there are none: bound to `x`, unread).
    pos_storage: Storage,
    interleaved: bool,
    hs_swap: bool,
    y: Storage,
}

impl KernelSpec for RopeSpec {
    const NAME: &'static str = "rope";
    const WGSL: &'static [&'static str] = &[ROPE_WGSL, ROTATE_WGSL];
    fn build(&self, _: &Features) -> Kernel {
        let cos_row = match (self.tables, self.pos) {
            (None, _) => "0u",
            (Some(_), PosKind::Seqlens) => "u32(ldi_pos(b) + 1 - i32(S) + i32(s))",
            (Some(_), PosKind::Ids) => "u32(ldi_pos(b * S + s))",
            (Some(_), PosKind::Offset) => "u32(ldi_pos(0u)) + s",
            (Some(_), PosKind::PerToken) => "b * S + s",
        };
        let k = Kernel::new("rope", ROPE)
            .params::<RopeParams>()
            .bool("ROTARY", self.tables.is_some())
            .bool("INTERLEAVED", self.interleaved)
            .bool("HS_SWAP", self.hs_swap)
            .code("COS_ROW", cos_row)
            .input("x", self.x);
        let k = match &self.tables {
            Some(t) => t.declare(k),
            // No rotary: the (unread) tables alias the input, without bindings.
            None => k.alias("cos", "x", 0).alias("sin", "x", 0),
        };
        k.input("pos", self.pos_storage)
            .output("y", self.y)
            .mapped("y")
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
    let (kind, pos_t) = pos.kind();
    let pack = cs.and_then(|(c, s)| cos_sin_pack(c, s));
    // Without positions the (unread) `pos` binding is the input.
    let pos_t = pos_t.unwrap_or(x);
    let k = cx.gpu.kernel(&RopeSpec {
        x: x.storage(),
        tables: cs.map(|(c, s)| Tables::of(c, s, pack.as_ref())),
        pos: kind,
        pos_storage: pos_t.storage(),
        interleaved,
        hs_swap,
        y: out.storage(),
    })?;
    let mut bound = k.bind("x", x).bind("pos", pos_t).bind("y", &out);
    if let Some(cs) = cs {
        bound = bind_tables(bound, cs, pack.as_ref());
    }
    let p = RopeParams {
        n: n as u32,
        b: l.b as u32,
        s: l.s as u32,
        h: l.h as u32,
        d: l.d as u32,
        sb: l.strides[0] as u32,
        ss: l.strides[1] as u32,
        sh: l.strides[2] as u32,
        off: l.off as u32,
        rot_dim: rot_dim as u32,
        half: cs.map_or(1, |(c, _)| c.shape.last().copied().unwrap_or(1)) as u32,
    };
    cx.launch_mapped(bound, &p, n, &out)?;
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

crate::gpu_params! {
    /// rope_pair.wgsl's parameters: the element count of `y` (both results and the padding
    /// between them), the shared sequence length and table row width, where the two meet, and
    /// per rotation `r` (element `r` of each array) its input's view and flags.
    struct RopePairParams {
        n: u32,
        s: u32,
        half: u32,
        /// Where `xb` starts in the inputs' joint address space (`xa`'s element count).
        xa: u32,
        /// Where the second result starts in `y`.
        second: u32,
        /// Where the first result ends in `y`.
        first_end: u32,
        pad0: u32,
        pad1: u32,
        heads: [u32; 4],
        d: [u32; 4],
        sb: [u32; 4],
        ss: [u32; 4],
        sh: [u32; 4],
        off: [u32; 4],
        rot_dim: [u32; 4],
        /// 1: the result is [B, H, S, D], else [B, S, H, D].
        hs_swap: [u32; 4],
    }
}

/// The kernel of [`rope_pair`]: storages, tables, position source and interleaving.
#[derive(Hash)]
struct RopePairSpec {
    xa: Storage,
    xb: Storage,
    tables: Tables,
    pos: PosKind,
    /// The positions' storage (`xa`'s when there are none: bound to `xa`, unread).
    pos_storage: Storage,
    interleaved: bool,
    y: Storage,
}

impl KernelSpec for RopePairSpec {
    const NAME: &'static str = "rope_pair";
    const WGSL: &'static [&'static str] = &[ROPE_PAIR_WGSL, ROTATE_WGSL];
    fn build(&self, _: &Features) -> Kernel {
        let cos_row = match self.pos {
            PosKind::Ids => "u32(ldi_pos(b * S + s))",
            PosKind::Offset => "u32(ldi_pos(0u)) + s",
            PosKind::PerToken | PosKind::Seqlens => "b * S + s",
        };
        let k = Kernel::new("rope_pair", ROPE_PAIR)
            .params::<RopePairParams>()
            .bool("INTERLEAVED", self.interleaved)
            .code("COS_ROW", cos_row)
            .input("xa", self.xa)
            .input("xb", self.xb);
        self.tables
            .declare(k)
            .input("pos", self.pos_storage)
            .output("y", self.y)
            .mapped("y")
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
    let pack = cos_sin_pack(&a.cos, &a.sin);
    let pos = a.pos.as_ref().unwrap_or(&a.x);
    let whole = ys[0].whole();
    let k = cx.gpu.kernel(&RopePairSpec {
        xa: a.x.storage(),
        xb: b.x.storage(),
        tables: Tables::of(&a.cos, &a.sin, pack.as_ref()),
        pos: a.pos().kind().0,
        pos_storage: pos.storage(),
        interleaved,
        y: whole.storage(),
    })?;
    let bound = k
        .bind("xa", &a.x)
        .bind("xb", &b.x)
        .bind("pos", pos)
        .bind("y", &whole);
    let bound = bind_tables(bound, (&a.cos, &a.sin), pack.as_ref());
    let mut p = RopePairParams {
        n: n as u32,
        s: a.l.s as u32,
        half: a.cos.shape.last().copied().unwrap_or(1) as u32,
        xa: a.x.numel() as u32,
        second: start_b as u32,
        first_end: ys[0].numel() as u32,
        ..RopePairParams::default()
    };
    for (r, j) in [a, b].into_iter().enumerate() {
        let l = &j.l;
        p.heads[r] = l.h as u32;
        p.d[r] = l.d as u32;
        p.sb[r] = l.strides[0] as u32;
        p.ss[r] = l.strides[1] as u32;
        p.sh[r] = l.strides[2] as u32;
        p.off[r] = l.off as u32;
        p.rot_dim[r] = j.rot_dim as u32;
        p.hs_swap[r] = u32::from(j.hs_swap);
    }
    cx.launch_mapped(bound, &p, n, &whole)?;
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
