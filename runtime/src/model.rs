//! The ONNX graph as the runtime sees it: decoded from `ModelProto` with prost, initializers kept as
//! metadata (inline bytes or an external-data reference) so that weights can be streamed later.

use crate::error::{Error, Result};
use crate::proto;
use crate::tensor::{DType, HostTensor, numel};
use prost::Message;
use std::collections::BTreeMap;

/// One dimension of a declared input/output shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(i64),
    /// A named dynamic dimension (`batch_size`, `sequence_length` ...).
    Param(String),
    /// Unknown.
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Param(p) => write!(f, "{p}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

/// A declared graph input or output.
#[derive(Debug, Clone)]
pub struct ValueInfo {
    /// Tensor name.
    pub name: String,
    /// ONNX elem type (may be unsupported, kept raw for reports).
    pub elem_type: i32,
    /// Declared shape, `None` when the model declares none.
    pub dims: Option<Vec<Dim>>,
}

impl ValueInfo {
    /// Element type, if the runtime supports it.
    pub fn dtype(&self) -> Result<DType> {
        DType::from_onnx(self.elem_type)
    }
}

/// Where an initializer's bytes live.
#[derive(Debug, Clone)]
pub enum InitData {
    /// Bytes inside the `.onnx` file (already normalised to little-endian raw bytes).
    Inline(Vec<u8>),
    /// A range of an external data file.
    External {
        /// File name relative to the model.
        location: String,
        /// Byte offset.
        offset: u64,
        /// Byte length.
        length: u64,
    },
}

/// A weight/constant tensor.
#[derive(Debug, Clone)]
pub struct Initializer {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Where the bytes are.
    pub data: InitData,
}

impl Initializer {
    /// Size in bytes.
    pub fn byte_len(&self) -> usize {
        numel(&self.shape) * self.dtype.size()
    }
}

/// A graph node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name (`#index` when the file has none).
    pub name: String,
    /// Operator type.
    pub op_type: String,
    /// Domain (`""` = ai.onnx).
    pub domain: String,
    /// Input names (`""` = optional input omitted).
    pub inputs: Vec<String>,
    /// Output names.
    pub outputs: Vec<String>,
    /// Raw attributes (each op parses its own at build time).
    pub attributes: Vec<proto::AttributeProto>,
}

/// A decoded model graph.
#[derive(Debug, Clone)]
pub struct Graph {
    /// Real graph inputs (initializers excluded).
    pub inputs: Vec<ValueInfo>,
    /// Graph outputs.
    pub outputs: Vec<ValueInfo>,
    /// Initializers.
    pub initializers: Vec<Initializer>,
    /// Nodes in file order.
    pub nodes: Vec<Node>,
    /// Opset imports: domain -> version.
    pub opsets: BTreeMap<String, i64>,
    /// Calls of model-local functions replaced by their bodies at load (see [`crate::inline`]).
    pub inlined: Vec<crate::inline::Inlined>,
}

fn value_info(v: &proto::ValueInfoProto) -> ValueInfo {
    let mut elem_type = 0;
    let mut dims = None;
    if let Some(proto::type_proto::Value::TensorType(t)) =
        v.r#type.as_ref().and_then(|t| t.value.as_ref())
    {
        elem_type = t.elem_type();
        dims = t.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(proto::tensor_shape_proto::dimension::Value::DimValue(v)) => {
                        Dim::Fixed(*v)
                    }
                    Some(proto::tensor_shape_proto::dimension::Value::DimParam(p)) => {
                        Dim::Param(p.clone())
                    }
                    None => Dim::Unknown,
                })
                .collect()
        });
    }
    ValueInfo {
        name: v.name().to_string(),
        elem_type,
        dims,
    }
}

/// Converts a `TensorProto` whose data is inline into a host tensor.
pub fn tensor_from_proto(t: &proto::TensorProto) -> Result<HostTensor> {
    match initializer_from_proto(t)? {
        Initializer {
            dtype,
            shape,
            data: InitData::Inline(bytes),
            ..
        } => HostTensor::new(dtype, shape, bytes),
        Initializer { name, .. } => Err(Error::Invalid(format!(
            "tensor {name}: external data where inline data is required"
        ))),
    }
}

fn dims_of(name: &str, dims: &[i64]) -> Result<Vec<usize>> {
    dims.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| Error::Invalid(format!("tensor {name}: negative dimension {d}")))
        })
        .collect()
}

/// An operator set domain as this crate names it: `ai.onnx` is the default domain `""`.
pub fn canonical_domain(d: &str) -> &str {
    if d == "ai.onnx" { "" } else { d }
}

