//! The node graph as the patterns see it: producers, consumers, graph outputs and initializers
//! by name, and the matchers shared by the patterns.

use super::spec::{Epi, Mat, Residual, Tail, Unit};
use crate::model::{Graph, Initializer, Node};
use crate::ops::{Attrs, MS};
use crate::tensor::DType;
use std::collections::{HashMap, HashSet};

pub(super) struct Graphs<'a> {
    pub(super) graph: &'a Graph,
    pub(super) producer: HashMap<&'a str, usize>,
    pub(super) consumers: HashMap<&'a str, Vec<usize>>,
    pub(super) outputs: HashSet<&'a str>,
    pub(super) inits: HashMap<&'a str, &'a Initializer>,
}

impl<'a> Graphs<'a> {
    pub(super) fn new(graph: &'a Graph) -> Self {
        let mut producer = HashMap::new();
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            for o in &n.outputs {
                producer.insert(o.as_str(), i);
            }
            for x in n.inputs.iter().filter(|s| !s.is_empty()) {
                let c = consumers.entry(x.as_str()).or_default();
                if !c.contains(&i) {
                    c.push(i);
                }
            }
        }
        Self {
            graph,
            producer,
            consumers,
            outputs: graph.outputs.iter().map(|o| o.name.as_str()).collect(),
            inits: graph
                .initializers
                .iter()
                .map(|i| (i.name.as_str(), i))
                .collect(),
        }
    }
    pub(super) fn node(&self, i: usize) -> &'a Node {
        &self.graph.nodes[i]
    }
    pub(super) fn attrs(&self, i: usize) -> Attrs<'a> {
        let node = self.node(i);
        Attrs {
            node,
            opset: self.graph.opset(&node.domain),
        }
    }
    pub(super) fn is(&self, i: usize, domain: &str, op: &str) -> bool {
        let n = self.node(i);
        n.op_type == op && (n.domain == domain || (domain.is_empty() && n.domain == "ai.onnx"))
    }
    /// An RMS norm node: `SimplifiedLayerNormalization` (the contrib-era export, registered in
    /// ai.onnx by ONNX Runtime) or ai.onnx 23 `RMSNormalization`; both compute
    /// `x / sqrt(mean(x²) + eps) * scale` over the axes from `axis` on, so they fuse alike.
    pub(super) fn is_rms(&self, i: usize) -> bool {
        self.is(i, "", "SimplifiedLayerNormalization") || self.is(i, "", "RMSNormalization")
    }
    pub(super) fn users(&self, v: &str) -> &[usize] {
        self.consumers.get(v).map_or(&[], Vec::as_slice)
    }
    /// `v` is read only by `node` (and is not a graph output).
    pub(super) fn only_for(&self, v: &str, node: usize) -> bool {
        !self.outputs.contains(v) && self.users(v) == [node]
    }
    /// The one node reading `v` (which is not a graph output).
    pub(super) fn single(&self, v: &str) -> Option<usize> {
        (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
    }
    pub(super) fn producer_of(&self, v: &str, domain: &str, op: &str) -> Option<usize> {
        self.producer
            .get(v)
            .copied()
            .filter(|&p| self.is(p, domain, op))
    }
    /// An initializer of `dtype` with `numel` elements.
    pub(super) fn init_is(&self, name: &str, dtype: DType, numel: usize) -> bool {
        self.inits
            .get(name)
            .is_some_and(|i| i.dtype == dtype && crate::tensor::numel(&i.shape) == numel)
    }
    /// A node with exactly one (non-empty) output, and inputs `n_in` (all present).
    pub(super) fn plain(&self, i: usize, n_in: usize) -> bool {
        let n = self.node(i);
        n.outputs.len() == 1 && n.inputs.len() == n_in && n.inputs.iter().all(|s| !s.is_empty())
    }
    /// An RMS norm over the last axis with f32 statistics and a `[k]` scale: its name, epsilon
    /// and whether the scale is f16 (otherwise f32). A norm's result has its scale's type
    /// (ONNX's `V`), so an f16 scale means f16 results.
    pub(super) fn rms_norm(&self, i: usize, k: usize) -> Option<(String, f32, bool)> {
        if !self.is_rms(i) || !self.plain(i, 2) {
            return None;
        }
        let a = self.attrs(i);
        if a.i_or("axis", -1) != -1 || a.i_or("stash_type", 1) != 1 {
            return None;
        }
        let g = &self.node(i).inputs[1];
        let g16 = self.init_is(g, DType::F16, k);
        (g16 || self.init_is(g, DType::F32, k)).then(|| (g.clone(), a.f_or("epsilon", 1e-5), g16))
    }
    /// A Cast node to `to` (ONNX elem type) with one input and output.
    pub(super) fn cast_to(&self, i: usize, to: i64) -> bool {
        self.is(i, "", "Cast") && self.plain(i, 1) && self.attrs(i).i("to") == Some(to)
    }
    /// The RMS-norm unit around norm node `p` over rows of `k`: the norm alone (f32 activations
    /// with an f32 scale; f16 ones with an f16 scale, as mobius's float16 exports write it), or
    /// `Cast(float) -> norm -> Cast(float16)` with an f32 scale (f16 activations, the
    /// onnx-community q4f16 exports).
    pub(super) fn unit(&self, p: usize, k: usize) -> Option<Unit> {
        let (gamma, eps, g16) = self.rms_norm(p, k)?;
        let n = self.node(p);
        if !g16
            && let Some(c1) = self.producer.get(n.inputs[0].as_str()).copied()
            && self.cast_to(c1, 1)
            && self.only_for(&n.inputs[0], p)
            && self.users(&n.outputs[0]).len() == 1
            && !self.outputs.contains(n.outputs[0].as_str())
            && self.cast_to(self.users(&n.outputs[0])[0], 10)
        {
            let c2 = self.users(&n.outputs[0])[0];
            return Some(Unit {
                nodes: vec![c1, p, c2],
                input: self.node(c1).inputs[0].clone(),
                output: self.node(c2).outputs[0].clone(),
                gamma,
                eps,
                f16: true,
            });
        }
        Some(Unit {
            nodes: vec![p],
            input: n.inputs[0].clone(),
            output: n.outputs[0].clone(),
            gamma,
            eps,
            f16: g16,
        })
    }
    /// The norm unit whose output is `v`.
    pub(super) fn unit_producing(&self, v: &str, k: usize) -> Option<Unit> {
        let p = self.producer.get(v).copied()?;
        let p = if self.cast_to(p, 10) {
            self.producer
                .get(self.node(p).inputs[0].as_str())
                .copied()
                .filter(|&n| self.is_rms(n))?
        } else {
            p
        };
        if !self.is_rms(p) {
            return None;
        }
        self.unit(p, k).filter(|u| u.output == v)
    }
    /// A float initializer with one element (f32 or f16).
    pub(super) fn scalar_init(&self, name: &str) -> bool {
        self.init_is(name, DType::F32, 1) || self.init_is(name, DType::F16, 1)
    }
    pub(super) fn gelu_tanh(&self, i: usize) -> bool {
        self.is(i, "", "Gelu")
            && self.plain(i, 1)
            && self.attrs(i).s("approximate").as_deref() == Some("tanh")
    }
    pub(super) fn matmul(&self, i: usize, x: &str) -> Option<(usize, Mat)> {
        if self.is(i, "", "MatMul") {
            return self.float_matmul(i, x);
        }
        if !self.is(i, MS, "MatMulNBits") || self.node(i).outputs.len() != 1 {
            return None;
        }
        let n = self.node(i);
        let a = self.attrs(i);
        let (k, nn, bits, block) = (a.i("K")?, a.i("N")?, a.i_or("bits", 4), a.i("block_size")?);
        let extra = n.inputs.iter().skip(4).any(|s| !s.is_empty());
        if bits != 4
            || !(16..=256).contains(&block)
            || !(block as u64).is_power_of_two()
            || k <= 0
            || nn <= 0
            || extra
            || n.inputs.len() < 3
            || n.inputs.first().map(String::as_str) != Some(x)
            || n.inputs[1..3].iter().any(String::is_empty)
        {
            return None;
        }
        let (k, nn, block) = (k as usize, nn as usize, block as usize);
        let nb = k.div_ceil(block);
        if !self.init_is(&n.inputs[1], DType::U8, nn * nb * block / 2) {
            return None;
        }
        let sc = self.inits.get(n.inputs[2].as_str())?;
        if !matches!(sc.dtype, DType::F32 | DType::F16)
            || crate::tensor::numel(&sc.shape) != nn * nb
        {
            return None;
        }
        let zp = n.inputs.get(3).filter(|s| !s.is_empty()).cloned();
        if let Some(z) = &zp
            && !self.init_is(z, DType::U8, nn * nb.div_ceil(2))
        {
            return None;
        }
        Some((
            k,
            Mat {
                node: i,
                qw: n.inputs[1].clone(),
                sc: n.inputs[2].clone(),
                zp,
                n: nn,
                block,
                out: n.outputs[0].clone(),
                float: false,
            },
        ))
    }

    /// `MatMul(x, W)` with `W` a float initializer `[K, N]`, f32 or f16 (a float projection:
    /// mobius keeps the per-layer input gate and projection float in its int4 exports, f16 in
    /// its int4f16 ones, and every weight in fp32).
    pub(super) fn float_matmul(&self, i: usize, x: &str) -> Option<(usize, Mat)> {
        let n = self.node(i);
        if !self.plain(i, 2) || n.inputs[0] != x || n.inputs[1] == x {
            return None;
        }
        let w = self.inits.get(n.inputs[1].as_str())?;
        if !matches!(w.dtype, DType::F32 | DType::F16)
            || w.shape.len() != 2
            || w.shape[0] == 0
            || w.shape[1] == 0
        {
            return None;
        }
        Some((
            w.shape[0],
            Mat {
                node: i,
                qw: n.inputs[1].clone(),
                sc: String::new(),
                zp: None,
                n: w.shape[1],
                block: 8,
                out: n.outputs[0].clone(),
                float: true,
            },
        ))
    }

    /// The RMS norm reading `v` (directly or through one Reshape by a constant shape), when it is
    /// the only reader of each value on the way.
    pub(super) fn norm_after(&self, v: &str) -> Option<Unit> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let mut n = single(v)?;
        if self.is(n, "", "Reshape") {
            let ins = &self.node(n).inputs;
            if !self.plain(n, 2)
                || !self
                    .inits
                    .get(ins[1].as_str())
                    .is_some_and(|i| i.dtype == DType::I64)
            {
                return None;
            }
            n = single(&self.node(n).outputs[0])?;
        }
        let unit_input = self.node(n).inputs.first()?.clone();
        if self.cast_to(n, 1) {
            n = single(&self.node(n).outputs[0])?;
        }
        if !self.is_rms(n) {
            return None;
        }
        let l = self
            .inits
            .get(self.node(n).inputs.get(1)?.as_str())
            .filter(|i| i.shape.len() == 1)?
            .shape[0];
        self.unit(n, l).filter(|u| u.input == unit_input)
    }

    /// `x = res + RMSNorm(o)` or `x = (res + RMSNorm(o)) * scalar`, the norm read only here.
    pub(super) fn residual(&self, x: &str, k: usize) -> Option<Residual> {
        let mut nodes = Vec::new();
        let mut scalar = None;
        let mut sum = x.to_string();
        if let Some(m) = self.producer_of(x, "", "Mul")
            && self.plain(m, 2)
        {
            let ins = &self.node(m).inputs;
            let (a, s) = if self.scalar_init(&ins[1]) {
                (&ins[0], &ins[1])
            } else if self.scalar_init(&ins[0]) {
                (&ins[1], &ins[0])
            } else {
                return None;
            };
            if !self.only_for(a, m) {
                return None;
            }
            nodes.push(m);
            scalar = Some(s.clone());
            sum = a.clone();
        }
        let add = self.producer_of(&sum, "", "Add")?;
        if !self.plain(add, 2) {
            return None;
        }
        let ins = &self.node(add).inputs;
        for (ni, ri) in [(1, 0), (0, 1)] {
            let normed = &ins[ni];
            let Some(u) = self.unit_producing(normed, k) else {
                continue;
            };
            if ins[0] == ins[1] || !self.only_for(normed, add) {
                continue;
            }
            nodes.push(add);
            nodes.extend(&u.nodes);
            return Some(Residual {
                nodes,
                o: u.input,
                g1: u.gamma,
                eps1: u.eps,
                f16: u.f16,
                skip: false,
                res: ins[ri].clone(),
                scalar,
            });
        }
        None
    }

    /// `v = SkipSimplifiedLayerNormalization(res, RMSNorm(o), gamma)[0]` (no bias, its mean and
    /// inverse-deviation outputs unread): the norm unit (the skip node, its input row the sum
    /// output `x`) and the residual `x = res + RMSNorm(o)` of a prologue, as ONNX Runtime
    /// GenAI's exporters (mobius) write the post-norm + residual add + pre-norm step that our
    /// own graphs spell `Add` + `SimplifiedLayerNormalization`. f32 (scales and inner norm
    /// f32), or f16 (both scales f16, the inner norm without Casts: mobius's float16 exports);
    /// an f16 skip norm normalises the sum before it is rounded (`Residual::skip`).
    pub(super) fn skip_norm(&self, v: &str, k: usize) -> Option<(Unit, Residual)> {
        let s = self.producer.get(v).copied()?;
        let n = self.node(s);
        if !self.is(s, MS, "SkipSimplifiedLayerNormalization")
            || n.inputs.len() != 3
            || n.inputs.iter().any(String::is_empty)
            || n.outputs.first().map(String::as_str) != Some(v)
            || n.outputs.len() != 4
            || n.outputs[3].is_empty()
            || n.inputs[0] == n.inputs[1]
        {
            return None;
        }
        let f16 = self.init_is(&n.inputs[2], DType::F16, k);
        if !f16 && !self.init_is(&n.inputs[2], DType::F32, k) {
            return None;
        }
        let unread = |o: &String| {
            o.is_empty() || (self.users(o).is_empty() && !self.outputs.contains(o.as_str()))
        };
        if !n.outputs[1..3].iter().all(unread) {
            return None;
        }
        for (oi, ri) in [(1, 0), (0, 1)] {
            let normed = &n.inputs[oi];
            // The inner norm's result has the skip norm's type: the norm node alone (an f16
            // one between Casts has an f32 scale, another pattern).
            let Some(u) = self
                .unit_producing(normed, k)
                .filter(|u| u.f16 == f16 && u.nodes.len() == 1)
            else {
                continue;
            };
            if !self.only_for(normed, s) {
                continue;
            }
            let eps = self.attrs(s).f_or("epsilon", 1e-5);
            let unit = Unit {
                nodes: vec![s],
                input: n.outputs[3].clone(),
                output: v.to_string(),
                gamma: n.inputs[2].clone(),
                eps,
                f16,
            };
            let residual = Residual {
                f16,
                skip: true,
                nodes: u.nodes,
                o: u.input,
                g1: u.gamma,
                eps1: u.eps,
                res: n.inputs[ri].clone(),
                scalar: None,
            };
            return Some((unit, residual));
        }
        None
    }

    /// The other input of binary node `i` (`Mul`/`Div`; `v` must be its first input when
    /// `first`) when it is a scalar float initializer and `v` the operand.
    pub(super) fn scalar_operand(&self, i: usize, v: &str, first: bool) -> Option<String> {
        let ins = &self.node(i).inputs;
        if !self.plain(i, 2) || ins[0] == ins[1] {
            return None;
        }
        let s = if ins[0] == v {
            &ins[1]
        } else if ins[1] == v && !first {
            &ins[0]
        } else {
            return None;
        };
        self.scalar_init(s).then(|| s.clone())
    }
    /// Whether scalar initializers `a` and `b` hold the same value (same name, or equal inline
    /// bytes of the same type).
    pub(super) fn same_scalar(&self, a: &str, b: &str) -> bool {
        use crate::model::InitData;
        if a == b {
            return true;
        }
        match (self.inits.get(a), self.inits.get(b)) {
            (Some(x), Some(y)) => {
                x.dtype == y.dtype
                    && matches!((&x.data, &y.data),
                        (InitData::Inline(p), InitData::Inline(q)) if p == q)
            }
            _ => false,
        }
    }
    /// A scalar epilogue of one MatMulNBits result `y` (read only by it): `Mul(y, s)`, or the
    /// softcap `Mul(Tanh(Div(y, c)), c)`; every intermediate read only inside, not an output.
    pub(super) fn scalar_epilogue(&self, y: &str, free: &dyn Fn(&usize) -> bool) -> Option<Epi> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let n = single(y).filter(free)?;
        if self.is(n, "", "Mul") {
            let scalar = self.scalar_operand(n, y, false)?;
            return Some(Epi::Scale {
                nodes: vec![n],
                scalar,
                out: self.node(n).outputs[0].clone(),
            });
        }
        if !self.is(n, "", "Div") {
            return None;
        }
        let div = self.scalar_operand(n, y, true)?;
        let d = &self.node(n).outputs[0];
        let t = single(d).filter(free)?;
        if !self.is(t, "", "Tanh") || !self.plain(t, 1) {
            return None;
        }
        let tv = &self.node(t).outputs[0];
        let m = single(tv).filter(free)?;
        if !self.is(m, "", "Mul") {
            return None;
        }
        let mul = self.scalar_operand(m, tv, false)?;
        self.same_scalar(&div, &mul).then(|| Epi::Softcap {
            nodes: vec![n, t, m],
            div,
            mul,
            out: self.node(m).outputs[0].clone(),
        })
    }

    /// The `Add(y, other) [-> Mul(., scalar)]` reading the norm unit result `y`, each value on the
    /// way read only by the next node and not a graph output.
    pub(super) fn norm_tail(&self, y: &str, free: &dyn Fn(&usize) -> bool) -> Option<Tail> {
        let single = |v: &str| {
            (self.users(v).len() == 1 && !self.outputs.contains(v)).then(|| self.users(v)[0])
        };
        let add = single(y).filter(free)?;
        let ins = &self.node(add).inputs;
        if !self.is(add, "", "Add") || !self.plain(add, 2) || ins[0] == ins[1] {
            return None;
        }
        let other = if ins[0] == y { &ins[1] } else { &ins[0] };
        let mut tail = Tail {
            nodes: vec![add],
            other: other.clone(),
            cast: false,
            scalar: None,
            out: self.node(add).outputs[0].clone(),
        };
        if let Some(c) = self.producer.get(other.as_str()).copied()
            && free(&c)
            && self.cast_to(c, 10)
            && self.only_for(other, add)
        {
            tail.nodes.push(c);
            tail.other = self.node(c).inputs[0].clone();
            tail.cast = true;
        }
        if let Some(m) = single(&tail.out).filter(free)
            && self.is(m, "", "Mul")
            && let Some(s) = self.scalar_operand(m, &tail.out, false)
        {
            tail.nodes.push(m);
            tail.scalar = Some(s);
            tail.out = self.node(m).outputs[0].clone();
        }
        Some(tail)
    }

    /// `v = Squeeze(Slice(data, [i], [i + 1], [2]), [2])` read only by `reader` (`i` >= 0, unit
    /// steps; constants as initializers or `Constant`s): `Gather(data, i, axis = 2)` spelled as
    /// a slice (the mobius split decoder's per-layer input of layer `i`). Returns `data`, the
    /// `starts` value (read as the gather index) and the two nodes.
    pub(super) fn sliced_row(
        &self,
        v: &str,
        reader: usize,
        free: &dyn Fn(&usize) -> bool,
    ) -> Option<(String, String, [usize; 2])> {
        let ints = |name: &str| {
            self.constant(name)
                .filter(|t| t.dtype == DType::I64)
                .map(|t| t.to_i64())
        };
        let sq = self.producer_of(v, "", "Squeeze").filter(free)?;
        let sn = self.node(sq);
        if !self.only_for(v, reader) || sn.outputs.len() != 1 || sn.inputs.is_empty() {
            return None;
        }
        let axes = if self.attrs(sq).opset < 13 {
            self.attrs(sq).ints("axes")?
        } else {
            ints(sn.inputs.get(1).filter(|s| !s.is_empty())?)?
        };
        let sliced = &sn.inputs[0];
        let sl = self.producer_of(sliced, "", "Slice").filter(free)?;
        let si = &self.node(sl).inputs;
        if axes != [2]
            || !self.only_for(sliced, sq)
            || self.attrs(sl).opset < 10
            || !(4..=5).contains(&si.len())
            || si[..4].iter().any(String::is_empty)
        {
            return None;
        }
        let (starts, ends) = (ints(&si[1])?, ints(&si[2])?);
        let steps_ok = si
            .get(4)
            .filter(|s| !s.is_empty())
            .is_none_or(|s| ints(s).is_some_and(|t| t == [1]));
        if starts.len() != 1
            || starts[0] < 0
            || ends != [starts[0] + 1]
            || ints(&si[3])? != [2]
            || !steps_ok
        {
            return None;
        }
        Some((si[0].clone(), si[1].clone(), [sl, sq]))
    }
}

