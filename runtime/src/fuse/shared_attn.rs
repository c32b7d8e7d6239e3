//! KV-shared attention: the layers of Gemma 4 that read another layer's KV cache (no
//! GroupQueryAttention node) are exported as about twenty nodes around the query:
//!
//! ```text
//! q  = Reshape(Cast(RMSNorm(Cast(Reshape(q_proj, [0, -1, D])))), [0, -1, H, D])   (norm optional)
//! qr = q * cos + Concat(-q[..., D/2:], q[..., :D/2]) * sin                          (rotate by halves)
//! Q  = Transpose(Reshape(qr, [0, 0, kvH, G, D]), [0, 2, 3, 1, 4])                   [B, kvH, G, S, D]
//! K  = Transpose(Unsqueeze(key, 2), [0, 1, 2, 4, 3])                               [B, kvH, 1, D, T]
//! P  = Softmax(MatMul(Q, K) + mask, -1)
//! y  = Reshape(Transpose(MatMul(P, Unsqueeze(value, 2)), [0, 3, 1, 2, 4]), [0, 0, H * D])
//! ```
//!
//! One flash-attention dispatch computes the same (`gqa.wgsl` with the KV-shared query reader:
//! the norm, the rotation and the additive mask inside the kernel, no scores buffer). Every shape
//! constant is checked against the run-time shapes; whenever something does not fit (shapes,
//! broadcasts, storage bindings) the original nodes run.

use super::rewrite::Find;
use super::{FastPath, Graphs, external_inputs, fused_group};
use crate::error::Result;
use crate::exec::{Ctx, Value};
use crate::model::{InitData, Node};
use crate::ops::Op;
use crate::ops::attention::{
    Bias, Flash, Layout, Query, flash_attention, flash_bindings, shared_query_bindings,
};
use crate::tensor::{DType, HostTensor};
use std::collections::HashSet;

/// A matched group.
pub(super) struct Pattern {
    /// Member nodes.
    pub nodes: Vec<usize>,
    /// The query before the head split: [B, S, H * D] with a norm, else [B, S, H, D].
    q_src: String,
    /// The norm: (scale, epsilon, reshape to rows of D, reshape back to heads).
    norm: Option<(String, f32, Vec<i64>, Vec<i64>)>,
    cos: String,
    sin: String,
    key: String,
    value: String,
    mask: String,
    /// Reshape of the rotated query to [B, S, kvH, G, D], and of the output to [B, S, H * D].
    q5: Vec<i64>,
    o3: Vec<i64>,
    /// Head size (from the rotation's slices).
    d: usize,
    /// The group's output.
    pub out: String,
}

impl Pattern {
    /// Storage buffers of its attention kernel (the parameter block aside); its rotary tables
    /// are the two outputs of the rotary-table kernel.
    pub fn bindings(&self) -> u32 {
        flash_bindings(shared_query_bindings(self.norm.is_some(), 2), false, true)
    }
}

/// The values of an inline INT64 initializer.
fn i64s(g: &Graphs<'_>, name: &str) -> Option<Vec<i64>> {
    let init = g.inits.get(name)?;
    match &init.data {
        InitData::Inline(b) if init.dtype == DType::I64 => {
            HostTensor::new(DType::I64, init.shape.clone(), b.clone())
                .ok()
                .map(|t| t.to_i64())
        }
        _ => None,
    }
}

