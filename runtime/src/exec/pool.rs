//! The buffer pool: pooled buffers, the free lists and their size buckets.

#[cfg(doc)]
use super::BindGroupCache;
use std::cell::RefCell;
use std::rc::{Rc, Weak};

/// A buffer that returns to its pool when the last tensor using it is dropped.
pub(crate) struct PooledBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(super) size: u64,
    pub(super) pool: Option<Weak<RefCell<PoolState>>>,
}

impl PooledBuffer {
    /// A buffer owned by one tensor (weights), never returned to a pool.
    pub(crate) fn unpooled(buffer: wgpu::Buffer) -> Rc<Self> {
        let size = buffer.size();
        Rc::new(Self {
            buffer,
            size,
            pool: None,
        })
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.as_ref().and_then(Weak::upgrade) {
            pool.borrow_mut()
                .dirty
                .push((self.size, self.buffer.clone()));
        }
    }
}

/// Free buffers. `clean` ones are not referenced by commands recorded since the last submit and
/// may be written with `queue.write_buffer`; `dirty` ones may only be used as kernel outputs.
#[derive(Default)]
pub(crate) struct PoolState {
    pub(super) clean: Vec<(u64, wgpu::Buffer)>,
    pub(super) dirty: Vec<(u64, wgpu::Buffer)>,
    pub(super) staging: Vec<(u64, wgpu::Buffer)>,
}

impl PoolState {
    /// Makes the freed buffers writable (nothing pending references them) and orders the free
    /// list (size, then buffer identity) whatever order they were freed in: a run repeating the
    /// one before then gets the same buffers.
    pub(super) fn settle(&mut self) {
        if !self.dirty.is_empty() {
            let dirty = std::mem::take(&mut self.dirty);
            self.clean.extend(dirty);
            self.clean.sort_unstable();
        }
    }
}

pub(super) fn bucket(size: u64) -> u64 {
    let size = size.max(256).next_multiple_of(256);
    if size <= 4096 {
        return size.next_power_of_two();
    }
    let p = 63 - size.leading_zeros();
    let step = 1u64 << (p - 2);
    size.next_multiple_of(step)
}

/// The buffer of `size` freed last (the list keeps its order), so that a run repeating the
/// allocations of the run before, from the same free list, gets the same buffers (and reuses its
/// bind groups: [`BindGroupCache`]).
pub(super) fn take(list: &mut Vec<(u64, wgpu::Buffer)>, size: u64) -> Option<(u64, wgpu::Buffer)> {
    let pos = list.iter().rposition(|(s, _)| *s == size)?;
    Some(list.remove(pos))
}
