//! Generation on the tiny Gemma 4 fixtures against ONNX Runtime's reference outputs
//! (`tests/fixtures/models/<name>/reference/`, made by `tools/fixtures/reference.py`).
//!
//! GPU: whatever wgpu picks (in CI `WGPU_BACKEND=vulkan` = Mesa lavapipe).

#[path = "common/reference.rs"]
mod reference;
#[path = "common/serve.rs"]
mod serve;
#[path = "common/teacher.rs"]
mod teacher;

use futures::StreamExt;
use gg_agent::{CancellationToken, FinishReason, GenerateOptions, ModelBackend, StreamChunk};
use gg_llm::{
    Dtype, GemmaBackend, GemmaModel, Generator, LoadOptions, ModelRepo, Sampling, StopReason,
    TextOptions,
};
use gg_runtime::{Gpu, HostTensor};
use reference::{Q4F16_LOGIT_TOL, ids};
use serde_json::Value;
use std::path::PathBuf;
use std::rc::Rc;
use teacher::{argmax_agrees_where_clear, teacher_forced};

const FIXTURES: &[&str] = &["gemma4-tiny", "gemma4-tiny-e4b"];

/// q4 (fp32 activations): max |logit - ONNX Runtime| allowed.
const Q4_LOGIT_TOL: f32 = 2e-3;
fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models")
        .join(name)
}

fn reference(name: &str, dtype: Dtype) -> Value {
    let p = fixture_dir(name)
        .join("reference")
        .join(format!("{}.json", dtype.name()));
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).expect("reference JSON")
}

fn npy(name: &str, file: &str) -> HostTensor {
    let p = fixture_dir(name).join("reference").join(file);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    gg_runtime::npy::parse(file, &bytes).expect("npy")
}

fn gpu() -> Rc<Gpu> {
    Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe in CI)"))
}

fn load(gpu: &Rc<Gpu>, name: &str, dtype: Dtype) -> GemmaModel {
    let repo = ModelRepo::open(fixture_dir(name).to_str().expect("utf-8 path")).expect("repo");
    pollster::block_on(GemmaModel::load(
        gpu.clone(),
        &repo,
        &LoadOptions { dtype: Some(dtype) },
    ))
    .unwrap_or_else(|e| panic!("{name} {dtype}: {e}"))
}

/// Logits of the prompt and of the first decode steps, teacher-forced on the reference tokens.
/// Returns the largest difference seen.
fn check_logits(model: &GemmaModel, name: &str, reference: &Value, tol: f32) -> f32 {
    let dtype = model.dtype.name();
    teacher_forced(
        model,
        reference,
        &format!("{name} {dtype}"),
        tol,
        |pname, step| npy(name, &format!("{dtype}.{pname}.{step}_logits.npy")).to_f32(),
    )
}

