//! Attention on a transposed cache: the mobius exports' KV-shared layers read another layer's
//! present key and value ([B, kv_heads, T, D]) as `Reshape(Transpose(present, perm 0,2,1,3),
//! [.., .., kv_heads * D])`, the 3-D key/value of an ai.onnx `Attention` with a 3-D query: one
//! copy (Transpose) per cache and decode step. The fused node gives the Attention the caches
//! themselves, read in place at their heads-major strides (the same elements: the reshape of the
//! transpose only renames them), so the two copies go. Only for an Attention without past and
//! present (its key and value are the whole cache), each Transpose and Reshape read only by the
//! next node; shapes that do not reshape to [B, T, kv_heads * D] run the original nodes.

use super::rewrite::Find;
use super::{FastPath, Graphs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::model::Node;
use crate::ops::Op;
use crate::ops::sdpa::{Attention, attention_op};
use crate::tensor::DType;

/// One folded view: the Transpose, the Reshape and the reshape's target as written.
struct View {
    transpose: usize,
    reshape: usize,
    /// The cache (the Transpose's input).
    cache: String,
    /// The Reshape's shape input (an external input of the group) and its value.
    shape_name: String,
    shape: Vec<i64>,
}

/// An Attention node whose key and value are both folded views.
pub(super) struct Pattern {
    pub nodes: Vec<usize>,
    attention: usize,
    views: [View; 2],
}

impl Graphs<'_> {
    /// `Reshape(Transpose(cache, perm [0, 2, 1, 3]), shape)` read only by `attn` (at `v`),
    /// `shape` a constant 3-element i64 vector, the Reshape without `allowzero`.
    fn kv_view(&self, v: &str, attn: usize) -> Option<View> {
        let reshape = self.producer_of(v, "", "Reshape")?;
        if !self.plain(reshape, 2)
            || !self.only_for(v, attn)
            || self.attrs(reshape).i_or("allowzero", 0) != 0
        {
            return None;
        }
        let ri = &self.node(reshape).inputs;
        let transpose = self.producer_of(&ri[0], "", "Transpose")?;
        if !self.plain(transpose, 1)
            || !self.only_for(&ri[0], reshape)
            || self.attrs(transpose).ints("perm")? != [0, 2, 1, 3]
        {
            return None;
        }
        let shape = self
            .constant(&ri[1])
            .filter(|t| t.dtype == DType::I64 && t.shape == [3])?
            .to_i64();
        Some(View {
            transpose,
            reshape,
            cache: self.node(transpose).inputs[0].clone(),
            shape_name: ri[1].clone(),
            shape,
        })
    }

    /// An ai.onnx Attention (query, key, value, optional mask; only its output Y) whose key and
    /// value are folded views.
    fn attention_on_views(&self, attn: usize) -> Option<Pattern> {
        if !self.is(attn, "", "Attention") {
            return None;
        }
        let n = self.node(attn);
        if n.outputs.len() != 1 || n.outputs[0].is_empty() || !(3..=4).contains(&n.inputs.len()) {
            return None;
        }
        if n.inputs[..3].iter().any(String::is_empty) || n.inputs[1] == n.inputs[2] {
            return None;
        }
        let a = self.attrs(attn);
        if a.i("q_num_heads").is_none() || a.i("kv_num_heads").is_none() {
            return None;
        }
        let k = self.kv_view(&n.inputs[1], attn)?;
        let v = self.kv_view(&n.inputs[2], attn)?;
        let mut nodes = vec![k.transpose, k.reshape, v.transpose, v.reshape, attn];
        nodes.sort_unstable();
        Some(Pattern {
            nodes,
            attention: attn,
            views: [k, v],
        })
    }
}

/// The Attention nodes on folded views, none of their nodes in `used`.
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    let (g, used) = (cx.g, &cx.used);
    (0..g.graph.nodes.len())
        .filter(|i| !used.contains(i))
        .filter_map(|i| g.attention_on_views(i))
        .filter(|p| p.nodes.iter().all(|n| !used.contains(n)))
        .filter(|p| !super::reenters(g, &p.nodes.iter().copied().collect()))
        .collect()
}

/// The reshape of a transposed [B, H, T, D] cache by `target` (ONNX Reshape, no `allowzero`)
/// is [B, T, H * D].
fn reshapes_to_3d(cache: &[usize], target: &[i64]) -> bool {
    let [b, h, t, d] = *cache else {
        return false;
    };
    let transposed = [b, t, h, d];
    let want = [b, t, h * d];
    let total = b * t * h * d;
    let mut known = 1usize;
    let mut infer = None;
    let mut out = [0usize; 3];
    for (i, &v) in target.iter().enumerate() {
        out[i] = match v {
            0 => transposed[i],
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            v if v > 0 => v as usize,
            _ => return false,
        };
        known *= out[i];
    }
    if let Some(i) = infer {
        if known == 0 || total % known != 0 {
            return false;
        }
        out[i] = total / known;
    }
    out == want
}

pub(super) struct AttentionOnViews {
    op: Attention,
    /// External input positions: query, key cache, value cache, mask (absent: none), and each
    /// view's target.
    q: usize,
    caches: [usize; 2],
    mask: Option<usize>,
    targets: [Vec<i64>; 2],
}

impl FastPath for AttentionOnViews {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (Some(q), Some(k), Some(v)) = (get(self.q), get(self.caches[0]), get(self.caches[1]))
        else {
            return Ok(None);
        };
        if q.shape().len() != 3
            || !reshapes_to_3d(k.shape(), &self.targets[0])
            || !reshapes_to_3d(v.shape(), &self.targets[1])
        {
            return Ok(None);
        }
        let mask = match self.mask.map(get) {
            None => None,
            Some(Some(m)) => Some(cx.to_gpu(m)?),
            Some(None) => return Ok(None),
        };
        let (q, k, v) = (cx.to_gpu(q)?, cx.to_gpu(k)?, cx.to_gpu(v)?);
        let outs = self
            .op
            .compute(cx, [q, k, v], mask, [None, None], None, true)?;
        Ok(Some(outs))
    }
}

/// The fused node and op for `p`; `None` (the nodes left as they are) when the Attention's
/// attributes do not build.
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let op = attention_op(&g.attrs(p.attention)).ok()?;
    let an = g.node(p.attention);
    let mut ext = vec![an.inputs[0].clone()];
    for view in &p.views {
        if !ext.contains(&view.cache) {
            ext.push(view.cache.clone());
        }
    }
    let mask = an.inputs.get(3).filter(|m| !m.is_empty()).cloned();
    if let Some(m) = &mask
        && !ext.contains(m)
    {
        ext.push(m.clone());
    }
    for view in &p.views {
        if !ext.contains(&view.shape_name) {
            ext.push(view.shape_name.clone());
        }
    }
    let pos = |name: &str| ext.iter().position(|e| e == name).expect("external input");
    let outs = vec![an.outputs[0].clone()];
    let fused = AttentionOnViews {
        op,
        q: pos(&an.inputs[0]),
        caches: [pos(&p.views[0].cache), pos(&p.views[1].cache)],
        mask: mask.as_deref().map(pos),
        targets: [p.views[0].shape.clone(), p.views[1].shape.clone()],
    };
    Some(fused_group(
        g,
        &p.nodes,
        ext,
        outs,
        ops,
        "Fused[2x(Transpose+Reshape)+Attention]".into(),
        fused,
    ))
}
