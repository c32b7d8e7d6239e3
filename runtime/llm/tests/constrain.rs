//! Constrained tool calls on the tiny Gemma 4 fixtures (issue 34): the sampling kernel's mask,
//! calls sampled under the grammar of the built-in tools, run-ahead, and ONNX Runtime's greedy
//! tokens where the constraint allows them.
//!
//! The fixtures' random weights make a good adversary: unconstrained, their "calls" are garbage.
//! They hardly ever write `<|tool_call>` on their own, so the call tests pre-fill it: the prompt
//! is a chat turn ending with `<|tool_call>` (what the model would have written), and everything
//! after it is sampled. The run-ahead test instead makes a token the model does write the call
//! opener ([`CallConstraint::new`] takes the opener's id), so that a call opens in the middle of
//! a generation, while the step after the opener is already running ahead.
//!
//! GPU: whatever wgpu picks (in CI `WGPU_BACKEND=vulkan` = Mesa lavapipe).

#[path = "common/reference.rs"]
mod reference;

use gg_gemma::{OutputEvent, OutputParser};
use gg_llm::sampler::{self, Mask, Sampling};
use gg_llm::{CallConstraint, Dtype, GemmaModel, Generator, LoadOptions, ModelRepo, TextOptions};
use gg_runtime::{Gpu, HostTensor};
use reference::ids;
use serde_json::Value;
use std::path::PathBuf;
use std::rc::Rc;

fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models")
        .join(name)
}

/// ONNX Runtime's q4 reference of `gemma4-tiny`.
fn reference_json() -> Value {
    let p = fixture_dir("gemma4-tiny").join("reference/q4.json");
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).expect("reference JSON")
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

fn builtin_values() -> Vec<Value> {
    gg_agent::builtin_tools()
        .iter()
        .map(|t| serde_json::to_value(t).expect("serialises"))
        .collect()
}

fn constraint(model: &GemmaModel) -> CallConstraint {
    model
        .call_constraint(&builtin_values())
        .expect("the built-in tools compile into a grammar")
}

