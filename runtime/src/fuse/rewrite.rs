//! The pass as an ordered list of rewrites. Each rewrite first finds its groups among the nodes
//! no earlier rewrite claimed (and claims theirs), then, once every rewrite has looked, builds
//! one fused node per group (or leaves a group as it is when a last check fails). The order of
//! the list is the order in which patterns get first pick of a node.

use super::graph::Graphs;
use super::norms::NormGroups;
use super::{
    Limits, attn_kv_view, gather_scale, gelu_gather, layer_lookups, norms, rotary_2d, rotary_pair,
    rotary_table, shared_attn, spec, spelled_attn, spelled_norm,
};
use crate::model::Node;
use crate::ops::Op;
use std::collections::{HashMap, HashSet};

/// The rewrites, in the order they look for groups and build them: the KV-shared attentions
/// first (they hold per-head norms the norm rewrite would take), then the attentions spelled out
/// in MatMul / Add / Softmax / MatMul and the 2-D rotaries (the vision encoder's), the per-layer
/// lookups (before the rotary tables, which would pair their same-shaped gathers), the rotary
/// tables, the attentions on transposed caches, the rotary pairs, the scaled lookups, the fused
/// GEMVs (with their results' sibling norms), the other norms, the spelled-out norms and
/// `Gelu * Gather`.
pub(super) fn rewrites() -> Vec<Box<dyn Rewrite>> {
    vec![
        Box::new(Groups::new(shared_attn::find, shared_attn::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(spelled_attn::find, spelled_attn::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(rotary_2d::find, rotary_2d::build, |p| &p.nodes)),
        Box::new(Groups::new(
            layer_lookups::find,
            layer_lookups::build,
            |p| &p.nodes,
        )),
        Box::new(Groups::new(rotary_table::find, rotary_table::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(attn_kv_view::find, attn_kv_view::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(rotary_pair::find, rotary_pair::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(gather_scale::find, gather_scale::build, |p| {
            &p.nodes
        })),
        Box::new(spec::Gemvs::default()),
        Box::new(norms::Norms),
        Box::new(Groups::new(spelled_norm::find, spelled_norm::build, |p| {
            &p.nodes
        })),
        Box::new(Groups::new(gelu_gather::find, gelu_gather::build, |p| {
            &p.nodes
        })),
    ]
}

/// What the rewrites share while finding groups.
pub(super) struct Find<'a> {
    pub(super) g: &'a Graphs<'a>,
    pub(super) limits: &'a Limits,
    /// The nodes claimed by a group so far.
    pub(super) used: HashSet<usize>,
    /// Initializers already in a weight pack (see `Spec::pack`).
    pub(super) taken: HashSet<String>,
    /// The norm groups found so far (the GEMVs' sibling norms, then the others), built by the
    /// norm rewrite.
    pub(super) norms: NormGroups,
}

impl Find<'_> {
    /// Whether none of `nodes` is claimed yet.
    pub(super) fn free(&self, nodes: &[usize]) -> bool {
        nodes.iter().all(|n| !self.used.contains(n))
    }
}

/// What the rewrites share while building: the original ops (a group's are taken into its
/// fallback), the packs, and the fused nodes placed so far.
pub(super) struct Build<'a> {
    pub(super) g: &'a Graphs<'a>,
    pub(super) limits: &'a Limits,
    pub(super) ops: Vec<Option<Box<dyn Op>>>,
    /// Initializers to pack into one buffer each.
    pub(super) packs: Vec<Vec<String>>,
    pub(super) norms: NormGroups,
    /// The report line of each fused group, in build order.
    pub(super) fused: Vec<String>,
    /// The fused node (and its op) standing where its group's last node was.
    pub(super) at_last: HashMap<usize, (Node, Box<dyn Op>)>,
}

impl Build<'_> {
    /// Puts a fused node in the place of its group's last node `last`.
    pub(super) fn place(&mut self, last: usize, node: Node, op: Box<dyn Op>, desc: String) {
        self.fused.push(desc);
        self.at_last.insert(last, (node, op));
    }
}

/// One rewrite of the list: find (claiming nodes), then build. Patterns built group by group are
/// [`Groups`]; the fused GEMV and the norms have rewrites of their own.
pub(super) trait Rewrite {
    /// Finds this rewrite's groups among the nodes not in `cx.used`, and claims their nodes.
    fn find(&mut self, cx: &mut Find<'_>);
    /// Builds a fused node for each group found.
    fn build(self: Box<Self>, cx: &mut Build<'_>);
}

/// What a pattern that builds group by group provides: its groups among the nodes not in
/// `cx.used` (a pattern whose candidates may overlap claims them as it goes), each group's nodes
/// in graph order (the fused node goes where the last one was), and the fused node, its op and its
/// report line for a group (the members' ops taken from `ops`; `None` leaves the nodes as they
/// are).
pub(super) struct Groups<P> {
    find: fn(&mut Find<'_>) -> Vec<P>,
    nodes: fn(&P) -> &[usize],
    build: Build1<P>,
    found: Vec<P>,
}

type Build1<P> =
    fn(&Graphs<'_>, P, &mut [Option<Box<dyn Op>>]) -> Option<(Node, Box<dyn Op>, String)>;

impl<P> Groups<P> {
    fn new(find: fn(&mut Find<'_>) -> Vec<P>, build: Build1<P>, nodes: fn(&P) -> &[usize]) -> Self {
        Self {
            find,
            nodes,
            build,
            found: Vec::new(),
        }
    }
}

impl<P> Rewrite for Groups<P> {
    fn find(&mut self, cx: &mut Find<'_>) {
        self.found = (self.find)(cx);
        for p in &self.found {
            cx.used.extend((self.nodes)(p));
        }
    }
    fn build(self: Box<Self>, cx: &mut Build<'_>) {
        for p in self.found {
            let last = *(self.nodes)(&p).last().expect("non-empty group");
            if let Some((node, op, desc)) = (self.build)(cx.g, p, &mut cx.ops) {
                cx.place(last, node, op, desc);
            }
        }
    }
}

/// The groups `at(g, i)` anchored at each node `i` in turn, each claimed as it is found when
/// none of its `nodes` is claimed yet (candidates may overlap: the first in graph order wins).
pub(super) fn claim_each<P>(
    cx: &mut Find<'_>,
    at: impl Fn(&Graphs<'_>, usize) -> Option<P>,
    nodes: fn(&P) -> &[usize],
) -> Vec<P> {
    let mut found = Vec::new();
    for i in 0..cx.g.graph.nodes.len() {
        if let Some(p) = at(cx.g, i)
            && cx.free(nodes(&p))
        {
            cx.used.extend(nodes(&p));
            found.push(p);
        }
    }
    found
}
