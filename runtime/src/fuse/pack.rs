//! Packing initializers into one buffer for a fused kernel.

use super::Limits;
use super::graph::Graphs;
use crate::gpu::Storage;
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
