//! Execution state shared by all ops during a run: values (host or GPU), the buffer pool, the
//! per-dispatch parameter arena, command recording and read-back.

use crate::error::{Error, Result};
use crate::gpu::{Gpu, Kernel, Storage};
use crate::tensor::{DType, HostTensor, numel};
use half::f16;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

/// A tensor on the GPU. Cloning shares the buffer (reshapes are free).
#[derive(Clone)]
pub struct GpuTensor {
    /// Element type (I64 tensors are held as i32 words).
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    pub(crate) buf: Rc<PooledBuffer>,
    /// Set for a weight above the adapter's binding limit: its row ranges `(first row, part)`
    /// along axis 0, each in its own buffer (`buf` is then the first part). Only ops that
    /// understand row ranges (MatMulNBits, GatherBlockQuantized) accept such tensors.
    pub(crate) split: Option<Rc<Vec<(usize, GpuTensor)>>>,
    /// Set for a tensor that is a range of a shared buffer (`(first byte, bytes)`, the first
    /// byte aligned to the adapter's storage offset alignment): weights packed together for a
    /// fused kernel, and a fused kernel's outputs written through one binding. Bound as that
    /// range; `None`: the whole buffer.
    pub(crate) view: Option<(u64, u64)>,
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuTensor({:?} {:?})", self.dtype, self.shape)
    }
}

impl GpuTensor {
    /// The underlying buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buf.buffer
    }
    /// The range this tensor binds (first byte, bytes): its view, or the whole buffer.
    pub(crate) fn range(&self) -> (u64, u64) {
        self.view.unwrap_or((0, self.buf.buffer.size()))
    }
    /// First byte of this tensor in its buffer.
    pub(crate) fn byte_offset(&self) -> u64 {
        self.view.map_or(0, |(o, _)| o)
    }
    /// Whether `self` and `other` are ranges of one buffer.
    pub(crate) fn shares_buffer(&self, other: &GpuTensor) -> bool {
        Rc::ptr_eq(&self.buf, &other.buf)
    }
    /// The whole buffer under a view, as one tensor of bytes.
    pub(crate) fn whole(&self) -> GpuTensor {
        GpuTensor {
            dtype: DType::U8,
            shape: vec![self.buf.buffer.size() as usize],
            buf: self.buf.clone(),
            split: None,
            view: None,
        }
    }
    /// Storage layout.
    pub fn storage(&self) -> Storage {
        Storage::of(self.dtype).unwrap_or(Storage::F32)
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }
    /// Whether this tensor is the only holder of its whole buffer: no clone, view or pack
    /// member, no caller and no session constant refers to it, so an op may write into it and
    /// hand it on as its result. [`crate::Session::run`] moves a value into the last node that
    /// reads it, so a graph input its caller gave away (the generator's KV cache) arrives
    /// there held by that node's inputs alone.
    pub(crate) fn is_sole_owner(&self) -> bool {
        self.view.is_none() && self.split.is_none() && Rc::strong_count(&self.buf) == 1
    }
    /// Bytes of the buffer (at least what the shape needs: pool buckets and
    /// [`Ctx::alloc_spare`] leave room after it).
    pub(crate) fn capacity(&self) -> u64 {
        self.buf.buffer.size()
    }
    /// The same buffer as a tensor of `shape`, which may be larger than this tensor's as long
    /// as the buffer holds it (a cache grown in place; see [`GpuTensor::is_sole_owner`]).
    pub(crate) fn regrown(&self, shape: Vec<usize>) -> Result<Self> {
        let need = self.storage().bytes(numel(&shape));
        if self.view.is_some() || self.split.is_some() || need > self.capacity() {
            return Err(Error::Gpu(format!(
                "cannot grow {:?} to {shape:?} in its buffer of {} bytes",
                self.shape,
                self.capacity()
            )));
        }
        Ok(Self {
            dtype: self.dtype,
            shape,
            buf: self.buf.clone(),
            split: None,
            view: None,
        })
    }
    /// Same buffer, new shape (element count must match).
    pub fn reshaped(&self, shape: Vec<usize>) -> Self {
        Self {
            dtype: self.dtype,
            shape,
            buf: self.buf.clone(),
            split: self.split.clone(),
            view: self.view,
        }
    }
}

/// A buffer that returns to its pool when the last tensor using it is dropped.
pub(crate) struct PooledBuffer {
    pub(crate) buffer: wgpu::Buffer,
    size: u64,
    pool: Option<Weak<RefCell<PoolState>>>,
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
    clean: Vec<(u64, wgpu::Buffer)>,
    dirty: Vec<(u64, wgpu::Buffer)>,
    staging: Vec<(u64, wgpu::Buffer)>,
}

