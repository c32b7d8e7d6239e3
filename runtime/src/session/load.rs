//! Loading: ops built (and fused), weights streamed from the data source onto the GPU (packed,
//! split by rows, or kept on the host), as [`Session::from_graph_with`] does once per model.

use super::{Session, SessionOptions, plan};
use crate::error::{Error, Result};
use crate::exec::{GpuTensor, PoolState, Value, to_gpu_bytes};
use crate::gpu::{Gpu, Storage};
use crate::model::{Graph, InitData, Initializer};
use crate::ops::Registry;
use crate::source::DataSource;
use crate::tensor::{DType, HostTensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Initializers up to this size stay on the host (shape constants, scalars); they are uploaded
/// when a GPU kernel needs them.
const HOST_CONST_BYTES: usize = 4096;
/// Submit queued weight uploads after this many bytes, waiting for the flush before each (so
/// staging memory stays within two flushes while the reads overlap the copies).
const UPLOAD_FLUSH_BYTES: u64 = 64 << 20;

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
        let order = plan::topo_order(nodes.len(), &node_in, &node_out)?;
        // Buffer lifetimes: free each value after its last consumer (graph outputs never).
        let frees = plan::frees(&graph, &ids, &order, &node_in, &node_out);
        let steps = plan::steps(nodes, ops, node_in, node_out, &order, frees);
        let meta_buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("meta arena"),
            size: 1 << 20,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut s = Self {
            gpu,
            steps,
            fused,
            packed: HashMap::new(),
            profile: RefCell::new(None),
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
        let mut in_flight: Option<wgpu::SubmissionIndex> = None;
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
                        // Writes go to 4-byte-aligned offsets in whole words: the chunk's bytes
                        // are written from where they are; only the few bytes of a word split
                        // across chunks wait in `carry`.
                        let mut piece = piece;
                        let before = written - carry.len() as u64; // bytes of the tensor written so far
                        let mut at = before;
                        if !carry.is_empty() {
                            let need = (4 - carry.len()).min(piece.len());
                            carry.extend_from_slice(&piece[..need]);
                            piece = &piece[need..];
                            if carry.len() == 4 {
                                write_parts(&self.gpu.queue, parts, at, &carry);
                                at += 4;
                                carry.clear();
                            }
                        }
                        if carry.is_empty() {
                            let aligned = piece.len() / 4 * 4;
                            if aligned > 0 {
                                write_parts(&self.gpu.queue, parts, at, &piece[..aligned]);
                            }
                            carry.extend_from_slice(&piece[aligned..]);
                        }
                        let sent = written + take as u64 - carry.len() as u64 - before;
                        self.gpu.count_upload(sent);
                        since_flush += sent;
                    }
                }
                written += take as u64;
                if since_flush >= UPLOAD_FLUSH_BYTES {
                    // Keep one flush in flight: wait for the one before, so that reading the
                    // next bytes overlaps the copy of these (staging memory stays within two
                    // flushes).
                    let submitted = self.gpu.queue.submit(std::iter::empty());
                    if let Some(previous) = in_flight.replace(submitted) {
                        self.gpu.poll_until(Some(previous));
                    }
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
