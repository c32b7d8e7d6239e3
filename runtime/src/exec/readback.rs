//! Read-back from the GPU: [`Ctx::download`], [`Ctx::read_later`] and [`PendingRead`].

use super::ctx_record::Cmd;
use super::pool::{bucket, take};
use super::{Ctx, GpuTensor, PoolState, Value, from_gpu_bytes};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::tensor::{DType, HostTensor};
use std::cell::RefCell;
use std::rc::Rc;

impl<'a> Ctx<'a> {
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
