//! Rotary tables: Gemma 4's exports build the per-token cos and sin of the KV-shared layers as
//! `Concat(Gather(cache, position_ids), Gather(...), axis=-1)` (the half-width cache row, twice),
//! two dispatches each. The cos and sin tables read with the same positions become one dispatch
//! writing both: `out[..., j] = cache[pos, j mod H]`. The mobius exports gather the full-width
//! cos and sin rows without a Concat (`Gather(cache, position_ids)`, axis 0, of a 2-D cache):
//! two such Gathers of same-shaped caches at the same positions are one dispatch the same way
//! (`out[..., j] = cache[pos, j]`). Out-of-range positions give 0, as Gather does.

use super::rewrite::Find;
use super::{FastPath, Graphs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, GpuTensor, Value};
use crate::gpu::{Features, Kernel, KernelSpec, Storage};
use crate::model::Node;
use crate::ops::Op;
use crate::tensor::DType;
use std::collections::HashSet;

const ROTARY_TABLE: &str = include_str!("../kernels/fuse/rotary_table.wgsl");

crate::gpu_params! {
    /// The `rotary_table` kernel's parameters: `y_k[i] = c_k[pos[i / width], (i % width) %
    /// cache_width]`.
    struct RotaryTableParams {
        /// Output elements (per table).
        n: u32,
        /// The cache's row width (H).
        cache_width: u32,
        /// The cache's rows (P): positions outside [-P, P) give 0.
        cache_rows: u32,
        /// The output's row width (W: 2H after a Concat, H for a plain Gather).
        width: u32,
    }
}

/// The `rotary_table` kernel: the positions' and caches' storages (a second cache `c1`: two
/// tables in one dispatch, `y0` and `y1`) and the outputs' storage.
#[derive(Hash)]
struct RotaryTableSpec {
    pos: Storage,
    c0: Storage,
    c1: Option<Storage>,
    y: Storage,
}

impl KernelSpec for RotaryTableSpec {
    const NAME: &'static str = "rotary_table";
    const WGSL: &'static [&'static str] = &[ROTARY_TABLE];
    fn build(&self, _: &Features) -> Kernel {
        let k = Kernel::new("rotary_table", ROTARY_TABLE)
            .params::<RotaryTableParams>()
            .input("pos", self.pos)
            .input("c0", self.c0);
        match self.c1 {
            Some(c1) => k
                .input("c1", c1)
                .code(
                    "V1",
                    "fn v1(i: u32) -> f32 { let j = idx(i); if (j < 0) { return 0.0; } return ld_c1(u32(j)); }
fn compute2(i: u32) -> vec2<f32> { return vec2<f32>(v0(i), v1(i)); }",
                )
                .output("y0", self.y)
                .output("y1", self.y)
                .mapped_pair("y0", "y1"),
            None => k.code("V1", "").output("y0", self.y).mapped("y0"),
        }
    }
}

/// One table: the Gather and Concat nodes (no Concat: a plain Gather), the cache initializer
/// and the output.
pub(super) struct Table {
    gather: usize,
    concat: Option<usize>,
    cache: String,
    out: String,
}

/// A group of tables (one or two) read at the same positions.
pub(super) struct Pattern {
    pub nodes: Vec<usize>,
    pos: String,
    tables: Vec<Table>,
}

impl Graphs<'_> {
    /// `Concat(Gather(cache, pos, axis 0), same, axis -1)`, the Gather read only by the Concat.
    fn rotary_table(&self, concat: usize) -> Option<(String, Table)> {
        if !self.is(concat, "", "Concat") || !self.plain(concat, 2) {
            return None;
        }
        let ci = &self.node(concat).inputs;
        if ci[0] != ci[1] || self.outputs.contains(ci[0].as_str()) {
            return None;
        }
        let gather = self.producer_of(&ci[0], "", "Gather")?;
        if !self.plain(gather, 2) || self.attrs(gather).i_or("axis", 0) != 0 {
            return None;
        }
        if self.users(&ci[0]) != [concat] {
            return None;
        }
        let gi = &self.node(gather).inputs;
        let cache = self.inits.get(gi[0].as_str())?;
        if cache.shape.len() != 2 || !matches!(cache.dtype, DType::F32 | DType::F16) {
            return None;
        }
        // The Gather's output rank is rank(pos) + 1; the Concat axis must be its last.
        let axis = self.attrs(concat).i("axis")?;
        if axis != -1 && axis < 1 {
            return None;
        }
        Some((
            gi[1].clone(),
            Table {
                gather,
                concat: Some(concat),
                cache: gi[0].clone(),
                out: self.node(concat).outputs[0].clone(),
            },
        ))
    }

    /// `Gather(cache, pos, axis 0)` of a 2-D f32/f16 cache initializer by non-constant
    /// positions.
    fn plain_table(&self, gather: usize) -> Option<(String, Table)> {
        if !self.is(gather, "", "Gather")
            || !self.plain(gather, 2)
            || self.attrs(gather).i_or("axis", 0) != 0
        {
            return None;
        }
        let gi = &self.node(gather).inputs;
        let cache = self.inits.get(gi[0].as_str())?;
        if cache.shape.len() != 2
            || !matches!(cache.dtype, DType::F32 | DType::F16)
            || self.inits.contains_key(gi[1].as_str())
        {
            return None;
        }
        Some((
            gi[1].clone(),
            Table {
                gather,
                concat: None,
                cache: gi[0].clone(),
                out: self.node(gather).outputs[0].clone(),
            },
        ))
    }
}

