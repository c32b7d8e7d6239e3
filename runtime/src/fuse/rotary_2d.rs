//! The vision encoder's 2-D rotary, spelled out by the mobius exports in 17 nodes per query or
//! key (Gemma 4's vision attention rotates the first half of each head by the patch's column
//! and the second half by its row):
//!
//! ```text
//! part_p = Slice(x, [p·h2], [(p+1)·h2], [3])                        x [B, S, H, D], h2 = D / 2
//! rot_p  = part_p * cos_p + Concat(-part_p[..., h2/2:], part_p[..., :h2/2]) * sin_p
//! y      = Concat(rot_0, rot_1, axis 3)
//! ```
//!
//! One elementwise dispatch (`kernels/fuse/rotary_2d.wgsl`) computes the same. The tables are
//! read through their broadcast against [B, S, H, D / 2] (per token, shared by the heads); at run
//! time anything else — other shapes or ranks, types other than f32 or f16 throughout, buffers
//! split across bindings — runs the original nodes. In f16 each product and the sum are rounded
//! to f16 as the unfused `Mul` and `Add` nodes store them.

use super::rewrite::{Find, claim_each};
use super::shared_attn::broadcast_strides;
use super::{FastPath, Graphs, external_inputs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::gpu::{Kernel, Storage};
use crate::model::Node;
use crate::ops::Op;
use crate::tensor::DType;
use std::collections::HashSet;

const ROTARY_2D: &str = include_str!("../kernels/fuse/rotary_2d.wgsl");

/// A matched group.
pub(super) struct Pattern {
    /// Member nodes, in graph order.
    pub nodes: Vec<usize>,
    x: String,
    /// (cos, sin) of the first and the second part.
    tables: [(String, String); 2],
    /// The head size D.
    d: usize,
    out: String,
}

/// One rotated part: its member nodes, the sliced value, the slice's range and (cos, sin).
struct Part {
    nodes: Vec<usize>,
    x: String,
    lo: i64,
    hi: i64,
    cos: String,
    sin: String,
}

impl Graphs<'_> {
    /// `part * cos + Concat(Neg(part[hr:2hr]), part[0:hr]) * sin` producing `v`, `part` a
    /// `Slice` of the last axis.
    fn rotated_part(&self, v: &str) -> Option<Part> {
        let add = self.producer_of(v, "", "Add")?;
        if !self.plain(add, 2) {
            return None;
        }
        let ai = &self.node(add).inputs;
        let (m0, m1) = (
            self.producer_of(&ai[0], "", "Mul")?,
            self.producer_of(&ai[1], "", "Mul")?,
        );
        if m0 == m1 || !self.plain(m0, 2) || !self.plain(m1, 2) {
            return None;
        }
        let rotated = |m: usize| -> Option<(usize, String)> {
            let mi = &self.node(m).inputs;
            [(0, 1), (1, 0)].into_iter().find_map(|(x, y)| {
                self.producer_of(&mi[x], "", "Concat")
                    .filter(|_| mi[x] != mi[y])
                    .map(|c| (c, mi[y].clone()))
            })
        };
        let (cat, sin, mcos) = if let Some((c, s)) = rotated(m1) {
            (c, s, m0)
        } else {
            let (c, s) = rotated(m0)?;
            (c, s, m1)
        };
        if !self.plain(cat, 2) || !matches!(self.attrs(cat).i("axis"), Some(3 | -1)) {
            return None;
        }
        let ci = &self.node(cat).inputs;
        let neg = self.producer_of(&ci[0], "", "Neg")?;
        if !self.plain(neg, 1) {
            return None;
        }
        let s_hi = self
            .producer
            .get(self.node(neg).inputs[0].as_str())
            .copied()?;
        let s_lo = self.producer.get(ci[1].as_str()).copied()?;
        let (part, lo, hr) = self.slice_last(s_lo)?;
        let (part2, hr2, end) = self.slice_last(s_hi)?;
        if part != part2 || lo != 0 || hr != hr2 || hr <= 0 || end != 2 * hr {
            return None;
        }
        let cos = self.other(mcos, &part)?;
        let ps = self.producer.get(part.as_str()).copied()?;
        let (x, plo, phi) = self.slice_last(ps)?;
        if phi - plo != 2 * hr || plo < 0 {
            return None;
        }
        Some(Part {
            nodes: vec![add, m0, m1, cat, neg, s_hi, s_lo, ps],
            x,
            lo: plo,
            hi: phi,
            cos,
            sin,
        })
    }

    /// The group ending at Concat node `c`.
    fn rotary_2d(&self, c: usize) -> Option<Pattern> {
        if !self.is(c, "", "Concat")
            || !self.plain(c, 2)
            || !matches!(self.attrs(c).i("axis"), Some(3 | -1))
        {
            return None;
        }
        let ci = &self.node(c).inputs;
        if ci[0] == ci[1] {
            return None;
        }
        let (p0, p1) = (self.rotated_part(&ci[0])?, self.rotated_part(&ci[1])?);
        let half = p0.hi - p0.lo;
        if p0.x != p1.x || p0.lo != 0 || p1.lo != half || p1.hi != 2 * half {
            return None;
        }
        let mut nodes: Vec<usize> = p0.nodes.iter().chain(&p1.nodes).copied().collect();
        nodes.push(c);
        nodes.sort_unstable();
        nodes.dedup();
        let set: HashSet<usize> = nodes.iter().copied().collect();
        let out = self.node(c).outputs[0].clone();
        for &n in &nodes {
            for o in &self.node(n).outputs {
                if *o != out
                    && (self.outputs.contains(o.as_str())
                        || self.users(o).iter().any(|u| !set.contains(u)))
                {
                    return None;
                }
            }
        }
        let produced: HashSet<&str> = nodes
            .iter()
            .flat_map(|&n| self.node(n).outputs.iter().map(String::as_str))
            .collect();
        let ins = [&p0.x, &p0.cos, &p0.sin, &p1.cos, &p1.sin];
        if ins.iter().any(|v| produced.contains(v.as_str())) {
            return None;
        }
        Some(Pattern {
            nodes,
            x: p0.x,
            tables: [(p0.cos, p0.sin), (p1.cos, p1.sin)],
            d: 2 * half as usize,
            out,
        })
    }
}