/// A small xorshift for test data.
struct Rand(u64);
impl Rand {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// Samples `logits` (a host row) on the GPU under `mask` (or none).
fn pick(
    model: &GemmaModel,
    logits: &[f32],
    sampling: &Sampling,
    step: u64,
    mask: Option<&[u32]>,
) -> gg_llm::Result<u32> {
    let mut cx = model.decoder.context();
    let t = cx
        .upload(&HostTensor::from_f32(vec![1, 1, logits.len()], logits))
        .expect("upload");
    let out = sampler::record_masked(
        &mut cx,
        &t,
        sampling,
        step,
        mask.map(|words| Mask { words }),
    )?;
    pollster::block_on(sampler::read_id(&mut cx, &out))
}

#[test]
fn the_sampling_kernel_picks_only_allowed_tokens_in_every_mode() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    // A vocabulary that is not a multiple of 32 or of the workgroup size.
    let v: usize = 5000;
    let mut r = Rand(0x1234_5678_9ABC_DEF1);
    let logits: Vec<f32> = (0..v)
        .map(|_| (r.next() % 20_000) as f32 / 1000.0 - 10.0)
        .collect();
    let modes = [
        Sampling::Greedy,
        Sampling::Sample {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 7,
        },
        Sampling::Sample {
            temperature: 0.7,
            top_k: 5,
            top_p: 1.0,
            seed: 8,
        },
        Sampling::Sample {
            temperature: 1.3,
            top_k: 0,
            top_p: 0.5,
            seed: 9,
        },
        Sampling::Sample {
            temperature: 1.0,
            top_k: 64,
            top_p: 0.95,
            seed: 10,
        },
    ];
    for round in 0..6 {
        // A sparse mask (a few dozen tokens) or a dense one (about half).
        let mut words = vec![0u32; v.div_ceil(32)];
        let dense = round % 2 == 1;
        for i in 0..v {
            if (dense && r.next().is_multiple_of(2)) || r.next().is_multiple_of(128) {
                words[i / 32] |= 1 << (i % 32);
            }
        }
        let allowed = |i: u32| words[i as usize / 32] & (1 << (i % 32)) != 0;
        let best = (0..v as u32)
            .filter(|&i| allowed(i))
            .max_by(|&a, &b| {
                logits[a as usize]
                    .total_cmp(&logits[b as usize])
                    .then(b.cmp(&a))
            })
            .expect("some token allowed");
        for mode in &modes {
            for step in 0..8 {
                let id = pick(&model, &logits, mode, step, Some(&words)).expect("sample");
                assert!(
                    allowed(id),
                    "round {round} {mode:?} step {step}: {id} is masked"
                );
                if *mode == Sampling::Greedy {
                    assert_eq!(id, best, "round {round}: greedy under the mask");
                }
                if let Sampling::Sample { top_k: 5, .. } = mode {
                    // Top-k counts only allowed tokens: the pick is among the 5 best of them.
                    let better = (0..v as u32)
                        .filter(|&i| allowed(i) && logits[i as usize] > logits[id as usize])
                        .count();
                    assert!(
                        better < 5,
                        "round {round} step {step}: {better} allowed tokens beat the top-5 pick"
                    );
                }
            }
        }
    }
    // One allowed token: every mode picks it.
    let mut words = vec![0u32; v.div_ceil(32)];
    words[4321 / 32] |= 1 << (4321 % 32);
    for mode in &modes {
        assert_eq!(
            pick(&model, &logits, mode, 3, Some(&words)).expect("sample"),
            4321
        );
    }
    // Nothing allowed: an error naming the constraint, not a token.
    let none = vec![0u32; v.div_ceil(32)];
    for mode in &modes {
        let err = pick(&model, &logits, mode, 0, Some(&none)).expect_err("no token allowed");
        assert!(err.to_string().contains("constrained decoding"), "{err}");
    }
    // Without a mask: the plain argmax.
    let argmax = reference::argmax(&logits);
    assert_eq!(
        pick(&model, &logits, &Sampling::Greedy, 0, None).expect("greedy"),
        argmax
    );
}

/// Tools whose calls are bounded (enums, booleans, integers of at most 18 digits; no free
/// strings): a random model's call under the grammar ends within [`BOUNDED_CAP`] tokens.
fn bounded_tools() -> Vec<gg_agent::ToolDefinition> {
    serde_json::from_value(serde_json::json!([
        {"name": "scroll_page", "description": "Scroll the page.", "parameters": {
            "type": "object",
            "properties": {
                "direction": {"type": "string", "enum": ["up", "down", "top", "bottom"]},
                "amount": {"type": "integer"}
            },
            "required": ["direction"]}},
        {"name": "press_key", "description": "Press a key.", "parameters": {
            "type": "object",
            "properties": {
                "key": {"type": "string", "enum": ["Enter", "Tab", "Escape"]},
                "shift": {"type": "boolean"}
            },
            "required": ["key"]}},
        {"name": "get_page_title", "description": "The page's title.", "parameters": {
            "type": "object", "properties": {}}}
    ]))
    .expect("tool definitions")
}

/// Tokens per bounded call at most (the longest call the bounded tools allow is shorter).
const BOUNDED_CAP: usize = 96;

/// Tokens per call of the built-in tools at most: their free strings go on for hundreds of
/// tokens under random weights (the delimiter is one token among a thousand), so calls still
/// open then are cut (counted apart; every token of theirs is checked against the grammar).
const BUILTIN_CAP: usize = 32;

/// Whether a parsed argument value fits its declared schema (the subset the tools here use).
fn fits(schema: &Value, value: &Value) -> bool {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return options.contains(value);
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    }
}

