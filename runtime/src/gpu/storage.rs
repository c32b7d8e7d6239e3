//! How a tensor's dtype is laid out in a GPU buffer.

#[cfg(doc)]
use super::Kernel;
use crate::tensor::DType;

/// How a tensor of a given dtype is laid out in a GPU buffer (an `array<u32>` binding, or
/// `array<vec4<u32>>` for [`Kernel::input_wide`]: the same words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// One f32 per word.
    F32,
    /// Two f16 per word (low half first).
    F16,
    /// One i32 per word (int64 is narrowed on upload).
    I32,
    /// One bool per word (0/1).
    Bool,
    /// Four bytes per word.
    U8,
    /// Four signed bytes per word.
    I8,
}

impl Storage {
    /// GPU layout of a dtype (`None` for host-only types).
    pub fn of(dtype: DType) -> Option<Self> {
        Some(match dtype {
            DType::F32 => Self::F32,
            DType::F16 => Self::F16,
            DType::I32 | DType::I64 => Self::I32,
            DType::Bool => Self::Bool,
            DType::U8 => Self::U8,
            DType::I8 => Self::I8,
            DType::F64 => return None,
        })
    }

    /// Bytes a tensor of `n` elements occupies.
    pub fn bytes(self, n: usize) -> u64 {
        let b = match self {
            Self::F32 | Self::I32 | Self::Bool => n * 4,
            Self::F16 => n.div_ceil(2) * 4,
            Self::U8 | Self::I8 => n.div_ceil(4) * 4,
        };
        b.max(4) as u64
    }

    /// Elements per 32-bit word.
    pub fn per_word(self) -> u32 {
        match self {
            Self::F32 | Self::I32 | Self::Bool => 1,
            Self::F16 => 2,
            Self::U8 | Self::I8 => 4,
        }
    }
}
