//! Shared runner for folder-based test cases (model.onnx + test_data_set_N/{input,output}_J.pb).
#![allow(dead_code)] // reason: each test binary uses a subset

use gg_runtime::model::{Graph, decode_tensor};
use gg_runtime::source::MemorySource;
use gg_runtime::{Gpu, Session};
use std::path::{Path, PathBuf};
use std::rc::Rc;

#[path = "compare.rs"]
mod compare;
pub use compare::compare;

/// An integer node attribute.
pub fn attr_i(name: &str, v: i64) -> gg_runtime::proto::AttributeProto {
    gg_runtime::proto::AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(gg_runtime::proto::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    }
}

/// `gpu` with the kernels chosen for GPUs even where it is a software adapter (SwiftShader,
/// lavapipe), so that both forms of the kernels that pick by adapter kind are tested on any
/// machine.
pub fn as_hardware(mut gpu: Gpu) -> Gpu {
    gpu.tuning.software = false;
    gpu
}

/// The adapter opened without subgroup operations (`Tuning::subgroups` off), so that its
/// workgroup reductions go through workgroup memory only even where the device has them
/// (lavapipe and SwiftShader natively): the kernels built with `Kernel::wg_reduce` are then
/// tested in both forms on such machines. The browser never has them (wgpu's WebGPU backend does
/// not expose subgroups), so this is its form.
pub fn open_without_subgroups() -> Gpu {
    pollster::block_on(Gpu::with_tuning(None, |adapter| {
        Ok(gg_runtime::Tuning {
            subgroups: false,
            ..gg_runtime::Tuning::from_env(adapter)?
        })
    }))
    .expect("a GPU adapter (lavapipe natively)")
}

/// `gpu` with quantized weights read a word per load, as on SwiftShader (the browser's software
/// adapter), even where the adapter reads them 16 bytes per load (lavapipe, GPUs): both forms of
/// the fused GEMV are then tested on any machine.
pub fn without_wide_loads(mut gpu: Gpu) -> Gpu {
    gpu.tuning.wide_weight_loads = false;
    gpu
}

/// Runs every data set of a case folder.
pub fn run_case(
    gpu: &Rc<Gpu>,
    dir: &Path,
    graph: Graph,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    run_case_diffs(gpu, dir, graph, rtol, atol).map(|_| ())
}

/// [`run_case`], returning the largest absolute difference per output (over the data sets).
pub fn run_case_diffs(
    gpu: &Rc<Gpu>,
    dir: &Path,
    graph: Graph,
    rtol: f64,
    atol: f64,
) -> Result<Vec<(String, f64)>, String> {
    let mut diffs: Vec<(String, f64)> = Vec::new();
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
            let d = got
                .to_f64()
                .iter()
                .zip(exp.to_f64())
                .map(|(a, b)| if a == &b { 0.0 } else { (a - b).abs() })
                .fold(0.0, f64::max);
            match diffs.iter_mut().find(|(n, _)| n == name) {
                Some((_, m)) => *m = m.max(d),
                None => diffs.push((name.clone(), d)),
            }
        }
    }
    Ok(diffs)
}
