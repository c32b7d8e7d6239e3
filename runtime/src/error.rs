//! Errors of the runtime. Every variant names the culprit (file, tensor, node, input) so that a
//! one-line message is enough to act on.

use crate::tensor::DType;

/// One node whose operator the registry does not implement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// Operator domain (`""` is the default ONNX domain, shown as `ai.onnx`).
    pub domain: String,
    /// Operator type, e.g. `MatMulNBits`.
    pub op: String,
    /// Node name (or `#index` when the node has no name).
    pub node: String,
    /// Why it is unsupported (unknown op, bad attribute ...).
    pub reason: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let domain = if self.domain.is_empty() {
            "ai.onnx"
        } else {
            &self.domain
        };
        write!(f, "{domain} {} {}", self.op, self.node)
    }
}

/// Runtime error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The protobuf could not be decoded (truncated or not an ONNX model).
    #[error("{what}: not a valid ONNX protobuf ({source}); is the file complete?")]
    Decode {
        /// What was being decoded.
        what: String,
        /// Decoder error.
        #[source]
        source: prost::DecodeError,
    },
    /// A tuning variable (`GG_*`, [`crate::Tuning::from_env`]) has a value it cannot take.
    #[error("bad tuning variable {0}")]
    Tuning(String),
    /// The model is structurally invalid.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// An initializer's external data is missing or out of range.
    #[error("tensor {tensor}: external data {location} [{offset}, +{length}) {reason}")]
    ExternalData {
        /// Initializer name.
        tensor: String,
        /// Data file.
        location: String,
        /// Byte offset.
        offset: u64,
        /// Byte length.
        length: u64,
        /// What is wrong.
        reason: String,
    },
    /// Ops the registry does not implement, all of them.
    #[error("{} unsupported node(s): {}", .0.len(), .0.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", "))]
    Unsupported(Vec<Unsupported>),
    /// A tensor data type the runtime does not handle.
    #[error("unsupported data type {0} (ONNX TensorProto.DataType)")]
    DataType(i32),
    /// A graph input was given a bad value or is missing.
    #[error("input {name}: {reason}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An op failed at run time (shapes, dtypes, values).
    #[error("node {node} ({op}): {reason}")]
    Op {
        /// Node name.
        node: String,
        /// Operator type.
        op: String,
        /// What went wrong.
        reason: String,
    },
    /// A dtype mismatch.
    #[error("{context}: expected {expected:?}, got {got:?}")]
    DTypeMismatch {
        /// Where.
        context: String,
        /// Expected dtype.
        expected: DType,
        /// Actual dtype.
        got: DType,
    },
    /// GPU failures (no adapter, device lost, mapping failed).
    #[error("GPU: {0}")]
    Gpu(String),
    /// A `.npy` file could not be parsed or written.
    #[error("{path}: npy: {reason}")]
    Npy {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for an op error without node context (filled in by the executor).
pub fn op_err(reason: impl Into<String>) -> Error {
    Error::Op {
        node: String::new(),
        op: String::new(),
        reason: reason.into(),
    }
}
