//! Output comparison shared by the native and the browser op tests.

use gg_runtime::HostTensor;

/// Compares with `|got - exp| <= atol + rtol * |exp|` (floats; infinities and NaN exactly) or
/// exactly; the error names the first bad index with got and expected.
pub fn compare(got: &HostTensor, exp: &HostTensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype != exp.dtype {
        return Err(format!(
            "dtype {} expected {}",
            got.dtype.name(),
            exp.dtype.name()
        ));
    }
    if got.shape != exp.shape {
        return Err(format!("shape {:?} expected {:?}", got.shape, exp.shape));
    }
    if exp.dtype.is_float() {
        let (g, e) = (got.to_f64(), exp.to_f64());
        for (i, (a, b)) in g.iter().zip(&e).enumerate() {
            // An infinite expected value must be met exactly (the tolerance would be infinite).
            let ok = (a.is_nan() && b.is_nan())
                || a == b
                || (b.is_finite() && (a - b).abs() <= atol + rtol * b.abs());
            if !ok {
                return Err(format!(
                    "index {i}: got {a} expected {b} (rtol {rtol}, atol {atol})"
                ));
            }
        }
    } else {
        let (g, e) = (got.to_i64(), exp.to_i64());
        if let Some(i) = (0..g.len()).find(|&i| g[i] != e[i]) {
            return Err(format!("index {i}: got {} expected {}", g[i], e[i]));
        }
    }
    Ok(())
}
