//! Host tensor bytes to and from their GPU layout.

use crate::error::{Error, Result};
use crate::tensor::{DType, HostTensor, numel};
use half::f16;

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
