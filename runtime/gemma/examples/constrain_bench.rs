//! Times the tool-call mask ([`gg_gemma::constrain::TokenMatcher::allowed`]) per step over long
//! calls of the built-in tools, on a 262,144-token vocabulary: synthetic (the fixture tokenizer's
//! pieces plus generated ones) by default, or a real model's when a model directory is given.
//!
//! `cargo run --release -p gg-gemma --example constrain_bench [MODEL_DIR]`

use std::path::{Path, PathBuf};

use gg_gemma::constrain::bench::{GEMMA4_VOCAB, bench_mask, synthetic_vocab};
use gg_gemma::constrain::{ToolGrammar, VocabEntry};
use gg_gemma::syntax::render_tool_call;
use gg_gemma::{GemmaTokenizer, ToolDeclaration};
use serde_json::{Value, json};

fn main() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models/gemma4-tiny");
    let dir = std::env::args().nth(1).map(PathBuf::from);
    let entries = match &dir {
        Some(dir) => {
            let tok = GemmaTokenizer::from_dir(dir).expect("model tokenizer");
            VocabEntry::from_tokenizer(&tok)
        }
        None => {
            let tok = GemmaTokenizer::from_dir(&fixture).expect("fixture tokenizer");
            let seed: Vec<Vec<u8>> = VocabEntry::from_tokenizer(&tok)
                .into_iter()
                .filter_map(|e| match e {
                    VocabEntry::Bytes(b) => Some(b),
                    _ => None,
                })
                .collect();
            synthetic_vocab(&seed, GEMMA4_VOCAB)
        }
    };
    let declarations: Vec<Value> = gg_agent::builtin_tools()
        .iter()
        .map(|d| serde_json::to_value(ToolDeclaration::from(d)).expect("declaration"))
        .collect();
    let grammar = ToolGrammar::from_declarations(&declarations).expect("grammar");

    let prose = "The quick brown fox jumps over the lazy dog; naïve café, 東京 ☕ — {braces}, \
                 [brackets], a < b > c, \"quotes\", 100% & more.\n"
        .repeat(40);
    let calls: Vec<String> = [
        ("type_text", json!({"ref": "e12", "text": prose, "submit": true, "clear": false})),
        (
            "read_page_content",
            json!({"selector": "#main > article:nth-child(2)", "format": "html", "mode": "main", "offset": 123456, "max_chars": 4000}),
        ),
        ("scroll_page", json!({"direction": "down", "amount": 600})),
        ("click_element", json!({"selector": "form#login button[type=\"submit\"]"})),
        (
            "run_javascript",
            json!({"code": "const xs = [...document.querySelectorAll('a')].map(a => a.href);\nreturn xs.filter(x => x.length < 80).slice(0, 20);"}),
        ),
        ("snapshot_page", json!({"max_tokens": 2048})),
        ("get_page_title", json!({})),
    ]
    .into_iter()
    .map(|(name, args)| {
        let call = render_tool_call(name, args.as_object().expect("object"));
        call.trim_start_matches(gg_gemma::markers::TOOL_CALL_START).to_owned()
    })
    .collect();

    let timings = bench_mask(entries, &grammar, &calls);
    println!(
        "{} vocabulary: {timings}",
        if dir.is_some() { "model" } else { "synthetic" }
    );
}
