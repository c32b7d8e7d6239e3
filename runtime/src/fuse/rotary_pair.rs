//! Rotary pairs: the mobius exports' standard-Attention profile rotates each layer's query and
//! key with two ai.onnx `RotaryEmbedding` nodes reading the same cos, sin (and positions): one
//! dispatch each. Two such nodes (the same table and position inputs, the same `interleaved`
//! and `rotary_embedding_dim`; `num_heads` may differ), neither depending on the other, become
//! one dispatch whose two results are ranges of one buffer (`ops::attention::RotaryPair`). Each
//! node is paired with the next one after it that qualifies. Inputs that do not fit one kernel
//! (other batch or sequence sizes, element types) run the two nodes.

use super::rewrite::Find;
use super::{FastPath, Graphs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::model::Node;
use crate::ops::Op;
use crate::ops::attention::RotaryPair;
use std::collections::HashSet;

/// Two RotaryEmbedding nodes (graph order).
pub(super) struct Pattern {
    pub nodes: Vec<usize>,
}

impl Graphs<'_> {
    /// An ai.onnx RotaryEmbedding with X, cos and sin (and optionally position_ids) and one
    /// output.
    fn rotary_node(&self, i: usize) -> bool {
        let n = self.node(i);
        self.is(i, "", "RotaryEmbedding")
            && n.outputs.len() == 1
            && !n.outputs[0].is_empty()
            && (3..=4).contains(&n.inputs.len())
            && n.inputs.iter().all(|s| !s.is_empty())
    }

    /// Whether RotaryEmbedding nodes `a` and `b` read the same tables and positions with the same
    /// attributes but for `num_heads`, and different inputs.
    fn rotary_twins(&self, a: usize, b: usize) -> bool {
        let (na, nb) = (self.node(a), self.node(b));
        let attr = |i: usize, k: &str| self.attrs(i).i_or(k, 0);
        na.inputs[1..] == nb.inputs[1..]
            && na.inputs[0] != nb.inputs[0]
            && ["interleaved", "rotary_embedding_dim"]
                .iter()
                .all(|k| attr(a, k) == attr(b, k))
            && na
                .attributes
                .iter()
                .all(|x| ["interleaved", "rotary_embedding_dim", "num_heads"].contains(&x.name()))
            && nb
                .attributes
                .iter()
                .all(|x| ["interleaved", "rotary_embedding_dim", "num_heads"].contains(&x.name()))
    }
}

/// The rotary pairs among the nodes not in `used`.
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    let (g, used) = (cx.g, &cx.used);
    let rot: Vec<usize> = (0..g.graph.nodes.len())
        .filter(|i| !used.contains(i) && g.rotary_node(*i))
        .collect();
    let mut taken: HashSet<usize> = HashSet::new();
    let mut found = Vec::new();
    for (k, &a) in rot.iter().enumerate() {
        if taken.contains(&a) {
            continue;
        }
        let partner = rot[k + 1..].iter().copied().find(|&b| {
            !taken.contains(&b)
                && g.rotary_twins(a, b)
                && !super::reenters(g, &[a, b].into_iter().collect())
        });
        if let Some(b) = partner {
            taken.extend([a, b]);
            found.push(Pattern { nodes: vec![a, b] });
        }
    }
    found
}

pub(super) struct FusedRotaryPair {
    op: RotaryPair,
    /// Each node's inputs as positions among the fused node's.
    ins: [Vec<usize>; 2],
}

impl FastPath for FusedRotaryPair {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let pick = |ins: &[usize]| -> Vec<Option<&Value>> {
            ins.iter()
                .map(|&i| inputs.get(i).copied().flatten())
                .collect()
        };
        let (a, b) = (pick(&self.ins[0]), pick(&self.ins[1]));
        self.op.run(cx, [&a, &b])
    }
}

/// The fused node and op for `p`; `None` (the nodes left as they are) when the attributes do
/// not pair.
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let [a, b] = [p.nodes[0], p.nodes[1]];
    let op = RotaryPair::new(&g.attrs(a), &g.attrs(b)).ok()?;
    let ext = super::external_inputs(g, &p.nodes);
    let pos = |name: &String| ext.iter().position(|e| e == name).expect("external input");
    let ins = [a, b].map(|n| g.node(n).inputs.iter().map(pos).collect());
    let outs: Vec<String> = [a, b]
        .iter()
        .map(|&n| g.node(n).outputs[0].clone())
        .collect();
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        outs,
        ops,
        "Fused[2xRotaryEmbedding]".into(),
        FusedRotaryPair { op, ins },
    ))
}
