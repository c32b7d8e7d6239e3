//! A loaded model: weights streamed onto the GPU, ops built, execution order and buffer lifetimes
//! planned once; [`Session::run`] resolves dynamic shapes per call.

use crate::error::{Error, Result};
use crate::exec::{Ctx, GpuTensor, PoolState, Value, to_gpu_bytes};
use crate::gpu::{Gpu, Storage};
use crate::model::{Dim, Graph, InitData, Initializer, Node};
use crate::ops::{Op, Registry};
use crate::source::DataSource;
use crate::tensor::{DType, HostTensor};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Initializers up to this size stay on the host (shape constants, scalars); they are uploaded
/// when a GPU kernel needs them.
const HOST_CONST_BYTES: usize = 4096;
/// Submit queued weight uploads after this many bytes so staging memory stays bounded.
const UPLOAD_FLUSH_BYTES: u64 = 64 << 20;

/// A model ready to run.
pub struct Session {
    /// The GPU.
    pub gpu: Rc<Gpu>,
    /// The graph.
    pub graph: Graph,
    /// The nodes actually executed: the graph's nodes with fused groups replaced by one node each.
    nodes: Vec<Node>,
    ops: Vec<Box<dyn Op>>,
    order: Vec<usize>,
    /// Value ids to drop after each step of `order`.
    frees: Vec<Vec<usize>>,
    ids: HashMap<String, usize>,
    node_in: Vec<Vec<Option<usize>>>,
    node_out: Vec<Vec<usize>>,
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

/// A clock for the profile: native only.
#[cfg(not(target_arch = "wasm32"))]
type Clock = std::time::Instant;
#[cfg(target_arch = "wasm32")]
type Clock = ();

fn profile_clock(cx: &mut Ctx<'_>, gpu: &Gpu) -> Option<Clock> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        cx.flush();
        gpu.poll_wait();
        Some(std::time::Instant::now())
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (cx, gpu);
        None
    }
}

fn profile_micros(cx: &mut Ctx<'_>, gpu: &Gpu, since: Option<Clock>) -> u64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let Some(t0) = since else { return 0 };
        cx.flush();
        gpu.poll_wait();
        t0.elapsed().as_micros() as u64
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (cx, gpu, since);
        0
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("nodes", &self.graph.nodes.len())
            .finish_non_exhaustive()
    }
}

struct Streamed<'a> {
    init: &'a Initializer,
    offset: u64,
    length: u64,
}

impl Session {
    /// Loads `model` (e.g. `decoder_model_merged_q4.onnx`) and its external data from `source`.
    pub async fn load(gpu: Rc<Gpu>, source: &dyn DataSource, model: &str) -> Result<Self> {
        let bytes = crate::source::read_all(source, model).await?;
        let graph = Graph::decode(&bytes, model)?;
        drop(bytes);
        Self::from_graph(gpu, graph, source).await
    }