#[test]
fn q4_greedy_tokens_equal_onnx_runtime() {
    let gpu = gpu();
    for name in FIXTURES {
        let model = load(&gpu, name, Dtype::Q4);
        let reference = reference(name, Dtype::Q4);
        let worst = check_logits(&model, name, &reference, Q4_LOGIT_TOL);
        for prompt in reference["prompts"].as_array().expect("prompts") {
            let pname = prompt["name"].as_str().expect("name");
            let input = ids(&prompt["input_ids"]);
            let want = ids(&prompt["greedy_tokens"]);
            assert!(want.len() >= 32);
            // Run-ahead forced on: lavapipe (CI) runs without it by default.
            let mut g = Generator::new(&model, &input, Sampling::Greedy)
                .expect("generator")
                .run_ahead(true);
            let mut got = Vec::new();
            let mut groups = 0;
            let submits = gpu.counters.snapshot().submits;
            let mut compiled = 0;
            for step in 0..want.len() {
                let before = gpu.counters.snapshot();
                got.push(pollster::block_on(g.next_token()).expect("step"));
                if step >= 2 {
                    let after = gpu.counters.snapshot();
                    groups += after.bind_groups_created - before.bind_groups_created;
                    compiled += after.pipelines_compiled - before.pipelines_compiled;
                }
                // Run-ahead: when token `step` comes back, the step after it is submitted.
                assert_eq!(
                    gpu.counters.snapshot().submits - submits,
                    step as u64 + 2,
                    "{name} {pname}: submits after token {step}"
                );
            }
            assert_eq!(got, want, "{name} q4 {pname}: greedy tokens");
            // No kernel is compiled once decoding runs, even when a cache outgrows its buffer
            // (it is copied, and the new rows appended by the kernel of every step).
            assert_eq!(
                compiled, 0,
                "{name} {pname}: pipelines compiled while decoding"
            );
            let stats = g.stats();
            assert_eq!(stats.decode_tokens, want.len() - 1);
            // Only the sampled id comes back: the KV cache and the logits never leave the GPU.
            assert!(
                stats.bytes_read_back_per_token() <= 16.0,
                "{name} {pname}: {} bytes read back per token",
                stats.bytes_read_back_per_token()
            );
            // The embedding, the decoder and the sampling kernel go to the GPU in one submit.
            assert_eq!(
                stats.decode_submits as usize, stats.decode_tokens,
                "{name} {pname}: {} submits in {} decode steps",
                stats.decode_submits, stats.decode_tokens
            );
            // A decode step binds what the step before bound (the cache in place, the pool's
            // buffers in the same order): bind groups are made only when a buffer changes (the
            // cache or the mask outgrowing theirs), not per step.
            let steps = (want.len() - 2) as u64;
            assert!(
                groups * 4 <= steps * stats.dispatches_per_token() as u64,
                "{name} {pname}: {groups} bind groups created in {steps} decode steps"
            );
            // The cache grows in place in the pool's size buckets: no buffer per step.
            assert!(
                (stats.decode_buffers_created as usize) < stats.decode_tokens,
                "{name} {pname}: {} buffers created in {} decode steps",
                stats.decode_buffers_created,
                stats.decode_tokens
            );
            eprintln!(
                "{name} q4 {pname}: {} tokens match; logits max diff {worst:.2e}; {:.1} dispatches/token, {:.1} bytes read back/token, {} buffers and {groups} bind groups created while decoding, decode {:.1} tok/s",
                got.len(),
                stats.dispatches_per_token(),
                stats.bytes_read_back_per_token(),
                stats.decode_buffers_created,
                stats.decode_tok_s()
            );
        }
    }
}

#[test]
fn q4f16_logits_within_tolerance_and_teacher_forced_argmax() {
    q4f16_logits_on(&gpu());
    // With 512 bytes of workgroup memory planned for, no fused GEMV stages its input row: the lone
    // f16 projections read it from memory (`xeo`'s word path), the prologue groups fall back.
    let mut small = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
    small.limits.max_compute_workgroup_storage_size = 512;
    q4f16_logits_on(&Rc::new(small));
}

fn q4f16_logits_on(gpu: &Rc<Gpu>) {
    for name in FIXTURES {
        let model = load(gpu, name, Dtype::Q4F16);
        let reference = reference(name, Dtype::Q4F16);
        let worst = check_logits(&model, name, &reference, Q4F16_LOGIT_TOL);
        // Teacher forcing over all reference tokens: where ONNX Runtime's top-1 margin is clear
        // (above twice the tolerance), the argmax must agree.
        let compared = argmax_agrees_where_clear(
            &model,
            &reference,
            &format!("{name} q4f16"),
            f64::from(2.0 * Q4F16_LOGIT_TOL),
        );
        assert!(compared >= 20, "{name}: only {compared} clear steps");
        eprintln!(
            "{name} q4f16: logits max diff {worst:.3} (tolerance {Q4F16_LOGIT_TOL}); {compared} teacher-forced steps agree"
        );
    }
}

