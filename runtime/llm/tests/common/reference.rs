//! Reading the ONNX Runtime references of the fixtures (`reference/*.json`), shared by the native
//! (`fixtures.rs`) and the browser (`browser_greedy.rs`) tests.
#![allow(dead_code)] // reason: each test binary uses a subset

use serde_json::Value;

/// q4f16: max |logit - ONNX Runtime| allowed; argmax is compared where the reference's top-1
/// margin is above twice this. ONNX Runtime computes q4f16 in fp16 (its own fp16 result differs
/// from fp32 by up to ~0.4 logit here, see the reference JSON); this runtime stores fp16 but
/// computes in f32, so it sits between the two.
pub const Q4F16_LOGIT_TOL: f32 = 0.5;

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| u32::try_from(x.as_u64().expect("id")).expect("u32"))
        .collect()
}

/// A prompt's `top1_margins`: ONNX Runtime's top-1 minus top-2 logit at each greedy step.
pub fn margins(prompt: &Value) -> Vec<f64> {
    prompt["top1_margins"]
        .as_array()
        .expect("margins")
        .iter()
        .map(|m| m.as_f64().expect("margin"))
        .collect()
}

/// Index of the largest logit (the lowest index on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    u32::try_from(best).expect("a u32 index")
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "logit counts");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