impl Graphs<'_> {
    /// `Reshape(x, const)` with `allowzero` 0: (x, the constant).
    fn reshape_const(&self, n: usize) -> Option<(String, Vec<i64>)> {
        if !self.is(n, "", "Reshape")
            || !self.plain(n, 2)
            || self.attrs(n).i_or("allowzero", 0) != 0
        {
            return None;
        }
        let ins = &self.node(n).inputs;
        Some((ins[0].clone(), i64s(self, &ins[1])?))
    }
    /// `Transpose(x, perm)` with one input and output.
    pub(super) fn transpose(&self, n: usize, perm: &[i64]) -> bool {
        self.is(n, "", "Transpose")
            && self.plain(n, 1)
            && self.attrs(n).ints("perm").as_deref() == Some(perm)
    }
    /// `Unsqueeze(x, [2])` (axes as input from opset 13, attribute before): x.
    fn unsqueeze2(&self, n: usize) -> Option<String> {
        if !self.is(n, "", "Unsqueeze") || self.node(n).outputs.len() != 1 {
            return None;
        }
        let ins = &self.node(n).inputs;
        let axes = match ins.len() {
            1 => self.attrs(n).ints("axes")?,
            2 => i64s(self, &ins[1])?,
            _ => return None,
        };
        (axes == [2]).then(|| ins[0].clone())
    }
    /// `Slice(x, [start], [end], [axis])` on the last axis of a 4-D value (axis 3 or -1), step 1.
    pub(super) fn slice_last(&self, n: usize) -> Option<(String, i64, i64)> {
        if !self.is(n, "", "Slice") || self.node(n).outputs.len() != 1 {
            return None;
        }
        let ins = &self.node(n).inputs;
        if ins.len() < 4 || ins[..4].iter().any(String::is_empty) {
            return None;
        }
        if let Some(st) = ins.get(4).filter(|s| !s.is_empty())
            && i64s(self, st)? != [1]
        {
            return None;
        }
        let (s, e, a) = (
            i64s(self, &ins[1])?,
            i64s(self, &ins[2])?,
            i64s(self, &ins[3])?,
        );
        if s.len() != 1 || e.len() != 1 || !(a == [3] || a == [-1]) {
            return None;
        }
        Some((ins[0].clone(), s[0], e[0]))
    }
    /// The operand of binary `n` other than `v`.
    pub(super) fn other(&self, n: usize, v: &str) -> Option<String> {
        let ins = &self.node(n).inputs;
        if ins.len() != 2 || ins[0] == ins[1] {
            return None;
        }
        if ins[0] == v {
            Some(ins[1].clone())
        } else if ins[1] == v {
            Some(ins[0].clone())
        } else {
            None
        }
    }

    /// The group around Softmax node `sm`.
    fn shared_attention(&self, sm: usize) -> Option<Pattern> {
        let mut nodes = vec![sm];
        if !self.is(sm, "", "Softmax") || !self.plain(sm, 1) {
            return None;
        }
        let a = self.attrs(sm);
        let axis_ok = match a.i("axis") {
            Some(ax) => ax == -1 || ax == 4,
            None => a.opset >= 13,
        };
        if !axis_ok {
            return None;
        }
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
        let qt = self
            .producer
            .get(self.node(qk).inputs[0].as_str())
            .copied()?;
        let kt = self
            .producer
            .get(self.node(qk).inputs[1].as_str())
            .copied()?;
        if !self.transpose(qt, &[0, 2, 3, 1, 4]) || !self.transpose(kt, &[0, 1, 2, 4, 3]) {
            return None;
        }
        nodes.extend([qt, kt]);
        let ku = self
            .producer
            .get(self.node(kt).inputs[0].as_str())
            .copied()?;
        let key = self.unsqueeze2(ku)?;
        nodes.push(ku);
        let q5n = self
            .producer
            .get(self.node(qt).inputs[0].as_str())
            .copied()?;
        let (qr, q5) = self.reshape_const(q5n)?;
        nodes.push(q5n);
        // Probabilities · V, back to [B, S, H * D].
        let pv = self.single(&self.node(sm).outputs[0])?;
        if !self.is(pv, "", "MatMul")
            || !self.plain(pv, 2)
            || self.node(pv).inputs[0] != self.node(sm).outputs[0]
        {
            return None;
        }
        nodes.push(pv);
        let vu = self
            .producer
            .get(self.node(pv).inputs[1].as_str())
            .copied()?;
        let value = self.unsqueeze2(vu)?;
        nodes.push(vu);
        let ot = self.single(&self.node(pv).outputs[0])?;
        if !self.transpose(ot, &[0, 3, 1, 2, 4]) {
            return None;
        }
        nodes.push(ot);
        let o3n = self.single(&self.node(ot).outputs[0])?;
        let (_, o3) = self.reshape_const(o3n)?;
        nodes.push(o3n);
        // The rotation: qr = q * cos + Concat(Neg(q[h:]), q[:h]) * sin.
        let radd = self.producer_of(&qr, "", "Add")?;
        if !self.plain(radd, 2) {
            return None;
        }
        let ri = &self.node(radd).inputs;
        let (m0, m1) = (
            self.producer_of(&ri[0], "", "Mul")?,
            self.producer_of(&ri[1], "", "Mul")?,
        );
        if m0 == m1 || !self.plain(m0, 2) || !self.plain(m1, 2) {
            return None;
        }
        let rotated = |m: usize| -> Option<(usize, String)> {
            let mi = &self.node(m).inputs;
            [(0, 1), (1, 0)].into_iter().find_map(|(x, y)| {
                self.producer_of(&mi[x], "", "Concat")
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
        let s2 = self
            .producer
            .get(self.node(neg).inputs[0].as_str())
            .copied()?;
        let s1 = self.producer.get(ci[1].as_str()).copied()?;
        let (q, lo, hr) = self.slice_last(s1)?;
        let (q2, hr2, d) = self.slice_last(s2)?;
        if q != q2 || lo != 0 || hr != hr2 || hr <= 0 || d != 2 * hr {
            return None;
        }
        let cos = self.other(mcos, &q)?;
        nodes.extend([radd, m0, m1, cat, neg, s1, s2]);
        // The norm: q = Reshape(unit(Reshape(q_src, [.., D])), [.., H, D]).
        let mut q_src = q.clone();
        let mut norm = None;
        if let Some(r2) = self.producer.get(q.as_str()).copied()
            && let Some((normed, sh2)) = self.reshape_const(r2)
            && let Some(u) = self
                .unit_producing(&normed, d as usize)
                .filter(|u| self.init_is(&u.gamma, DType::F32, d as usize))
            && self.only_for(&normed, r2)
            && let Some(r1) = self.producer.get(u.input.as_str()).copied()
            && let Some((src, sh1)) = self.reshape_const(r1)
            && self.only_for(&u.input, u.nodes[0])
        {
            nodes.extend([r2, r1]);
            nodes.extend(&u.nodes);
            q_src = src;
            norm = Some((u.gamma, u.eps, sh1, sh2));
        }
        // Every intermediate is read only inside the group.
        nodes.sort_unstable();
        nodes.dedup();
        let set: HashSet<usize> = nodes.iter().copied().collect();
        let out = self.node(o3n).outputs[0].clone();
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
        // The inputs come from outside.
        let produced: HashSet<&str> = nodes
            .iter()
            .flat_map(|&n| self.node(n).outputs.iter().map(String::as_str))
            .collect();
        for v in [&q_src, &cos, &sin, &key, &value, &mask] {
            if produced.contains(v.as_str()) {
                return None;
            }
        }
        Some(Pattern {
            nodes,
            q_src,
            norm,
            cos,
            sin,
            key,
            value,
            mask,
            q5,
            o3,
            d: d as usize,
            out,
        })
    }
}

/// Every KV-shared attention group of the graph whose nodes are not in `cx.used` and whose
/// kernel fits the adapter's storage buffers.
pub(super) fn find(cx: &mut Find<'_>) -> Vec<Pattern> {
    let (g, used) = (cx.g, &cx.used);
    let mut found: Vec<Pattern> = Vec::new();
    let mut taken: HashSet<usize> = HashSet::new();
    for i in 0..g.graph.nodes.len() {
        if !g.is(i, "", "Softmax") || used.contains(&i) {
            continue;
        }
        if let Some(p) = g.shared_attention(i)
            && p.nodes
                .iter()
                .all(|n| !used.contains(n) && !taken.contains(n))
        {
            let set: HashSet<usize> = p.nodes.iter().copied().collect();
            if super::reenters(g, &set) {
                continue;
            }
            taken.extend(&set);
            found.push(p);
        }
    }
    // Each only when its attention kernel fits the adapter's storage buffers.
    found
        .into_iter()
        .filter(|p| p.bindings() < cx.limits.storage_buffers)
        .collect()
}

/// `shape` reshaped by `spec` (ONNX Reshape, allowzero 0), if valid.
fn reshaped(shape: &[usize], spec: &[i64]) -> Option<Vec<usize>> {
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            0 => out.push(*shape.get(i)?),
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            s if s > 0 => out.push(s as usize),
            _ => return None,
        }
    }
    let known: usize = out.iter().product();
    if let Some(i) = infer {
        if known == 0 || !total.is_multiple_of(known) {
            return None;
        }
        out[i] = total / known;
    }
    (out.iter().product::<usize>() == total).then_some(out)
}