impl PoolState {
    /// Makes the freed buffers writable (nothing pending references them) and orders the free
    /// list (size, then buffer identity) whatever order they were freed in: a run repeating the
    /// one before then gets the same buffers.
    fn settle(&mut self) {
        if !self.dirty.is_empty() {
            let dirty = std::mem::take(&mut self.dirty);
            self.clean.extend(dirty);
            self.clean.sort_unstable();
        }
    }
}

fn bucket(size: u64) -> u64 {
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
fn take(list: &mut Vec<(u64, wgpu::Buffer)>, size: u64) -> Option<(u64, wgpu::Buffer)> {
    let pos = list.iter().rposition(|(s, _)| *s == size)?;
    Some(list.remove(pos))
}

/// A value flowing through the graph.
#[derive(Debug, Clone)]
pub enum Value {
    /// On the host (shape arithmetic, int64, small constants).
    Host(HostTensor),
    /// On the GPU.
    Gpu(GpuTensor),
}

impl Value {
    /// Element type.
    pub fn dtype(&self) -> DType {
        match self {
            Value::Host(t) => t.dtype,
            Value::Gpu(t) => t.dtype,
        }
    }
    /// Shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Value::Host(t) => &t.shape,
            Value::Gpu(t) => &t.shape,
        }
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(self.shape())
    }
    /// The host tensor, if on the host.
    pub fn host(&self) -> Option<&HostTensor> {
        match self {
            Value::Host(t) => Some(t),
            Value::Gpu(_) => None,
        }
    }
}

enum Cmd {
    Dispatch {
        pipeline: Rc<crate::gpu::Pipeline>,
        group: wgpu::BindGroup,
        wg: (u32, u32),
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

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
    groups: HashMap<BindGroupKey, (wgpu::BindGroup, u64, Rc<crate::gpu::Pipeline>)>,
    /// Submits with dispatches so far.
    epoch: u64,
}

/// A bind group's pipeline (by address; the entry holds it) and its buffer ranges in binding
/// order, the parameter slot last.
#[derive(PartialEq, Eq, Hash)]
struct BindGroupKey {
    pipeline: usize,
    ranges: Vec<(wgpu::Buffer, u64, u64)>,
}

/// Submits with dispatches after which an unused bind group is dropped.
const BIND_GROUP_FLUSHES: u64 = 2;
/// Bind groups a cache holds at most.
const BIND_GROUP_ENTRIES: usize = 4096;

impl BindGroupCache {
    fn end_epoch(&mut self) {
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

/// Words reserved per dispatch in the parameter arena (256-byte aligned slots).
const META_ALIGN_WORDS: usize = 64;

/// Recording context handed to ops.
pub struct Ctx<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    pool: Rc<RefCell<PoolState>>,
    cmds: Vec<Cmd>,
    meta: Vec<u32>,
    meta_buf: &'a RefCell<wgpu::Buffer>,
    bind_groups: &'a RefCell<BindGroupCache>,
    /// The host values among the inputs of the node being run (see [`HostCopy`]).
    pub(crate) host_copies: Vec<HostCopy>,
}

/// A host value given to the node being run, and the GPU copy the session keeps of it:
/// [`Ctx::upload`] returns that copy instead of uploading the value again, and makes it on first
/// use. For a constant (a small initializer kept on the host for the ops that read it there) the
/// copy lasts as long as the session, in a buffer of its own; for any other host value (the
/// attention mask, values computed on the host) it lasts the run, in a pooled buffer, so that
/// every node reading it shares one upload. The value is recognised by the address and length of
/// its bytes in the node's inputs.
pub(crate) struct HostCopy {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    /// The value's id in the session.
    pub(crate) id: usize,
    /// A constant: the copy is kept for the session.
    pub(crate) lasting: bool,
    pub(crate) gpu: Option<GpuTensor>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        gpu: &'a Gpu,
        pool: Rc<RefCell<PoolState>>,
        meta_buf: &'a RefCell<wgpu::Buffer>,
        bind_groups: &'a RefCell<BindGroupCache>,
    ) -> Self {
        // A new context has recorded nothing, and the contexts of one pool record one at a time
        // (as `flush` assumes when it makes every freed buffer writable): the buffers freed
        // since the last submit (the outputs a caller read and dropped) are referenced by no
        // pending command. Every run then starts from the same free list, in a fixed order.
        pool.borrow_mut().settle();
        Self {
            gpu,
            pool,
            cmds: Vec::new(),
            meta: Vec::new(),
            meta_buf,
            bind_groups,
            host_copies: Vec::new(),
        }
    }

    fn wrap(&self, size: u64, buffer: wgpu::Buffer) -> Rc<PooledBuffer> {
        Rc::new(PooledBuffer {
            buffer,
            size,
            pool: Some(Rc::downgrade(&self.pool)),
        })
    }

