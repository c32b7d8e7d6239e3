//! Work counters (dispatches, submits, bytes moved, buffers, pipelines, bind groups).

use std::cell::Cell;

/// Work counters (monotonic; take differences around a run).
#[derive(Debug, Default)]
pub struct Counters {
    /// Compute dispatches encoded.
    pub dispatches: Cell<u64>,
    /// Queue submits.
    pub submits: Cell<u64>,
    /// Bytes copied back from the GPU to the host.
    pub bytes_read_back: Cell<u64>,
    /// Bytes written from the host to the GPU.
    pub bytes_uploaded: Cell<u64>,
    /// GPU buffers created (weights, pool growth, staging).
    pub buffers_created: Cell<u64>,
    /// Compute pipelines compiled (pipeline cache misses).
    pub pipelines_compiled: Cell<u64>,
    /// Bind groups created (a dispatch reusing the bind group of an earlier one creates none).
    pub bind_groups_created: Cell<u64>,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Compute dispatches encoded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// Bytes read back to the host.
    pub bytes_read_back: u64,
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// GPU buffers created.
    pub buffers_created: u64,
    /// Pipelines compiled.
    pub pipelines_compiled: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
}

impl Counters {
    /// Current values.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            dispatches: self.dispatches.get(),
            submits: self.submits.get(),
            bytes_read_back: self.bytes_read_back.get(),
            bytes_uploaded: self.bytes_uploaded.get(),
            buffers_created: self.buffers_created.get(),
            pipelines_compiled: self.pipelines_compiled.get(),
            bind_groups_created: self.bind_groups_created.get(),
        }
    }
}

pub(super) fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get() + by);
}