/// Converts a `TensorProto` into initializer metadata.
pub fn initializer_from_proto(t: &proto::TensorProto) -> Result<Initializer> {
    let name = t.name().to_string();
    let dtype = DType::from_onnx(t.data_type()).map_err(|_| {
        Error::Invalid(format!(
            "tensor {name}: unsupported data type {} (ONNX TensorProto.DataType)",
            t.data_type()
        ))
    })?;
    let shape = dims_of(&name, &t.dims)?;
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let n = n.ok_or_else(|| Error::Invalid(format!("tensor {name}: shape {shape:?} overflows")))?;
    let byte_len = n
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::Invalid(format!("tensor {name}: too large")))?;
    if t.data_location() == proto::tensor_proto::DataLocation::External {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value();
            let num = || {
                v.parse::<u64>().map_err(|_| {
                    Error::Invalid(format!("tensor {name}: bad external {} {v:?}", kv.key()))
                })
            };
            match kv.key() {
                "location" => location = Some(v.to_string()),
                "offset" => offset = num()?,
                "length" => length = Some(num()?),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| {
            Error::Invalid(format!("tensor {name}: external data without location"))
        })?;
        let length = length.unwrap_or(byte_len as u64);
        if length != byte_len as u64 {
            return Err(Error::ExternalData {
                tensor: name,
                location,
                offset,
                length,
                reason: format!(
                    "does not match shape {shape:?} {} ({byte_len} bytes)",
                    dtype.name()
                ),
            });
        }
        return Ok(Initializer {
            name,
            dtype,
            shape,
            data: InitData::External {
                location,
                offset,
                length,
            },
        });
    }
    let bytes = if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        // Sized by the values actually present, never by the (untrusted) shape: a header that
        // claims terabytes must fail the length check below, not abort on allocation.
        let values = match dtype {
            DType::F32 => t.float_data.len(),
            DType::F64 => t.double_data.len(),
            DType::I64 => t.int64_data.len(),
            _ => t.int32_data.len(),
        };
        let mut b = Vec::with_capacity(values.saturating_mul(dtype.size()).min(byte_len));
        match dtype {
            DType::F32 => t
                .float_data
                .iter()
                .for_each(|v| b.extend_from_slice(&v.to_le_bytes())),
            DType::F64 => t
                .double_data
                .iter()
                .for_each(|v| b.extend_from_slice(&v.to_le_bytes())),
            DType::I64 => t
                .int64_data
                .iter()
                .for_each(|v| b.extend_from_slice(&v.to_le_bytes())),
            DType::I32 => t
                .int32_data
                .iter()
                .for_each(|v| b.extend_from_slice(&v.to_le_bytes())),
            DType::F16 => t
                .int32_data
                .iter()
                .for_each(|v| b.extend_from_slice(&(*v as u16).to_le_bytes())),
            DType::Bool | DType::U8 | DType::I8 => {
                t.int32_data.iter().for_each(|v| b.push(*v as u8))
            }
        }
        b
    };
    if bytes.len() != byte_len {
        return Err(Error::Invalid(format!(
            "tensor {name}: shape {shape:?} {} needs {byte_len} bytes, has {}",
            dtype.name(),
            bytes.len()
        )));
    }
    Ok(Initializer {
        name,
        dtype,
        shape,
        data: InitData::Inline(bytes),
    })
}

impl Graph {
    /// Decodes a serialised `ModelProto`.
    pub fn decode(bytes: &[u8], what: &str) -> Result<Self> {
        let m = proto::ModelProto::decode(bytes).map_err(|source| Error::Decode {
            what: what.to_string(),
            source,
        })?;
        Self::from_proto(&m)
    }

    /// Builds the graph from a decoded `ModelProto`.
    pub fn from_proto(m: &proto::ModelProto) -> Result<Self> {
        let g = m
            .graph
            .as_ref()
            .ok_or_else(|| Error::Invalid("model has no graph".into()))?;
        let mut opsets = BTreeMap::new();
        for o in &m.opset_import {
            opsets.insert(canonical_domain(o.domain()).to_string(), o.version());
        }
        let initializers = g
            .initializer
            .iter()
            .map(initializer_from_proto)
            .collect::<Result<Vec<_>>>()?;
        let init_names: std::collections::HashSet<&str> =
            initializers.iter().map(|i| i.name.as_str()).collect();
        let inputs = g
            .input
            .iter()
            .filter(|i| !init_names.contains(i.name()))
            .map(value_info)
            .collect();
        let outputs = g.output.iter().map(value_info).collect();
        // Calls of model-local functions the registry does not implement: their bodies.
        let registry = crate::ops::Registry::default();
        let (protos, inlined) = crate::inline::inline(g, &m.functions, &mut opsets, &|d, op| {
            registry.claims(d, op)
        })?;
        let nodes = protos
            .iter()
            .map(|n| Node {
                name: n.name().to_string(),
                op_type: n.op_type().to_string(),
                domain: canonical_domain(n.domain()).to_string(),
                inputs: n.input.clone(),
                outputs: n.output.clone(),
                attributes: n.attribute.clone(),
            })
            .collect();
        Ok(Self {
            inputs,
            outputs,
            initializers,
            nodes,
            opsets,
            inlined,
        })
    }

    /// Opset version of a domain (`""` = ai.onnx).
    pub fn opset(&self, domain: &str) -> i64 {
        self.opsets.get(domain).copied().unwrap_or(1)
    }

    /// Distinct external data files, in first-use order.
    pub fn external_files(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for i in &self.initializers {
            if let InitData::External { location, .. } = &i.data
                && !out.contains(location)
            {
                out.push(location.clone());
            }
        }
        out
    }

    /// Node count per (domain, op), sorted by count then name.
    pub fn op_histogram(&self) -> Vec<((String, String), usize)> {
        let mut h: BTreeMap<(String, String), usize> = BTreeMap::new();
        for n in &self.nodes {
            *h.entry((n.domain.clone(), n.op_type.clone())).or_default() += 1;
        }
        let mut v: Vec<_> = h.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// Decodes a serialised `TensorProto` (e.g. an ONNX test `input_0.pb`) into a host tensor.
pub fn decode_tensor(bytes: &[u8], what: &str) -> Result<HostTensor> {
    let t = proto::TensorProto::decode(bytes).map_err(|source| Error::Decode {
        what: what.to_string(),
        source,
    })?;
    tensor_from_proto(&t)
}
