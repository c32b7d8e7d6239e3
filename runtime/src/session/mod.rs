//! A loaded model: weights streamed onto the GPU, ops built, execution order and buffer lifetimes
//! planned once; [`Session::run`] resolves dynamic shapes per call.

mod load;
mod plan;
mod profile;
mod run;

use crate::exec::{GpuTensor, PoolState, Value};
use crate::gpu::Gpu;
use crate::model::{Graph, Node};
use crate::ops::Op;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// A model ready to run.
pub struct Session {
    /// The GPU.
    pub gpu: Rc<Gpu>,
    /// The graph.
    pub graph: Graph,
    /// The plan: the nodes actually executed (the graph's nodes with fused groups replaced by
    /// one node each), in execution order.
    steps: Vec<Step>,
    /// Value ids by name (graph inputs, initializers, node outputs).
    ids: HashMap<String, usize>,
    consts: Vec<Option<Value>>,
    /// GPU copies of host constants, made the first time an op uploads one (see
    /// [`crate::exec::HostCopy`]).
    const_copies: RefCell<Vec<Option<GpuTensor>>>,
    pool: Rc<RefCell<PoolState>>,
    meta_buf: RefCell<wgpu::Buffer>,
    /// Bind groups of this session's contexts, reused across runs.
    bind_groups: RefCell<crate::exec::BindGroupCache>,
    fused: Vec<String>,
    /// Weights packed into shared buffers for fused kernels: (buffer, first byte, slot bytes).
    packed: HashMap<String, (Rc<crate::exec::PooledBuffer>, u64, u64)>,
    profile: RefCell<Option<BTreeMap<String, OpProfile>>>,
}

/// One step of a session's plan.
struct Step {
    /// The node (a fused group is one node).
    node: Node,
    op: Box<dyn Op>,
    /// Value ids of its inputs (`None`: an omitted optional input).
    inputs: Vec<Option<usize>>,
    /// Value ids of its outputs.
    outputs: Vec<usize>,
    /// Value ids whose last reader this step is: dropped after it.
    frees: Vec<usize>,
}

/// Load-time options. The loaders that take none ([`Session::load`], [`Session::from_graph`],
/// ...) use their GPU's: `SessionOptions::from(&gpu.tuning)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOptions {
    /// Run the graph fusion pass ([`crate::fuse`]). Default: on
    /// ([`Tuning::fuse`](crate::Tuning::fuse): natively, off with `GG_NO_FUSE`).
    pub fuse: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self { fuse: true }
    }
}

impl From<&crate::Tuning> for SessionOptions {
    fn from(t: &crate::Tuning) -> Self {
        Self { fuse: t.fuse }
    }
}

/// Work recorded by one kind of node while profiling ([`Session::set_profiling`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpProfile {
    /// Nodes of this kind run.
    pub runs: u64,
    /// GPU dispatches they recorded.
    pub dispatches: u64,
    /// Wall time of their work, GPU included, in microseconds: while profiling, natively, the
    /// run waits for the GPU before and after every node (so nothing overlaps; for finding where
    /// time goes, not for speed figures). Zero in the browser, which cannot wait.
    pub micros: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.graph.nodes.len())
            .finish_non_exhaustive()
    }
}