/// Why a call's text is not one valid call of `tools` (`None`: it is).
fn invalid(text: &str, tools: &[gg_agent::ToolDefinition]) -> Option<String> {
    let mut parser = OutputParser::new();
    let mut events = parser.push(text);
    events.extend(parser.finish());
    if let Some(e) = events
        .iter()
        .find(|e| matches!(e, OutputEvent::ToolCallError(_)))
    {
        return Some(format!("{e:?}"));
    }
    let calls: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            OutputEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    let [call] = calls.as_slice() else {
        return Some(format!("{} calls parsed", calls.len()));
    };
    let Some(def) = tools.iter().find(|d| d.name == call.name) else {
        return Some(format!("undeclared tool {}", call.name));
    };
    let props = def.parameters["properties"].as_object()?;
    for (key, value) in &call.arguments {
        let Some(schema) = props.get(key) else {
            return Some(format!("undeclared argument {key}"));
        };
        if !fits(schema, value) {
            return Some(format!("{key} = {value} does not fit {schema}"));
        }
    }
    for required in def.parameters["required"].as_array().into_iter().flatten() {
        if !call.arguments.contains_key(required.as_str()?) {
            return Some(format!("required {required} missing"));
        }
    }
    None
}

/// What [`sample_calls`] saw.
#[derive(Debug, Default)]
struct Calls {
    started: usize,
    /// Closed with `<tool_call|>` within the cap.
    closed: usize,
    /// Closed and valid.
    valid: usize,
    /// Still open at the cap.
    cut: usize,
    /// Tokens sampled after `<|tool_call>`.
    tokens: usize,
}

/// Samples `n` calls of `tools` after `prompt` (ending with `<|tool_call>`) at temperature 1.0,
/// at most `cap` tokens each, with the constraint on or off. With it on, every closed call must
/// be valid and every cut one a valid prefix.
fn sample_calls(
    model: &GemmaModel,
    prompt: &[u32],
    tools: &[gg_agent::ToolDefinition],
    n: u64,
    cap: usize,
    constrained: bool,
) -> Calls {
    let values: Vec<Value> = tools
        .iter()
        .map(|t| serde_json::to_value(t).expect("serialises"))
        .collect();
    let matcher = model.call_matcher(&values).expect("a grammar");
    let s = model.tokenizer.special();
    let (open, close) = (s.tool_call_start.id, s.tool_call_end.id);
    let mut seen = Calls::default();
    for k in 0..n {
        // Plain temperature 1.0 over the whole distribution, and every other call Gemma's
        // recommended top-k 64 / top-p 0.95 on top.
        let (top_k, top_p) = if k % 2 == 0 { (0, 1.0) } else { (64, 0.95) };
        let mut stream = model
            .stream(
                prompt,
                TextOptions {
                    max_new_tokens: cap,
                    sampling: Sampling::Sample {
                        temperature: 1.0,
                        top_k,
                        top_p,
                        seed: 1000 + k,
                    },
                    cancel: None,
                    stop_ids: vec![close],
                    constraint: constrained.then(|| CallConstraint::new(matcher.clone(), open)),
                },
            )
            .expect("stream");
        let mut got = vec![open];
        while let Some(t) = pollster::block_on(stream.next()).expect("step") {
            got.push(t.id);
        }
        seen.started += 1;
        seen.tokens += got.len() - 1;
        let text = model.tokenizer.decode(&got).expect("decode");
        if got.last() != Some(&close) {
            seen.cut += 1;
            if constrained {
                let mut state = matcher.start();
                for &t in &got[1..] {
                    matcher
                        .advance(&mut state, t)
                        .unwrap_or_else(|e| panic!("cut call {k} {text:?}: {e}"));
                }
            }
            continue;
        }
        seen.closed += 1;
        match invalid(&text, tools) {
            None => seen.valid += 1,
            Some(why) => assert!(!constrained, "constrained call {k} {text:?}: {why}"),
        }
    }
    seen
}

