//! Packing initializers into one buffer for a fused kernel.

use super::Limits;
use super::graph::Graphs;
use crate::gpu::Storage;
use crate::ops::MS;
use std::collections::HashSet;

/// Whether the initializers `names` can be one pack (one buffer, each at an offset aligned to
/// the adapter's storage-offset alignment) within the binding limit: each an initializer of a
/// storable type, named once and not already in a pack (`taken`).
pub(super) fn fits_one_pack(
    g: &Graphs<'_>,
    names: &[String],
    limits: &Limits,
    taken: &HashSet<String>,
) -> bool {
    let mut total = 0u64;
    let mut seen = HashSet::new();
    for n in names {
        let Some(i) = g.inits.get(n.as_str()) else {
            return false;
        };
        let Some(st) = Storage::of(i.dtype) else {
            return false;
        };
        if taken.contains(n) || !seen.insert(n) {
            return false;
        }
        total += st
            .bytes(i.shape.iter().product())
            .max(4)
            .next_multiple_of(limits.align);
    }
    total <= limits.max_binding
}

/// The rotary cos and sin caches of the attentions: one pack each pair, bound once by the
/// attention and KV-append kernels (so that GroupQueryAttention with its rotary, both caches'
/// appends and a bias fits WebGPU's default 8 storage buffers).
pub(super) fn rotary_packs(
    g: &Graphs<'_>,
    limits: &Limits,
    taken: &mut HashSet<String>,
) -> Vec<Vec<String>> {
    let mut packs: Vec<Vec<String>> = Vec::new();
    for (i, node) in g.graph.nodes.iter().enumerate() {
        if !g.is(i, MS, "GroupQueryAttention") {
            continue;
        }
        let (Some(c), Some(s)) = (node.inputs.get(7), node.inputs.get(8)) else {
            continue;
        };
        let pair = vec![c.clone(), s.clone()];
        if c.is_empty() || s.is_empty() || c == s || packs.contains(&pair) {
            continue;
        }
        let (Some(ci), Some(si)) = (g.inits.get(c.as_str()), g.inits.get(s.as_str())) else {
            continue;
        };
        // Both are read at one element type (`Kernel::alias`).
        if ci.dtype == si.dtype && fits_one_pack(g, &pair, limits, taken) {
            taken.extend(pair.iter().cloned());
            packs.push(pair);
        }
    }
    packs
}
