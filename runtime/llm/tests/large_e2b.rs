//! Opt-in (`cargo xtask test --large`): Gemma 4 E2B's real shapes with all 35 layers
//! (`tools/fixtures/gen_gemma4.py --preset e2b-full`, random weights, 3.25 GB at q4: the
//! per-layer table 262144 × 8960 is ~1.2 GB, above SwiftShader's 1 GiB binding; 15 cache pairs;
//! the real layer pattern) loads natively and its first greedy tokens equal ONNX Runtime's
//! (`reference/q4.json`, `tools/fixtures/reference.py --large`). Prints the load time and the GPU
//! memory the allocator reports. Measured on lavapipe (2 cores): load 12.8 s, 3124 MiB, prefill
//! logits within 4.6e-4, the 8 tokens in 234 s, 348 s in all.
//!
//! `GG_E2B_FULL`: the model folder (xtask: `bench/cache/gemma4-e2b-full`).

#[path = "common/reference.rs"]
mod reference;

use gg_llm::{Dtype, GemmaModel, Generator, LoadOptions, ModelRepo, Sampling};
use gg_runtime::Gpu;
use reference::{ids, max_abs_diff};
use serde_json::Value;
use std::path::PathBuf;
use std::rc::Rc;

fn model_dir() -> PathBuf {
    PathBuf::from(
        std::env::var_os("GG_E2B_FULL").expect(
            "GG_E2B_FULL: the e2b-full model folder (cargo xtask test --large generates it)",
        ),
    )
}

fn gpu_memory(gpu: &Gpu) -> Option<u64> {
    gpu.device
        .generate_allocator_report()
        .map(|r| r.total_allocated_bytes)
}

#[test]
#[ignore = "large: run by cargo xtask test --large (needs the generated e2b-full model)"]
fn large_e2b_full_greedy_equals_onnx_runtime() {
    let dir = model_dir();
    let reference: Value = serde_json::from_slice(
        &std::fs::read(dir.join("reference/q4.json")).expect("reference/q4.json"),
    )
    .expect("json");
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    let t0 = std::time::Instant::now();
    let repo = ModelRepo::open(dir.to_str().expect("utf-8")).expect("repo");
    let model = pollster::block_on(GemmaModel::load(
        gpu.clone(),
        &repo,
        &LoadOptions {
            dtype: Some(Dtype::Q4),
        },
    ))
    .expect("load");
    let load_s = t0.elapsed().as_secs_f64();
    assert_eq!(model.layout.cache.len(), 30, "15 key/value cache pairs");
    let prompt = &reference["prompts"][0];
    let want = ids(&prompt["greedy_tokens"]);
    let input = ids(&prompt["input_ids"]);
    let prefill = {
        let p = dir.join("reference/q4.raw.prefill_logits.npy");
        let bytes = std::fs::read(&p).expect("prefill logits");
        gg_runtime::npy::parse("prefill", &bytes)
            .expect("npy")
            .to_f32()
    };
    let mut g = Generator::new(&model, &input, Sampling::Greedy).expect("generator");
    let logits = pollster::block_on(g.logits_for(&[])).expect("prefill");
    let d = max_abs_diff(&logits, &prefill);
    // fp32 activations over 35 layers and a 262144 vocabulary
    assert!(d <= 1e-2, "prefill logits differ by {d}");
    let mut g = Generator::new(&model, &input, Sampling::Greedy).expect("generator");
    let t1 = std::time::Instant::now();
    let got: Vec<u32> = (0..want.len())
        .map(|_| pollster::block_on(g.next_token()).expect("step"))
        .collect();
    assert_eq!(got, want, "greedy tokens");
    eprintln!(
        "e2b-full q4: load {load_s:.1} s, GPU memory allocated {} MiB, prefill logits within {d:.1e}, {} greedy tokens equal ONNX Runtime's in {:.1} s ({:.1} dispatches/token, {} cache pairs)",
        gpu_memory(&gpu).map_or("?".to_string(), |b| (b >> 20).to_string()),
        got.len(),
        t1.elapsed().as_secs_f64(),
        g.stats().dispatches_per_token(),
        model.layout.cache.len() / 2
    );
}
