//! Logits of the reference prompts, teacher-forced on ONNX Runtime's greedy tokens, against ONNX
//! Runtime's logits: shared by the native tests of our own fixtures (`fixtures.rs`) and of the
//! exporters' packages (`mobius.rs`).

use crate::reference::{argmax, ids, margins, max_abs_diff};
use gg_llm::{GemmaModel, Generator, Sampling};
use serde_json::Value;

/// For every prompt of `reference`: the prefill logits, then each decode step's (fed the
/// reference's greedy token of that step), against `logits(prompt name, "prefill" | "decode")`
/// (ONNX Runtime's; decode one row per step). Asserts each within `tol` and returns the largest
/// difference seen; `label` names the case in a failure.
pub fn teacher_forced(
    model: &GemmaModel,
    reference: &Value,
    label: &str,
    tol: f32,
    logits: impl Fn(&str, &str) -> Vec<f32>,
) -> f32 {
    let mut worst = 0.0f32;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let pname = prompt["name"].as_str().expect("name");
        let input = ids(&prompt["input_ids"]);
        let greedy = ids(&prompt["greedy_tokens"]);
        let prefill = logits(pname, "prefill");
        let decode = logits(pname, "decode");
        let mut g = Generator::new(model, &input, Sampling::Greedy).expect("generator");
        let got = pollster::block_on(g.logits_for(&[])).expect("prefill");
        let d = max_abs_diff(&got, &prefill);
        assert!(
            d <= tol,
            "{label} {pname}: prefill logits differ by {d} > {tol}"
        );
        worst = worst.max(d);
        for (step, want) in decode.chunks(prefill.len()).enumerate() {
            let got = pollster::block_on(g.logits_for(&[greedy[step]])).expect("decode");
            let d = max_abs_diff(&got, want);
            assert!(
                d <= tol,
                "{label} {pname}: decode step {step} logits differ by {d} > {tol}"
            );
            worst = worst.max(d);
        }
    }
    worst
}

/// Teacher forcing over all of the reference's greedy tokens: wherever its top-1 margin is above
/// `clear`, the argmax must be the reference's token. Returns how many steps were compared.
pub fn argmax_agrees_where_clear(
    model: &GemmaModel,
    reference: &Value,
    label: &str,
    clear: f64,
) -> usize {
    let mut compared = 0;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let pname = prompt["name"].as_str().expect("name");
        let want = ids(&prompt["greedy_tokens"]);
        let margins = margins(prompt);
        let mut g =
            Generator::new(model, &ids(&prompt["input_ids"]), Sampling::Greedy).expect("generator");
        let mut feed: Vec<u32> = Vec::new();
        for (step, &tok) in want.iter().enumerate() {
            let logits = pollster::block_on(g.logits_for(&feed)).expect("step");
            if margins[step] > clear {
                assert_eq!(
                    argmax(&logits),
                    tok,
                    "{label} {pname}: step {step} (margin {})",
                    margins[step]
                );
                compared += 1;
            }
            feed = vec![tok];
        }
    }
    compared
}
