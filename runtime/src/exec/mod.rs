//! Execution state shared by all ops during a run: values (host or GPU), the buffer pool, the
//! per-dispatch parameter arena, command recording and read-back.

mod bind_cache;
mod bytes;
mod ctx;
mod ctx_record;
mod pool;
mod readback;
mod value;

pub(crate) use bind_cache::BindGroupCache;
pub use bytes::{f16_bytes, from_gpu_bytes, to_gpu_bytes};
pub use ctx::Ctx;
pub(crate) use ctx::HostCopy;
pub(crate) use pool::{PoolState, PooledBuffer};
pub use readback::PendingRead;
pub use value::{GpuTensor, Value};
