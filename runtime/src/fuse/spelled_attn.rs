//! Attention spelled out in elementary ops, as the mobius exports' vision encoder writes it for
//! each layer (Gemma 4's bidirectional image attention, scale 1: the query and key are normed):
//!
//! ```text
//! Q = Transpose(q, [0, 2, 1, 3])       [B, H, S, D]   (from q [B, S, H, D]; or Q given as is)
//! P = Softmax(MatMul(Q, Transpose(k, [0, 1, 3, 2])) + mask, -1)     k [B, H, T, D]
//! y = Transpose(MatMul(P, v), [0, 2, 1, 3])                         v [B, H, T, D], y [B, S, H, D]
//! ```
//!
//! One flash attention ([`flash_attention`]: `gqa.wgsl`, online softmax over key tiles, or on
//! software adapters its register-blocked passes) computes the same with `kv_heads = H`, scale
//! 1, no softcap, not causal, and the mask as an additive bias read through its broadcast
//! strides: the S × T scores are not written as a graph value (nor Q transposed). Only this
//! exact form is matched (no scale between the MatMul and the Add, the Softmax over the last
//! axis); at run time anything else — other ranks or shapes, a mask that does not broadcast to
//! [B, H, S, T] contiguously along T, mixed or non-float types, an odd head size, buffers split
//! across bindings — runs the original nodes.

use super::rewrite::Find;
use super::shared_attn::broadcast_strides;
use super::{FastPath, Graphs, external_inputs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::model::Node;
use crate::ops::Op;
use crate::ops::attention::{Bias, Flash, Layout, Query, flash_attention, flash_bindings};
use crate::tensor::DType;
use std::collections::HashSet;

/// A matched group.
pub(super) struct Pattern {
    /// Member nodes, in graph order.
    pub nodes: Vec<usize>,
    /// The query: [B, S, H, D] when its Transpose is in the group, else [B, H, S, D].
    q: String,
    /// Whether `q` is read before its Transpose (as [B, S, H, D]).
    q_seq_major: bool,
    key: String,
    value: String,
    mask: String,
    /// The group's output ([B, S, H, D]).
    out: String,
}

impl Graphs<'_> {
    /// The group around Softmax node `sm`.
    fn spelled_attention(&self, sm: usize) -> Option<Pattern> {
        if !self.is(sm, "", "Softmax") || !self.plain(sm, 1) {
            return None;
        }
        let a = self.attrs(sm);
        // Before opset 13 Softmax flattens from `axis` on: the last axis only when it is named.
        let axis_ok = match a.i("axis") {
            Some(ax) => ax == -1 || ax == 3,
            None => a.opset >= 13,
        };
        if !axis_ok {
            return None;
        }
        let mut nodes = vec![sm];
        // Scores + mask.
        let add = self.producer_of(&self.node(sm).inputs[0], "", "Add")?;
        if !self.plain(add, 2) {
            return None;
        }
        nodes.push(add);
        let ai = &self.node(add).inputs;
        let (qk, mask) = [(0, 1), (1, 0)].into_iter().find_map(|(x, y)| {
            self.producer_of(&ai[x], "", "MatMul")
                .filter(|_| ai[x] != ai[y])
                .map(|m| (m, ai[y].clone()))
        })?;
        if !self.plain(qk, 2) {
            return None;
        }
        nodes.push(qk);
        let qki = &self.node(qk).inputs;
        // Kᵀ = Transpose(k, [0, 1, 3, 2]).
        let kt = self.producer.get(qki[1].as_str()).copied()?;
        if !self.transpose(kt, &[0, 1, 3, 2]) {
            return None;
        }
        nodes.push(kt);
        let key = self.node(kt).inputs[0].clone();
        // Q, read before its head-major Transpose when only this MatMul reads that.
        let (q, q_seq_major) = match self.producer.get(qki[0].as_str()).copied() {
            Some(qt) if self.transpose(qt, &[0, 2, 1, 3]) && self.only_for(&qki[0], qk) => {
                nodes.push(qt);
                (self.node(qt).inputs[0].clone(), true)
            }
            _ => (qki[0].clone(), false),
        };
        // Probabilities · V, back to [B, S, H, D].
        let pv = self.single(&self.node(sm).outputs[0])?;
        if !self.is(pv, "", "MatMul")
            || !self.plain(pv, 2)
            || self.node(pv).inputs[0] != self.node(sm).outputs[0]
        {
            return None;
        }
        nodes.push(pv);
        let value = self.node(pv).inputs[1].clone();
        let ot = self.single(&self.node(pv).outputs[0])?;
        if !self.transpose(ot, &[0, 2, 1, 3]) {
            return None;
        }
        nodes.push(ot);
        let out = self.node(ot).outputs[0].clone();
        // Every intermediate is read only inside the group; the inputs come from outside.
        nodes.sort_unstable();
        let set: HashSet<usize> = nodes.iter().copied().collect();
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
        if [&q, &key, &value, &mask]
            .iter()
            .any(|v| produced.contains(v.as_str()))
        {
            return None;
        }
        Some(Pattern {
            nodes,
            q,
            q_seq_major,
            key,
            value,
            mask,
            out,
        })
    }
}