#[test]
fn constrained_calls_of_the_tiny_model_are_all_valid() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let prompt = model
        .tokenizer
        .encode_prompt(
            "<bos><|turn>user\nScroll down a bit, then press Enter.<turn|>\n<|turn>model\n<|tool_call>",
        )
        .expect("prompt");
    assert_eq!(
        prompt.last(),
        Some(&model.tokenizer.special().tool_call_start.id)
    );
    let report = |what: &str, c: &Calls, s: f64| {
        eprintln!(
            "{what}: {} calls started, {} closed, {} valid ({:.1}% of started, {:.1}% of closed), {} cut at the cap; {} tokens, {s:.1} s",
            c.started,
            c.closed,
            c.valid,
            100.0 * c.valid as f64 / c.started.max(1) as f64,
            100.0 * c.valid as f64 / c.closed.max(1) as f64,
            c.cut,
            c.tokens
        );
    };
    // Bounded tools: every call the model starts ends, and every one is valid.
    let bounded = bounded_tools();
    let t0 = std::time::Instant::now();
    let on = sample_calls(&model, &prompt, &bounded, 150, BOUNDED_CAP, true);
    report(
        "bounded tools, constraint on",
        &on,
        t0.elapsed().as_secs_f64(),
    );
    assert_eq!((on.closed, on.valid), (150, 150), "{on:?}");
    let t0 = std::time::Instant::now();
    let off = sample_calls(&model, &prompt, &bounded, 20, BUILTIN_CAP, false);
    report(
        "bounded tools, constraint off",
        &off,
        t0.elapsed().as_secs_f64(),
    );
    // The built-in tools (free strings): closed calls all valid, cut ones valid so far.
    let builtin = gg_agent::builtin_tools();
    let t0 = std::time::Instant::now();
    let on = sample_calls(&model, &prompt, &builtin, 50, BUILTIN_CAP, true);
    report(
        "built-in tools, constraint on",
        &on,
        t0.elapsed().as_secs_f64(),
    );
    assert_eq!(on.valid, on.closed, "{on:?}");
    assert!(
        on.closed >= 8,
        "only {} built-in calls closed: {on:?}",
        on.closed
    );
}

/// Generates `n` tokens (tokens only) with the given run-ahead and constraint.
fn generate(
    model: &GemmaModel,
    prompt: &[u32],
    sampling: Sampling,
    run_ahead: bool,
    constraint: Option<CallConstraint>,
    n: usize,
) -> (Vec<u32>, gg_llm::GenerationStats) {
    let mut g = Generator::new(model, prompt, sampling)
        .expect("generator")
        .run_ahead(run_ahead)
        .constrained(constraint);
    let mut got = Vec::new();
    for i in 0..n {
        let id = if i + 1 < n {
            pollster::block_on(g.next_token())
        } else {
            pollster::block_on(g.last_token())
        };
        got.push(id.expect("step"));
    }
    (got, g.stats())
}

#[test]
fn run_ahead_gives_the_same_constrained_tokens() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let reference = reference_json();
    let prompt = ids(&reference["prompts"][0]["input_ids"]);
    let matcher = constraint(&model).matcher().clone();
    for sampling in [
        Sampling::Greedy,
        Sampling::Sample {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 42,
        },
        Sampling::Sample {
            temperature: 1.0,
            top_k: 64,
            top_p: 0.95,
            seed: 43,
        },
    ] {
        // Unconstrained, the model writes token `opener` at step 2; made the call opener, a call
        // opens there, while step 3 already runs ahead.
        let (free, _) = generate(&model, &prompt, sampling, false, None, 4);
        let opener = free[2];
        let at = free.iter().position(|&t| t == opener).expect("present");
        let make = || Some(CallConstraint::new(matcher.clone(), opener));
        let (ahead, stats_ahead) = generate(&model, &prompt, sampling, true, make(), 24);
        let (plain, stats_plain) = generate(&model, &prompt, sampling, false, make(), 24);
        assert_eq!(
            ahead, plain,
            "{sampling:?}: tokens with and without run-ahead"
        );
        assert_eq!(
            ahead[..=at],
            free[..=at],
            "{sampling:?}: tokens before the call"
        );
        assert_eq!(
            stats_ahead.resampled, 1,
            "{sampling:?}: the step run ahead is sampled again"
        );
        assert_eq!(stats_plain.resampled, 0);
        assert!(stats_ahead.call_tokens > 0 && stats_ahead.call_tokens == stats_plain.call_tokens);
        // What follows the opener is a valid call prefix (accept would have failed otherwise);
        // check it independently with the matcher.
        let mut state = matcher.start();
        for &t in &ahead[at + 1..] {
            if state.is_closed() {
                break;
            }
            matcher
                .advance(&mut state, t)
                .expect("a token the grammar allows");
        }
    }
}

