//! Shared runner for folder-based test cases (model.onnx + test_data_set_N/{input,output}_J.pb).
#![allow(dead_code)] // reason: each test binary uses a subset

use gg_runtime::model::{Graph, decode_tensor};
use gg_runtime::source::MemorySource;
use gg_runtime::{Gpu, HostTensor, Session};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Compares with `|got - exp| <= atol + rtol * |exp|` (floats) or exactly; the error names the
/// first bad index with got and expected.
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
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
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

/// Runs every data set of a case folder.
pub fn run_case(
    gpu: &Rc<Gpu>,
    dir: &Path,
    graph: Graph,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    let session = pollster::block_on(Session::from_graph(
        gpu.clone(),
        graph.clone(),
        &MemorySource::new(),
    ))
    .map_err(|e| e.to_string())?;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    for set in sets {
        let mut feeds = Vec::new();
        for (j, input) in graph.inputs.iter().enumerate() {
            let p = set.join(format!("input_{j}.pb"));
            let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            feeds.push((
                input.name.clone(),
                decode_tensor(&bytes, &p.display().to_string()).map_err(|e| e.to_string())?,
            ));
        }
        let outs = pollster::block_on(session.run_host(feeds)).map_err(|e| e.to_string())?;
        for (j, (name, got)) in outs.iter().enumerate() {
            let p = set.join(format!("output_{j}.pb"));
            let bytes = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let exp = decode_tensor(&bytes, &p.display().to_string()).map_err(|e| e.to_string())?;
            compare(got, &exp, rtol, atol).map_err(|e| format!("output {name}: {e}"))?;
        }
    }
    Ok(())
}
