//! Gemma Gem runtime: executes ONNX graphs on WebGPU through wgpu, natively and in the browser.
//!
//! Entry points: [`model::Graph::decode`] (parse), [`ops::Registry`] (what is supported),
//! [`session::Session`] (load weights from a [`source::DataSource`] and run on a [`gpu::Gpu`]).

pub mod error;
pub mod exec;
pub mod fuse;
pub mod gpu;
pub mod inline;
pub mod model;
pub mod npy;
pub mod ops;
pub mod proto;
pub mod session;
pub mod source;
pub mod tensor;
pub mod tuning;

pub use error::{Error, Result};
pub use exec::{GpuTensor, Value};
pub use gpu::Gpu;
pub use session::{OpProfile, Session, SessionOptions};
pub use tensor::{DType, HostTensor};
pub use tuning::Tuning;