/// Row-major strides of `shape` right-aligned to `rank` dimensions, 0 where broadcast; `None`
/// unless every dimension is 1 or equal to `full`'s.
pub(super) fn broadcast_strides(shape: &[usize], full: &[usize]) -> Option<Vec<usize>> {
    let rank = full.len();
    if shape.len() > rank {
        return None;
    }
    let mut aligned = vec![1; rank - shape.len()];
    aligned.extend_from_slice(shape);
    let mut strides = vec![0; rank];
    let mut st = 1;
    for i in (0..rank).rev() {
        if aligned[i] == full[i] && full[i] != 1 {
            strides[i] = st;
        } else if aligned[i] != 1 {
            return None;
        }
        st *= aligned[i];
    }
    Some(strides)
}

pub(super) struct SharedAttn {
    /// Slots in the fused node's inputs: q_src, gamma, cos, sin, key, value, mask.
    slots: [usize; 7],
    norm: Option<(f32, Vec<i64>, Vec<i64>)>,
    q5: Vec<i64>,
    o3: Vec<i64>,
    d: usize,
}

impl FastPath for SharedAttn {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let [qs, gs, cs, ss, ks, vs, ms] = self.slots;
        let (Some(qv), Some(cv), Some(sv), Some(kv), Some(vv), Some(mv)) =
            (get(qs), get(cs), get(ss), get(ks), get(vs), get(ms))
        else {
            return Ok(None);
        };
        let d = self.d;
        let ksh = kv.shape();
        if ksh.len() != 4 || vv.shape() != ksh || ksh[3] != d || !d.is_multiple_of(2) {
            return Ok(None);
        }
        let (kb, kvh, t) = (ksh[0], ksh[1], ksh[2]);
        let float = |v: &Value| matches!(v.dtype(), DType::F32 | DType::F16);
        let dt = qv.dtype();
        if !float(qv)
            || [kv, vv, cv, sv, mv].iter().any(|v| v.dtype() != dt)
            || kv.dtype() != vv.dtype()
        {
            return Ok(None);
        }
        // The query as [B, S, H, D].
        let qsh = qv.shape().to_vec();
        let q4 = match &self.norm {
            Some((_, sh1, sh2)) => {
                let Some(rows) = reshaped(&qsh, sh1) else {
                    return Ok(None);
                };
                if rows.last() != Some(&d) {
                    return Ok(None);
                }
                match reshaped(&rows, sh2) {
                    Some(q4) if q4.len() == 4 && qsh.len() == 3 => q4,
                    _ => return Ok(None),
                }
            }
            None => qsh.clone(),
        };
        if q4.len() != 4 || q4[3] != d || q4[0] != kb || (self.norm.is_some() && q4[1] != qsh[1]) {
            return Ok(None);
        }
        let (b, s, h) = (q4[0], q4[1], q4[2]);
        if kvh == 0 || h % kvh != 0 {
            return Ok(None);
        }
        let g = h / kvh;
        if reshaped(&q4, &self.q5).as_deref() != Some(&[b, s, kvh, g, d][..])
            || reshaped(&[b, s, kvh, g, d], &self.o3).as_deref() != Some(&[b, s, h * d][..])
        {
            return Ok(None);
        }
        // cos / sin broadcast against [B, S, H, D] as [B|1, S|1, 1, D].
        if cv.shape() != sv.shape() {
            return Ok(None);
        }
        let Some(cst) = broadcast_strides(cv.shape(), &[b, s, h, d]) else {
            return Ok(None);
        };
        if cst[2] != 0 || cst[3] != 1 {
            return Ok(None);
        }
        // The mask broadcast against the scores [B, kvH, G, S, T], contiguous along T.
        let Some(mst) = broadcast_strides(mv.shape(), &[b, kvh, g, s, t]) else {
            return Ok(None);
        };
        if t > 1 && mst[4] != 1 {
            return Ok(None);
        }
        let q = cx.to_gpu(qv)?;
        let gamma = match (&self.norm, get(gs)) {
            (Some(_), Some(gv)) if gv.dtype() == DType::F32 && gv.numel() == d => {
                Some(cx.to_gpu(gv)?)
            }
            (Some(_), _) => return Ok(None),
            (None, _) => None,
        };
        let (cos, sin, key, value, mask) = (
            cx.to_gpu(cv)?,
            cx.to_gpu(sv)?,
            cx.to_gpu(kv)?,
            cx.to_gpu(vv)?,
            cx.to_gpu(mv)?,
        );
        if [&q, &cos, &sin, &key, &value, &mask]
            .iter()
            .any(|t| t.split.is_some())
        {
            return Ok(None);
        }
        let flash = Flash {
            q: Query::Shared {
                x: &q,
                l: Layout {
                    b,
                    s,
                    h,
                    d,
                    strides: [s * h * d, h * d, d],
                    off: 0,
                },
                norm: gamma.as_ref().zip(self.norm.as_ref().map(|n| n.0)),
                cos: &cos,
                sin: &sin,
                cs: [0, cst[0], cst[1]],
            },
            k: &key,
            v: &value,
            seqlens: None,
            dims: [b, s, h, kvh, d, t],
            scale: 1.0,
            softcap: 0.0,
            window: -1,
            bias: Some(Bias {
                t: &mask,
                off: 0,
                sb: mst[0],
                skv: mst[1],
                sg: mst[2],
                ss: mst[3],
            }),
            out_dtype: dt,
        };
        if flash.bindings() > cx.gpu.max_bindings() {
            return Ok(None);
        }
        let y = flash_attention(cx, &flash)?;
        Ok(Some(vec![Value::Gpu(y)]))
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
    let gamma = p.norm.as_ref().map_or(usize::MAX, |n| pos(&n.0));
    let slots = [
        pos(&p.q_src),
        gamma,
        pos(&p.cos),
        pos(&p.sin),
        pos(&p.key),
        pos(&p.value),
        pos(&p.mask),
    ];
    let outs = vec![p.out.clone()];
    let kind = if p.norm.is_some() {
        "Fused[Norm+Rotary+SharedKVAttention]"
    } else {
        "Fused[Rotary+SharedKVAttention]"
    };
    let op = SharedAttn {
        slots,
        norm: p.norm.map(|(_, eps, a, b)| (eps, a, b)),
        q5: p.q5,
        o3: p.o3,
        d: p.d,
    };
    Some(fused_group(g, members, ext, outs, ops, kind.into(), op))
}