    /// An uninitialised GPU tensor (from the pool when possible).
    pub fn alloc(&mut self, dtype: DType, shape: Vec<usize>) -> Result<GpuTensor> {
        self.alloc_spare(dtype, shape, 0)
    }

    /// [`Ctx::alloc`] with room for at least `spare` more elements after the tensor's own (a
    /// cache that will grow in place: `GpuTensor::regrown`).
    pub fn alloc_spare(
        &mut self,
        dtype: DType,
        shape: Vec<usize>,
        spare: usize,
    ) -> Result<GpuTensor> {
        let storage = Storage::of(dtype).ok_or_else(|| {
            Error::Gpu(format!("{} tensors cannot live on the GPU", dtype.name()))
        })?;
        let size = bucket(storage.bytes(numel(&shape).saturating_add(spare)));
        self.check_size(size)?;
        let found = {
            let mut p = self.pool.borrow_mut();
            take(&mut p.dirty, size).or_else(|| take(&mut p.clean, size))
        };
        let (size, buffer) = match found {
            Some(b) => b,
            None => (size, self.gpu.create_buffer(size, "pool")),
        };
        Ok(GpuTensor {
            dtype,
            shape,
            buf: self.wrap(size, buffer),
            split: None,
            view: None,
        })
    }

    /// Records a copy of `src`'s bytes (its whole range) to the start of `dst`'s range, in order
    /// with the dispatches around it. Both ranges must start and end on 4-byte boundaries, and
    /// `dst`'s buffer must hold them at that offset.
    pub fn copy(&mut self, src: &GpuTensor, dst: &GpuTensor) -> Result<()> {
        let (so, bytes) = (src.byte_offset(), src.storage().bytes(src.numel()));
        let (d_off, d_cap) = match dst.view {
            Some(v) => v,
            None => (0, dst.capacity()),
        };
        if src.split.is_some() || dst.split.is_some() {
            return Err(Error::Invalid(
                "cannot copy tensors split into row ranges".into(),
            ));
        }
        if so % 4 != 0 || d_off % 4 != 0 || bytes % 4 != 0 || bytes > d_cap {
            return Err(Error::Invalid(format!(
                "cannot copy {src:?} ({bytes} bytes at {so}) into {dst:?} ({d_cap} bytes at {d_off})"
            )));
        }
        if bytes > 0 {
            self.cmds.push(Cmd::Copy {
                src: src.buffer().clone(),
                src_offset: so,
                dst: dst.buffer().clone(),
                dst_offset: d_off,
                size: bytes,
            });
        }
        Ok(())
    }

    /// Uninitialised GPU tensors of one element type as ranges of one pooled buffer (each
    /// starting at a multiple of the storage offset alignment), so that a kernel writing all of
    /// them binds one buffer. The buffer returns to the pool when the last of them is dropped.
    pub fn alloc_pack(&mut self, dtype: DType, shapes: &[Vec<usize>]) -> Result<Vec<GpuTensor>> {
        let storage = Storage::of(dtype).ok_or_else(|| {
            Error::Gpu(format!("{} tensors cannot live on the GPU", dtype.name()))
        })?;
        let align = u64::from(self.gpu.limits.min_storage_buffer_offset_alignment).max(4);
        let mut ranges = Vec::new();
        let mut end = 0u64;
        for s in shapes {
            let len = storage.bytes(numel(s)).max(4).next_multiple_of(4);
            ranges.push((end, len));
            end = (end + len).next_multiple_of(align);
        }
        let whole = self.alloc(DType::U8, vec![end as usize])?;
        Ok(shapes
            .iter()
            .zip(ranges)
            .map(|(s, r)| GpuTensor {
                dtype,
                shape: s.clone(),
                buf: whole.buf.clone(),
                split: None,
                view: Some(r),
            })
            .collect())
    }

    fn check_size(&self, size: u64) -> Result<()> {
        let max = self
            .gpu
            .limits
            .max_storage_buffer_binding_size
            .min(self.gpu.limits.max_buffer_size);
        if size > max {
            return Err(Error::Gpu(format!(
                "tensor of {size} bytes exceeds the adapter's binding limit of {max} bytes"
            )));
        }
        Ok(())
    }

