//! Timing of [`TokenMatcher::allowed`] on a vocabulary of Gemma 4's size (a benchmark, not a
//! test: `cargo run --release -p gg-gemma --example constrain_bench`).

use std::time::{Duration, Instant};

use super::grammar::ToolGrammar;
use super::mask::TokenMatcher;
use super::vocab::{Trie, VocabEntry};
use crate::special::text::{STRING_DELIM, TOOL_CALL_END};

/// Gemma 4's vocabulary size.
pub const GEMMA4_VOCAB: usize = 262_144;

/// A synthetic byte-level vocabulary of `size` entries: the 256 byte-fallback bytes, the
/// delimiter and `<tool_call|>`, some refused special tokens, the `seed` texts (e.g. a real
/// tokenizer's pieces), then generated pieces (words with and without a leading space, numbers,
/// punctuation runs such as `:{` or `},`, non-ASCII text) until `size`. Deterministic.
pub fn synthetic_vocab(seed: &[Vec<u8>], size: usize) -> Vec<VocabEntry> {
    let mut out: Vec<VocabEntry> = Vec::with_capacity(size);
    let mut seen = std::collections::HashSet::new();
    out.push(VocabEntry::Delim);
    out.push(VocabEntry::CallEnd);
    for _ in 0..98 {
        out.push(VocabEntry::Refused);
    }
    for b in 0..=255u8 {
        out.push(VocabEntry::Bytes(vec![b]));
        seen.insert(vec![b]);
    }
    for s in seed {
        if out.len() < size && !s.is_empty() && seen.insert(s.clone()) {
            out.push(VocabEntry::Bytes(s.clone()));
        }
    }
    // xorshift64*: deterministic, no dependency.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rand = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    const LETTERS: &[u8] = b"etaoinshrdlucmfwypvbgkjqxz";
    const PUNCT: &[&str] = &[
        ":", "{", "}", ",", "[", "]", "(", ")", ".", "-", "_", "\"", "'", "<", ">", "|", "=", "/",
    ];
    const WIDE: &[&str] = &[
        "é", "ü", "ß", "ж", "я", "中", "文", "日", "本", "☕", "€", "😀",
    ];
    while out.len() < size {
        let r = rand();
        let piece: Vec<u8> = match r % 16 {
            0..=9 => {
                // A word, a leading space two times out of three, sometimes capitalised.
                let len = 2 + (rand() % 9) as usize;
                let mut w = Vec::new();
                if r % 3 != 0 {
                    w.push(b' ');
                }
                for i in 0..len {
                    // Skewed towards frequent letters.
                    let k = (rand() % LETTERS.len() as u64) as usize;
                    let k = k.min((rand() % LETTERS.len() as u64) as usize);
                    let c = LETTERS[k];
                    w.push(if i == 0 && r % 7 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    });
                }
                w
            }
            10 => format!("{}", rand() % 100_000).into_bytes(),
            11 | 12 => {
                let len = 1 + (rand() % 3) as usize;
                let mut p = String::new();
                for _ in 0..len {
                    p.push_str(PUNCT[(rand() % PUNCT.len() as u64) as usize]);
                }
                if r % 2 == 0 {
                    p.push(LETTERS[(rand() % LETTERS.len() as u64) as usize] as char);
                }
                p.into_bytes()
            }
            13 => {
                let len = 1 + (rand() % 3) as usize;
                let mut p = String::new();
                for _ in 0..len {
                    p.push_str(WIDE[(rand() % WIDE.len() as u64) as usize]);
                }
                p.into_bytes()
            }
            _ => {
                // Identifier-like: snake_case fragments.
                let mut p = Vec::new();
                for part in 0..(1 + rand() % 3) {
                    if part > 0 {
                        p.push(b'_');
                    }
                    for _ in 0..(2 + rand() % 4) {
                        p.push(LETTERS[(rand() % LETTERS.len() as u64) as usize]);
                    }
                }
                p
            }
        };
        if seen.insert(piece.clone()) {
            out.push(VocabEntry::Bytes(piece));
        }
    }
    out.truncate(size);
    out
}

/// Greedy longest-match tokenization of rendered calls (`call:...{...}<tool_call|>`, with
/// `<|"|>` as the delimiter token) over a vocabulary with every byte as a token.
pub fn greedy_tokenize(entries: &[VocabEntry], calls: &[String]) -> Vec<Vec<u32>> {
    let trie = Trie::build(entries);
    calls
        .iter()
        .map(|c| greedy_one(&trie, entries, c))
        .collect()
}

