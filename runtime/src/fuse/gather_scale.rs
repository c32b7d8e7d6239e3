//! `Mul(Gather(table, ids, axis 0), s)`: an embedding lookup scaled by a constant (the mobius
//! split exports' embedding graph: the token and per-layer tables times their scales), `table`
//! a 2-D f32 initializer and `s` an f32 scalar initializer: one dispatch instead of two, the
//! same product of the same gathered value. A table split across buffers (above the binding
//! limit) runs the two nodes.

use super::rewrite::Find;
use super::{FastPath, Graphs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::gpu::{Kernel, Storage};
use crate::model::Node;
use crate::ops::Op;
use crate::tensor::DType;

const GATHER_SCALE: &str = include_str!("../kernels/fuse/gather_scale.wgsl");

pub(super) struct Pattern {
    /// Gather, Mul.
    pub nodes: Vec<usize>,
    table: String,
    ids: String,
    scale: String,
    out: String,
}

impl Graphs<'_> {
    fn gather_scale(&self, mul: usize) -> Option<Pattern> {
        if !self.is(mul, "", "Mul") || !self.plain(mul, 2) {
            return None;
        }
        let mi = &self.node(mul).inputs;
        for (gi, si) in [(0, 1), (1, 0)] {
            let Some(gather) = self.producer_of(&mi[gi], "", "Gather") else {
                continue;
            };
            let scalar = self.inits.get(mi[si].as_str()).is_some_and(|s| {
                s.dtype == DType::F32
                    && s.shape.len() <= 1
                    && s.shape.iter().product::<usize>() == 1
            });
            if !scalar
                || !self.plain(gather, 2)
                || !self.only_for(&mi[gi], mul)
                || self.attrs(gather).i_or("axis", 0) != 0
            {
                continue;
            }
            let gin = &self.node(gather).inputs;
            let table = self
                .inits
                .get(gin[0].as_str())
                .is_some_and(|t| t.dtype == DType::F32 && t.shape.len() == 2);
            if !table || gin[1] == gin[0] {
                continue;
            }
            return Some(Pattern {
                nodes: vec![gather, mul],
                table: gin[0].clone(),
                ids: gin[1].clone(),
                scale: mi[si].clone(),
                out: self.node(mul).outputs[0].clone(),
            });
        }
        None
    }
}

/// The scaled lookups among the nodes not in `used`.
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    let (g, used) = (cx.g, &cx.used);
    (0..g.graph.nodes.len())
        .filter(|i| !used.contains(i))
        .filter_map(|i| g.gather_scale(i))
        .filter(|p| p.nodes.iter().all(|n| !used.contains(n)))
        .collect()
}

crate::gpu_params! {
    /// [`GatherScale`]'s parameters.
    struct GatherScaleParams {
        /// Elements of the result.
        n: u32,
        /// The table's row length (H).
        row_len: u32,
        /// The table's rows (P).
        rows: u32,
    }
}

/// `gather_scale.wgsl`: the storages of the table, indices, scale and result.
#[derive(Hash)]
struct GatherScaleSpec {
    data: Storage,
    idx: Storage,
    s: Storage,
    y: Storage,
}

impl crate::gpu::KernelSpec for GatherScaleSpec {
    const NAME: &'static str = "gather_scale";
    const WGSL: &'static [&'static str] = &[GATHER_SCALE];
    fn build(&self, _: &crate::gpu::Features) -> Kernel {
        Kernel::new("gather_scale", GATHER_SCALE)
            .params::<GatherScaleParams>()
            .input("data", self.data)
            .input("idx", self.idx)
            .input("s", self.s)
            .output("y", self.y)
            .mapped("y")
    }
}

pub(super) struct GatherScale;

impl FastPath for GatherScale {
    /// Inputs: table, ids, scale.
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (Some(table), Some(ids), Some(scale)) = (get(0), get(1), get(2)) else {
            return Ok(None);
        };
        if table.shape().len() != 2
            || table.dtype() != DType::F32
            || scale.dtype() != DType::F32
            || scale.shape().len() > 1
            || scale.shape().iter().product::<usize>() != 1
            || !matches!(ids.dtype(), DType::I64 | DType::I32)
        {
            return Ok(None);
        }
        let (p, h) = (table.shape()[0], table.shape()[1]);
        crate::ops::check_host_indices(ids, p, "index")?;
        let t = cx.to_gpu(table)?;
        if t.split.is_some() {
            return Ok(None);
        }
        let (ids, s) = (cx.to_gpu(ids)?, cx.to_gpu(scale)?);
        let mut shape = ids.shape.clone();
        shape.push(h);
        let y = cx.alloc(DType::F32, shape)?;
        let n = y.numel();
        if n > 0 {
            let k = cx.gpu.kernel(&GatherScaleSpec {
                data: t.storage(),
                idx: ids.storage(),
                s: s.storage(),
                y: y.storage(),
            })?;
            let params = GatherScaleParams {
                n: n as u32,
                row_len: h as u32,
                rows: p as u32,
            };
            let bound = k
                .bind("data", &t)
                .bind("idx", &ids)
                .bind("s", &s)
                .bind("y", &y);
            cx.launch(bound, &params, n as u64)?;
        }
        Ok(Some(vec![Value::Gpu(y)]))
    }
}

/// The fused node and op for `p`.
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let ext = vec![p.table.clone(), p.ids.clone(), p.scale.clone()];
    let outs = vec![p.out.clone()];
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        outs,
        ops,
        "Fused[Gather+Mul]".into(),
        GatherScale,
    ))
}
