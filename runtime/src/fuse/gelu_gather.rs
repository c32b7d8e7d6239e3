//! `y = Mul(Gelu(tanh)(a), Gather(data, i, axis))` with `i` a scalar constant (Gemma's per-layer
//! input gate when its projection is a float `MatMul`, as in the mobius exports, so that the
//! fused GEMV's epilogue cannot take it): one elementwise dispatch that reads the gathered slice
//! of `data` through a strided view, instead of three (Gelu, Gather, Mul). f32, or f16 (the Gelu
//! result rounded to f16 before the product, as the f16 graph stores it); mixed types run the
//! three nodes.

use super::Graphs;
use super::rewrite::{Find, claim_each};
use super::{FastPath, external_inputs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::model::Node;
use crate::ops::Op;
use crate::ops::elementwise::{View, ew_gpu};
use crate::tensor::{DType, strides};

/// The pattern ending at a `Mul` node.
pub(super) struct GeluGather {
    /// Gelu, Gather, Mul (graph order).
    pub nodes: Vec<usize>,
    /// Gelu's input.
    pub a: String,
    /// Gather's data.
    pub data: String,
    pub axis: i64,
    pub index: i64,
    /// Mul's output.
    pub out: String,
}

impl Graphs<'_> {
    pub(super) fn gelu_gather(&self, mul: usize) -> Option<GeluGather> {
        if !self.is(mul, "", "Mul") || !self.plain(mul, 2) {
            return None;
        }
        let mi = &self.node(mul).inputs;
        if mi[0] == mi[1] {
            return None;
        }
        for (gi, hi) in [(0, 1), (1, 0)] {
            let (Some(gelu), Some(gather)) = (
                self.producer.get(mi[gi].as_str()).copied(),
                self.producer.get(mi[hi].as_str()).copied(),
            ) else {
                continue;
            };
            if !self.gelu_tanh(gelu)
                || !self.only_for(&mi[gi], mul)
                || !self.is(gather, "", "Gather")
                || !self.plain(gather, 2)
                || !self.only_for(&mi[hi], mul)
            {
                continue;
            }
            let gin = &self.node(gather).inputs;
            let Some(idx) = self
                .constant(&gin[1])
                .filter(|t| t.shape.is_empty() && matches!(t.dtype, DType::I64 | DType::I32))
            else {
                continue;
            };
            let mut nodes = vec![gelu, gather, mul];
            nodes.sort_unstable();
            return Some(GeluGather {
                nodes,
                a: self.node(gelu).inputs[0].clone(),
                data: gin[0].clone(),
                axis: self.attrs(gather).i_or("axis", 0),
                index: idx.to_i64()[0],
                out: self.node(mul).outputs[0].clone(),
            });
        }
        None
    }
}

/// The fused op: inputs at `a` and `data` of the group's external inputs.
pub(super) struct FusedGeluGather {
    pub a: usize,
    pub data: usize,
    pub axis: i64,
    pub index: i64,
}

/// Right-aligned broadcast of two shapes.
fn broadcast(x: &[usize], y: &[usize]) -> Option<Vec<usize>> {
    let r = x.len().max(y.len());
    (0..r)
        .map(|d| {
            let a = if d + x.len() >= r {
                x[d + x.len() - r]
            } else {
                1
            };
            let b = if d + y.len() >= r {
                y[d + y.len() - r]
            } else {
                1
            };
            match (a, b) {
                _ if a == b => Some(a),
                (1, b) => Some(b),
                (a, 1) => Some(a),
                _ => None,
            }
        })
        .collect()
}

impl FastPath for FusedGeluGather {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let (Some(av), Some(dv)) = (
            inputs.get(self.a).copied().flatten(),
            inputs.get(self.data).copied().flatten(),
        ) else {
            return Ok(None);
        };
        let ds = dv.shape().to_vec();
        let r = ds.len() as i64;
        let ax = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        let (expr, dtype) = match (av.dtype(), dv.dtype()) {
            (DType::F32, DType::F32) => ("gelu_tanh(a) * b", DType::F32),
            (DType::F16, DType::F16) => ("round_f16(gelu_tanh(a)) * b", DType::F16),
            _ => return Ok(None),
        };
        if !(0..r).contains(&ax) {
            return Ok(None);
        }
        let ax = ax as usize;
        let i = if self.index < 0 {
            self.index + ds[ax] as i64
        } else {
            self.index
        };
        if !(0..ds[ax] as i64).contains(&i) {
            // Out of range: the Gather's own error.
            return Ok(None);
        }
        let mut gshape = ds.clone();
        gshape.remove(ax);
        let Some(out) = broadcast(av.shape(), &gshape) else {
            return Ok(None);
        };
        let a = cx.to_gpu(av)?;
        let d = cx.to_gpu(dv)?;
        if a.split.is_some() || d.split.is_some() {
            return Ok(None);
        }
        // The slice's element strides, then broadcast into the output's dimensions.
        let st = strides(&ds);
        let mut gst: Vec<i64> = st.iter().map(|&s| s as i64).collect();
        gst.remove(ax);
        let lead = out.len() - gshape.len();
        let vst: Vec<i64> = (0..out.len())
            .map(|k| {
                if k < lead || gshape[k - lead] == 1 {
                    0
                } else {
                    gst[k - lead]
                }
            })
            .collect();
        let slice = View {
            t: &d,
            base: i * st[ax] as i64,
            strides: vst,
        };
        let y = ew_gpu(cx, expr, &[View::bcast(&a, &out), slice], &out, dtype)?;
        Ok(Some(vec![Value::Gpu(y)]))
    }
}

/// Every GeluGather group among the nodes not in `cx.used` (the first in graph order where they
/// overlap).
pub(super) fn find(cx: &mut Find<'_>) -> Vec<GeluGather> {
    claim_each(cx, |g, i| g.gelu_gather(i), |p| &p.nodes)
}

/// The fused node, its op and its report line for `p`.
pub(super) fn build(
    g: &Graphs<'_>,
    p: GeluGather,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let ext = external_inputs(g, &p.nodes);
    let outs = vec![p.out.clone()];
    let pos = |name: &str| ext.iter().position(|e| e == name).expect("external input");
    let op = FusedGeluGather {
        a: pos(&p.a),
        data: pos(&p.data),
        axis: p.axis,
        index: p.index,
    };
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        outs,
        ops,
        "Fused[Gelu+Gather+Mul]".into(),
        op,
    ))
}
