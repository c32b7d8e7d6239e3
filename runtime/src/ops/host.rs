//! Host (CPU) helpers: broadcasting, strided views and elementwise maps on small tensors
//! (shape arithmetic, int64 index math).

use crate::error::{Result, op_err};
use crate::tensor::{DType, HostTensor, numel, strides};

/// Numpy-style broadcast of several shapes.
pub fn broadcast(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(op_err(format!("shapes {shapes:?} do not broadcast")));
            }
        }
    }
    Ok(out)
}

/// Element strides of `shape` broadcast to `out` (0 on broadcast dimensions).
pub fn bcast_strides(shape: &[usize], out: &[usize]) -> Vec<i64> {
    let st = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|d| {
            if d < lead || shape[d - lead] == 1 {
                0
            } else {
                st[d - lead] as i64
            }
        })
        .collect()
}

/// Offsets of every element of `out_shape` in a strided view (`base + Σ idx·stride`).
pub fn view_offsets(out_shape: &[usize], st: &[i64], base: i64) -> Vec<usize> {
    let n = numel(out_shape);
    let mut offs = Vec::with_capacity(n);
    let mut idx = vec![0usize; out_shape.len()];
    for _ in 0..n {
        let o: i64 = base + idx.iter().zip(st).map(|(&i, &s)| i as i64 * s).sum::<i64>();
        offs.push(o.max(0) as usize);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    offs
}

/// Copies a strided view of `src` into a new contiguous tensor.
pub fn gather_view(src: &HostTensor, out_shape: Vec<usize>, st: &[i64], base: i64) -> HostTensor {
    let es = src.dtype.size();
    let offs = view_offsets(&out_shape, st, base);
    let mut data = Vec::with_capacity(offs.len() * es);
    for o in offs {
        data.extend_from_slice(&src.data[o * es..o * es + es]);
    }
    HostTensor {
        dtype: src.dtype,
        shape: out_shape,
        data,
    }
}

/// An integer elementwise function.
pub type IntFn<'a> = &'a dyn Fn(&[i64]) -> i64;

/// Elementwise map with broadcasting, in i64 (integer/bool inputs) or f64 arithmetic.
pub fn map(
    inputs: &[&HostTensor],
    out_dtype: DType,
    fi: Option<IntFn<'_>>,
    ff: &dyn Fn(&[f64]) -> f64,
) -> Result<HostTensor> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let out = broadcast(&shapes)?;
    let offs: Vec<Vec<usize>> = inputs
        .iter()
        .map(|t| view_offsets(&out, &bcast_strides(&t.shape, &out), 0))
        .collect();
    let n = numel(&out);
    let int = inputs.iter().all(|t| !t.dtype.is_float()) && fi.is_some();
    if let (true, Some(fi)) = (int, fi) {
        let vals: Vec<Vec<i64>> = inputs.iter().map(|t| t.to_i64()).collect();
        let mut args = vec![0i64; inputs.len()];
        let res: Vec<i64> = (0..n)
            .map(|e| {
                for (k, a) in args.iter_mut().enumerate() {
                    *a = vals[k][offs[k][e]];
                }
                fi(&args)
            })
            .collect();
        return Ok(HostTensor::from_i64_as(out_dtype, out, &res));
    }
    let vals: Vec<Vec<f64>> = inputs.iter().map(|t| t.to_f64()).collect();
    let mut args = vec![0f64; inputs.len()];
    let res: Vec<f64> = (0..n)
        .map(|e| {
            for (k, a) in args.iter_mut().enumerate() {
                *a = vals[k][offs[k][e]];
            }
            ff(&args)
        })
        .collect();
    // Float to int truncates toward zero and saturates (out of range is undefined in ONNX;
    // going through i64 would wrap an int32 result instead).
    Ok(HostTensor::from_f64_as(out_dtype, out, &res))
}

/// Values of a 1-D (or scalar) int tensor.
pub fn ints(t: &HostTensor) -> Vec<i64> {
    t.to_i64()
}