fn greedy_one(trie: &Trie, entries: &[VocabEntry], call: &str) -> Vec<u32> {
    let find = |e: &VocabEntry| entries.iter().position(|x| x == e).map(|i| i as u32);
    let (delim, end) = (find(&VocabEntry::Delim), find(&VocabEntry::CallEnd));
    let mut out = Vec::new();
    let mut rest = call.as_bytes();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(STRING_DELIM.as_bytes()) {
            out.extend(delim);
            rest = r;
            continue;
        }
        if let Some(r) = rest.strip_prefix(TOOL_CALL_END.as_bytes()) {
            out.extend(end);
            rest = r;
            continue;
        }
        let stop = [STRING_DELIM, TOOL_CALL_END]
            .iter()
            .filter_map(|m| rest.windows(m.len()).position(|w| w == m.as_bytes()))
            .min()
            .unwrap_or(rest.len());
        let text = &rest[..stop];
        let (mut node, mut best) = (0u32, None);
        for (i, &b) in text.iter().enumerate() {
            let Some(c) = trie
                .children(node)
                .find(|&c| trie.nodes[c as usize].byte == b)
            else {
                break;
            };
            node = c;
            if let Some(&t) = trie.ending(c).first() {
                best = Some((t, i + 1));
            }
        }
        let (t, n) = best.expect("every byte is a token");
        out.push(t);
        rest = &rest[n..];
    }
    out
}

/// What [`bench_mask`] measured.
#[derive(Debug, Clone)]
pub struct MaskTimings {
    /// Vocabulary size.
    pub vocab: usize,
    /// Time to build the matcher (trie + the string-start mask).
    pub build: Duration,
    /// Steps (tokens of the call).
    pub steps: usize,
    /// Steps inside strings.
    pub string_steps: usize,
    /// Mean time of `allowed` over all steps.
    pub mean: Duration,
    /// Slowest `allowed`.
    pub max: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Mean over the steps outside strings.
    pub structural_mean: Duration,
    /// Slowest step outside strings.
    pub structural_max: Duration,
    /// The state (debug form) of the slowest step.
    pub slowest_state: String,
    /// The state (debug form) of the slowest step outside strings.
    pub slowest_structural_state: String,
}

impl std::fmt::Display for MaskTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vocab {}: build {:.1?}; {} steps ({} in strings): allowed mean {:.1?}, p99 {:.1?}, max {:.1?}; outside strings mean {:.1?}, max {:.1?}",
            self.vocab,
            self.build,
            self.steps,
            self.string_steps,
            self.mean,
            self.p99,
            self.max,
            self.structural_mean,
            self.structural_max
        )?;
        write!(
            f,
            "; slowest at {}; slowest outside strings at {}",
            self.slowest_state, self.slowest_structural_state
        )
    }
}

/// Builds a matcher over `entries` and times [`TokenMatcher::allowed`] at every step of `calls`
/// (rendered calls without their `<|tool_call>`, tokenized greedily), checking that each token
/// is in its mask. Every call runs on the same matcher (its caches warm up as in a session).
pub fn bench_mask(
    entries: Vec<VocabEntry>,
    grammar: &ToolGrammar,
    calls: &[String],
) -> MaskTimings {
    let vocab = entries.len();
    let tokenized = greedy_tokenize(&entries, calls);
    let t0 = Instant::now();
    let matcher = TokenMatcher::from_vocab(entries, grammar);
    let build = t0.elapsed();
    let (mut all, mut structural, mut string_steps) = (Vec::new(), Vec::new(), 0);
    let mut slowest = (Duration::ZERO, String::new());
    let mut slowest_structural = (Duration::ZERO, String::new());
    for (call, tokens) in calls.iter().zip(&tokenized) {
        let mut state = matcher.start();
        for &t in tokens {
            let in_string = state.in_string().is_some();
            let t0 = Instant::now();
            let mask = matcher.allowed(&state);
            let dt = t0.elapsed();
            let before = format!("{:?}", state.lex);
            assert!(mask.contains(t), "token {t} of {call:?} not in its mask");
            matcher
                .advance(&mut state, t)
                .unwrap_or_else(|e| panic!("{call:?}: {e}"));
            if !in_string && dt > slowest_structural.0 {
                slowest_structural = (dt, before.clone());
            }
            if dt > slowest.0 {
                slowest = (dt, before);
            }
            all.push(dt);
            if in_string {
                string_steps += 1;
            } else {
                structural.push(dt);
            }
        }
        assert!(state.is_closed(), "{call:?} did not close");
    }
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    let max = |v: &[Duration]| v.iter().copied().max().unwrap_or_default();
    let mut sorted = all.clone();
    sorted.sort();
    MaskTimings {
        vocab,
        build,
        steps: all.len(),
        string_steps,
        mean: mean(&all),
        max: max(&all),
        p99: sorted
            .get(sorted.len() * 99 / 100)
            .copied()
            .unwrap_or_default(),
        structural_mean: mean(&structural),
        structural_max: max(&structural),
        slowest_state: slowest.1,
        slowest_structural_state: slowest_structural.1,
    }
}