#[test]
fn stop_ids_max_tokens_and_cancellation() {
    // With and without run-ahead (the stream uses the generator's default for the adapter).
    for overlap in [false, true] {
        let mut gpu = pollster::block_on(Gpu::new(None)).expect("a GPU adapter");
        gpu.tuning.submits_overlap = overlap;
        stop_rules(&Rc::new(gpu));
    }
}

fn stop_rules(gpu: &Rc<Gpu>) {
    let name = "gemma4-tiny";
    let model = load(gpu, name, Dtype::Q4);
    // End ids come from generation_config.json.
    assert_eq!(model.tokenizer.special().end_ids, vec![1, 106, 50]);
    let reference = reference(name, Dtype::Q4);
    let prompt = &reference["prompts"][0];
    let input = ids(&prompt["input_ids"]);
    let want = ids(&prompt["greedy_tokens"]);
    let run = |options: TextOptions, cancel_after: Option<(usize, &CancellationToken)>| {
        let mut s = model.stream(&input, options).expect("stream");
        let mut got = Vec::new();
        while let Some(t) = pollster::block_on(s.next()).expect("step") {
            got.push(t.id);
            if let Some((n, token)) = cancel_after
                && got.len() == n
            {
                token.cancel();
            }
        }
        (got, s.stop_reason(), s.steps_run())
    };
    // A stop id ends generation at its first occurrence (and is reported as the last token).
    let stop = want[5];
    let first = want.iter().position(|&t| t == stop).expect("present");
    let (got, reason, _) = run(
        TextOptions {
            max_new_tokens: 40,
            sampling: Sampling::Greedy,
            cancel: None,
            stop_ids: vec![stop],
            constraint: None,
        },
        None,
    );
    assert_eq!(got, want[..=first].to_vec());
    assert_eq!(reason, Some(StopReason::EndId(stop)));
    // max_new_tokens.
    let (got, reason, steps) = run(
        TextOptions {
            max_new_tokens: 7,
            sampling: Sampling::Greedy,
            cancel: None,
            stop_ids: Vec::new(),
            constraint: None,
        },
        None,
    );
    assert_eq!(got, want[..7].to_vec());
    assert_eq!((reason, steps), (Some(StopReason::MaxNewTokens), 7));
    // Cancellation is answered before the next step: no decoder run is recorded after the
    // cancel. Where the generator runs ahead, the step after the third token was already running
    // when that token was returned.
    let ahead = usize::from(gpu.tuning.submits_overlap);
    let token = CancellationToken::new();
    let (got, reason, steps) = run(
        TextOptions {
            max_new_tokens: 40,
            sampling: Sampling::Greedy,
            cancel: Some(token.clone()),
            stop_ids: Vec::new(),
            constraint: None,
        },
        Some((3, &token)),
    );
    assert_eq!(got, want[..3].to_vec());
    assert_eq!((reason, steps), (Some(StopReason::Cancelled), 3 + ahead));
}

