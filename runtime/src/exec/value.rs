//! The values flowing through a run: [`Value`] (host or GPU) and [`GpuTensor`].

#[cfg(doc)]
use super::Ctx;
use super::PooledBuffer;
use crate::error::{Error, Result};
use crate::gpu::Storage;
use crate::tensor::{DType, HostTensor, numel};
use std::rc::Rc;

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
    /// The whole buffer under a view, as one tensor of this tensor's element type (so that it
    /// binds where a kernel declares this storage: the results packed into one buffer by
    /// `Ctx::alloc_pack`, written through one binding).
    pub(crate) fn whole(&self) -> GpuTensor {
        let words = self.buf.buffer.size() as usize / 4;
        GpuTensor {
            dtype: self.dtype,
            shape: vec![words * self.storage().per_word() as usize],
            buf: self.buf.clone(),
            split: None,
            view: None,
        }
    }
    /// The whole buffer under a view, as one tensor of bytes (a weight pack: quantized
    /// weights, scales and zero points in one buffer, read through one byte binding).
    pub(crate) fn whole_bytes(&self) -> GpuTensor {
        GpuTensor {
            dtype: DType::U8,
            shape: vec![self.buf.buffer.size() as usize],
            ..self.whole()
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
