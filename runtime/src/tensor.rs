//! Data types and host (CPU) tensors.

use crate::error::{Error, Result};
use half::f16;

/// Element types the runtime handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float (stored packed two per word on the GPU, computed in f32).
    F16,
    /// 64-bit float (host only).
    F64,
    /// 64-bit signed integer (host only: shapes and indices, narrowed to i32 on upload).
    I64,
    /// 32-bit signed integer.
    I32,
    /// Boolean (one byte on the host, one word on the GPU).
    Bool,
    /// Unsigned byte (packed weights, zero points).
    U8,
    /// Signed byte.
    I8,
}

impl DType {
    /// From ONNX `TensorProto.DataType`.
    pub fn from_onnx(t: i32) -> Result<Self> {
        Ok(match t {
            1 => Self::F32,
            2 => Self::U8,
            3 => Self::I8,
            6 => Self::I32,
            7 => Self::I64,
            9 => Self::Bool,
            10 => Self::F16,
            11 => Self::F64,
            other => return Err(Error::DataType(other)),
        })
    }

    /// To ONNX `TensorProto.DataType`.
    pub fn to_onnx(self) -> i32 {
        match self {
            Self::F32 => 1,
            Self::U8 => 2,
            Self::I8 => 3,
            Self::I32 => 6,
            Self::I64 => 7,
            Self::Bool => 9,
            Self::F16 => 10,
            Self::F64 => 11,
        }
    }

    /// Bytes per element on the host.
    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 => 8,
            Self::F32 | Self::I32 => 4,
            Self::F16 => 2,
            Self::Bool | Self::U8 | Self::I8 => 1,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F16 | Self::F64)
    }

    /// Lower-case name as used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::F64 => "float64",
            Self::I64 => "int64",
            Self::I32 => "int32",
            Self::Bool => "bool",
            Self::U8 => "uint8",
            Self::I8 => "int8",
        }
    }
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A tensor in host memory: little-endian bytes, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// `numel * dtype.size()` bytes.
    pub data: Vec<u8>,
}

impl HostTensor {
    /// Builds a tensor, checking the byte length.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self> {
        let want = numel(&shape) * dtype.size();
        if data.len() != want {
            return Err(Error::Invalid(format!(
                "tensor of shape {shape:?} {} needs {want} bytes, got {}",
                dtype.name(),
                data.len()
            )));
        }
        Ok(Self { dtype, shape, data })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, v: &[f32]) -> Self {
        Self {
            dtype: DType::F32,
            shape,
            data: bytemuck::cast_slice(v).to_vec(),
        }
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Vec<usize>, v: &[i64]) -> Self {
        Self {
            dtype: DType::I64,
            shape,
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Builds a tensor of `dtype` from i64 values (integer and bool types; floats are converted).
    pub fn from_i64_as(dtype: DType, shape: Vec<usize>, v: &[i64]) -> Self {
        if dtype.is_float() {
            let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            return Self::from_f64_as(dtype, shape, &f);
        }
        let mut data = Vec::with_capacity(v.len() * dtype.size());
        for &x in v {
            match dtype {
                DType::I64 => data.extend_from_slice(&x.to_le_bytes()),
                DType::I32 => data.extend_from_slice(&(x as i32).to_le_bytes()),
                DType::Bool => data.push(u8::from(x != 0)),
                DType::U8 => data.push(x as u8),
                DType::I8 => data.push(x as i8 as u8),
                DType::F32 | DType::F16 | DType::F64 => {}
            }
        }
        Self { dtype, shape, data }
    }

    /// Builds a tensor of `dtype` from f64 values (rounding for integer types).
    pub fn from_f64_as(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Self {
        let mut data = Vec::with_capacity(v.len() * dtype.size());
        for &x in v {
            match dtype {
                DType::F32 => data.extend_from_slice(&(x as f32).to_le_bytes()),
                DType::F16 => data.extend_from_slice(&f16::from_f64(x).to_le_bytes()),
                DType::F64 => data.extend_from_slice(&x.to_le_bytes()),
                DType::I64 => data.extend_from_slice(&(x as i64).to_le_bytes()),
                DType::I32 => data.extend_from_slice(&(x as i32).to_le_bytes()),
                DType::Bool => data.push(u8::from(x != 0.0)),
                DType::U8 => data.push(x as u8),
                DType::I8 => data.push(x as i8 as u8),
            }
        }
        Self { dtype, shape, data }
    }

    /// Values as i64 (floats truncated toward zero).
    pub fn to_i64(&self) -> Vec<i64> {
        let d = &self.data;
        match self.dtype {
            DType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(arr(c)))
                .collect(),
            DType::I32 => d
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(arr(c))))
                .collect(),
            DType::Bool | DType::U8 => d.iter().map(|&b| i64::from(b)).collect(),
            DType::I8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            DType::F32 | DType::F16 | DType::F64 => {
                self.to_f64().into_iter().map(|x| x as i64).collect()
            }
        }
    }

    /// Values as f64.
    pub fn to_f64(&self) -> Vec<f64> {
        let d = &self.data;
        match self.dtype {
            DType::F32 => d
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes(arr(c))))
                .collect(),
            DType::F16 => d
                .chunks_exact(2)
                .map(|c| f16::from_le_bytes(arr(c)).to_f64())
                .collect(),
            DType::F64 => d
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(arr(c)))
                .collect(),
            _ => self.to_i64().into_iter().map(|x| x as f64).collect(),
        }
    }

    /// Values as f32.
    pub fn to_f32(&self) -> Vec<f32> {
        self.to_f64().into_iter().map(|x| x as f32).collect()
    }

    /// Same data with another shape (element count must match).
    pub fn reshaped(&self, shape: Vec<usize>) -> Self {
        Self {
            dtype: self.dtype,
            shape,
            data: self.data.clone(),
        }
    }
}

fn arr<const N: usize>(c: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(c);
    a
}