    /// Uploads a host tensor (int64 narrowed to i32, bool widened to words, f16 packed). A
    /// host value among the inputs of the node being run is uploaded once: its copy is reused
    /// (for the session when it is a constant, for the run otherwise; see `HostCopy`).
    pub fn upload(&mut self, t: &HostTensor) -> Result<GpuTensor> {
        let (addr, len) = (t.data.as_ptr() as usize, t.data.len());
        let known = self
            .host_copies
            .iter()
            .position(|c| len > 0 && c.addr == addr && c.len == len);
        let Some(i) = known else {
            return self.upload_buffer(t, false);
        };
        if let Some(g) = &self.host_copies[i].gpu
            && g.dtype == t.dtype
            && g.shape == t.shape
        {
            return Ok(g.clone());
        }
        let g = self.upload_buffer(t, self.host_copies[i].lasting)?;
        self.host_copies[i].gpu = Some(g.clone());
        Ok(g)
    }

    /// Uploads a host tensor into a pooled buffer, or (`lasting`) into a buffer of its own that
    /// never returns to the pool.
    fn upload_buffer(&mut self, t: &HostTensor, lasting: bool) -> Result<GpuTensor> {
        let bytes = to_gpu_bytes(t)?;
        let storage = Storage::of(t.dtype).ok_or_else(|| {
            Error::Gpu(format!("{} tensors cannot live on the GPU", t.dtype.name()))
        })?;
        if lasting {
            let buffer = self.gpu.create_buffer(storage.bytes(t.numel()), "constant");
            self.write_upload(&buffer, &bytes);
            return Ok(GpuTensor {
                dtype: t.dtype,
                shape: t.shape.clone(),
                buf: PooledBuffer::unpooled(buffer),
                split: None,
                view: None,
            });
        }
        let size = bucket(storage.bytes(t.numel()));
        self.check_size(size)?;
        let found = take(&mut self.pool.borrow_mut().clean, size);
        let (size, buffer) = match found {
            Some(b) => b,
            None => (size, self.gpu.create_buffer(size, "upload")),
        };
        self.write_upload(&buffer, &bytes);
        Ok(GpuTensor {
            dtype: t.dtype,
            shape: t.shape.clone(),
            buf: self.wrap(size, buffer),
            split: None,
            view: None,
        })
    }

    /// Writes `bytes` to the start of `buffer` (counted).
    fn write_upload(&self, buffer: &wgpu::Buffer, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.gpu.queue.write_buffer(buffer, 0, bytes);
            self.gpu.count_upload(bytes.len() as u64);
        }
    }

    /// Moves a value to the GPU (host values are uploaded).
    pub fn to_gpu(&mut self, v: &Value) -> Result<GpuTensor> {
        match v {
            Value::Gpu(t) => Ok(t.clone()),
            Value::Host(h) => self.upload(h),
        }
    }

