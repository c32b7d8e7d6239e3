//! `gemma-gem generate --greedy` on every model layout the runtime loads gives ONNX Runtime's
//! greedy tokens: our onnx-community fixture and the packages exported by mobius (ONNX Runtime
//! GenAI: a single `model.onnx`, the split `embedding/` + `decoder/`, both attention profiles).
//! The chat prompt goes through `--prompt` (the package's chat template and tokenizer), the raw
//! one through `--token-ids`; 40 tokens each, past the sliding window.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models")
}

/// Runs `gemma-gem generate --json` and returns the generated ids and the last (counters) line.
fn generate(model: &Path, extra: &[&str]) -> (Vec<u32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_gemma-gem"))
        .arg("generate")
        .arg("--model")
        .arg(model)
        .args(["--greedy", "--json"])
        .args(extra)
        .output()
        .expect("gemma-gem runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {}\n{stdout}",
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let ids = lines
        .iter()
        .filter_map(|l| l.get("id").and_then(Value::as_u64))
        .map(|id| u32::try_from(id).expect("u32"))
        .collect();
    (ids, lines.last().cloned().expect("a counters line"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| u32::try_from(x.as_u64().expect("id")).expect("u32"))
        .collect()
}

fn check(name: &str, reference: &str, variant: &str, extra: &[&str]) {
    let dir = models().join(name);
    let r: Value = serde_json::from_slice(
        &std::fs::read(dir.join("reference").join(reference)).expect("reference"),
    )
    .expect("json");
    for prompt in r["prompts"].as_array().expect("prompts") {
        let want = ids(&prompt["greedy_tokens"]);
        let n = want.len().to_string();
        let token_ids;
        let mut args: Vec<&str> = vec!["--max-new-tokens", &n];
        match prompt["name"].as_str().expect("name") {
            "chat" => {
                let messages = prompt["messages"].as_array();
                let text = messages
                    .and_then(|m| m[0]["content"].as_str())
                    .unwrap_or("Hello! What is the capital of France?");
                args.extend(["--prompt", text]);
            }
            _ => {
                token_ids = ids(&prompt["input_ids"])
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                args.extend(["--token-ids", &token_ids]);
            }
        }
        args.extend(extra);
        let (got, stats) = generate(&dir, &args);
        assert_eq!(got, want, "{name} {}: greedy tokens", prompt["name"]);
        assert_eq!(stats["dtype"], variant, "{name}");
        assert_eq!(stats["stop"], "max_new_tokens", "{name}");
        eprintln!(
            "{name} {}: {} tokens equal ONNX Runtime's; {} dispatches/token",
            prompt["name"],
            got.len(),
            stats["dispatches_per_token"]
        );
    }
}

#[test]
fn greedy_generation_equals_onnx_runtime_on_every_layout() {
    check("gemma4-tiny", "q4.json", "q4", &["--dtype", "q4"]);
    for name in [
        "mobius-tiny-gqa-fp32",
        "mobius-tiny-gqa-int4",
        "mobius-tiny-attn-int4",
        "mobius-tiny-gqa-int4-split",
        "mobius-tiny-attn-fp32-split",
        "mobius-tiny-e4b-gqa-int4",
        "mobius-tiny-e4b-attn-int4",
    ] {
        check(name, "ort.json", "genai f32", &[]);
    }
}

#[test]
fn a_folder_in_neither_layout_is_a_one_line_error() {
    let dir = std::env::temp_dir().join(format!("gg-cli-generate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_gemma-gem"))
        .arg("generate")
        .arg("--model")
        .arg(&dir)
        .args(["--greedy", "--token-ids", "2,3"])
        .output()
        .expect("gemma-gem runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // one error line (a GPU driver may log its own lines)
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("genai_config.json") && err.contains("config.json"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--image`: the picture preprocessed at `--image-tokens`, encoded by the package's vision
/// encoder on the GPU and merged into the prompt: the greedy tokens equal ONNX Runtime's full
/// chain (`reference/ort.image.json`'s one-image case, written by
/// tools/fixtures/gen_image_merge_refs.py); a model without a vision encoder and a file that is
/// not an image are clear errors.
#[test]
fn generate_with_an_image_equals_onnx_runtime() {
    let dir = models().join("mobius-tiny-gqa-int4-split");
    let r: Value = serde_json::from_slice(
        &std::fs::read(dir.join("reference/ort.image.json")).expect("reference"),
    )
    .expect("json");
    let case = &r["cases"][0];
    assert_eq!(case["name"], "one_image");
    let text = case["messages"][0]["content"][1]["text"]
        .as_str()
        .expect("the text part");
    let image = models()
        .join("../images")
        .join(case["images"][0].as_str().expect("image"));
    let want = ids(&case["greedy_tokens"]);
    let budget = r["image_tokens"].to_string();
    let n = want.len().to_string();
    let image_arg = image.to_str().expect("utf-8 path");
    let (got, last) = generate(
        &dir,
        &[
            "--prompt",
            text,
            "--image",
            image_arg,
            "--image-tokens",
            &budget,
            "--max-new-tokens",
            &n,
        ],
    );
    assert_eq!(got, want, "greedy tokens after the image");
    assert_eq!(last["image_soft_tokens"], case["soft_tokens"]);
    assert_eq!(
        last["prefill_tokens"].as_u64(),
        Some(case["input_ids"].as_array().expect("ids").len() as u64)
    );

    let fails = |model: &Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gemma-gem"))
            .arg("generate")
            .arg("--model")
            .arg(model)
            .args(args)
            .output()
            .expect("gemma-gem runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = fails(
        &models().join("mobius-tiny-gqa-int4"),
        &["--prompt", "x", "--image", image_arg],
    );
    assert!(e.contains("takes no images"), "{e}");
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let e = fails(
        &dir,
        &["--prompt", "x", "--image", readme.to_str().expect("utf-8")],
    );
    assert!(
        e.contains("image 1: the image is not a PNG, JPEG or WebP"),
        "{e}"
    );
}
