//! The recording context handed to ops ([`Ctx`]): allocation from the pool and uploads.

use super::ctx_record::Cmd;
use super::pool::{bucket, take};
use super::{BindGroupCache, GpuTensor, PoolState, PooledBuffer, Value, to_gpu_bytes};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, Storage};
use crate::tensor::{DType, HostTensor, numel};
use std::cell::RefCell;
use std::rc::Rc;

/// Recording context handed to ops.
pub struct Ctx<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    pub(super) pool: Rc<RefCell<PoolState>>,
    pub(super) cmds: Vec<Cmd>,
    pub(super) meta: Vec<u32>,
    pub(super) meta_buf: &'a RefCell<wgpu::Buffer>,
    pub(super) bind_groups: &'a RefCell<BindGroupCache>,
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
}