/// The rotary table groups not in `used`, cos/sin pairs sharing their positions together;
/// plain Gathers only in pairs (one alone is the Gather it is).
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    let (g, used) = (cx.g, &cx.used);
    let mut found: Vec<Pattern> = Vec::new();
    let mut in_concat: HashSet<usize> = HashSet::new();
    for i in 0..g.graph.nodes.len() {
        if used.contains(&i) {
            continue;
        }
        let Some((pos, t)) = g.rotary_table(i) else {
            continue;
        };
        in_concat.insert(t.gather);
        if used.contains(&t.gather) {
            continue;
        }
        // The Concat axis, once the Gather's rank is known at run time, must be the last one.
        let axis = g.attrs(i).i("axis").unwrap_or(-1);
        match found.iter_mut().find(|p| {
            p.pos == pos
                && p.tables.len() == 1
                && p.tables[0]
                    .concat
                    .is_some_and(|c| g.attrs(c).i("axis") == Some(axis))
        }) {
            Some(p) => {
                p.nodes.extend([t.gather, i]);
                p.tables.push(t);
            }
            None => found.push(Pattern {
                nodes: vec![t.gather, i],
                pos,
                tables: vec![t],
            }),
        }
    }
    // Plain Gathers: each with the next one of the same positions and cache shape and type.
    let mut plain: Vec<Pattern> = Vec::new();
    for i in 0..g.graph.nodes.len() {
        if used.contains(&i) || in_concat.contains(&i) {
            continue;
        }
        let Some((pos, t)) = g.plain_table(i) else {
            continue;
        };
        let cache = &g.inits[t.cache.as_str()];
        match plain.iter_mut().find(|p| {
            let c = &g.inits[p.tables[0].cache.as_str()];
            p.pos == pos && p.tables.len() == 1 && c.shape == cache.shape && c.dtype == cache.dtype
        }) {
            Some(p) => {
                p.nodes.push(i);
                p.tables.push(t);
            }
            None => plain.push(Pattern {
                nodes: vec![i],
                pos,
                tables: vec![t],
            }),
        }
    }
    found.extend(plain.into_iter().filter(|p| p.tables.len() == 2));
    for p in &mut found {
        p.nodes.sort_unstable();
    }
    found.retain(|p| !super::reenters(g, &p.nodes.iter().copied().collect()));
    found
}

pub(super) struct RotaryTables {
    /// Concat axis as written (-1, or the last axis of the output); `None`: plain Gathers.
    axis: Option<i64>,
}

impl FastPath for RotaryTables {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        // Inputs: pos, then one cache per table.
        let Some(pos) = inputs.first().copied().flatten() else {
            return Ok(None);
        };
        let caches: Vec<&Value> = inputs[1..].iter().copied().flatten().collect();
        if caches.len() + 1 != inputs.len()
            || !matches!(pos.dtype(), DType::I64 | DType::I32)
            || caches
                .iter()
                .any(|c| c.shape().len() != 2 || c.shape() != caches[0].shape())
            || caches.iter().any(|c| c.dtype() != caches[0].dtype())
        {
            return Ok(None);
        }
        let rank = pos.shape().len() as i64 + 1;
        if self.axis.is_some_and(|a| a != -1 && a != rank - 1) {
            return Ok(None);
        }
        let (p, h) = (caches[0].shape()[0], caches[0].shape()[1]);
        // Row width: the cache row twice (Concat), or once.
        let w = if self.axis.is_some() { 2 * h } else { h };
        let dtype = caches[0].dtype();
        let mut shape = pos.shape().to_vec();
        shape.push(w);
        let n = pos.numel() * w;
        crate::ops::check_host_indices(pos, p, "position")?;
        let pos = cx.to_gpu(pos)?;
        let mut gc = Vec::new();
        for c in &caches {
            let t = cx.to_gpu(c)?;
            if t.split.is_some() {
                return Ok(None);
            }
            gc.push(t);
        }
        let outs: Vec<_> = caches
            .iter()
            .map(|_| cx.alloc(dtype, shape.clone()))
            .collect::<Result<_>>()?;
        let k = cx.gpu.kernel(&RotaryTableSpec {
            pos: pos.storage(),
            c0: gc[0].storage(),
            c1: gc.get(1).map(GpuTensor::storage),
            y: outs[0].storage(),
        })?;
        let bound = k
            .bind("pos", &pos)
            .bind("c0", &gc[0])
            .bind_opt("c1", gc.get(1))
            .bind("y0", &outs[0])
            .bind_opt("y1", outs.get(1));
        let words = n.div_ceil(outs[0].storage().per_word() as usize);
        let params = RotaryTableParams {
            n: n as u32,
            cache_width: h as u32,
            cache_rows: p as u32,
            width: w as u32,
        };
        cx.launch(bound, &params, words as u64)?;
        Ok(Some(outs.into_iter().map(Value::Gpu).collect()))
    }
}

/// The fused node and op for `p`.
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let mut ext = vec![p.pos.clone()];
    ext.extend(p.tables.iter().map(|t| t.cache.clone()));
    let outs: Vec<String> = p.tables.iter().map(|t| t.out.clone()).collect();
    let concat = p.tables[0].concat;
    let kind = match concat {
        Some(_) => format!("Fused[{}x(Gather+Concat)]", p.tables.len()),
        None => format!("Fused[{}xGather]", p.tables.len()),
    };
    let op = RotaryTables {
        axis: concat.map(|c| g.attrs(c).i("axis").unwrap_or(-1)),
    };
    Some(fused_group(g, &p.nodes, ext, outs, ops, kind, op))
}