/// Whether a path leads from `group`'s outputs, through nodes outside it, back into it (fusing
/// it would then create a cycle).
pub(super) fn reenters(g: &Graphs<'_>, group: &HashSet<usize>) -> bool {
    let mut stack: Vec<usize> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    for &n in group {
        for o in &g.node(n).outputs {
            stack.extend(g.users(o).iter().filter(|u| !group.contains(u)));
        }
    }
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        for o in &g.node(n).outputs {
            for &u in g.users(o) {
                if group.contains(&u) {
                    return true;
                }
                stack.push(u);
            }
        }
    }
    false
}

/// `members` ordered so that each node comes after the members producing its inputs.
pub(super) fn topo(g: &Graphs<'_>, members: &[usize]) -> Vec<usize> {
    let mut done: Vec<usize> = Vec::new();
    let mut left: Vec<usize> = members.to_vec();
    while !left.is_empty() {
        let ready = left.iter().position(|&n| {
            g.node(n).inputs.iter().all(|s| {
                g.producer
                    .get(s.as_str())
                    .is_none_or(|p| !left.contains(p) || *p == n)
            })
        });
        // A cycle inside one group cannot happen in a valid graph; keep file order then.
        let i = ready.unwrap_or(0);
        done.push(left.remove(i));
    }
    done
}

/// The values a group of nodes reads from outside it, in first-use order (the fused node's
/// inputs).
pub(super) fn external_inputs(g: &Graphs<'_>, members: &[usize]) -> Vec<String> {
    let produced: HashSet<&str> = members
        .iter()
        .flat_map(|&n| g.node(n).outputs.iter().map(String::as_str))
        .collect();
    let mut ext: Vec<String> = Vec::new();
    for &n in members {
        for s in g.node(n).inputs.iter().filter(|s| !s.is_empty()) {
            if !produced.contains(s.as_str()) && !ext.contains(s) {
                ext.push(s.clone());
            }
        }
    }
    ext
}
