//! Minimal `.npy` (format 1.0/2.0/3.0) reader and writer for little-endian C-order arrays.

use crate::error::{Error, Result};
use crate::tensor::{DType, HostTensor};

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
    }
}

/// Parses `.npy` bytes; `path` is only used in error messages.
pub fn parse(path: &str, bytes: &[u8]) -> Result<HostTensor> {
    let err = |reason: &str| Error::Npy {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(err("missing \\x93NUMPY magic"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(err("truncated header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(err(&format!("unknown format version {v}"))),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or_else(|| err("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| err("header is not UTF-8"))?;
    let field = |key: &str| -> Option<&str> {
        let k = header.find(&format!("'{key}'"))?;
        let rest = &header[k + key.len() + 2..];
        let colon = rest.find(':')?;
        Some(rest[colon + 1..].trim_start())
    };
    let d = field("descr").ok_or_else(|| err("no descr"))?;
    let d = d
        .get(1..)
        .and_then(|s| s.split('\'').next())
        .ok_or_else(|| err("bad descr"))?;
    let dtype = match d {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "<f8" => DType::F64,
        "<i8" => DType::I64,
        "<i4" => DType::I32,
        "|b1" => DType::Bool,
        "|u1" => DType::U8,
        "|i1" => DType::I8,
        other => return Err(err(&format!("unsupported dtype {other}"))),
    };
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err(err("Fortran order is not supported"));
    }
    let s = field("shape").ok_or_else(|| err("no shape"))?;
    let s = s
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| err("bad shape"))?;
    let mut shape = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        shape.push(
            part.parse::<usize>()
                .map_err(|_| err(&format!("bad dimension {part}")))?,
        );
    }
    let data = bytes[start + hlen..].to_vec();
    let want = shape.iter().product::<usize>() * dtype.size();
    if data.len() != want {
        return Err(err(&format!(
            "shape {shape:?} needs {want} data bytes, file has {}",
            data.len()
        )));
    }
    HostTensor::new(dtype, shape, data)
}

/// Serialises a tensor as `.npy` version 1.0.
pub fn to_bytes(t: &HostTensor) -> Vec<u8> {
    let shape = match t.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.shape[0]),
        _ => format!(
            "({})",
            t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(t.dtype)
    );
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&t.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_keeps_dtype_shape_and_values() -> Result<()> {
        let t = HostTensor::from_i64(vec![2, 3], &[1, -2, 3, 4, 5, i64::MAX]);
        let back = parse("mem", &to_bytes(&t))?;
        assert_eq!(back, t);
        let s = HostTensor::from_f32(vec![], &[1.5]);
        assert_eq!(parse("mem", &to_bytes(&s))?, s);
        Ok(())
    }

    #[test]
    fn truncated_file_is_an_error() {
        let t = HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]);
        let b = to_bytes(&t);
        assert!(parse("mem", &b[..b.len() - 1]).is_err());
        assert!(parse("mem", &b[..5]).is_err());
    }
}