    /// Records a dispatch of `kernel` over `invocations` invocations (2-D grid when needed).
    /// `tensors` are bound in kernel declaration order; `meta` becomes the `meta` binding.
    pub fn dispatch(
        &mut self,
        kernel: &Kernel,
        tensors: &[&GpuTensor],
        meta: &[u32],
        invocations: u64,
    ) -> Result<()> {
        if tensors.len() != kernel.n_bindings() {
            return Err(Error::Gpu(format!(
                "kernel {}: {} tensors for {} bindings",
                kernel.name(),
                tensors.len(),
                kernel.n_bindings()
            )));
        }
        let wg_size = u64::from(kernel_wg(kernel));
        let groups = invocations.div_ceil(wg_size);
        if groups == 0 {
            return Ok(());
        }
        let maxd = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension);
        let (x, y) = if groups <= maxd {
            (groups, 1)
        } else {
            (maxd, groups.div_ceil(maxd))
        };
        if y > maxd {
            return Err(Error::Gpu(format!(
                "kernel {}: {invocations} invocations exceed the grid limits",
                kernel.name()
            )));
        }
        self.dispatch_groups(kernel, tensors, meta, (x as u32, y as u32))
    }

    /// Records a dispatch with an explicit workgroup grid.
    pub fn dispatch_groups(
        &mut self,
        kernel: &Kernel,
        tensors: &[&GpuTensor],
        meta: &[u32],
        wg: (u32, u32),
    ) -> Result<()> {
        if wg.0 == 0 || wg.1 == 0 {
            return Ok(());
        }
        if meta.len() > crate::gpu::PARAM_WORDS {
            return Err(Error::Gpu(format!(
                "kernel {}: {} parameter words exceed {}",
                kernel.name(),
                meta.len(),
                crate::gpu::PARAM_WORDS
            )));
        }
        let pipeline = self.gpu.pipeline(kernel)?;
        let meta_words = meta.len().max(1).next_multiple_of(META_ALIGN_WORDS);
        let cap_words = (self.meta_buf.borrow().size() / 4) as usize;
        if self.meta.len() + meta_words > cap_words {
            self.flush();
            if meta_words > cap_words {
                let new = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("meta arena"),
                    size: (meta_words * 4).next_power_of_two() as u64,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                *self.meta_buf.borrow_mut() = new;
            }
        }
        if self.meta.capacity() == 0 {
            // A step's parameters fill much of the arena: reserve it once, not by doubling.
            self.meta.reserve(cap_words.max(meta_words));
            self.cmds.reserve(128);
        }
        let off = self.meta.len();
        self.meta.extend_from_slice(meta);
        self.meta.resize(off + meta_words, 0);
        let meta_buf = self.meta_buf.borrow();
        let meta_range = ((off * 4) as u64, (meta_words * 4) as u64);
        let mut ranges: Vec<(wgpu::Buffer, u64, u64)> = Vec::with_capacity(tensors.len() + 1);
        ranges.extend(tensors.iter().map(|t| {
            let (offset, size) = t.range();
            (t.buf.buffer.clone(), offset, size)
        }));
        ranges.push((meta_buf.clone(), meta_range.0, meta_range.1));
        let key = BindGroupKey {
            pipeline: Rc::as_ptr(&pipeline) as usize,
            ranges,
        };
        let mut cache = self.bind_groups.borrow_mut();
        let epoch = cache.epoch;
        let group = match cache.groups.get_mut(&key) {
            Some((group, used, _)) => {
                *used = epoch;
                group.clone()
            }
            None => {
                let entries: Vec<wgpu::BindGroupEntry<'_>> = key
                    .ranges
                    .iter()
                    .enumerate()
                    .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset: *offset,
                            size: std::num::NonZeroU64::new(*size),
                        }),
                    })
                    .collect();
                let group = self
                    .gpu
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(kernel.name()),
                        layout: &pipeline.layout,
                        entries: &entries,
                    });
                self.gpu
                    .counters
                    .bind_groups_created
                    .set(self.gpu.counters.bind_groups_created.get() + 1);
                cache
                    .groups
                    .insert(key, (group.clone(), epoch, pipeline.clone()));
                group
            }
        };
        drop(cache);
        drop(meta_buf);
        self.gpu.count_dispatch();
        self.cmds.push(Cmd::Dispatch {
            pipeline,
            group,
            wg,
        });
        Ok(())
    }

    /// Submits everything recorded so far (one submit); returns its index (`None`: nothing was
    /// recorded, nothing submitted).
    pub fn flush(&mut self) -> Option<wgpu::SubmissionIndex> {
        if self.cmds.is_empty() {
            return None;
        }
        if !self.meta.is_empty() {
            self.gpu.queue.write_buffer(
                &self.meta_buf.borrow(),
                0,
                bytemuck::cast_slice(&self.meta),
            );
        }
        let mut enc = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("run") });
        let cmds = std::mem::take(&mut self.cmds);
        // Reads (copies alone) do not age the bind groups.
        let dispatched = cmds.iter().any(|c| matches!(c, Cmd::Dispatch { .. }));
        let mut i = 0;
        while i < cmds.len() {
            match &cmds[i] {
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => {
                    enc.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size);
                    i += 1;
                }
                Cmd::Dispatch { .. } => {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    });
                    while let Some(Cmd::Dispatch {
                        pipeline,
                        group,
                        wg,
                    }) = cmds.get(i)
                    {
                        pass.set_pipeline(&pipeline.pipeline);
                        pass.set_bind_group(0, group, &[]);
                        pass.dispatch_workgroups(wg.0, wg.1, 1);
                        i += 1;
                    }
                }
            }
        }
        let index = self.gpu.queue.submit(Some(enc.finish()));
        self.gpu.count_submit();
        if dispatched {
            self.bind_groups.borrow_mut().end_epoch();
        }
        self.meta.clear();
        self.pool.borrow_mut().settle();
        Some(index)
    }

    /// Copies a GPU tensor back to the host (submits pending work first).
    pub async fn download(&mut self, t: &GpuTensor) -> Result<HostTensor> {
        if let Some(parts) = &t.split {
            let mut data = Vec::new();
            for (_, p) in parts.iter() {
                data.extend(Box::pin(self.download(p)).await?.data);
            }
            return HostTensor::new(t.dtype, t.shape.clone(), data);
        }
        self.read_later(t)?.wait().await
    }

    /// Starts copying a GPU tensor back to the host: records the copy, submits everything
    /// recorded so far and requests the mapping, without waiting. The returned read completes
    /// when the GPU has done this submit; work submitted after it (the next step, recorded
    /// meanwhile) does not delay it. Not for tensors split into row ranges (see
    /// [`Ctx::download`]).
    pub fn read_later(&mut self, t: &GpuTensor) -> Result<PendingRead<'a>> {
        if t.split.is_some() {
            return Err(Error::Invalid(format!(
                "{t:?} is split into row ranges; download it instead"
            )));
        }
        let n = t.numel();
        let storage = t.storage();
        let bytes = storage.bytes(n);
        let size = bucket(bytes);
        let found = take(&mut self.pool.borrow_mut().staging, size);
        let staging = match found {
            Some((_, b)) => b,
            None => {
                self.gpu
                    .counters
                    .buffers_created
                    .set(self.gpu.counters.buffers_created.get() + 1);
                self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            }
        };
        self.cmds.push(Cmd::Copy {
            src: t.buffer().clone(),
            src_offset: t.byte_offset(),
            dst: staging.clone(),
            dst_offset: 0,
            size: bytes,
        });
        let submission = self.flush();
        let (tx, rx) = futures::channel::oneshot::channel();
        staging
            .slice(..bytes)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        Ok(PendingRead {
            gpu: self.gpu,
            pool: self.pool.clone(),
            staging: (size, staging),
            bytes,
            dtype: t.dtype,
            shape: t.shape.clone(),
            submission,
            rx,
        })
    }

    /// The value on the host (downloading GPU tensors).
    pub async fn to_host(&mut self, v: &Value) -> Result<HostTensor> {
        match v {
            Value::Host(h) => Ok(h.clone()),
            Value::Gpu(t) => self.download(t).await,
        }
    }
}

