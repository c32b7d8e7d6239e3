//! ONNX backend node conformance suite on the native GPU adapter (lavapipe here).
//!
//! Generate the cases first (not committed, ~60 MB):
//!     .venv/bin/python tools/onnx/gen_conformance.py --out target/onnx-node-cases
//! then `cargo test -p gg-runtime --test conformance -- --nocapture`.
//! Every case whose ops the registry claims is run; cases with unclaimed ops are skipped. Failures
//! listed in `tests/fixtures/conformance/known_failures.txt` (case name, reason) are reported but
//! tolerated; any other failure fails the test. `GG_CONFORMANCE_FILTER=substr` limits the cases,
//! `GG_ONNX_CASES=dir` points elsewhere. The report is written to the cargo target dir: target/onnx-conformance-report.txt.

use gg_runtime::model::Graph;
use gg_runtime::ops::Registry;
use gg_runtime::{DType, Gpu};
mod common;

use common::run_case;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<(String, String)>,
    skipped: Vec<(String, String)>,
}

#[test]
fn onnx_node_conformance() {
    let cases = std::env::var("GG_ONNX_CASES")
        .map_or_else(|_| root().join("target/onnx-node-cases"), PathBuf::from);
    if !cases.is_dir() {
        eprintln!(
            "SKIPPED: no generated ONNX node cases at {}. Generate them with\n  .venv/bin/python tools/onnx/gen_conformance.py --out target/onnx-node-cases",
            cases.display()
        );
        return;
    }
    let filter = std::env::var("GG_CONFORMANCE_FILTER").ok();
    let known: BTreeMap<String, String> =
        std::fs::read_to_string(root().join("tests/fixtures/conformance/known_failures.txt"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (c, r) = l.split_once(' ').unwrap_or((l, ""));
                (c.trim().to_string(), r.trim().to_string())
            })
            .collect();
    let gpu = match pollster::block_on(Gpu::new(None)) {
        Ok(g) => Rc::new(g),
        Err(e) => panic!("no GPU adapter for the conformance suite: {e}"),
    };
    let registry = Registry::default();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&cases)
        .expect("cases folder is readable")
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut per_op: BTreeMap<String, Tally> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut not_claimed = 0usize;
    for dir in dirs {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let meta: serde_json::Value = std::fs::read_to_string(dir.join("case.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let bytes = match std::fs::read(dir.join("model.onnx")) {
            Ok(b) => b,
            Err(_) => continue,
        };
        let graph = match Graph::decode(&bytes, &name) {
            Ok(g) => g,
            Err(e) => {
                per_op
                    .entry("(undecodable)".into())
                    .or_default()
                    .skipped
                    .push((name, e.to_string()));
                continue;
            }
        };
        let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        let key = if ops.len() == 1 {
            ops[0].to_string()
        } else {
            format!(
                "{} (multi-node)",
                name.trim_start_matches("test_")
                    .split('_')
                    .next()
                    .unwrap_or("?")
            )
        };
        if graph
            .nodes
            .iter()
            .any(|n| !registry.claims(&n.domain, &n.op_type))
        {
            not_claimed += 1;
            continue;
        }
        let tally = per_op.entry(key).or_default();
        if let Some(reason) = meta.get("skip").and_then(|v| v.as_str()) {
            tally.skipped.push((name, reason.to_string()));
            continue;
        }
        let bad = registry.check(&graph);
        if !bad.is_empty() {
            tally.skipped.push((
                name,
                format!(
                    "unsupported attributes: {}",
                    bad.iter()
                        .map(|u| u.reason.clone())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ));
            continue;
        }
        if let Some(dt) = graph
            .inputs
            .iter()
            .chain(&graph.outputs)
            .find_map(|v| DType::from_onnx(v.elem_type).err())
        {
            tally.skipped.push((name, format!("data type: {dt}")));
            continue;
        }
        let rtol = meta
            .get("rtol")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(1e-3);
        let atol = meta
            .get("atol")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(1e-7);
        match run_case(&gpu, &dir, graph, rtol, atol) {
            Ok(()) => tally.passed += 1,
            Err(reason) => {
                if !known.contains_key(&name) {
                    unexpected.push(format!("{name}: {reason}"));
                }
                tally.failed.push((name, reason));
            }
        }
    }
    let mut report = String::new();
    let (mut p, mut f, mut s) = (0, 0, 0);
    report.push_str(&format!(
        "{:<40} {:>6} {:>6} {:>7}\n",
        "op", "passed", "failed", "skipped"
    ));
    for (op, t) in &per_op {
        report.push_str(&format!(
            "{op:<40} {:>6} {:>6} {:>7}\n",
            t.passed,
            t.failed.len(),
            t.skipped.len()
        ));
        p += t.passed;
        f += t.failed.len();
        s += t.skipped.len();
    }
    report.push_str(&format!("{:<40} {p:>6} {f:>6} {s:>7}\n", "TOTAL"));
    report.push_str(&format!(
        "cases whose ops are not all claimed (not run): {not_claimed}\n\nfailures:\n"
    ));
    for t in per_op.values() {
        for (c, r) in &t.failed {
            let tag = if known.contains_key(c) {
                "known"
            } else {
                "NEW"
            };
            report.push_str(&format!("  [{tag}] {c}: {r}\n"));
        }
    }
    report.push_str("\nskipped:\n");
    for t in per_op.values() {
        for (c, r) in &t.skipped {
            report.push_str(&format!("  {c}: {r}\n"));
        }
    }
    // In the cargo target dir (`CARGO_TARGET_DIR` honoured): `<target>/tmp` is CARGO_TARGET_TMPDIR.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map_or_else(|| root().join("target"), Path::to_path_buf);
    let report_path = target.join("onnx-conformance-report.txt");
    if let Err(e) = std::fs::write(&report_path, &report) {
        eprintln!("could not write {}: {e}", report_path.display());
    }
    println!("{report}");
    assert!(
        unexpected.is_empty(),
        "{} unexpected conformance failure(s):\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}