#[test]
fn run_ahead_gives_the_same_tokens() {
    let gpu = gpu();
    let name = "gemma4-tiny";
    let model = load(&gpu, name, Dtype::Q4);
    let reference = reference(name, Dtype::Q4);
    let input = ids(&reference["prompts"][0]["input_ids"]);
    let sampled = Sampling::Sample {
        temperature: 1.5,
        top_k: 0,
        top_p: 1.0,
        seed: 7,
    };
    let generate = |ahead: bool| -> (Vec<u32>, u64) {
        let mut g = Generator::new(&model, &input, sampled)
            .expect("generator")
            .run_ahead(ahead);
        let before = gpu.counters.snapshot().submits;
        let mut got: Vec<u32> = (0..23)
            .map(|_| pollster::block_on(g.next_token()).expect("step"))
            .collect();
        got.push(pollster::block_on(g.last_token()).expect("last"));
        (got, gpu.counters.snapshot().submits - before)
    };
    // The random draw of step n is the same whether the step was fed its id from the GPU (run
    // ahead) or from the host; one submit per step either way, none left running after
    // last_token.
    let (ahead, ahead_submits) = generate(true);
    let (plain, plain_submits) = generate(false);
    assert_eq!(ahead, plain);
    assert_eq!((ahead_submits, plain_submits), (24, 24));
    assert!(
        ahead.iter().collect::<std::collections::HashSet<_>>().len() > 5,
        "temperature 1.5 should wander: {ahead:?}"
    );
    // Teacher forcing needs the step running ahead to be taken first.
    let mut g = Generator::new(&model, &input, Sampling::Greedy)
        .expect("generator")
        .run_ahead(true);
    pollster::block_on(g.next_token()).expect("prefill");
    let err = pollster::block_on(g.logits_for(&[5])).expect_err("a step runs ahead");
    assert!(err.to_string().contains("last_token"), "{err}");
    let mut g = Generator::new(&model, &input, Sampling::Greedy).expect("generator");
    let first = pollster::block_on(g.last_token()).expect("prefill");
    let logits = pollster::block_on(g.logits_for(&[])).expect("logits of the pending token");
    assert_eq!(g.position(), input.len() + 1);
    assert_eq!(logits.len(), 1024, "after {first}");
}

#[test]
fn gpu_sampling_follows_top_k_top_p_and_seed() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let v = 1024usize;
    // Logits: token 7 -> 2.0, 300 -> 1.0, 301 -> 1.0 (a tie), 900 -> 0.5, the rest -10.
    let mut logits = vec![-10.0f32; v];
    logits[7] = 2.0;
    logits[300] = 1.0;
    logits[301] = 1.0;
    logits[900] = 0.5;
    let host = HostTensor::from_f32(vec![1, 1, v], &logits);
    let mut cx = model.decoder.context();
    let t = cx.upload(&host).expect("upload");
    let draw = |sampling: Sampling, n: u64| -> Vec<u32> {
        (0..n)
            .map(|step| {
                pollster::block_on(gg_llm::sampler::sample(&model.decoder, &t, &sampling, step))
                    .expect("sample")
            })
            .collect()
    };
    let before = gpu.counters.snapshot().bytes_read_back;
    assert_eq!(draw(Sampling::Greedy, 1), vec![7]);
    assert_eq!(gpu.counters.snapshot().bytes_read_back - before, 4);
    let s = |temperature, top_k, top_p, seed| Sampling::Sample {
        temperature,
        top_k,
        top_p,
        seed,
    };
    // top_k 1 is greedy.
    assert!(draw(s(1.0, 1, 1.0, 1), 20).iter().all(|&x| x == 7));
    // top_k 3 keeps 7, 300, 301 (the tie at the threshold is kept whole), never 900.
    let k3 = draw(s(1.0, 3, 1.0, 2), 300);
    assert!(k3.iter().all(|x| [7, 300, 301].contains(x)), "{k3:?}");
    // Frequencies: p(7) = e^2/(e^2+2e) = 0.576.
    let f7 = k3.iter().filter(|&&x| x == 7).count() as f64 / 300.0;
    assert!((f7 - 0.576).abs() < 0.1, "p(7) = {f7}");
    assert!(k3.contains(&300) && k3.contains(&301));
    // top_p 0.5: token 7 alone has 0.52 of the full mass, so only 7 survives.
    let full =
        [2.0f64, 1.0, 1.0, 0.5].iter().map(|x| x.exp()).sum::<f64>() + 1020.0 * (-10.0f64).exp();
    assert!(2.0f64.exp() / full > 0.5);
    assert!(draw(s(1.0, 0, 0.5, 3), 50).iter().all(|&x| x == 7));
    // top_p 0.9 needs 7, 300 and 301 (0.52 + 2 * 0.19 = 0.90...) or 900 too: never the tail.
    let p9 = draw(s(1.0, 0, 0.97, 4), 300);
    assert!(p9.iter().all(|x| [7, 300, 301, 900].contains(x)), "{p9:?}");
    // High temperature flattens: the tail appears without top-k/top-p.
    let hot = draw(s(50.0, 0, 1.0, 5), 200);
    assert!(hot.iter().any(|x| ![7, 300, 301, 900].contains(x)));
    // Seeded: reproducible; another seed differs.
    assert_eq!(draw(s(1.0, 0, 1.0, 42), 40), draw(s(1.0, 0, 1.0, 42), 40));
    assert_ne!(draw(s(1.0, 0, 1.0, 42), 40), draw(s(1.0, 0, 1.0, 43), 40));
    // Ties in greedy go to the lowest id.
    let mut tie = vec![0.0f32; v];
    tie[10] = 3.0;
    tie[5] = 3.0;
    let t2 = cx
        .upload(&HostTensor::from_f32(vec![1, 1, v], &tie))
        .expect("upload");
    let id = pollster::block_on(gg_llm::sampler::sample(
        &model.decoder,
        &t2,
        &Sampling::Greedy,
        0,
    ))
    .expect("sample");
    assert_eq!(id, 5);
}