/// A read-back in flight (see [`Ctx::read_later`]): the copy is submitted and the mapping
/// requested. Dropping it without [`PendingRead::wait`] abandons the read (its staging buffer is
/// released, not reused).
pub struct PendingRead<'a> {
    gpu: &'a Gpu,
    pool: Rc<RefCell<PoolState>>,
    staging: (u64, wgpu::Buffer),
    bytes: u64,
    dtype: DType,
    shape: Vec<usize>,
    submission: Option<wgpu::SubmissionIndex>,
    rx: futures::channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
}

impl std::fmt::Debug for PendingRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingRead({:?} {:?})", self.dtype, self.shape)
    }
}

impl PendingRead<'_> {
    /// Waits for the copy (natively: for its submit only, not for work submitted after it;
    /// in the browser the mapping resolves on the event loop) and returns the tensor.
    pub async fn wait(self) -> Result<HostTensor> {
        let PendingRead {
            gpu,
            pool,
            staging: (size, staging),
            bytes,
            dtype,
            shape,
            submission,
            rx,
        } = self;
        gpu.poll_until(submission);
        rx.await
            .map_err(|_| Error::Gpu("read-back was cancelled (device lost?)".into()))?
            .map_err(|e| Error::Gpu(format!("read-back failed: {e}")))?;
        gpu.take_error()?;
        let raw = staging
            .slice(..bytes)
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("read-back mapping failed: {e}")))?
            .to_vec();
        staging.unmap();
        pool.borrow_mut().staging.push((size, staging));
        gpu.count_read_back(bytes);
        from_gpu_bytes(dtype, shape, &raw)
    }
}

fn kernel_wg(k: &Kernel) -> u32 {
    k.workgroup_size()
}

/// A 128-bit hash of everything about an op's inputs that the WGSL an op writes for them can
/// depend on: per input its presence, element type and shape; for a host value its bytes when
/// small (graph scalars, indices; larger host data is only uploaded); for a GPU tensor its byte
/// offset, whether it is a view, its row split, and which earlier input (if any) shares its
/// buffer. Ops that make their kernel's code from their inputs keep the last kernel under this
/// key ([`KernelMemo`]), so that a decode step, whose inputs look the same every time, does not
/// write and hash the code again.
pub(crate) fn input_signature(inputs: &[Option<&Value>]) -> u128 {
    use std::hash::Hash;
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    inputs.len().hash(&mut h);
    for (i, v) in inputs.iter().enumerate() {
        match v {
            None => 0u8.hash(&mut h),
            Some(Value::Host(t)) => {
                1u8.hash(&mut h);
                (t.dtype, &t.shape).hash(&mut h);
                if t.data.len() <= 256 {
                    t.data.hash(&mut h);
                }
            }
            Some(Value::Gpu(t)) => {
                2u8.hash(&mut h);
                (t.dtype, &t.shape, t.view.map(|(o, _)| o)).hash(&mut h);
                let shared = inputs[..i].iter().position(|u| match u {
                    Some(Value::Gpu(u)) => u.shares_buffer(t),
                    _ => false,
                });
                shared.hash(&mut h);
                if let Some(parts) = &t.split {
                    for (r0, p) in parts.iter() {
                        (r0, &p.shape, p.view.map(|(o, _)| o)).hash(&mut h);
                    }
                }
            }
        }
    }
    h.digest128()
}

/// An op's last generated kernel, under the [`input_signature`] of the inputs it was made for.
/// In debug builds the op makes the kernel anyway and checks it against the memo (see
/// [`KernelMemo::check`]), so that the tests catch an input the signature misses.
#[derive(Default)]
pub(crate) struct KernelMemo(RefCell<Option<(u128, Rc<Kernel>)>>);

