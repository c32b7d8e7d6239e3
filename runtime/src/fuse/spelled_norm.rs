//! A scale-free RMS norm spelled out in elementary ops,
//!
//! `y = Div(x, Sqrt(Add(ReduceMean(Mul(x, x), axes = [-1], keepdims = 1), eps)))`
//!
//! (Gemma 4's value norm as the mobius exporter writes it; `Pow(x, 2)` for the square and the
//! operands of `Add` in either order too), becomes one norm dispatch ([`scale_free_rms`])
//! instead of five. `eps` is a one-element float initializer or `Constant`, the axes an int64
//! initializer, `Constant` or (before opset 18) the attribute; every intermediate value is read
//! only by the next node and is not a graph output.

use super::fused_node;
use super::rewrite::{Find, claim_each};
use super::{Graphs, Unit};
use crate::model::InitData;
use crate::model::Node;
use crate::ops::Op;
use crate::ops::norm::scale_free_rms;
use crate::ops::shape::constant_value;
use crate::tensor::{DType, HostTensor};

/// The nodes (in graph order), input `x`, output `y` and epsilon of the pattern ending at `div`.
pub(super) struct SpelledRms {
    pub nodes: Vec<usize>,
    pub x: String,
    pub y: String,
    pub eps: f32,
}

impl SpelledRms {
    /// The fused op.
    pub fn op(&self) -> Box<dyn Op> {
        scale_free_rms(self.eps)
    }
}

impl Graphs<'_> {
    /// The values of a constant: an inline initializer or a `Constant` node's `value` (or
    /// `value_float(s)` / `value_int(s)`).
    pub(super) fn constant(&self, name: &str) -> Option<HostTensor> {
        if let Some(i) = self.inits.get(name) {
            return match &i.data {
                InitData::Inline(b) => HostTensor::new(i.dtype, i.shape.clone(), b.clone()).ok(),
                InitData::External { .. } => None,
            };
        }
        let p = *self.producer.get(name)?;
        if !self.is(p, "", "Constant") || self.node(p).outputs.len() != 1 {
            return None;
        }
        constant_value(&self.attrs(p)).ok().flatten()
    }

    /// The one node reading `v` (not a graph output), if it is `op` with one output.
    fn only_reader(&self, v: &str, op: &str) -> Option<usize> {
        self.single(v)
            .filter(|&u| self.is(u, "", op) && self.node(u).outputs.len() == 1)
    }

    /// The spelled-out scale-free norm reading `v` (directly or through one `Reshape` by a
    /// constant int64 shape, `v` read only by it) as a norm unit without a scale (`gamma`
    /// empty): a sibling of the per-head norms after a GEMV's separate results (mobius' value
    /// norm next to the query and key norms), fused with them into one dispatch. Between a
    /// `Cast` to float and one back to float16, with the Casts: an f16 unit.
    pub(super) fn spelled_after(&self, v: &str) -> Option<Unit> {
        let mut x = v;
        if let Some(r) = self.single(v)
            && self.is(r, "", "Reshape")
            && self.plain(r, 2)
            && self
                .constant(&self.node(r).inputs[1])
                .is_some_and(|t| t.dtype == DType::I64)
        {
            x = &self.node(r).outputs[0];
        }
        // f16 activations: `Cast(float) -> norm -> Cast(float16)` (mobius's float16 exports),
        // the Casts read only on the way.
        let c1 = self.single(x).filter(|&c| self.cast_to(c, 1));
        let src = c1.map_or(x, |c| self.node(c).outputs[0].as_str());
        self.users(src).iter().find_map(|&sq| {
            let p = self.spelled_rms(sq).filter(|p| p.x == src)?;
            let (mut nodes, mut output) = (p.nodes, p.y);
            if let Some(c1) = c1 {
                let c2 = self.single(&output).filter(|&c| self.cast_to(c, 10))?;
                nodes.extend([c1, c2]);
                nodes.sort_unstable();
                output = self.node(c2).outputs[0].clone();
            }
            Some(Unit {
                nodes,
                input: x.to_string(),
                output,
                gamma: String::new(),
                eps: p.eps,
                f16: c1.is_some(),
            })
        })
    }

    /// The pattern starting at the square node `sq` (`Mul(x, x)` or `Pow(x, 2)`).
    pub(super) fn spelled_rms(&self, sq: usize) -> Option<SpelledRms> {
        let n = self.node(sq);
        if n.outputs.len() != 1 || n.inputs.len() != 2 || n.inputs[0].is_empty() {
            return None;
        }
        let x = n.inputs[0].clone();
        let squared = if self.is(sq, "", "Mul") {
            n.inputs[1] == x
        } else if self.is(sq, "", "Pow") {
            self.constant(&n.inputs[1])
                .is_some_and(|t| t.numel() == 1 && t.dtype.is_float() && t.to_f32()[0] == 2.0)
        } else {
            false
        };
        if !squared {
            return None;
        }
        // ReduceMean over the last axis, dimensions kept.
        let mean = self.only_reader(&n.outputs[0], "ReduceMean")?;
        let ma = self.attrs(mean);
        let mi = &self.node(mean).inputs;
        let axes = if ma.opset < 18 {
            ma.ints("axes")?
        } else {
            self.constant(mi.get(1).filter(|s| !s.is_empty())?)
                .filter(|t| t.dtype == DType::I64)?
                .to_i64()
        };
        if axes != [-1] || ma.i_or("keepdims", 1) != 1 || mi[0] != n.outputs[0] {
            return None;
        }
        // + eps (either operand order).
        let mv = &self.node(mean).outputs[0];
        let add = self.only_reader(mv, "Add")?;
        let ai = &self.node(add).inputs;
        if ai.len() != 2 || ai[0] == ai[1] {
            return None;
        }
        let e = if ai[0] == *mv { &ai[1] } else { &ai[0] };
        let eps = self
            .constant(e)
            .filter(|t| t.numel() == 1 && matches!(t.dtype, DType::F32 | DType::F16))?
            .to_f32()[0];
        if !(eps.is_finite() && eps >= 0.0) {
            return None;
        }
        let sqrt = self.only_reader(&self.node(add).outputs[0], "Sqrt")?;
        if self.node(sqrt).inputs.len() != 1 {
            return None;
        }
        // x / sqrt(...): x the dividend, the root the divisor.
        let sv = &self.node(sqrt).outputs[0];
        let div = self.only_reader(sv, "Div")?;
        let di = &self.node(div).inputs;
        if di.len() != 2 || di[0] != x || di[1] != *sv {
            return None;
        }
        let mut nodes = vec![sq, mean, add, sqrt, div];
        nodes.sort_unstable();
        Some(SpelledRms {
            nodes,
            x,
            y: self.node(div).outputs[0].clone(),
            eps,
        })
    }
}

/// Every SpelledRms group among the nodes not in `cx.used` (the first in graph order where they
/// overlap).
pub(super) fn find(cx: &mut Find<'_>) -> Vec<SpelledRms> {
    claim_each(cx, |g, i| g.spelled_rms(i), |p| &p.nodes)
}

/// The fused node, its op and its report line for `p`.
pub(super) fn build(
    g: &Graphs<'_>,
    p: SpelledRms,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    // The norm kernel takes every shape: no fallback to keep.
    for &n in &p.nodes {
        ops[n] = None;
    }
    let (node, desc) = fused_node(
        &g.node(p.nodes[0]).name,
        "Fused[Mul+ReduceMean+Add+Sqrt+Div=RMSNorm]".into(),
        vec![p.x.clone()],
        vec![p.y.clone()],
    );
    Some((node, p.op(), desc))
}
