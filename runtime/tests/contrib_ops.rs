//! com.microsoft ops (MatMulNBits, GatherBlockQuantized, SimplifiedLayerNormalization,
//! SkipSimplifiedLayerNormalization, GroupQueryAttention, RotaryEmbedding) and Gelu against ONNX
//! Runtime CPU references in tests/fixtures/ops (regenerate with
//! `.venv/bin/python tools/onnx/gen_contrib_refs.py`). Tolerances per case in case.json:
//! f32 rtol=atol=1e-4, f16 rtol=atol=5e-3.

mod common;

use gg_runtime::Gpu;
use gg_runtime::model::Graph;
use std::path::Path;
use std::rc::Rc;

#[test]
fn contrib_ops_match_onnx_runtime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ops");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/ops exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 30,
        "expected the committed reference cases in {}",
        dir.display()
    );
    let gpu =
        Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe natively)"));
    let mut failures = Vec::new();
    for case in &cases {
        let name = case
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(case.join("case.json")).expect("case.json"),
        )
        .expect("valid case.json");
        let rtol = meta["rtol"].as_f64().expect("rtol");
        let atol = meta["atol"].as_f64().expect("atol");
        let graph = Graph::decode(
            &std::fs::read(case.join("model.onnx")).expect("model.onnx"),
            &name,
        )
        .expect("decodes");
        match common::run_case(&gpu, case, graph, rtol, atol) {
            Ok(()) => println!("ok   {name}"),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ONNX Runtime:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