impl KernelMemo {
    /// The kernel made for inputs with signature `sig`, if it is the last one.
    pub(crate) fn get(&self, sig: u128) -> Option<Rc<Kernel>> {
        match &*self.0.borrow() {
            Some((s, k)) if *s == sig => Some(k.clone()),
            _ => None,
        }
    }

    /// Whether the op must write the kernel's code: on a miss, and always in debug builds.
    pub(crate) fn must_build(hit: &Option<Rc<Kernel>>) -> bool {
        hit.is_none() || cfg!(debug_assertions)
    }

    /// The kernel to run: the memo's (checked against the one just made, in debug builds), or
    /// `built`, which becomes the memo.
    pub(crate) fn check(&self, sig: u128, hit: Option<Rc<Kernel>>, built: Kernel) -> Rc<Kernel> {
        kept_or_built(hit, built, |k| *self.0.borrow_mut() = Some((sig, k)))
    }
}

/// `hit` (in debug builds asserted to have the key of `built`, the kernel made now: a
/// signature or recipe that misses something the code depends on fails the tests), or else
/// `built`, handed to `keep`.
fn kept_or_built(
    hit: Option<Rc<Kernel>>,
    built: Kernel,
    keep: impl FnOnce(Rc<Kernel>),
) -> Rc<Kernel> {
    match hit {
        Some(k) => {
            if cfg!(debug_assertions) {
                assert_eq!(
                    k.key(),
                    built.key(),
                    "kernel {}: the code kept for these inputs differs from the code made now",
                    built.name()
                );
            }
            k
        }
        None => {
            let k = Rc::new(built);
            keep(k.clone());
            k
        }
    }
}

/// Kernels kept under an op's own recipe key (a hash of what its code depends on), shared by
/// every instance of the op: e.g. all sliding-window layers' attention runs one kernel, made
/// once. [`recipe_kernel`] looks one up; [`recipe_keep`] keeps (or, in debug builds, checks) it.
const RECIPES_KEPT: usize = 4096;

thread_local! {
    static RECIPES: RefCell<HashMap<(&'static str, u128), Rc<Kernel>>> = RefCell::default();
}

/// A recipe key: the 128-bit hash of what a kernel's code depends on.
pub(crate) fn hash128(what: impl std::hash::Hash) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    what.hash(&mut h);
    h.digest128()
}

/// The kernel kept under `(site, recipe)`, if any. The caller then builds with
/// [`recipe_builder`] (debug builds always build, and [`recipe_keep`] compares).
pub(crate) fn recipe_kernel(site: &'static str, recipe: u128) -> Option<Rc<Kernel>> {
    RECIPES.with(|r| r.borrow().get(&(site, recipe)).cloned())
}

/// The builder for an op that collects its bindings while it builds: `Kernel::new(name, body)`
/// where [`KernelMemo::must_build`] (a miss, or a debug build), else [`Kernel::discard`].
pub(crate) fn recipe_builder(
    hit: &Option<Rc<Kernel>>,
    name: &'static str,
    body: &'static str,
) -> Kernel {
    if KernelMemo::must_build(hit) {
        Kernel::new(name, body)
    } else {
        Kernel::discard()
    }
}

/// The kernel kept under `(site, recipe)`, or the one `make` makes (kept; in debug builds
/// always made and compared, see [`recipe_keep`]): for ops whose kernel is made apart from
/// their bindings.
pub(crate) fn recipe_made(
    site: &'static str,
    recipe: u128,
    make: impl FnOnce() -> Kernel,
) -> Rc<Kernel> {
    match recipe_kernel(site, recipe) {
        Some(k) if !cfg!(debug_assertions) => k,
        hit => recipe_keep(site, recipe, hit, make()),
    }
}

/// The kernel to run for `(site, recipe)`: the one kept (checked against `built` in debug
/// builds: a recipe that misses something the code depends on fails the tests), or `built`,
/// which is kept.
pub(crate) fn recipe_keep(
    site: &'static str,
    recipe: u128,
    hit: Option<Rc<Kernel>>,
    built: Kernel,
) -> Rc<Kernel> {
    kept_or_built(hit, built, |k| {
        RECIPES.with(|r| {
            let mut r = r.borrow_mut();
            if r.len() >= RECIPES_KEPT {
                r.clear();
            }
            r.insert((site, recipe), k);
        })
    })
}

