//! The `gemma-gem-onnx` contract: exit codes and one-line errors, `inspect` on the real exporter
//! graphs, `run` writing one .npy per output.

use gg_runtime::model::{Graph, decode_tensor};
use gg_runtime::npy;
use gg_runtime::proto;
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gemma-gem-onnx"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gg-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn inspect_accepts_every_real_exporter_graph() {
    let dir = repo().join("../shared/fixtures/onnx-community-gemma3-graphs");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("SKIPPED: {} not present", dir.display());
        return;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "onnx") {
            let o = bin().arg("inspect").arg(&p).output().expect("runs");
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}: {out}{}",
                p.display(),
                stderr(&o)
            );
            assert!(!out.contains("unsupported:"), "{out}");
            assert!(
                out.contains("external data:") && out.contains(".onnx_data"),
                "{out}"
            );
            n += 1;
        }
    }
    assert_eq!(n, 4, "expected the four Gemma 3 graphs");
}

#[test]
fn inspect_lists_unsupported_nodes_and_exits_3() {
    let node = |op: &str, name: &str| proto::NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        domain: Some("com.example".into()),
        input: vec!["x".into()],
        output: vec![format!("{name}_out")],
        ..Default::default()
    };
    let m = proto::ModelProto {
        ir_version: Some(10),
        graph: Some(proto::GraphProto {
            node: vec![node("Frobnicate", "n1"), node("Twiddle", "n2")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let d = tmp("unsupported");
    let p = d.join("m.onnx");
    std::fs::write(&p, m.encode_to_vec()).expect("write");
    let o = bin().arg("inspect").arg(&p).output().expect("runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains("unsupported: com.example Frobnicate n1"),
        "{out}"
    );
    assert!(out.contains("unsupported: com.example Twiddle n2"), "{out}");
}

#[test]
fn inspect_names_the_inlined_function_calls() {
    // A model whose unregistered ops are model-local functions (tools/onnx/gen_contrib_refs.py).
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ops/function_model_local_inlined/model.onnx");
    let o = bin().arg("inspect").arg(&p).output().expect("runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for line in [
        "inlined functions (4 calls):",
        "  call0/Square_2 -> test.fn:Square (1 nodes)",
        "  call0 -> test.fn:ScaledSoftmax (8 nodes)",
        "  call1 -> test.fn:ScaledSoftmax (8 nodes)",
    ] {
        assert!(out.lines().any(|l| l == line), "{line:?} in\n{out}");
    }
    assert!(
        !out.contains("SkipSimplifiedLayerNormalization ->"),
        "{out}"
    );
}

#[test]
fn errors_are_one_line_and_nonzero() {
    let d = tmp("errors");
    let o = bin()
        .args(["inspect", "/nonexistent/model.onnx"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/model.onnx") && stderr(&o).lines().count() == 1,
        "{}",
        stderr(&o)
    );
    let case = repo().join("tests/fixtures/ops/gelu_tanh_float32/model.onnx");
    let bytes = std::fs::read(&case).expect("fixture");
    let cut = d.join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let o = bin().arg("inspect").arg(&cut).output().expect("runs");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    let x = d.join("x.npy");
    std::fs::write(
        &x,
        npy::to_bytes(&gg_runtime::HostTensor::from_f32(vec![3, 50], &[0.0; 150])),
    )
    .expect("write");
    let o = bin()
        .arg("run")
        .arg(&case)
        .arg("--input")
        .arg(format!("nope={}", x.display()))
        .arg("--out")
        .arg(d.join("o"))
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("nope") && !stderr(&o).contains("panicked"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_writes_one_npy_per_output_matching_onnx_runtime() {
    let case = repo().join("tests/fixtures/ops/skipsimplifiedlayernorm_bias_float16");
    let model = case.join("model.onnx");
    let g = Graph::decode(&std::fs::read(&model).expect("model"), "model").expect("decodes");
    let d = tmp("run");
    let mut cmd = bin();
    cmd.arg("run").arg(&model).arg("--out").arg(d.join("out"));
    for (j, i) in g.inputs.iter().enumerate() {
        let t = decode_tensor(
            &std::fs::read(case.join(format!("test_data_set_0/input_{j}.pb"))).expect("input"),
            "input",
        )
        .expect("tensor");
        let p = d.join(format!("{j}.npy"));
        std::fs::write(&p, npy::to_bytes(&t)).expect("write");
        cmd.arg("--input")
            .arg(format!("{}={}", i.name, p.display()));
    }
    let o = cmd.output().expect("runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (j, out) in g.outputs.iter().enumerate() {
        let exp = decode_tensor(
            &std::fs::read(case.join(format!("test_data_set_0/output_{j}.pb"))).expect("output"),
            "output",
        )
        .expect("tensor");
        let p = d
            .join("out")
            .join(format!("{}.npy", out.name.replace('/', "_")));
        let got = npy::parse(
            &p.display().to_string(),
            &std::fs::read(&p).expect("output npy written"),
        )
        .expect("npy");
        assert_eq!(got.dtype, exp.dtype, "{}", out.name);
        assert_eq!(got.shape, exp.shape, "{}", out.name);
        for (i, (a, b)) in got.to_f64().iter().zip(exp.to_f64()).enumerate() {
            assert!(
                (a - b).abs() <= 5e-3 + 5e-3 * b.abs(),
                "{} index {i}: got {a} expected {b}",
                out.name
            );
        }
    }
}
