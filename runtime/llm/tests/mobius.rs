//! The Gemma session on the graphs a public exporter writes: tiny Gemma 4 models exported by
//! mobius (`mobius-onnx` 0.1.0) as ONNX Runtime GenAI packages (`tests/fixtures/models/mobius-*`,
//! made by `tools/fixtures/gen_mobius.py`): its three attention profiles (`--ep cpu`:
//! GroupQueryAttention with empty K/V on the KV-shared layers; `--ep default`: standard
//! Attention; `--ep webgpu`: GroupQueryAttention, graph-capture-ready), fp32, int4 (MatMulNBits /
//! GatherBlockQuantized) and int4 with float16 activations, the single `model.onnx` taking `input_ids` and the split package
//! (`embedding/` and `decoder/`). Against ONNX Runtime's references (`reference/ort.json`): prefill and
//! decode logits, 40 greedy tokens (well past the sliding windows of 8 and 16), and the decode
//! dispatches per layer against our own fixtures'.
//!
//! GPU: whatever wgpu picks (in CI `WGPU_BACKEND=vulkan` = Mesa lavapipe).

#[path = "common/reference.rs"]
mod reference;
#[path = "common/serve.rs"]
mod serve;
#[path = "common/teacher.rs"]
mod teacher;

use gg_llm::config::Package;
use gg_llm::{Dtype, GemmaModel, Generator, LoadOptions, ModelRepo, Sampling};
use gg_runtime::{Gpu, HostTensor};
use reference::{Q4F16_LOGIT_TOL, ids, max_abs_diff};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use teacher::{argmax_agrees_where_clear, teacher_forced};

/// Every committed mobius package.
const PACKAGES: &[&str] = &[
    "mobius-tiny-gqa-fp32",
    "mobius-tiny-gqa-int4",
    "mobius-tiny-attn-int4",
    "mobius-tiny-gqa-int4-split",
    "mobius-tiny-attn-fp32-split",
    "mobius-tiny-e4b-gqa-int4",
    "mobius-tiny-e4b-attn-int4",
    // The WebGPU profile (`--ep webgpu`): GroupQueryAttention, no position_ids input (the
    // positions come from attention_mask), the total length from the mask's sum.
    "mobius-tiny-webgpu-int4-split",
    // The same with the per-layer table split into one float table per layer, read in the
    // decoder from input_ids (what mobius writes for WebGPU when the table passes 256 MiB, as
    // Gemma 4 E2B's does; forced here at the tiny size).
    "mobius-tiny-webgpu-int4-split-ple",
];

/// fp32 activations: max |logit - ONNX Runtime| allowed (as for our own q4 fixtures).
const LOGIT_TOL: f32 = 2e-3;

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models")
        .join(name)
}