#[test]
fn constrained_greedy_equals_onnx_runtime_where_the_constraint_allows_its_argmax() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let reference = reference_json();
    let matcher = constraint(&model).matcher().clone();
    let mut compared = 0;
    for prompt in reference["prompts"].as_array().expect("prompts") {
        let name = prompt["name"].as_str().expect("name");
        let input = ids(&prompt["input_ids"]);
        let want = ids(&prompt["greedy_tokens"]);
        // With the built-in tools' constraint on: the reference never opens a call, so every
        // token is unconstrained and must be ONNX Runtime's.
        assert!(!want.contains(&model.tokenizer.special().tool_call_start.id));
        let (got, stats) = generate(
            &model,
            &input,
            Sampling::Greedy,
            true,
            Some(constraint(&model)),
            want.len(),
        );
        assert_eq!(got, want, "{name}: constrained greedy, no call opened");
        assert_eq!(stats.call_tokens, 0);
        // With a call opened at ONNX Runtime's token k: from there on, the token must be ONNX
        // Runtime's argmax as long as the grammar allows it; the first step it does not, the
        // two generations part.
        for k in [0, 5, 17] {
            let opener = want[k];
            let at = want.iter().position(|&t| t == opener).expect("present");
            let c = CallConstraint::new(matcher.clone(), opener);
            let (got, _) = generate(&model, &input, Sampling::Greedy, true, Some(c), want.len());
            let mut state = matcher.start();
            for i in 0..want.len() {
                if i > at && !state.is_closed() && !matcher.allowed(&state).contains(want[i]) {
                    break;
                }
                assert_eq!(got[i], want[i], "{name}: call opened at {at}, step {i}");
                compared += 1;
                if i > at && !state.is_closed() {
                    matcher.advance(&mut state, got[i]).expect("allowed");
                }
            }
        }
    }
    eprintln!("{compared} constrained greedy steps equal ONNX Runtime's");
    assert!(compared >= 40);
}

#[test]
fn declarations_the_grammar_cannot_express_generate_unconstrained() {
    let gpu = gpu();
    let model = load(&gpu, "gemma4-tiny", Dtype::Q4);
    let decl = serde_json::json!({"name": "pick", "description": "Pick one.", "parameters": {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}});
    let err = model
        .call_matcher(std::slice::from_ref(&decl))
        .expect_err("anyOf");
    assert!(err.to_string().contains("anyOf"), "{err}");
    assert!(model.call_constraint(std::slice::from_ref(&decl)).is_none());
    // Through the agent's backend: a warning, and the generation runs as without the setting.
    let backend = gg_llm::GemmaBackend::new(Rc::new(model));
    let tools: Vec<gg_agent::ToolDefinition> = vec![serde_json::from_value(decl).expect("tool")];
    let options = gg_agent::GenerateOptions {
        max_new_tokens: 4,
        temperature: 0.0,
        ..Default::default()
    };
    assert!(options.constrain_tool_calls);
    let messages = [gg_agent::ChatMessage::user("hi")];
    let chunks: Vec<_> = pollster::block_on(futures::StreamExt::collect::<Vec<_>>(
        gg_agent::ModelBackend::generate(&backend, &messages, &tools, &options),
    ));
    assert!(
        matches!(chunks.last(), Some(Ok(gg_agent::StreamChunk::Done { .. }))),
        "{chunks:?}"
    );
}
