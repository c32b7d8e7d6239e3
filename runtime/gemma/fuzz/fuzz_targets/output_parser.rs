//! Fuzzes gg-gemma's streaming output parser.
//!
//! Input: the first byte seeds the chunking, the rest (lossy UTF-8) is the model output, with a
//! few bytes mapped to Gemma markers so the fuzzer reaches the call and channel states quickly.
//! Checks: no panic; the events do not depend on the chunking; a parsed call renders and parses
//! back to itself.
#![no_main]

use gg_gemma::syntax::render_tool_call;
use gg_gemma::{OutputEvent, OutputParser};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const MARKERS: &[&str] = &[
    "<|tool_call>", "<tool_call|>", "<|\"|>", "<|channel>", "<channel|>", "<turn|>", "<|tool_response>",
    "<eos>", "<|turn>", "call:", "thought\n",
];

/// Bytes 0xF5..=0xFF never occur in UTF-8: use them as marker shortcuts.
fn expand(data: &[u8]) -> String {
    let mut text = String::new();
    let mut plain = Vec::new();
    for &b in data {
        if b >= 0xF5 {
            text.push_str(&String::from_utf8_lossy(&plain));
            plain.clear();
            text.push_str(MARKERS[(b - 0xF5) as usize % MARKERS.len()]);
        } else {
            plain.push(b);
        }
    }
    text.push_str(&String::from_utf8_lossy(&plain));
    text
}

fn coalesce(events: Vec<OutputEvent>) -> Vec<OutputEvent> {
    let mut out: Vec<OutputEvent> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (Some(OutputEvent::Text(a)), OutputEvent::Text(b)) => a.push_str(&b),
            (Some(OutputEvent::Thinking(a)), OutputEvent::Thinking(b)) => a.push_str(&b),
            (_, OutputEvent::Text(t) | OutputEvent::Thinking(t)) if t.is_empty() => {}
            (_, e) => out.push(e),
        }
    }
    out
}

fn run(chunks: &[&str], max: usize) -> Vec<OutputEvent> {
    let mut p = OutputParser::with_max_call_len(max);
    let mut events = Vec::new();
    for c in chunks {
        events.extend(p.push(c));
    }
    events.extend(p.finish());
    coalesce(events)
}

fn renderable(v: &Value) -> bool {
    match v {
        Value::String(s) => !MARKERS[..9].iter().any(|m| s.contains(m)),
        Value::Array(a) => a.iter().all(renderable),
        Value::Object(o) => o.iter().all(|(k, v)| bare_key(k) && renderable(v)),
        _ => true,
    }
}

fn bare_key(k: &str) -> bool {
    let mut chars = k.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, rest)) = data.split_first() else { return };
    let text = expand(rest);
    // Small limit sometimes, to exercise the too-long path.
    let max = if seed & 0x80 != 0 { 48 } else { 64 * 1024 };
    let whole = run(&[&text], max);

    // Chunk at pseudo-random character boundaries.
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut state = u32::from(seed) | 1;
    for (i, _) in text.char_indices().skip(1) {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        if (state >> 16) % 3 == 0 {
            chunks.push(&text[start..i]);
            start = i;
        }
    }
    chunks.push(&text[start..]);
    assert_eq!(run(&chunks, max), whole, "chunking changed the events for {text:?}");

    for event in &whole {
        if let OutputEvent::ToolCall(call) = event {
            let args = Value::Object(call.arguments.clone());
            if !renderable(&args) {
                continue;
            }
            let rendered = render_tool_call(&call.name, &call.arguments);
            let again = run(&[&rendered], usize::MAX);
            let expected = [OutputEvent::ToolCallStart { name: call.name.clone() }, event.clone()];
            if rendered.len() <= max {
                assert_eq!(again, expected, "round trip of {rendered:?}");
            }
        }
    }
});