/// Storage buffers of the kernel: x, the four tables and y.
const BINDINGS: u32 = 6;

/// Every 2-D rotary among the nodes not in `cx.used` (none when the kernel would not fit the
/// adapter's storage buffers).
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    if BINDINGS >= cx.limits.storage_buffers {
        return Vec::new();
    }
    claim_each(cx, |g, i| g.rotary_2d(i), |p| &p.nodes)
}

crate::gpu_params! {
    /// rotary_2d.wgsl's parameters: the sizes of x [B, S, H, D] and the tables' view.
    struct Rotary2dParams {
        n: u32,
        s: u32,
        h: u32,
        d: u32,
        c_off: u32,
        c_sb: u32,
        c_ss: u32,
    }
}

#[derive(Hash)]
struct Rotary2dSpec {
    x: Storage,
    t: Storage,
    y: Storage,
}

impl crate::gpu::KernelSpec for Rotary2dSpec {
    const NAME: &'static str = "rotary_2d";
    const WGSL: &'static [&'static str] = &[ROTARY_2D];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        Kernel::new("rotary_2d", ROTARY_2D)
            .params::<Rotary2dParams>()
            .input("x", self.x)
            .input("c0", self.t)
            .input("s0", self.t)
            .input("c1", self.t)
            .input("s1", self.t)
            .output("y", self.y)
            .mapped("y")
            .code("RD", super::gemv_wgsl::rd_code(self.y == Storage::F16))
    }
}

pub(super) struct Rotary2d {
    /// Slots in the fused node's inputs: x, cos0, sin0, cos1, sin1.
    slots: [usize; 5],
    d: usize,
}

impl FastPath for Rotary2d {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let vals: Option<Vec<&Value>> = self.slots.iter().map(|&i| get(i)).collect();
        let Some(vals) = vals else {
            return Ok(None);
        };
        // f32, or f16 throughout (rounded as the unfused Mul and Add nodes store f16).
        let dtype = vals[0].dtype();
        if !matches!(dtype, DType::F32 | DType::F16) || vals.iter().any(|v| v.dtype() != dtype) {
            return Ok(None);
        }
        let xs = vals[0].shape();
        let d = self.d;
        if xs.len() != 4 || xs[3] != d || vals[1..].iter().any(|v| v.shape() != vals[1].shape()) {
            return Ok(None);
        }
        let (b, s, h) = (xs[0], xs[1], xs[2]);
        // The tables per token, shared by the heads, contiguous along the part.
        let Some(ts) = broadcast_strides(vals[1].shape(), &[b, s, h, d / 2]) else {
            return Ok(None);
        };
        if ts[2] != 0 || (d / 2 > 1 && ts[3] != 1) {
            return Ok(None);
        }
        let mut t = Vec::with_capacity(5);
        for v in &vals {
            let g = cx.to_gpu(v)?;
            if g.split.is_some() {
                return Ok(None);
            }
            t.push(g);
        }
        let y = cx.alloc(dtype, xs.to_vec())?;
        let n = y.numel();
        if n > 0 {
            let k = cx.gpu.kernel(&Rotary2dSpec {
                x: t[0].storage(),
                t: t[1].storage(),
                y: y.storage(),
            })?;
            let p = Rotary2dParams {
                n: n as u32,
                s: s as u32,
                h: h as u32,
                d: d as u32,
                c_off: 0,
                c_sb: ts[0] as u32,
                c_ss: ts[1] as u32,
            };
            let bound = k
                .bind("x", &t[0])
                .bind("c0", &t[1])
                .bind("s0", &t[2])
                .bind("c1", &t[3])
                .bind("s1", &t[4])
                .bind("y", &y);
            cx.launch(bound, &p, n as u64)?;
        }
        Ok(Some(vec![Value::Gpu(y)]))
    }
}

/// The fused node and op for `p` (its members' ops are taken into the fallback).
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let ext = external_inputs(g, &p.nodes);
    let pos = |name: &str| ext.iter().position(|e| e == name).unwrap_or(usize::MAX);
    let [(c0, s0), (c1, s1)] = &p.tables;
    let slots = [pos(&p.x), pos(c0), pos(s0), pos(c1), pos(s1)];
    let outs = vec![p.out.clone()];
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        outs,
        ops,
        "Fused[2x(3xSlice+Neg+Concat+2xMul+Add)+Concat=Rotary2D]".into(),
        Rotary2d { slots, d: p.d },
    ))
}