    /// Loads a native model file (external data next to it).
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn load_file(gpu: Rc<Gpu>, path: &std::path::Path) -> Result<Self> {
        let dir = path
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::Invalid(format!("bad model path {}", path.display())))?;
        let src = crate::source::DirSource::new(dir);
        Self::load(gpu, &src, name).await
    }

    /// Builds ops, plans execution and streams the weights, with the options of `gpu`'s tuning.
    pub async fn from_graph(gpu: Rc<Gpu>, graph: Graph, source: &dyn DataSource) -> Result<Self> {
        let options = SessionOptions::from(&gpu.tuning);
        Self::from_graph_with(gpu, graph, source, options).await
    }

    /// [`Session::from_graph`] with explicit options.
    pub async fn from_graph_with(
        gpu: Rc<Gpu>,
        graph: Graph,
        source: &dyn DataSource,
        options: SessionOptions,
    ) -> Result<Self> {
        let registry = Registry::default();
        let ops = registry.build(&graph)?;
        let (nodes, ops, fused, packs) = if options.fuse {
            crate::fuse::fuse(&graph, ops, &crate::fuse::Limits::of(&gpu))
        } else {
            (graph.nodes.clone(), ops, Vec::new(), Vec::new())
        };
        let mut ids: HashMap<String, usize> = HashMap::new();
        let id = |name: &str, ids: &mut HashMap<String, usize>| -> usize {
            let n = ids.len();
            *ids.entry(name.to_string()).or_insert(n)
        };
        for i in &graph.inputs {
            id(&i.name, &mut ids);
        }
        for i in &graph.initializers {
            id(&i.name, &mut ids);
        }
        let node_in: Vec<Vec<Option<usize>>> = nodes
            .iter()
            .map(|n| {
                n.inputs
                    .iter()
                    .map(|s| (!s.is_empty()).then(|| id(s, &mut ids)))
                    .collect()
            })
            .collect();
        let node_out: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| n.outputs.iter().map(|s| id(s, &mut ids)).collect())
            .collect();
        for o in &graph.outputs {
            id(&o.name, &mut ids);
        }
        let order = topo_order(nodes.len(), &node_in, &node_out)?;
        // Buffer lifetimes: free each value after its last consumer (graph outputs never).
        let mut last: HashMap<usize, usize> = HashMap::new();
        for (step, &n) in order.iter().enumerate() {
            for v in node_in[n].iter().flatten() {
                last.insert(*v, step);
            }
            for v in &node_out[n] {
                last.entry(*v).or_insert(step);
            }
        }
        let keep: std::collections::HashSet<usize> = graph
            .outputs
            .iter()
            .filter_map(|o| ids.get(&o.name).copied())
            .chain(
                graph
                    .initializers
                    .iter()
                    .filter_map(|i| ids.get(&i.name).copied()),
            )
            .collect();
        let mut frees = vec![Vec::new(); order.len()];
        for (v, step) in last {
            if !keep.contains(&v) {
                frees[step].push(v);
            }
        }
        let meta_buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("meta arena"),
            size: 1 << 20,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut s = Self {
            gpu,
            nodes,
            fused,
            packed: HashMap::new(),
            profile: RefCell::new(None),
            ops,
            order,
            frees,
            node_in,
            node_out,
            consts: vec![None; ids.len()],
            const_copies: RefCell::new(vec![None; ids.len()]),
            ids,
            pool: Rc::new(RefCell::new(PoolState::default())),
            meta_buf: RefCell::new(meta_buf),
            bind_groups: RefCell::default(),
            graph,
        };
        s.plan_packs(&packs);
        s.load_weights(source).await?;
        Ok(s)
    }

    /// GPU buffers for a weight: its range of a packed buffer, one buffer, or several row ranges
    /// when it exceeds the binding limit.
    fn weight_parts(&self, init: &Initializer) -> Result<Vec<Part>> {
        let storage = Storage::of(init.dtype).ok_or_else(|| {
            Error::Invalid(format!(
                "tensor {}: float64 weights are not supported",
                init.name
            ))
        })?;
        let size = storage.bytes(init.shape.iter().product());
        let rows = init.shape.first().copied().unwrap_or(1);
        if let Some((buf, at, slot)) = self.packed.get(&init.name) {
            return Ok(vec![Part {
                start: 0,
                len: size,
                r0: 0,
                rows,
                buf: buf.clone(),
                at: *at,
                slot: *slot,
                packed: true,
            }]);
        }
        let max = self.gpu.max_weight_part;
        let own = |len: u64, r0: usize, rows: usize| {
            let b = self.gpu.create_buffer(len, &init.name);
            Part {
                start: 0,
                len,
                r0,
                rows,
                slot: b.size(),
                buf: crate::exec::PooledBuffer::unpooled(b),
                at: 0,
                packed: false,
            }
        };
        if size <= max {
            return Ok(vec![own(size, 0, rows)]);
        }
        let rows = rows.max(1);
        let row_bytes = (init.byte_len() / rows) as u64;
        if !row_bytes.is_multiple_of(4)
            || row_bytes > max
            || !matches!(
                init.dtype,
                DType::F32 | DType::F16 | DType::U8 | DType::I8 | DType::I32
            )
        {
            return Err(Error::Gpu(format!(
                "tensor {} ({size} bytes) exceeds the binding limit {max} and cannot be split by rows",
                init.name
            )));
        }
        let per = (max / row_bytes) as usize;
        let mut parts = Vec::new();
        let mut r0 = 0;
        while r0 < rows {
            let n = per.min(rows - r0);
            let mut p = own(n as u64 * row_bytes, r0, n);
            p.start = r0 as u64 * row_bytes;
            parts.push(p);
            r0 += n;
        }
        Ok(parts)
    }

    fn gpu_value(init: &Initializer, parts: Vec<Part>) -> Value {
        let mut ts: Vec<(usize, GpuTensor)> = parts
            .into_iter()
            .map(|p| {
                let mut shape = init.shape.clone();
                if let Some(first) = shape.first_mut() {
                    *first = p.rows;
                }
                let view = p.packed.then_some((p.at, p.slot));
                let t = GpuTensor {
                    dtype: init.dtype,
                    shape,
                    buf: p.buf,
                    split: None,
                    view,
                };
                (p.r0, t)
            })
            .collect();
        if ts.len() == 1 {
            let (_, mut t) = ts.remove(0);
            t.shape = init.shape.clone();
            return Value::Gpu(t);
        }
        let mut whole = ts[0].1.clone();
        whole.shape = init.shape.clone();
        whole.split = Some(Rc::new(ts));
        Value::Gpu(whole)
    }

    /// Buffers for the weight packs the fusion pass asked for: per pack one buffer, each member
    /// at a multiple of the storage offset alignment.
    fn plan_packs(&mut self, packs: &[Vec<String>]) {
        let align = u64::from(self.gpu.limits.min_storage_buffer_offset_alignment).max(4);
        let by_name: HashMap<&str, &Initializer> = self
            .graph
            .initializers
            .iter()
            .map(|i| (i.name.as_str(), i))
            .collect();
        for pack in packs {
            let mut layout = Vec::new();
            let mut end = 0u64;
            for name in pack {
                let Some(storage) = by_name
                    .get(name.as_str())
                    .and_then(|i| Storage::of(i.dtype).map(|s| s.bytes(i.shape.iter().product())))
                else {
                    continue;
                };
                let slot = storage.max(4).next_multiple_of(align);
                layout.push((name.clone(), end, slot));
                end += slot;
            }
            if layout.len() < 2 || end > self.gpu.max_weight_part {
                continue;
            }
            let buf = crate::exec::PooledBuffer::unpooled(
                self.gpu
                    .create_buffer(end, &format!("{} (packed)", pack[0])),
            );
            for (name, at, slot) in layout {
                self.packed.insert(name, (buf.clone(), at, slot));
            }
        }
    }

    fn keep_on_host(&self, init: &Initializer) -> bool {
        if self.packed.contains_key(&init.name) {
            return false;
        }
        let small = init.byte_len() <= HOST_CONST_BYTES
            && (init.byte_len() as u64) <= self.gpu.max_weight_part;
        small || matches!(init.dtype, DType::I64 | DType::F64 | DType::Bool)
    }

    async fn load_weights(&mut self, source: &dyn DataSource) -> Result<()> {
        let inits = std::mem::take(&mut self.graph.initializers);
        let mut by_file: Vec<(String, Vec<Streamed<'_>>)> = Vec::new();
        for init in &inits {
            let vid = self.ids[&init.name];
            match &init.data {
                InitData::Inline(bytes) => {
                    let host = HostTensor::new(init.dtype, init.shape.clone(), bytes.clone())?;
                    let v = if self.keep_on_host(init) {
                        Value::Host(host)
                    } else {
                        let parts = self.weight_parts(init)?;
                        let data = to_gpu_bytes(&host)?;
                        write_parts(&self.gpu.queue, &parts, 0, &data);
                        self.gpu.count_upload(data.len() as u64);
                        Self::gpu_value(init, parts)
                    };
                    self.consts[vid] = Some(v);
                }
                InitData::External {
                    location,
                    offset,
                    length,
                } => {
                    let s = Streamed {
                        init,
                        offset: *offset,
                        length: *length,
                    };
                    match by_file.iter_mut().find(|(l, _)| l == location) {
                        Some((_, v)) => v.push(s),
                        None => by_file.push((location.clone(), vec![s])),
                    }
                }
            }
        }
        for (location, mut list) in by_file {
            list.sort_by_key(|s| s.offset);
            self.stream_file(source, &location, &list).await?;
        }
        self.graph.initializers = inits;
        self.gpu.queue.submit(std::iter::empty());
        self.gpu.poll_wait();
        self.gpu.take_error()
    }

    /// Streams one external data file once, front to back, routing byte ranges to their tensors.
    async fn stream_file(
        &mut self,
        source: &dyn DataSource,
        location: &str,
        list: &[Streamed<'_>],
    ) -> Result<()> {
        let mut stream = source.open(location).await?;
        let mut pos = 0u64; // file offset of chunk[0]
        let mut chunk: Vec<u8> = Vec::new();
        let mut since_flush = 0u64;
        for s in list {
            let ext_err = |reason: String| Error::ExternalData {
                tensor: s.init.name.clone(),
                location: location.to_string(),
                offset: s.offset,
                length: s.length,
                reason,
            };
            if s.offset < pos {
                // Overlapping or repeated ranges: restart the stream.
                stream = source.open(location).await?;
                pos = 0;
                chunk.clear();
            }
            let host = self.keep_on_host(s.init);
            let mut host_bytes = Vec::new();
            let gpu = if host {
                None
            } else {
                Some(self.weight_parts(s.init)?)
            };
            let mut written = 0u64; // bytes of this tensor delivered
            let mut carry: Vec<u8> = Vec::new(); // unaligned tail waiting for 4-byte alignment
            while written < s.length {
                let start = s.offset + written;
                let end_of_chunk = pos + chunk.len() as u64;
                if start >= end_of_chunk {
                    pos = end_of_chunk;
                    chunk = match stream.next_chunk().await? {
                        Some(c) => c,
                        None => {
                            return Err(ext_err(format!(
                                "goes past the end of the file ({pos} bytes)"
                            )));
                        }
                    };
                    continue;
                }
                let from = (start - pos) as usize;
                let take = ((s.length - written) as usize).min(chunk.len() - from);
                let piece = &chunk[from..from + take];
                match &gpu {
                    None => host_bytes.extend_from_slice(piece),
                    Some(parts) => {
                        carry.extend_from_slice(piece);
                        let aligned = carry.len() / 4 * 4;
                        if aligned > 0 {
                            let at = written + take as u64 - carry.len() as u64;
                            write_parts(&self.gpu.queue, parts, at, &carry[..aligned]);
                            self.gpu.count_upload(aligned as u64);
                            since_flush += aligned as u64;
                            carry.drain(..aligned);
                        }
                    }
                }
                written += take as u64;
                if since_flush >= UPLOAD_FLUSH_BYTES {
                    self.gpu.queue.submit(std::iter::empty());
                    self.gpu.poll_wait();
                    since_flush = 0;
                }
            }
            let vid = self.ids[&s.init.name];
            match gpu {
                None => {
                    self.consts[vid] = Some(Value::Host(HostTensor::new(
                        s.init.dtype,
                        s.init.shape.clone(),
                        host_bytes,
                    )?));
                }
                Some(parts) => {
                    if !carry.is_empty() {
                        let at = s.length - carry.len() as u64;
                        carry.resize(4, 0);
                        write_parts(&self.gpu.queue, &parts, at, &carry);
                    }
                    let v = Self::gpu_value(s.init, parts);
                    self.consts[vid] = Some(v);
                }
            }
        }
        Ok(())
    }

    /// Starts (clearing earlier counts) or stops counting dispatches per kind of node during
    /// [`Session::run`]; fused nodes count under their own kind (`Fused[...]`).
    pub fn set_profiling(&self, on: bool) {
        *self.profile.borrow_mut() = on.then(BTreeMap::new);
    }

    /// Dispatches per kind of node since [`Session::set_profiling`] (empty when off).
    pub fn profile(&self) -> Vec<(String, OpProfile)> {
        self.profile
            .borrow()
            .as_ref()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }

    /// The groups the fusion pass replaced, one line each (kind and first node).
    pub fn fused(&self) -> &[String] {
        &self.fused
    }

    /// Number of weights packed with others into one buffer (for the fused kernels).
    pub fn packed_weights(&self) -> usize {
        self.packed.len()
    }

    /// Number of weights split by rows across several buffers (above [`Gpu::max_weight_part`]).
    pub fn split_weights(&self) -> usize {
        self.consts
            .iter()
            .flatten()
            .filter(|v| matches!(v, Value::Gpu(t) if t.split.is_some()))
            .count()
    }

    /// Runs the graph. Inputs may be host tensors or GPU tensors (e.g. a KV cache kept on the GPU);
    /// returns every graph output, left where it was produced (use [`Session::read`]).
    pub async fn run(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        let mut cx = self.context();
        let out = self.run_in(&mut cx, inputs).await?;
        cx.flush();
        self.gpu.take_error()?;
        Ok(out)
    }

    /// [`Session::run`] recorded into `cx` (a context of any session on the same GPU: see
    /// [`Session::context`]) and not submitted, so that several graphs and the caller's own
    /// kernels go to the GPU in one submit, at the context's next [`Ctx::flush`] or
    /// [`Ctx::download`]. Intermediate buffers come from, and return to, `cx`'s pool. A graph
    /// whose ops must read a GPU value on the host still submits at that point.
    pub async fn run_in(
        &self,
        cx: &mut Ctx<'_>,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>> {
        if !std::ptr::eq(cx.gpu, &*self.gpu) {
            return Err(Error::Invalid(
                "the recording context belongs to another GPU device than this session".into(),
            ));
        }
        // This run's values; the constants are read from `self.consts` (not copied per run).
        let mut env: Vec<Option<Value>> = vec![None; self.consts.len()];
        let mut dims: HashMap<String, usize> = HashMap::new();
        let mut given = std::collections::HashSet::new();
        for (name, v) in inputs {
            let decl = self
                .graph
                .inputs
                .iter()
                .find(|i| i.name == name)
                .ok_or_else(|| Error::Input {
                    name: name.clone(),
                    reason: format!(
                        "not an input of the model (inputs: {})",
                        self.graph
                            .inputs
                            .iter()
                            .map(|i| i.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })?;
            let want = decl.dtype().map_err(|e| Error::Input {
                name: name.clone(),
                reason: e.to_string(),
            })?;
            if v.dtype() != want {
                return Err(Error::Input {
                    name,
                    reason: format!(
                        "dtype {} but the model expects {}",
                        v.dtype().name(),
                        want.name()
                    ),
                });
            }
            if let Some(decl_dims) = &decl.dims {
                if decl_dims.len() != v.shape().len() {
                    return Err(Error::Input {
                        name,
                        reason: format!(
                            "shape {:?} but the model expects rank {} ({})",
                            v.shape(),
                            decl_dims.len(),
                            fmt_dims(decl_dims)
                        ),
                    });
                }
                for (d, &got) in decl_dims.iter().zip(v.shape()) {
                    match d {
                        Dim::Fixed(f) if *f as usize != got => {
                            return Err(Error::Input {
                                name,
                                reason: format!(
                                    "shape {:?} does not match [{}]",
                                    v.shape(),
                                    fmt_dims(decl_dims)
                                ),
                            });
                        }
                        Dim::Param(p) => {
                            if let Some(&prev) = dims.get(p)
                                && prev != got
                            {
                                return Err(Error::Input {
                                    name,
                                    reason: format!(
                                        "dimension {p} is {got} here but {prev} in another input"
                                    ),
                                });
                            }
                            dims.insert(p.clone(), got);
                        }
                        _ => {}
                    }
                }
            }
            let v = match v {
                Value::Host(h) if matches!(h.dtype, DType::F32 | DType::F16) => {
                    Value::Gpu(cx.upload(&h)?)
                }
                other => other,
            };
            given.insert(name.clone());
            env[self.ids[&name]] = Some(v);
        }
        if let Some(missing) = self.graph.inputs.iter().find(|i| !given.contains(&i.name)) {
            return Err(Error::Input {
                name: missing.name.clone(),
                reason: "required input not given".into(),
            });
        }
        // GPU copies of this run's host values, made by the first op that uploads one.
        let mut run_copies: HashMap<usize, GpuTensor> = HashMap::new();
        for (step, &n) in self.order.iter().enumerate() {
            let node = &self.nodes[n];
            let before = self.gpu.counters.dispatches.get();
            let wrap = |e: Error| match e {
                Error::Op {
                    node: nn, reason, ..
                } if nn.is_empty() => Error::Op {
                    node: node.name.clone(),
                    op: node.op_type.clone(),
                    reason,
                },
                Error::Gpu(reason) => Error::Op {
                    node: node.name.clone(),
                    op: node.op_type.clone(),
                    reason,
                },
                other => other,
            };
            let node_in = &self.node_in[n];
            let mut ins: Vec<Option<Value>> = Vec::with_capacity(node_in.len());
            for (k, vid) in node_in.iter().enumerate() {
                let v = match vid {
                    None => None,
                    Some(vid) => {
                        // A value this node reads last (and in no later slot) is moved into
                        // its inputs, not cloned: an op may then find a buffer nobody else
                        // holds and reuse it (GroupQueryAttention grows the KV cache in place).
                        let last = self.frees[step].contains(vid)
                            && !node_in[k + 1..].contains(&Some(*vid));
                        let v = if last {
                            env[*vid].take()
                        } else {
                            env[*vid].clone()
                        };
                        let v = v.or_else(|| self.consts[*vid].clone());
                        Some(v.ok_or_else(|| Error::Op {
                            node: node.name.clone(),
                            op: node.op_type.clone(),
                            reason: format!("input {} was never produced", node.inputs[k]),
                        })?)
                    }
                };
                ins.push(v);
            }
            for &k in self.ops[n].host_inputs() {
                if let Some(Some(Value::Gpu(t))) = ins.get(k) {
                    let t = t.clone();
                    ins[k] = Some(Value::Host(cx.download(&t).await.map_err(wrap)?));
                }
            }
            // The host values among the inputs: an op uploading one gets the GPU copy the session
            // keeps of it (constants: for the session; others: for this run).
            cx.host_copies.clear();
            for (vid, v) in node_in.iter().zip(&ins) {
                if let (Some(vid), Some(Value::Host(h))) = (vid, v) {
                    let lasting = matches!(self.consts[*vid], Some(Value::Host(_)));
                    let gpu = if lasting {
                        self.const_copies.borrow()[*vid].clone()
                    } else {
                        run_copies.get(vid).cloned()
                    };
                    cx.host_copies.push(crate::exec::HostCopy {
                        addr: h.data.as_ptr() as usize,
                        len: h.data.len(),
                        id: *vid,
                        lasting,
                        gpu,
                    });
                }
            }
            let refs: Vec<Option<&Value>> = ins.iter().map(Option::as_ref).collect();
            let profiling = self.profile.borrow().is_some();
            let clock = if profiling {
                profile_clock(cx, &self.gpu)
            } else {
                None
            };
            let outs = self.ops[n].run(cx, &refs).map_err(wrap)?;
            for c in cx.host_copies.drain(..) {
                match c.gpu {
                    Some(g) if c.lasting => {
                        self.const_copies.borrow_mut()[c.id].get_or_insert(g);
                    }
                    Some(g) => {
                        run_copies.entry(c.id).or_insert(g);
                    }
                    None => {}
                }
            }
            self.gpu.take_error().map_err(wrap)?;
            if profiling {
                let micros = profile_micros(cx, &self.gpu, clock);
                if let Some(p) = self.profile.borrow_mut().as_mut() {
                    let e = p.entry(node.op_type.clone()).or_default();
                    e.runs += 1;
                    e.dispatches += self.gpu.counters.dispatches.get() - before;
                    e.micros += micros;
                }
            }
            drop(ins);
            for (vid, v) in self.node_out[n].iter().zip(outs) {
                env[*vid] = Some(v);
            }
            for v in &self.frees[step] {
                env[*v] = None;
                run_copies.remove(v);
            }
        }
        self.gpu.take_error()?;
        let mut out = Vec::new();
        for o in &self.graph.outputs {
            let id = self.ids[&o.name];
            let v = env[id]
                .take()
                .or_else(|| self.consts[id].clone())
                .ok_or_else(|| Error::Invalid(format!("output {} was not produced", o.name)))?;
            out.push((o.name.clone(), v));
        }
        Ok(out)
    }

    /// Reads a value back to the host (counted in `bytes_read_back`).
    pub async fn read(&self, v: &Value) -> Result<HostTensor> {
        let mut cx = Ctx::new(
            &self.gpu,
            self.pool.clone(),
            &self.meta_buf,
            &self.bind_groups,
        );
        cx.to_host(v).await
    }

    /// A recording context on this session's GPU, buffer pool and parameter arena, for callers'
    /// own kernels on the session's outputs (e.g. sampling the next token from GPU logits).
    /// Work recorded into it is submitted by [`Ctx::flush`] or [`Ctx::download`]; tensors it
    /// allocates return to this session's pool when dropped.
    pub fn context(&self) -> Ctx<'_> {
        Ctx::new(
            &self.gpu,
            self.pool.clone(),
            &self.meta_buf,
            &self.bind_groups,
        )
    }

    /// Runs with host inputs and reads every output back.
    pub async fn run_host(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        let outs = self
            .run(
                inputs
                    .into_iter()
                    .map(|(n, t)| (n, Value::Host(t)))
                    .collect(),
            )
            .await?;
        let mut res = Vec::with_capacity(outs.len());
        for (n, v) in outs {
            let h = self.read(&v).await?;
            res.push((n, h));
        }
        Ok(res)
    }
}

/// One row range of a weight: (first byte, byte length, first row, rows, buffer).
/// Where a range of a weight's bytes lives on the GPU.
struct Part {
    /// First byte of the weight in this part, and bytes.
    start: u64,
    len: u64,
    /// First row and rows (along axis 0).
    r0: usize,
    rows: usize,
    buf: Rc<crate::exec::PooledBuffer>,
    /// First byte of the part in `buf`, and the bytes it may fill there (the whole buffer, or
    /// its slot of a packed buffer).
    at: u64,
    slot: u64,
    /// `buf` is shared with other weights (the tensor is a view of it).
    packed: bool,
}

/// Writes `data` at tensor byte offset `at`, routed to the parts that cover it.
fn write_parts(queue: &wgpu::Queue, parts: &[Part], mut at: u64, mut data: &[u8]) {
    while !data.is_empty() {
        let Some(p) = parts.iter().find(|p| at >= p.start && at < p.start + p.len) else {
            // Padding past the last part (tensor sizes are padded to whole words).
            if let Some(p) = parts.last() {
                let off = at.saturating_sub(p.start);
                if off < p.slot {
                    let n = ((p.slot - off) as usize).min(data.len());
                    queue.write_buffer(&p.buf.buffer, p.at + off, &data[..n]);
                }
            }
            return;
        };
        let n = ((p.start + p.len - at) as usize).min(data.len());
        queue.write_buffer(&p.buf.buffer, p.at + at - p.start, &data[..n]);
        at += n as u64;
        data = &data[n..];
    }
}

fn fmt_dims(d: &[Dim]) -> String {
    d.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn topo_order(
    n: usize,
    node_in: &[Vec<Option<usize>>],
    node_out: &[Vec<usize>],
) -> Result<Vec<usize>> {
    let mut producer: HashMap<usize, usize> = HashMap::new();
    for (n, outs) in node_out.iter().enumerate() {
        for &v in outs {
            producer.insert(v, n);
        }
    }
    let mut indeg = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ins) in node_in.iter().enumerate() {
        for v in ins.iter().flatten() {
            if let Some(&p) = producer.get(v)
                && p != i
            {
                indeg[i] += 1;
                users[p].push(i);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != n {
        return Err(Error::Invalid("the graph has a cycle".into()));
    }
    Ok(order)
}