#[test]
fn model_backend_streams_the_greedy_answer() {
    let gpu = gpu();
    let name = "gemma4-tiny";
    let model = Rc::new(load(&gpu, name, Dtype::Q4));
    let reference = reference(name, Dtype::Q4);
    let prompt = &reference["prompts"][0];
    let want = ids(&prompt["greedy_tokens"]);
    let text = prompt["messages"][0]["content"].as_str().expect("content");
    // The chat template renders the reference prompt exactly.
    let rendered = model
        .prompt_ids(&[gg_gemma::ChatMessage::user(text)], &[], false)
        .expect("prompt");
    assert_eq!(rendered, ids(&prompt["input_ids"]));
    let backend = GemmaBackend::new(model.clone());
    let options = GenerateOptions {
        max_new_tokens: 12,
        temperature: 0.0,
        ..GenerateOptions::default()
    };
    let messages = [gg_agent::ChatMessage::user(text)];
    let chunks: Vec<_> = pollster::block_on(
        backend
            .generate(&messages, &[], &options)
            .collect::<Vec<_>>(),
    );
    let mut out = String::new();
    for c in &chunks[..chunks.len() - 1] {
        match c {
            Ok(StreamChunk::Token { text }) => out.push_str(text),
            other => panic!("unexpected chunk {other:?}"),
        }
    }
    assert_eq!(
        chunks.last(),
        Some(&Ok(StreamChunk::Done {
            reason: FinishReason::MaxNewTokens
        }))
    );
    // The text is the incremental detokenization of the greedy tokens.
    let mut detok = model.tokenizer.incremental_decoder();
    let mut expected = String::new();
    for &id in &want[..12] {
        expected.push_str(&detok.push(id).expect("detok"));
    }
    expected.push_str(&detok.finish().expect("detok"));
    assert_eq!(out, expected);
    // Dropping the stream after the first chunk stops generation (nothing runs after it).
    let mut stream = backend.generate(&messages, &[], &options);
    let first = pollster::block_on(stream.next());
    assert!(matches!(first, Some(Ok(_))));
    drop(stream);
    // Token counting uses the real tokenizer: the user turn is longer than its text.
    use gg_agent::context::TokenCounter;
    let n = backend.count_message(&messages[0]);
    assert!(n > 5 && n < rendered.len(), "{n}");
}