#[cfg(test)]
mod tests {
    use super::{broadcast_strides, reshaped};

    #[test]
    fn reshape_specs_and_broadcasts() {
        assert_eq!(reshaped(&[1, 3, 128], &[0, -1, 32]), Some(vec![1, 12, 32]));
        assert_eq!(
            reshaped(&[1, 12, 32], &[0, -1, 4, 32]),
            Some(vec![1, 3, 4, 32])
        );
        assert_eq!(
            reshaped(&[1, 3, 4, 32], &[0, 0, 1, 4, 32]),
            Some(vec![1, 3, 1, 4, 32])
        );
        assert_eq!(reshaped(&[1, 3, 4, 32], &[0, 0, 2, 4, 32]), None);
        assert_eq!(reshaped(&[2, 3], &[-1, -1]), None);
        assert_eq!(
            broadcast_strides(&[2, 1, 1, 3, 7], &[2, 1, 4, 3, 7]),
            Some(vec![21, 0, 0, 7, 1])
        );
        assert_eq!(
            broadcast_strides(&[3, 7], &[2, 1, 4, 3, 7]),
            Some(vec![0, 0, 0, 7, 1])
        );
        assert_eq!(broadcast_strides(&[2, 3, 7], &[2, 1, 4, 3, 7]), None);
        assert_eq!(
            broadcast_strides(&[1, 3, 1, 8], &[1, 3, 4, 8]),
            Some(vec![0, 8, 0, 1])
        );
    }
}
