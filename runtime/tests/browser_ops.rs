//! The op families on the browser's WebGPU (headless Chromium, SwiftShader here) through
//! `wasm-bindgen-test`: a representative subset of the ONNX Runtime reference cases in
//! tests/fixtures/ops (every standard family, and each com.microsoft op), embedded in the test
//! and compared with the same tolerances as natively (`contrib_ops.rs`).
//!
//! Run by `cargo xtask test` (stage "wasm tests"); by hand:
//! `CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner cargo test -p gg-runtime
//! --target wasm32-unknown-unknown --test browser_ops` (with `runtime/webdriver.json`, which turns
//! WebGPU on in headless Chromium).
#![cfg(target_arch = "wasm32")]

#[path = "common/compare.rs"]
mod compare;

use gg_runtime::model::{Graph, decode_tensor};
use gg_runtime::source::MemorySource;
use gg_runtime::{Gpu, Session};
use std::rc::Rc;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

struct Case {
    name: &'static str,
    case_json: &'static str,
    model: &'static [u8],
    inputs: &'static [&'static [u8]],
    outputs: &'static [&'static [u8]],
}

macro_rules! case {
    ($name:literal, [$($i:literal),*], [$($o:literal),*]) => {
        Case {
            name: $name,
            case_json: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/ops/", $name, "/case.json")),
            model: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/ops/", $name, "/model.onnx")),
            inputs: &[$(include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/ops/", $name, "/test_data_set_0/input_", $i, ".pb"))),*],
            outputs: &[$(include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/ops/", $name, "/test_data_set_0/output_", $o, ".pb"))),*],
        }
    };
}

#[rustfmt::skip]
const CASES: &[Case] = &[
    case!("std_add_broadcast_float32", [0, 1], [0]),
    case!("std_cast_float16_to_float32", [0], [0]),
    case!("std_cast_float32_to_float16", [0], [0]),
    case!("std_concat_float32", [0, 1], [0]),
    case!("std_div_broadcast_float32", [0, 1], [0]),
    case!("std_expand_float32", [0], [0]),
    case!("std_gather_float32", [0, 1], [0]),
    case!("std_gemm_transb_float32", [0, 1, 2], [0]),
    case!("std_layernorm_float32", [0, 1, 2], [0]),
    case!("std_matmul_batched_float32", [0, 1], [0]),
    case!("std_matmul_float16", [0, 1], [0]),
    case!("std_mul_float16", [0, 1], [0]),
    case!("std_reducemean_float32", [0], [0]),
    case!("std_reshape_float32", [0], [0]),
    case!("std_slice_float32", [0], [0]),
    case!("std_softmax_float32", [0], [0]),
    case!("std_sqrt_float32", [0], [0]),
    case!("std_tanh_float32", [0], [0]),
    case!("std_transpose_float32", [0], [0]),
    case!("std_where_float32", [0, 1, 2], [0]),
    // Variadic Max (5 inputs: two dispatches, NaNs) and OneHot with a depth computed at run time.
    case!("std_max_variadic_nan_float32", [0, 1, 2, 3, 4], [0]),
    case!("std_onehot_runtime_depth", [0], [0]),
    case!("matmulnbits_b4_blk32_k64_n24_m1_zp_float32", [0, 1, 2, 3], [0]),
    case!("matmulnbits_b4_blk32_k72_n20_m11_zp_float32_bias", [0, 1, 2, 3, 4], [0]),
    case!("matmulnbits_b8_blk64_k64_n10_m1_zp_float16_bias", [0, 1, 2, 3, 4], [0]),
    case!("matmulnbits_b4_blk32_k100_n65_m33_zp_float32_bias", [0, 1, 2, 3, 4], [0]),
    case!("matmulnbits_b8_blk64_k72_n66_m17_zp_float16_bias", [0, 1, 2, 3, 4], [0]),
    case!("matmulnbits_b4_blk32_k96_n100_m6_zp_float32_bias", [0, 1, 2, 3, 4], [0]),
    case!("matmulnbits_b4_blk32_k64_n72_m20_zp_float16_bias", [0, 1, 2, 3, 4], [0]),
    case!("gatherblockquantized_b4_blk32_zp_float32", [0, 1, 2, 3], [0]),
    case!("simplifiedlayernorm_float32", [0, 1], [0]),
    case!("skipsimplifiedlayernorm_bias_float16", [0, 1, 2, 3], [0, 1]),
    case!("gelu_tanh_float32", [0], [0]),
    case!("rotaryembedding_ms_i0_float32", [0, 1, 2, 3], [0]),
    case!("gqa_prompt_rotary", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    case!("gqa_window_decode", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    case!("gqa_f16_decode_rotary", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    // cos/sin caches as initializers: packed into one binding at load (read at offsets).
    case!("gqa_cache_init_decode_rotary", [0, 1, 2, 3, 4, 5, 6], [0, 1, 2]),
    case!("gqa_cache_init_f16_prompt_rotary", [0, 1, 2, 3, 4, 5, 6], [0, 1, 2]),
    case!("mha_kpm_uni_attnbias_past", [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2]),
    case!("mha_f16_decode_past_uni_attnbias", [0, 1, 2, 3, 4, 5], [0, 1, 2]),
    case!("attention_3d_gqa_causal_past_softcap_float32", [0, 1, 2, 3, 4], [0, 1, 2]),
    case!("attention_4d_boolmask_float16", [0, 1, 2, 3], [0]),
    case!("attention_4d_long_past_neginf_mask_softmax_out_float32", [0, 1, 2, 3, 4, 5], [0, 1, 2, 3]),
    case!("gqa_tile_decode_long_split", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    case!("gqa_tile_prefill_past_split", [0, 1, 2, 3, 4, 5, 6], [0, 1, 2]),
    case!("gqa_tile_decode_bias_split", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 1, 2]),
    // Zero new K/V tokens (KV-shared layers): empty key/value, or absent with a Q-only query.
    case!("gqa_shared_decode_window", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    case!("gqa_shared_prefill_window_softcap", [0, 1, 2, 3, 4, 5, 6], [0]),
    case!("gqa_shared_qonly_decode_window", [0, 1, 2, 3, 4, 5, 6], [0, 1, 2]),
    case!("gqa_shared_f16_decode_window", [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2]),
    // ai.onnx 23 RMSNormalization (IR 11, opset 24), the scale broadcast over leading axes.
    case!("rmsnormalization_lead_scale", [0, 1], [0]),
    case!("rmsnormalization_f16", [0, 1], [0]),
    // Model-local functions inlined at load.
    case!("function_model_local_inlined", [0, 1], [0, 1]),
];

async fn run(gpu: &Rc<Gpu>, case: &Case) -> Result<(), String> {
    let meta: serde_json::Value =
        serde_json::from_str(case.case_json).map_err(|e| e.to_string())?;
    let rtol = meta["rtol"].as_f64().ok_or("case.json: rtol")?;
    let atol = meta["atol"].as_f64().ok_or("case.json: atol")?;
    let graph = Graph::decode(case.model, case.name).map_err(|e| e.to_string())?;
    let session = Session::from_graph(gpu.clone(), graph.clone(), &MemorySource::new())
        .await
        .map_err(|e| e.to_string())?;
    let mut feeds = Vec::new();
    for (input, bytes) in graph.inputs.iter().zip(case.inputs) {
        feeds.push((
            input.name.clone(),
            decode_tensor(bytes, &input.name).map_err(|e| e.to_string())?,
        ));
    }
    if feeds.len() != graph.inputs.len() {
        return Err(format!(
            "{} inputs for {} graph inputs",
            feeds.len(),
            graph.inputs.len()
        ));
    }
    let outs = session.run_host(feeds).await.map_err(|e| e.to_string())?;
    if outs.len() != case.outputs.len() {
        return Err(format!(
            "{} outputs, expected {}",
            outs.len(),
            case.outputs.len()
        ));
    }
    for ((name, got), bytes) in outs.iter().zip(case.outputs) {
        let exp = decode_tensor(bytes, name).map_err(|e| e.to_string())?;
        compare::compare(got, &exp, rtol, atol).map_err(|e| format!("output {name}: {e}"))?;
    }
    Ok(())
}

#[wasm_bindgen_test]
async fn op_families_match_onnx_runtime_on_webgpu() {
    let gpu = Rc::new(Gpu::new(None).await.expect(
        "a WebGPU adapter (headless Chromium needs --enable-unsafe-webgpu, see webdriver.json)",
    ));
    console_log!("adapter: {gpu:?}");
    let mut failures = Vec::new();
    for case in CASES {
        match run(&gpu, case).await {
            Ok(()) => console_log!("ok   {}", case.name),
            Err(e) => {
                console_log!("FAIL {}: {e}", case.name);
                failures.push(format!("{}: {e}", case.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from ONNX Runtime on WebGPU:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
    // Every family is here: at least the standard cases and each contrib op.
    for family in [
        "std_add",
        "std_matmul",
        "std_softmax",
        "std_gather",
        "std_cast",
        "std_reducemean",
        "std_layernorm",
        "std_slice",
        "std_max",
        "std_onehot",
        "matmulnbits",
        "gqa",
        "rotaryembedding",
        "gelu",
        "simplifiedlayernorm",
        "skipsimplifiedlayernorm",
        "gatherblockquantized",
        "mha",
        "attention",
        "gqa_shared",
        "rmsnormalization",
        "function_model_local",
    ] {
        assert!(
            CASES.iter().any(|c| c.name.starts_with(family)),
            "no {family} case"
        );
    }
}