fn reference(name: &str) -> Value {
    let p = fixture_dir(name).join("reference/ort.json");
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

fn load_dir(gpu: &Rc<Gpu>, dir: &Path) -> gg_llm::Result<GemmaModel> {
    let repo = ModelRepo::open(dir.to_str().expect("utf-8 path"))?;
    pollster::block_on(GemmaModel::load(
        gpu.clone(),
        &repo,
        &LoadOptions::default(),
    ))
}

fn load(gpu: &Rc<Gpu>, name: &str) -> GemmaModel {
    load_dir(gpu, &fixture_dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Greedy decoding of every reference prompt; returns the decode dispatches per token.
fn greedy_equals_reference(model: &GemmaModel, name: &str, reference: &Value) -> f64 {
    let mut dispatches = 0.0;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let pname = prompt["name"].as_str().expect("name");
        let input = ids(&prompt["input_ids"]);
        let want = ids(&prompt["greedy_tokens"]);
        assert!(want.len() >= 32);
        let mut g = Generator::new(model, &input, Sampling::Greedy)
            .expect("generator")
            .run_ahead(true);
        let mut got = Vec::new();
        for _ in 0..want.len() {
            got.push(pollster::block_on(g.next_token()).expect("step"));
        }
        assert_eq!(got, want, "{name} {pname}: greedy tokens");
        let stats = g.stats();
        assert!(
            stats.bytes_read_back_per_token() <= 16.0,
            "{name} {pname}: {} bytes read back per token",
            stats.bytes_read_back_per_token()
        );
        assert_eq!(
            stats.decode_submits as usize, stats.decode_tokens,
            "{name} {pname}: one submit per decode step"
        );
        dispatches = stats.dispatches_per_token();
        eprintln!(
            "{name} {pname}: {} greedy tokens equal ONNX Runtime's ({} positions); {:.1} dispatches/token, decode {:.1} tok/s",
            got.len(),
            input.len() + got.len(),
            dispatches,
            stats.decode_tok_s()
        );
    }
    dispatches
}

/// Prefill and the first 4 decode steps, teacher-forced on the reference tokens.
fn logits_match(model: &GemmaModel, name: &str, reference: &Value) -> f32 {
    teacher_forced(model, reference, name, LOGIT_TOL, |pname, step| {
        npy(name, &format!("ort.{pname}.{step}_logits.npy")).to_f32()
    })
}

#[test]
fn mobius_packages_match_onnx_runtime() {
    let gpu = gpu();
    for name in PACKAGES {
        let model = load(&gpu, name);
        assert!(
            matches!(model.config.package, Package::Genai { .. }),
            "{name}: read as an ONNX Runtime GenAI package"
        );
        assert_eq!(model.variant(), "genai f32", "{name}");
        let split = name.ends_with("-split") || name.ends_with("-split-ple");
        assert_eq!(model.embed.is_some(), split, "{name}: embedding graph");
        // The per-layer tables in the decoder read the token ids there.
        let ple_in_decoder = name.ends_with("-ple");
        assert_eq!(
            model.layout.input_ids,
            !split || ple_in_decoder,
            "{name}: decoder input_ids"
        );
        // mobius' graphs have no num_logits_to_keep: the sampler reads the last row.
        assert!(!model.layout.num_logits_to_keep, "{name}");
        // genai_config.json says 4096 positions; the rotary tables (GroupQueryAttention's
        // cos_cache, or the Gather of position_ids before RotaryEmbedding) have the checkpoint's
        // 1024 rows, so the context ends at 1024, where ONNX Runtime refuses to go on, except in
        // the package exported with 4096-row tables (`LONG_TABLES` in gen_mobius.py).
        let genai: Value = serde_json::from_slice(
            &std::fs::read(fixture_dir(name).join("genai_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(genai["model"]["context_length"], 4096, "{name}");
        let rows = if *name == "mobius-tiny-gqa-int4-split" {
            4096
        } else {
            1024
        };
        assert_eq!(model.layout.rotary_positions, Some(rows), "{name}");
        assert_eq!(model.context_limit(), Some(rows), "{name}");
        let reference = reference(name);
        let worst = logits_match(&model, name, &reference);
        greedy_equals_reference(&model, name, &reference);
        eprintln!("{name}: logits within {worst:.2e} of ONNX Runtime");
    }
}

/// The WebGPU profile with float16 activations (`--ep webgpu --dtype f16`: what mobius writes
/// for WebGPU deployments, q4f16; graph-capture-ready: the KV-shared layers' empty K/V a constant),
/// with the per-layer table whole (in the embedding graph) and split into one float16 table per
/// layer (in the decoder, as for Gemma 4 E2B); and the standard-Attention profile in float16
/// (single `model.onnx`, a float16 mask). ONNX Runtime computes it in float16; this runtime
/// stores float16 and computes in f32, so it is held to the float32 computation of the same int4
/// weights (ONNX Runtime's logits of the `-int4-` twin, teacher-forced on its tokens) within the
/// q4f16 tolerance, and to ONNX Runtime's float16 logits within that plus ONNX Runtime's own
/// float16 error on the references ([`ort_float16_error`]: 0.54 whole, 0.68 split, 0.77
/// Attention; ours is then 0.83, 0.96 and 0.61 from it, 0.33, 0.33 and 0.42 from float32). The argmax must equal ONNX Runtime's float16
/// greedy token wherever its top-1 margin is clear, teacher-forced over all 40 of them (past the
/// sliding window of 8).
#[test]
fn float16_webgpu_package_matches_onnx_runtime() {
    // Each float16 package with its float32 twin (the same int4 weights); the second pair has
    // the per-layer table split into float16 tables in the decoder.
    for (name, exact) in [
        ("mobius-tiny-attn-int4f16", "mobius-tiny-attn-int4"),
        (
            "mobius-tiny-webgpu-int4f16-split",
            "mobius-tiny-webgpu-int4-split",
        ),
        (
            "mobius-tiny-webgpu-int4f16-split-ple",
            "mobius-tiny-webgpu-int4-split-ple",
        ),
    ] {
        let model = load(&gpu(), name);
        assert_eq!(model.variant(), "genai f16", "{name}");
        assert_eq!(
            model.embed.is_some(),
            name.contains("-split"),
            "{name}: embedding graph"
        );
        let vs_f32 = teacher_forced(
            &model,
            &reference(exact),
            &format!("{name} vs {exact}"),
            Q4F16_LOGIT_TOL,
            |pname, step| npy(exact, &format!("ort.{pname}.{step}_logits.npy")).to_f32(),
        );
        // Ours and ONNX Runtime's float16 logits may differ by our error plus its own.
        let tol = Q4F16_LOGIT_TOL + ort_float16_error(name, exact);
        let reference = reference(name);
        let worst = teacher_forced(&model, &reference, name, tol, |pname, step| {
            npy(name, &format!("ort.{pname}.{step}_logits.npy")).to_f32()
        });
        let compared = argmax_agrees_where_clear(&model, &reference, name, f64::from(tol));
        assert!(compared >= 20, "{name}: only {compared} clear steps");
        eprintln!(
            "{name}: logits within {vs_f32:.3} of the float32 computation, {worst:.3} of ONNX Runtime's float16 one (tolerance {tol:.3}); {compared} teacher-forced steps agree"
        );
    }
}

/// ONNX Runtime's own float16 error on these references: the largest |logit| difference between
/// its float16 package (`name`) and its float32 twin (`exact`), over the prefill logits and the
/// decode steps both reached on the same greedy tokens.
fn ort_float16_error(name: &str, exact: &str) -> f32 {
    let (half, full) = (reference(name), reference(exact));
    let mut worst = 0.0f32;
    for (a, b) in half["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .zip(full["prompts"].as_array().expect("prompts"))
    {
        let pname = a["name"].as_str().expect("name");
        assert_eq!(a["input_ids"], b["input_ids"], "{name} / {exact} {pname}");
        let logits =
            |pkg: &str, step: &str| npy(pkg, &format!("ort.{pname}.{step}_logits.npy")).to_f32();
        let prefill = logits(name, "prefill");
        worst = worst.max(max_abs_diff(&prefill, &logits(exact, "prefill")));
        let same = ids(&a["greedy_tokens"])
            .iter()
            .zip(ids(&b["greedy_tokens"]))
            .take_while(|(x, y)| **x == *y)
            .count();
        let (dh, df) = (logits(name, "decode"), logits(exact, "decode"));
        for (step, (h, f)) in dh
            .chunks(prefill.len())
            .zip(df.chunks(prefill.len()))
            .enumerate()
            .take(same)
        {
            let d = max_abs_diff(h, f);
            assert!(d.is_finite(), "{name} {pname} step {step}");
            worst = worst.max(d);
        }
    }
    worst
}

/// Decode dispatches per layer of the GroupQueryAttention profile (int4 and fp32, single and
/// split, E2B- and E4B-style) against our own fixture of the same model (`gemma4-tiny` /
/// `gemma4-tiny-e4b` q4: fp32 activations like the packages), within 10% (issue 27). Measured
/// against 10.33 (E2B-style) and 10.60 (E4B-style): `mobius-tiny-gqa-int4` 10.00 and `-gqa-fp32`
/// 9.67 (10.00 before its embedding lookup and scale were one dispatch, 12.83 before the fusion
/// pass grouped the float `MatMul`s, 19.5 before it grouped
/// `SkipSimplifiedLayerNormalization`), `-gqa-int4-split` 10.17 (its decoder slices each layer's
/// per-layer input: read as the gather it spells; 10.50 before its embedding graph's lookups
/// and scales were one dispatch each and the Concat onto no image features no copy),
/// `-webgpu-int4-split-ple` 10.00 (its decoder's six per-layer tables, scales and Concat one
/// dispatch; 11.5 before: the lookups in pairs, six Muls and the Concat), `-e4b-gqa-int4` 10.20.
/// The float16 packages (`-webgpu-int4f16-split` and `-split-ple`: f16 activations, their norms'
/// scales and float projections f16, no Casts) group as their int4 twins: 10.17 and 10.00
/// (`-split-ple`: 22.3 before the fused kernels took f16 scales and f16 float weights, 32.3
/// before the f16 norms wrote f16 themselves).
#[test]
fn decode_dispatches_per_layer_close_to_our_fixtures() {
    dispatches_within_10_percent(&[
        ("gemma4-tiny", "mobius-tiny-gqa-int4"),
        ("gemma4-tiny", "mobius-tiny-gqa-fp32"),
        ("gemma4-tiny", "mobius-tiny-gqa-int4-split"),
        ("gemma4-tiny", "mobius-tiny-webgpu-int4-split"),
        ("gemma4-tiny", "mobius-tiny-webgpu-int4-split-ple"),
        ("gemma4-tiny", "mobius-tiny-webgpu-int4f16-split"),
        ("gemma4-tiny", "mobius-tiny-webgpu-int4f16-split-ple"),
        ("gemma4-tiny-e4b", "mobius-tiny-e4b-gqa-int4"),
    ]);
}

/// The same for the standard-Attention profile, against 10.33 and 10.60: `mobius-tiny-attn-int4`
/// 11.33 (+9.7%; 13.67 before), `-attn-fp32-split` 11.17 (+8.1%; 15.17 before),
/// `-e4b-attn-int4` 11.60 (+9.4%; 14.00 before), `-attn-int4f16` 11.33 (+9.7%: float16
/// activations group as its int4 twin; 11.67 before its mask's `Cast(Where(..), float16)` ran on
/// the host with the Where, 12.67 before `Attention` wrote float16 itself). Per decode step of `-attn-int4` (68 dispatches
/// against our 62; 82 before) attention takes 16 where our GroupQueryAttention graph takes 13
/// (28 before): `RotaryEmbedding` 6 (one dispatch for each layer's query and key,
/// `Fused[2xRotaryEmbedding]`, and the KV-shared layers' lone query rotations; 10 before), the
/// `Attention` op 10 for 6 nodes (its key and value cache appends in one dispatch; 14 before),
/// the KV-shared layers' attention reading the shared `present` caches in place
/// (`Fused[2x(Transpose+Reshape)+Attention]`: the 4 `Transpose` copies gone); the cos/sin
/// `Gather`s are 2 in pairs (4 before). The split package's embedding graph reads its two tables
/// with their scales in one dispatch each (`Fused[Gather+Mul]`), and its Concat of no image
/// features is the zero row itself.
#[test]
fn attention_profile_decode_dispatches_per_layer_close_to_our_fixtures() {
    dispatches_within_10_percent(&[
        ("gemma4-tiny", "mobius-tiny-attn-int4"),
        ("gemma4-tiny", "mobius-tiny-attn-fp32-split"),
        ("gemma4-tiny-e4b", "mobius-tiny-e4b-attn-int4"),
        ("gemma4-tiny", "mobius-tiny-attn-int4f16"),
    ]);
}

/// Decode dispatches per layer of each (our fixture, mobius package) pair within 10%: all pairs
/// are measured and printed before any assertion.
fn dispatches_within_10_percent(pairs: &[(&str, &str)]) {
    let gpu = gpu();
    let per_token = |m: &GemmaModel| {
        let prompt: Vec<u32> = (200..216).collect();
        let mut g = Generator::new(m, &prompt, Sampling::Greedy).expect("generator");
        for _ in 0..12 {
            pollster::block_on(g.last_token()).expect("step");
        }
        g.stats().dispatches_per_token()
    };
    let mut far = Vec::new();
    for &(ours, theirs) in pairs {
        // the q4 variant (fp32 activations) like the packages
        let repo = ModelRepo::open(fixture_dir(ours).to_str().expect("utf-8")).expect("repo");
        let base = pollster::block_on(GemmaModel::load(
            gpu.clone(),
            &repo,
            &LoadOptions {
                dtype: Some(Dtype::Q4),
            },
        ))
        .expect("our fixture");
        let text: Value = serde_json::from_slice(
            &std::fs::read(fixture_dir(ours).join("config.json")).expect("config"),
        )
        .expect("json");
        let layers = text["text_config"]["num_hidden_layers"]
            .as_u64()
            .expect("layers") as f64;
        let a = per_token(&base) / layers;
        drop(base);
        let model = load(&gpu, theirs);
        let b = per_token(&model) / layers;
        eprintln!(
            "decode dispatches per layer: {ours} q4 {a:.2}, {theirs} {b:.2} ({:+.1}%)",
            (b / a - 1.0) * 100.0
        );
        if (b - a).abs() > 0.1 * a {
            far.push(format!("{theirs} {b:.2} vs {ours} q4 {a:.2}"));
        }
    }
    assert!(
        far.is_empty(),
        "decode dispatches per layer more than 10% apart: {far:?}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gg-llm-mobius-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Packages the session cannot run fail at load with a message naming the missing file, section
/// or input.
#[test]
fn packages_it_cannot_run_name_what_is_missing() {
    let gpu = gpu();
    let expect_err = |dir: &Path, needle: &str| {
        let e = match load_dir(&gpu, dir) {
            Ok(_) => panic!("{}: loaded", dir.display()),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains(needle),
            "{}: {e:?} lacks {needle:?}",
            dir.display()
        );
    };
    // the split package without its embedding graph
    let d = scratch("no-embedding");
    copy_dir(&fixture_dir("mobius-tiny-gqa-int4-split"), &d);
    std::fs::remove_file(d.join("embedding/model.onnx")).expect("rm");
    expect_err(&d, "embedding/model.onnx");
    // ... or with genai_config.json not naming it: the decoder takes inputs_embeds
    let cfg_path = d.join("genai_config.json");
    let mut cfg: Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).expect("read")).expect("json");
    cfg["model"]
        .as_object_mut()
        .expect("model")
        .remove("embedding");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).expect("json")).expect("write");
    expect_err(&d, "model.embedding.filename");
    // no decoder section
    cfg["model"]
        .as_object_mut()
        .expect("model")
        .remove("decoder");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).expect("json")).expect("write");
    expect_err(&d, "model.decoder");
    // external data missing
    let d2 = scratch("no-data");
    copy_dir(&fixture_dir("mobius-tiny-gqa-int4"), &d2);
    std::fs::remove_file(d2.join("model.onnx.data")).expect("rm");
    expect_err(&d2, "model.onnx.data");
    // neither layout
    let d3 = scratch("empty");
    std::fs::create_dir_all(&d3).expect("mkdir");
    expect_err(&d3, "genai_config.json");
    for d in [d, d2, d3] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The split package over HTTP, as `gemma-gem generate --model URL` reads it: subfolders, the
/// optional files absent (404), external data found from the graphs.
#[test]
fn split_package_loads_over_http() {
    let name = "mobius-tiny-gqa-int4-split";
    let url = serve::serve(fixture_dir(name));
    let repo = ModelRepo::open(&url).expect("repo");
    let model = pollster::block_on(GemmaModel::load(gpu(), &repo, &LoadOptions::default()))
        .expect("load over HTTP");
    assert_eq!(
        model.config.graph_files(Dtype::Q4),
        ["embedding/model.onnx", "decoder/model.onnx"]
    );
    let reference = reference(name);
    let prompt = &reference["prompts"][0];
    let want = ids(&prompt["greedy_tokens"]);
    let mut g = Generator::new(&model, &ids(&prompt["input_ids"]), Sampling::Greedy).expect("gen");
    let got: Vec<u32> = (0..12)
        .map(|_| pollster::block_on(g.next_token()).expect("step"))
        .collect();
    assert_eq!(got, want[..12].to_vec());
}

/// A prompt past the rotary tables: the package with 1024-row tables refuses it up front (ONNX
/// Runtime would refuse it in GroupQueryAttention), the one exported with 4096-row tables computes
/// it as ONNX Runtime does (its `long` reference prompt, checked by
/// `mobius_packages_match_onnx_runtime`).
#[test]
fn a_prompt_past_the_rotary_tables_is_refused_where_they_end() {
    let gpu = gpu();
    let long = reference("mobius-tiny-gqa-int4-split")["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "long")
        .map(|p| ids(&p["input_ids"]))
        .expect("the split package's reference has the long prompt");
    assert!(long.len() > 1024);
    let short = load(&gpu, "mobius-tiny-gqa-int4");
    assert_eq!(short.context_limit(), Some(1024));
    let Err(err) = Generator::new(&short, &long, Sampling::Greedy) else {
        panic!("a prompt past the tables was accepted");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "the prompt has {} tokens, more than the model's context of 1024",
            long.len()
        )
    );
    // the longest prompt that leaves room for a token: the prefill's token, then the step that
    // feeds it at position 1023, the table's last row
    let mut g = Generator::new(&short, &long[..1023], Sampling::Greedy).expect("fits");
    pollster::block_on(g.next_token()).expect("the prefill's token");
    pollster::block_on(g.next_token()).expect("the step at position 1023");
    let err = pollster::block_on(g.next_token()).expect_err("no position 1024");
    assert!(err.to_string().contains("context of 1024"), "{err}");
}

/// A long prompt on a decoder without `num_logits_to_keep` computes the logits of its last
/// position only (`gg_llm::last_row`, applied where the decoder is loaded): not 1043 rows of
/// logits for the `long` prompt (at Gemma 4's vocabulary, 1043 × 262144 float32: 1.1 GB, more
/// than SwiftShader could allocate for the E2B-shaped package), and the greedy tokens are still
/// ONNX Runtime's.
#[test]
fn a_long_prompt_computes_the_logits_of_its_last_position_only() {
    let name = "mobius-tiny-gqa-int4-split";
    let model = load(&gpu(), name);
    let logits = model
        .decoder
        .graph
        .outputs
        .iter()
        .find(|o| o.name == "logits")
        .expect("logits");
    assert_eq!(logits.dims.as_ref().expect("dims")[1].to_string(), "1");
    assert!(
        model
            .decoder
            .graph
            .nodes
            .iter()
            .any(|n| n.op_type == "Slice" && n.name.starts_with("gg.last_row"))
    );
    let long = reference(name)["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "long")
        .cloned()
        .expect("the long prompt");
    let want = ids(&long["greedy_tokens"]);
    let mut g = Generator::new(&model, &ids(&long["input_ids"]), Sampling::Greedy).expect("gen");
    let got: Vec<u32> = (0..8)
        .map(|_| pollster::block_on(g.next_token()).expect("step"))
        .collect();
    assert_eq!(got, want[..8].to_vec());
}
