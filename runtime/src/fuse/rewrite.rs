//! The pass as an ordered list of rewrites. Each rewrite first finds its groups among the nodes
//! no earlier rewrite claimed (and claims theirs), then, once every rewrite has looked, builds
//! one fused node per group (or leaves a group as it is when a last check fails). The order of
//! the list is the order in which patterns get first pick of a node.

use super::graph::Graphs;
use super::norms::NormGroups;
use super::{
    Limits, attn_kv_view, gather_scale, gelu_gather, norms, rotary_pair, rotary_table, shared_attn,
    spec, spelled_norm,
};
use crate::model::Node;
use crate::ops::Op;
use std::collections::{HashMap, HashSet};

/// The rewrites, in the order they look for groups and build them: the KV-shared attentions
/// first (they hold per-head norms the norm rewrite would take), then the rotary tables, the
/// attentions on transposed caches, the rotary pairs, the scaled lookups, the fused GEMVs (with
/// their results' sibling norms), the other norms, the spelled-out norms and `Gelu * Gather`.
pub(super) fn rewrites() -> Vec<Box<dyn Rewrite>> {
    vec![
        Box::new(Groups::<shared_attn::Pattern>::default()),
        Box::new(Groups::<rotary_table::Pattern>::default()),
        Box::new(Groups::<attn_kv_view::Pattern>::default()),
        Box::new(Groups::<rotary_pair::Pattern>::default()),
        Box::new(Groups::<gather_scale::Pattern>::default()),
        Box::new(spec::Gemvs::default()),
        Box::new(norms::Norms),
        Box::new(Groups::<spelled_norm::SpelledRms>::default()),
        Box::new(Groups::<gelu_gather::GeluGather>::default()),
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

/// One rewrite of the list: find (claiming nodes), then build.
pub(super) trait Rewrite {
    /// Finds this rewrite's groups among the nodes not in `cx.used`, and claims their nodes.
    fn find(&mut self, cx: &mut Find<'_>);
    /// Builds a fused node for each group found.
    fn build(self: Box<Self>, cx: &mut Build<'_>);
}

/// A pattern whose groups each become one fused node through a function of the group alone.
pub(super) trait Group: Sized {
    /// The groups among the nodes not in `cx.used`, their nodes claimed in `cx.used`.
    fn find(cx: &mut Find<'_>) -> Vec<Self>;
    /// The group's nodes, in graph order (the fused node goes where the last one was).
    fn nodes(&self) -> &[usize];
    /// The fused node, its op and its report line (the members' ops are taken from `ops`);
    /// `None` leaves the nodes as they are.
    fn build(
        self,
        g: &Graphs<'_>,
        ops: &mut [Option<Box<dyn Op>>],
    ) -> Option<(Node, Box<dyn Op>, String)>;
}

/// The rewrite of a [`Group`] pattern: the groups found.
pub(super) struct Groups<P>(Vec<P>);

impl<P> Default for Groups<P> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<P: Group> Rewrite for Groups<P> {
    fn find(&mut self, cx: &mut Find<'_>) {
        self.0 = P::find(cx);
    }
    fn build(self: Box<Self>, cx: &mut Build<'_>) {
        for p in self.0 {
            let last = *p.nodes().last().expect("non-empty group");
            if let Some((node, op, desc)) = p.build(cx.g, &mut cx.ops) {
                cx.place(last, node, op, desc);
            }
        }
    }
}

/// Claims the nodes of every group of `found` (found together, against the same claims).
pub(super) fn claim_all<P: Group>(cx: &mut Find<'_>, found: Vec<P>) -> Vec<P> {
    for p in &found {
        cx.used.extend(p.nodes());
    }
    found
}
