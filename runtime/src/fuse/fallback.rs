//! A fused node's fallback: the group's original nodes run one by one over a local environment.

use super::graph::{Graphs, topo};
use crate::error::{Result, op_err};
use crate::exec::{Ctx, Value};
use crate::model::Node;
use crate::ops::Op;
use std::collections::HashMap;

/// One node of the unfused fallback: its op, input and output slots of the local environment.
pub(super) struct Sub {
    /// The graph node it runs.
    pub(super) node: usize,
    pub(super) op: Box<dyn Op>,
    pub(super) ins: Vec<Option<usize>>,
    pub(super) outs: Vec<usize>,
}

/// The original nodes of a group, run one by one over a local environment.
pub(super) struct Fallback {
    pub(super) subs: Vec<Sub>,
    pub(super) n_in: usize,
    pub(super) out_slots: Vec<usize>,
    pub(super) n_slots: usize,
    /// The slot of every value name of the group.
    pub(super) local: HashMap<String, usize>,
}

impl Fallback {
    pub(super) fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        self.run_with(cx, inputs, Vec::new(), &[])
    }

    /// Runs the subs not marked in `skip`, with `preset` values (slot, value) in the environment
    /// first: the results of a kernel that replaced the skipped ones.
    pub(super) fn run_with(
        &self,
        cx: &mut Ctx<'_>,
        inputs: &[Option<&Value>],
        preset: Vec<(usize, Value)>,
        skip: &[bool],
    ) -> Result<Vec<Value>> {
        // Values produced here (and the preset ones); the fused node's own inputs are passed
        // on by reference, not copied (so that host constants keep their identity: their GPU
        // copies are reused, see `Ctx::upload`).
        let mut env: Vec<Option<Value>> = vec![None; self.n_slots];
        for (slot, v) in preset {
            env[slot] = Some(v);
        }
        let input = |i: usize| {
            if i < self.n_in {
                inputs.get(i).copied().flatten()
            } else {
                None
            }
        };
        for (i, s) in self.subs.iter().enumerate() {
            if skip.get(i).copied().unwrap_or(false) {
                continue;
            }
            let outs = {
                let refs: Vec<Option<&Value>> = s
                    .ins
                    .iter()
                    .map(|i| i.and_then(|i| env[i].as_ref().or_else(|| input(i))))
                    .collect();
                s.op.run(cx, &refs)?
            };
            for (slot, v) in s.outs.iter().zip(outs) {
                env[*slot] = Some(v);
            }
        }
        self.out_slots
            .iter()
            .map(|&s| {
                env[s]
                    .take()
                    .or_else(|| input(s).cloned())
                    .ok_or_else(|| op_err("fused fallback did not produce an output"))
            })
            .collect()
    }
}

/// The fallback of a group: its nodes in order over a local environment whose first slots are
/// the fused node's inputs `ext`; the fused node's outputs are `outs`.
pub(super) fn fallback_for(
    g: &Graphs<'_>,
    members: &[usize],
    ext: &[String],
    outs: &[String],
    ops: &mut [Option<Box<dyn Op>>],
) -> Fallback {
    let mut local: HashMap<String, usize> = HashMap::new();
    for (i, s) in ext.iter().enumerate() {
        local.entry(s.clone()).or_insert(i);
    }
    let mut next = ext.len();
    let mut subs = Vec::new();
    for n in topo(g, members) {
        let node = g.node(n);
        let ins = node
            .inputs
            .iter()
            .map(|s| (!s.is_empty()).then(|| local[s]))
            .collect();
        let o: Vec<usize> = node
            .outputs
            .iter()
            .map(|s| {
                *local.entry(s.clone()).or_insert_with(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        subs.push(Sub {
            node: n,
            op: ops[n].take().expect("op not yet taken"),
            ins,
            outs: o,
        });
    }
    Fallback {
        out_slots: outs.iter().map(|s| local[s]).collect(),
        n_slots: next,
        n_in: ext.len(),
        subs,
        local,
    }
}

/// A fused group's one-kernel path: `Ok(None)` when the inputs do not fit it (shapes, dtypes,
/// weights split across buffers), and the group's original nodes run instead ([`Fallback`]).
pub(super) trait FastPath {
    fn fast(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Option<Vec<Value>>>;
}

/// A fused group's op: its fast path where it applies, else its original nodes.
struct OrFallback<F> {
    fast: F,
    fallback: Fallback,
}

impl<F: FastPath> Op for OrFallback<F> {
    fn run(&self, cx: &mut Ctx<'_>, inputs: &[Option<&Value>]) -> Result<Vec<Value>> {
        match self.fast.fast(cx, inputs)? {
            Some(v) => Ok(v),
            None => self.fallback.run(cx, inputs),
        }
    }
}

/// The fused node of kind `kind` standing for `members` ([`super::fused_node`], named after
/// the first member), its op (`fast`, with the members' ops taken out of `ops` as its fallback)
/// and its report line. `ext` are the fused node's inputs, `outs` its outputs.
pub(super) fn fused_group<F: FastPath + 'static>(
    g: &Graphs<'_>,
    members: &[usize],
    ext: Vec<String>,
    outs: Vec<String>,
    ops: &mut [Option<Box<dyn Op>>],
    kind: String,
    fast: F,
) -> (Node, Box<dyn Op>, String) {
    let fallback = fallback_for(g, members, &ext, &outs, ops);
    let (node, desc) = super::fused_node(&g.node(members[0]).name, kind, ext, outs);
    (node, Box::new(OrFallback { fast, fallback }), desc)
}