/// Storage buffers of the group's attention kernel: the query, K, V, the bias and y.
fn bindings() -> u32 {
    flash_bindings(1, false, true)
}

/// Every spelled-out attention of the graph whose nodes are not in `cx.used` (none when the
/// kernel would not fit the adapter's storage buffers).
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    if bindings() >= cx.limits.storage_buffers {
        return Vec::new();
    }
    let g = cx.g;
    let mut found = Vec::new();
    for i in 0..g.graph.nodes.len() {
        if !g.is(i, "", "Softmax") || cx.used.contains(&i) {
            continue;
        }
        if let Some(p) = g.spelled_attention(i)
            && cx.free(&p.nodes)
        {
            let set: HashSet<usize> = p.nodes.iter().copied().collect();
            if super::reenters(g, &set) {
                continue;
            }
            cx.used.extend(&set);
            found.push(p);
        }
    }
    found
}

pub(super) struct SpelledAttn {
    /// Slots in the fused node's inputs: q, key, value, mask.
    slots: [usize; 4],
    q_seq_major: bool,
}

impl FastPath for SpelledAttn {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let [qs, ks, vs, ms] = self.slots;
        let (Some(qv), Some(kv), Some(vv), Some(mv)) = (get(qs), get(ks), get(vs), get(ms)) else {
            return Ok(None);
        };
        let dt = qv.dtype();
        if !matches!(dt, DType::F32 | DType::F16) || [kv, vv, mv].iter().any(|v| v.dtype() != dt) {
            return Ok(None);
        }
        // K [B, H, T, D], V the same shape (P·V's head size is the key's).
        let ksh = kv.shape();
        if ksh.len() != 4 || vv.shape() != ksh {
            return Ok(None);
        }
        let (b, h, t, d) = (ksh[0], ksh[1], ksh[2], ksh[3]);
        let qsh = qv.shape();
        if qsh.len() != 4 || d == 0 || t == 0 || !d.is_multiple_of(2) {
            return Ok(None);
        }
        // The query as [B, S, H, D] and its view's batch / sequence / head strides.
        let (s, strides) = if self.q_seq_major {
            if qsh[0] != b || qsh[2] != h || qsh[3] != d {
                return Ok(None);
            }
            let s = qsh[1];
            (s, [s * h * d, h * d, d])
        } else {
            if qsh[0] != b || qsh[1] != h || qsh[3] != d {
                return Ok(None);
            }
            let s = qsh[2];
            (s, [h * s * d, d, s * d])
        };
        if s == 0 {
            return Ok(None);
        }
        // The mask broadcast against the scores [B, H, S, T], contiguous along T.
        let Some(mst) = broadcast_strides(mv.shape(), &[b, h, s, t]) else {
            return Ok(None);
        };
        if t > 1 && mst[3] != 1 {
            return Ok(None);
        }
        let (q, key, value, mask) = (
            cx.to_gpu(qv)?,
            cx.to_gpu(kv)?,
            cx.to_gpu(vv)?,
            cx.to_gpu(mv)?,
        );
        if [&q, &key, &value, &mask].iter().any(|t| t.split.is_some()) {
            return Ok(None);
        }
        let flash = Flash {
            q: Query::Gqa {
                x: &q,
                l: Layout {
                    b,
                    s,
                    h,
                    d,
                    strides,
                    off: 0,
                },
                rot: None,
                interleaved: false,
            },
            k: &key,
            v: &value,
            seqlens: None,
            dims: [b, s, h, h, d, t],
            scale: 1.0,
            softcap: 0.0,
            window: -1,
            // kv_heads = H: each head is its own group of one (its stride is the kv head's).
            bias: Some(Bias {
                t: &mask,
                off: 0,
                sb: mst[0],
                skv: mst[1],
                sg: 0,
                ss: mst[2],
            }),
            out_dtype: dt,
        };
        if flash.bindings() > cx.gpu.max_bindings() {
            return Ok(None);
        }
        let y = flash_attention(cx, &flash)?;
        Ok(Some(vec![Value::Gpu(y.reshaped(vec![b, s, h, d]))]))
    }
}

/// The fused node and op for `p` (its members' ops are taken into the fallback).
pub(super) fn build(
    g: &Graphs<'_>,
    p: Pattern,
    ops: &mut [Option<Box<dyn Op>>],
) -> Option<(Node, Box<dyn Op>, String)> {
    let members = &p.nodes;
    let ext = external_inputs(g, members);
    let pos = |name: &str| ext.iter().position(|e| e == name).unwrap_or(usize::MAX);
    let slots = [pos(&p.q), pos(&p.key), pos(&p.value), pos(&p.mask)];
    let outs = vec![p.out.clone()];
    let kind = if p.q_seq_major {
        "Fused[3xTranspose+2xMatMul+Add+Softmax=Attention]"
    } else {
        "Fused[2xTranspose+2xMatMul+Add+Softmax=Attention]"
    };
    let op = SpelledAttn {
        slots,
        q_seq_major: p.q_seq_major,
    };
    Some(fused_group(g, members, ext, outs, ops, kind.into(), op))
}
