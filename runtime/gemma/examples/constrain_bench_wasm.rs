//! The tool-call mask benchmark in wasm: the same measurement as `constrain_bench` (synthetic
//! 262,144-token vocabulary without the fixture seed, long calls of the built-in tools), built
//! for `wasm32-unknown-unknown` and driven by a host that provides the clock:
//!
//! ```text
//! cargo build --release -p gg-gemma --example constrain_bench_wasm --target wasm32-unknown-unknown
//! node -e 'const fs=require("fs"),{performance}=require("perf_hooks");
//!   WebAssembly.instantiate(fs.readFileSync(process.argv[1]),{env:{now_ms:()=>performance.now()}})
//!   .then(({instance:i})=>{const e=i.exports;e.run();
//!     console.log({build_ms:e.build_ms(),steps:e.steps(),mean_us:e.mean_us(),p99_us:e.p99_us(),
//!       max_us:e.max_us(),first_mean_us:e.first_mean_us(),first_max_us:e.first_max_us()})})' \
//!   target/wasm32-unknown-unknown/release/examples/constrain_bench_wasm.wasm
//! ```
//!
//! Natively it only says so.

#![cfg_attr(target_arch = "wasm32", no_main)]

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    println!("build this example for wasm32-unknown-unknown and run it under a wasm host");
}

#[cfg(target_arch = "wasm32")]
mod wasm {
    use std::cell::Cell;

    use gg_gemma::ToolDeclaration;
    use gg_gemma::constrain::bench::{GEMMA4_VOCAB, greedy_tokenize, synthetic_vocab};
    use gg_gemma::constrain::{TokenMatcher, ToolGrammar};
    use gg_gemma::syntax::render_tool_call;
    use serde_json::{Value, json};

    #[link(wasm_import_module = "env")]
    unsafe extern "C" {
        fn now_ms() -> f64;
    }

    fn now() -> f64 {
        // SAFETY: a host function without arguments or memory access.
        unsafe { now_ms() }
    }

    thread_local! {
        static RESULTS: Cell<[f64; 7]> = const { Cell::new([0.0; 7]) };
    }

    /// Runs the benchmark; the results are read with the other exports.
    #[unsafe(no_mangle)]
    pub extern "C" fn run() {
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
            ("snapshot_page", json!({"max_tokens": 2048})),
            ("get_page_title", json!({})),
        ]
        .into_iter()
        .map(|(name, args)| {
            let call = render_tool_call(name, args.as_object().expect("object"));
            call.trim_start_matches(gg_gemma::markers::TOOL_CALL_START)
                .to_owned()
        })
        .collect();
        let entries = synthetic_vocab(&[], GEMMA4_VOCAB);
        let tokenized = greedy_tokenize(&entries, &calls);
        let t0 = now();
        let matcher = TokenMatcher::from_vocab(entries, &grammar);
        let build = now() - t0;
        // Two passes over the calls on the same matcher: the first includes the wasm engine's
        // warm-up (lazy compilation, memory growth) and the matcher's first-use caches.
        let mut passes = Vec::new();
        for _ in 0..2 {
            let mut times = Vec::new();
            for tokens in &tokenized {
                let mut state = matcher.start();
                for &t in tokens {
                    let t0 = now();
                    let mask = matcher.allowed(&state);
                    times.push(now() - t0);
                    assert!(mask.contains(t));
                    matcher.advance(&mut state, t).expect("allowed token");
                }
            }
            passes.push(times);
        }
        let stats = |times: &[f64]| {
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            let max = times.iter().copied().fold(0.0, f64::max);
            let mut sorted = times.to_vec();
            sorted.sort_by(f64::total_cmp);
            (
                mean * 1000.0,
                sorted[sorted.len() * 99 / 100] * 1000.0,
                max * 1000.0,
            )
        };
        let (first_mean, _, first_max) = stats(&passes[0]);
        let (mean, p99, max) = stats(&passes[1]);
        let n = passes[1].len() as f64;
        RESULTS.with(|r| r.set([build, n, mean, p99, max, first_mean, first_max]));
    }

    fn result(i: usize) -> f64 {
        RESULTS.with(|r| r.get()[i])
    }

    /// Matcher build time (ms).
    #[unsafe(no_mangle)]
    pub extern "C" fn build_ms() -> f64 {
        result(0)
    }
    /// Steps timed.
    #[unsafe(no_mangle)]
    pub extern "C" fn steps() -> f64 {
        result(1)
    }
    /// Mean `allowed` time (µs), second pass.
    #[unsafe(no_mangle)]
    pub extern "C" fn mean_us() -> f64 {
        result(2)
    }
    /// 99th percentile (µs), second pass.
    #[unsafe(no_mangle)]
    pub extern "C" fn p99_us() -> f64 {
        result(3)
    }
    /// Slowest (µs), second pass.
    #[unsafe(no_mangle)]
    pub extern "C" fn max_us() -> f64 {
        result(4)
    }
    /// Mean (µs), first pass.
    #[unsafe(no_mangle)]
    pub extern "C" fn first_mean_us() -> f64 {
        result(5)
    }
    /// Slowest (µs), first pass.
    #[unsafe(no_mangle)]
    pub extern "C" fn first_max_us() -> f64 {
        result(6)
    }
}
