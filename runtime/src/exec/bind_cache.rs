//! The bind group cache shared by a session's contexts.

use std::collections::HashMap;
use std::rc::Rc;

/// Bind groups made by a session's contexts, kept while they are being reused: a decode step
/// binds the same buffers at the same offsets as the step before (weights, the pool's buffers
/// taken in the same order, the parameter arena's slots), so after the first step its
/// dispatches create no bind group. A group not used during the last [`BIND_GROUP_FLUSHES`]
/// submits that ran kernels is dropped (it holds its buffers), and so is everything when the
/// cache exceeds [`BIND_GROUP_ENTRIES`].
#[derive(Default)]
pub(crate) struct BindGroupCache {
    /// The group, the epoch of its last use, and its pipeline (held, so that the address in
    /// the key names it as long as the entry lives).
    pub(super) groups: HashMap<BindGroupKey, (wgpu::BindGroup, u64, Rc<crate::gpu::Pipeline>)>,
    /// Submits with dispatches so far.
    pub(super) epoch: u64,
}

/// A bind group's pipeline (by address; the entry holds it) and its buffer ranges in binding
/// order, the parameter slot last.
#[derive(PartialEq, Eq, Hash)]
pub(super) struct BindGroupKey {
    pub(super) pipeline: usize,
    pub(super) ranges: Vec<(wgpu::Buffer, u64, u64)>,
}

/// Submits with dispatches after which an unused bind group is dropped.
const BIND_GROUP_FLUSHES: u64 = 2;
/// Bind groups a cache holds at most.
const BIND_GROUP_ENTRIES: usize = 4096;

impl BindGroupCache {
    pub(super) fn end_epoch(&mut self) {
        self.epoch += 1;
        let epoch = self.epoch;
        if self.groups.len() > BIND_GROUP_ENTRIES {
            self.groups.clear();
        } else {
            self.groups
                .retain(|_, (_, used, _)| *used + BIND_GROUP_FLUSHES >= epoch);
        }
    }
}