/// Host bytes as laid out on the GPU.
pub fn to_gpu_bytes(t: &HostTensor) -> Result<Vec<u8>> {
    Ok(match t.dtype {
        DType::F32 | DType::I32 => t.data.clone(),
        DType::F16 | DType::U8 | DType::I8 => {
            let mut b = t.data.clone();
            b.resize(b.len().next_multiple_of(4), 0);
            b
        }
        DType::I64 => {
            let v = t.to_i64();
            let mut b = Vec::with_capacity(v.len() * 4);
            for x in v {
                let n =
                    i32::try_from(x.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(0);
                b.extend_from_slice(&n.to_le_bytes());
            }
            b
        }
        DType::Bool => t
            .data
            .iter()
            .flat_map(|&x| u32::from(x != 0).to_le_bytes())
            .collect(),
        DType::F64 => return Err(Error::Gpu("float64 tensors cannot live on the GPU".into())),
    })
}

/// Host tensor from GPU-layout bytes.
pub fn from_gpu_bytes(dtype: DType, shape: Vec<usize>, raw: &[u8]) -> Result<HostTensor> {
    let n = numel(&shape);
    let word = |i: usize| -> [u8; 4] {
        let mut a = [0u8; 4];
        a.copy_from_slice(&raw[i * 4..i * 4 + 4]);
        a
    };
    let data = match dtype {
        DType::F32 | DType::I32 => raw[..n * 4].to_vec(),
        DType::F16 | DType::U8 | DType::I8 => raw[..n * dtype.size()].to_vec(),
        DType::I64 => (0..n)
            .flat_map(|i| i64::from(i32::from_le_bytes(word(i))).to_le_bytes())
            .collect(),
        DType::Bool => (0..n)
            .map(|i| u8::from(u32::from_le_bytes(word(i)) != 0))
            .collect(),
        DType::F64 => return Err(Error::Gpu("float64 tensors cannot live on the GPU".into())),
    };
    HostTensor::new(dtype, shape, data)
}

/// Converts f32 values to packed f16 bytes.
pub fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| f16::from_f32(*x).to_le_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(vs: &[Option<&Value>]) -> u128 {
        input_signature(vs)
    }

    #[test]
    fn input_signature_tells_apart_what_kernel_code_depends_on() {
        let s = |v: f32| Value::Host(HostTensor::from_f32(vec![1], &[v]));
        let (a, b) = (s(2.0), s(3.0));
        let row = Value::Host(HostTensor::from_f32(vec![1, 4], &[0.0; 4]));
        let col = Value::Host(HostTensor::from_f32(vec![4, 1], &[0.0; 4]));
        let wide = Value::Host(HostTensor::from_f32(vec![1, 1024], &[0.0; 1024]));
        let wide2 = Value::Host(HostTensor::from_f32(vec![1, 1024], &[1.0; 1024]));
        let half = Value::Host(HostTensor::from_f64_as(DType::F16, vec![1], &[2.0]));
        // The same inputs: the same signature.
        assert_eq!(sig(&[Some(&a), None]), sig(&[Some(&s(2.0)), None]));
        // A small host value (a graph scalar) is part of it; large host data is not.
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&b)]));
        assert_eq!(sig(&[Some(&wide)]), sig(&[Some(&wide2)]));
        // Shape, type, presence and position.
        assert_ne!(sig(&[Some(&row)]), sig(&[Some(&col)]));
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&half)]));
        assert_ne!(sig(&[Some(&a), None]), sig(&[None, Some(&a)]));
        assert_ne!(sig(&[Some(&a)]), sig(&[Some(&a), None]));
    }

    #[test]
    fn kernel_memo_keeps_the_last_kernel_under_its_signature() {
        let memo = KernelMemo::default();
        assert!(memo.get(1).is_none());
        let k = || Kernel::new("t", "fn compute(i: u32) -> f32 { return {{V}}; }");
        let made = memo.check(1, None, k().f32("V", 1.0));
        let hit = memo.get(1).expect("kept");
        assert!(Rc::ptr_eq(&made, &hit));
        assert!(memo.get(2).is_none());
        assert!(KernelMemo::must_build(&None));
        assert_eq!(
            KernelMemo::must_build(&Some(hit.clone())),
            cfg!(debug_assertions)
        );
        // The same code: the memo's kernel is run.
        let again = memo.check(1, Some(hit.clone()), k().f32("V", 1.0));
        assert!(Rc::ptr_eq(&again, &hit));
        // Different code under the same signature is a bug the debug build reports.
        if cfg!(debug_assertions) {
            let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                memo.check(1, Some(hit.clone()), k().f32("V", 2.0))
            }));
            assert!(wrong.is_err());
        }
        // A kernel's key is cached, and builder methods clear it.
        let k1 = k().f32("V", 1.0);
        let key = k1.key();
        assert_eq!(k1.clone().key(), key);
        assert_ne!(k1.u32("W", 3).key(), key);
    }
}