#[test]
fn loads_over_http_with_chunked_external_data() {
    let name = "gemma4-tiny-e4b";
    let url = serve::serve(fixture_dir(name));
    let gpu = gpu();
    let repo = ModelRepo::open(&url).expect("repo");
    let model = pollster::block_on(GemmaModel::load(
        gpu,
        &repo,
        &LoadOptions {
            dtype: Some(Dtype::Q4),
        },
    ))
    .expect("load over HTTP");
    // The config's chunk counts name every external data file of the variant.
    let files = model.config.files(Dtype::Q4);
    assert!(files.contains(&"onnx/decoder_model_merged_q4.onnx_data_5".to_string()));
    let reference = reference(name, Dtype::Q4);
    let prompt = &reference["prompts"][1];
    let want = ids(&prompt["greedy_tokens"]);
    let mut g = Generator::new(&model, &ids(&prompt["input_ids"]), Sampling::Greedy).expect("gen");
    let got: Vec<u32> = (0..8)
        .map(|_| pollster::block_on(g.next_token()).expect("step"))
        .collect();
    assert_eq!(got, want[..8].to_vec());
    // A missing file is an error naming it.
    let bad = ModelRepo::open(&format!("{url}/nowhere")).expect("repo");
    let err = pollster::block_on(GemmaModel::load(
        Rc::new(pollster::block_on(Gpu::new(None)).expect("gpu")),
        &bad,
        &LoadOptions::default(),
    ))
    .expect_err("missing files");
    assert!(err.to_string().contains("config.json"), "{err}");
}

#[test]
fn warm_up_compiles_what_generations_need() {
    // As here (a software adapter: register-blocked prompt kernels), and as a GPU (tiled GEMMs
    // with their own row buckets), which is where the extension warms up.
    for hardware in [false, true] {
        let mut g = pollster::block_on(Gpu::new(None)).expect("a GPU adapter (lavapipe in CI)");
        g.tuning.software &= !hardware;
        warm_up_covers(Rc::new(g));
    }
}

fn warm_up_covers(gpu: Rc<Gpu>) {
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let before = gpu.counters.snapshot();
    pollster::block_on(model.warm_up()).expect("warm-up");
    let warmed = gpu.counters.snapshot();
    assert!(
        warmed.pipelines_compiled > before.pipelines_compiled,
        "the warm-up compiles the kernels"
    );
    assert_eq!(warmed.submits, before.submits, "the warm-up runs nothing");
    // Prompts of other lengths (the prompt kernels' row buckets: 2 to 4, 5 to 8, 9 to 16, 17 to
    // 32, 33 and more; from 256 keys a decode splits its attention) and their decode steps, run
    // ahead or not, find every kernel compiled, as does a decode crossing 256 keys.
    let vocab = gg_llm::bench::vocab_of(&model);
    for (n, tokens, ahead) in [
        (3, 4, true),
        (6, 4, false),
        (11, 4, true),
        (16, 4, false),
        (23, 4, true),
        (32, 4, false),
        (40, 4, true),
        (57, 4, false),
        (130, 4, true),
        (250, 12, true),
        (301, 4, false),
        (420, 4, true),
    ] {
        let prompt = gg_llm::bench::prompt_ids(n, vocab);
        let mut g = Generator::new(&model, &prompt, Sampling::Greedy)
            .expect("generator")
            .run_ahead(ahead);
        for _ in 1..tokens {
            pollster::block_on(g.next_token()).expect("step");
        }
        pollster::block_on(g.last_token()).expect("last");
        assert_eq!(
            gpu.counters.snapshot().pipelines_compiled,
            warmed.pipelines_compiled,
            "a prompt of {n} tokens compiled kernels after the warm-up (software: {})",
            gpu.tuning.software
        );
    }
    // What the warm-up recorded and dropped (its uploads still reach the GPU with the next
    // submit) leaves generations exact.
    let reference = reference("gemma4-tiny", Dtype::Q4);
    let prompt = &reference["prompts"][0];
    let want = ids(&prompt["greedy_tokens"]);
    let mut g = Generator::new(&model, &ids(&prompt["input_ids"]), Sampling::Greedy)
        .expect("generator")
        .run_ahead(true);
    let got: Vec<u32> = (0..want.len())
        .map(|_| pollster::block_on(g.next_token()).expect("step"))
        .collect();
    assert_eq!(got, want);
}
