//! Opt-in (`cargo xtask test --large`): the real onnx-community Gemma 3 exporter graphs from
//! `../shared/fixtures/onnx-community-gemma3-graphs/` with random weights written into their
//! external data (every tensor keeps its name, shape and offset; ~3.5 GB on disk), run by
//! `gemma-gem-onnx run` on the default adapter and compared with ONNX Runtime's CPU provider:
//! every output within 1e-3 of the largest reference value, logits with the same argmax.
//!
//! `tools/onnx/real_graph.py` writes the weights (`fill`, cached under the cargo target tmp dir
//! until the script changes), the inputs and the reference (`reference`) and compares (`compare`).
//! The tests take one lock: two ~3 GB models at once would not fit a small machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn graphs() -> PathBuf {
    repo().join("../shared/fixtures/onnx-community-gemma3-graphs")
}

fn python() -> PathBuf {
    let p = repo().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: `cargo xtask install` creates it (onnx, onnxruntime)",
        p.display()
    );
    p
}

fn script() -> PathBuf {
    repo().join("tools/onnx/real_graph.py")
}

fn work() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("large-real-graphs")
}

fn sh(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what} failed ({}):\n{out}", o.status);
    out
}

/// The model with random weights, written once per version of the generator script.
fn filled(model: &str) -> Option<PathBuf> {
    let src = graphs().join(model);
    if !src.exists() {
        eprintln!("SKIPPED: {} not present", src.display());
        return None;
    }
    let dir = work().join("models");
    std::fs::create_dir_all(&dir).expect("work dir");
    let stamp = dir.join(format!("{model}.stamp"));
    let code = std::fs::read(script()).expect("real_graph.py");
    if std::fs::read(&stamp).ok().as_deref() != Some(&code[..]) {
        let _ = std::fs::remove_file(&stamp);
        sh(
            Command::new(python())
                .arg(script())
                .arg("fill")
                .arg(&src)
                .arg(&dir),
            &format!("real_graph.py fill {model}"),
        );
        std::fs::write(&stamp, &code).expect("stamp");
    }
    Some(dir.join(model))
}

/// One step: reference by ONNX Runtime, ours by `gemma-gem-onnx run`, then the comparison.
fn check(model: &str, seq: usize, past: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = filled(model) else { return };
    let case = work().join(format!("{model}-s{seq}-p{past}"));
    let _ = std::fs::remove_dir_all(&case);
    let (rf, ours) = (case.join("ref"), case.join("ours"));
    sh(
        Command::new(python())
            .arg(script())
            .arg("reference")
            .arg(&path)
            .args(["--seq", &seq.to_string(), "--past", &past.to_string()])
            .arg("--out")
            .arg(&rf),
        &format!("ONNX Runtime reference for {model}"),
    );
    let args = std::fs::read_to_string(rf.join("inputs.args")).expect("inputs.args");
    let t = std::time::Instant::now();
    sh(
        Command::new(env!("CARGO_BIN_EXE_gemma-gem-onnx"))
            .arg("run")
            .arg(&path)
            .args(args.split_whitespace())
            .arg("--out")
            .arg(&ours),
        &format!("gemma-gem-onnx run {model}"),
    );
    eprintln!(
        "{model} seq {seq} past {past}: ours in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let report = sh(
        Command::new(python())
            .arg(script())
            .arg("compare")
            .arg(&rf)
            .arg(&ours)
            .args(["--rtol", "1e-3"]),
        &format!("comparing {model} seq {seq} past {past} with ONNX Runtime"),
    );
    let compared = report.lines().filter(|l| l.starts_with("ok")).count();
    assert!(compared > 0, "nothing compared:\n{report}");
    eprintln!("{report}");
    let _ = std::fs::remove_dir_all(&case);
}

#[test]
#[ignore = "opt-in: ~3.5 GB of random weights; cargo xtask test --large"]
fn large_real_graph_embed_tokens_q4() {
    check("embed_tokens_q4.onnx", 8, 0);
}

#[test]
#[ignore = "opt-in: ~3.5 GB of random weights; cargo xtask test --large"]
fn large_real_graph_embed_tokens_q4f16() {
    check("embed_tokens_q4f16.onnx", 8, 0);
}

#[test]
#[ignore = "opt-in: ~3.5 GB of random weights; cargo xtask test --large"]
fn large_real_graph_decoder_q4_prefill_8() {
    check("decoder_model_merged_q4.onnx", 8, 0);
}

#[test]
#[ignore = "opt-in: ~3.5 GB of random weights; cargo xtask test --large"]
fn large_real_graph_decoder_q4_decode_after_8() {
    check("decoder_model_merged_q4.onnx", 1, 8);
}
