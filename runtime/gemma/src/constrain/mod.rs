//! Constrained decoding of tool calls: once the model has written `<|tool_call>`, which tokens
//! keep the text a valid Gemma 4 call of a declared tool.
//!
//! # What is allowed
//!
//! [`ToolGrammar::from_declarations`] compiles the tool declarations (the JSON the agent sends)
//! into the grammar of `call:NAME{key:value,...}<tool_call|>` in the canonical form the chat
//! template renders and [`crate::syntax::parse_tool_call`] reads:
//!
//! - `NAME` is a declared tool; its arguments are an object.
//! - Objects with declared `properties`: bare keys (a name the parser cannot read bare is written
//!   `<|"|>name<|"|>`), each declared key at most once, in any order, every `required` key present
//!   before `}`; no other key. Objects without `properties`: any bare key, each once.
//! - Values by `type` (a type or a list of types): `string` is `<|"|>...<|"|>` (any well-formed
//!   UTF-8 between the two delimiter tokens, except the text of a marker that would end the call
//!   region in [`crate::OutputParser`] or be read as a delimiter: `<|"|>`, `<tool_call|>`,
//!   `<|tool_call>`, `<turn|>`, `<|tool_response>`, `<eos>`, `<|turn>`); `integer` is
//!   `-?(0|[1-9][0-9]*)` with at most 18 digits (it fits an `i64`, so the parser reads an
//!   integer back); `number` adds a fraction (at most 18 digits) and an exponent (at most 2
//!   digits, so the value is a finite `f64`); `boolean` is `true`/`false`;
//!   `null` is `None` (Python's `str`, as the template writes it); `array` is `[v,...]` of its
//!   `items`; `object` as above. No `type` means any value. `enum`/`const` values (scalars) are
//!   the exact texts the template would write for them.
//! - No whitespace between items, no trailing comma, no JSON `"` strings: the parser tolerates
//!   these, but the model's own format never uses them, and refusing them keeps the model from
//!   looping on whitespace.
//! - Declarations the grammar cannot express are errors ([`GrammarError`]): `anyOf`/`oneOf`/
//!   `allOf`/`$ref`/`pattern` and any other unknown keyword, unknown types, non-scalar enums,
//!   `additionalProperties` together with `properties`, a `required` key that is not declared,
//!   more than 64 properties in one object, names the call syntax cannot write, duplicate tools.
//!   Annotations (`description`, `title`, `default`, ...) and bounds (`minimum`, `maxLength`,
//!   ...) are accepted but bounds are not enforced: the tool's own argument checks do that.
//!
//! # Symbols and special tokens
//!
//! The automaton ([`ToolGrammar::step`], over a [`CallState`]) reads [`Symbol`]s: bytes of
//! decoded text, the string delimiter token `<|"|>`, and `<tool_call|>`. The delimiter is only
//! ever the special token: its text written with ordinary pieces is refused inside strings and
//! impossible elsewhere (no `<` is allowed outside strings). `<tool_call|>` is allowed only once
//! the arguments' `}` has been written ([`CallState::is_complete`]); after it nothing is
//! constrained ([`CallState::is_closed`]). Every other special or added token (`<turn|>`,
//! `<|tool_response>`, `<eos>`, `<|channel>`, `<|image|>`, unused tokens, ...) is refused anywhere
//! inside a call: the output parser would end the call there, or write the token's text into an
//! argument.
//!
//! # The token matcher
//!
//! [`TokenMatcher`] maps each token id to what it writes ([`VocabEntry`]: the piece's bytes with
//! `▁` as a space, the byte of a byte-fallback piece `<0xHH>`, or a special token) and builds a
//! byte trie of the text tokens. That side depends on the vocabulary only ([`MatcherVocab`]:
//! the trie, the string masks, the number segments and their caches); build it once per
//! tokenizer and give it to [`TokenMatcher::with_vocab`] for each tool list's grammar (gg-llm
//! keeps one per loaded model). A token is allowed when the automaton accepts all of its bytes
//! from the current state, so tokens that cross the grammar's boundaries (`:[`, `},`, `1,c`,
//! `,re` — a value's end, the comma and the next key's start) are checked exactly.
//!
//! - Outside strings, [`TokenMatcher::allowed`] walks the trie against the automaton: only a few
//!   bytes are allowed at each point (a key's next letter, a digit, a bracket), so the walk
//!   prunes at once and visits a few hundred nodes. One state is stepped down the trie and
//!   restored on the way back, without allocating. Inside a number only the number's lexer
//!   state matters until the number ends, so that part of the walk (every multi-digit token) is
//!   cached per trie node and number state, and the call's state is consulted only where a token
//!   leaves the number (`1,`, `5}`).
//! - Inside a string no text token can leave the string (only the `<|"|>` token closes it), so
//!   the mask depends only on the string lexer's state (UTF-8 decoder + marker guard), not on
//!   the call around it: the mask of the start state (nearly the whole vocabulary) is computed
//!   once when the matcher is built, the few other states' masks (in the middle of a UTF-8
//!   character, after a `<` that may start a marker) once on first use, by a walk that stops as
//!   soon as it agrees with the start state's.
//!
//! [`bench::bench_mask`] measures it on a synthetic 262,144-token vocabulary
//! (`cargo run --release -p gg-gemma --example constrain_bench`; `constrain_bench_wasm` is the
//! same measurement in wasm). Natively: building the matcher about 110 ms, `allowed` about 2 µs
//! per step on average (inside strings: a copy of a cached 32 KiB mask), about 20 µs outside
//! strings, at most about 0.4 ms (the first time a mid-number state is met). In wasm (Node 20,
//! V8): build about 120 ms, mean 2–3 µs, p99 about 20 µs; single steps up to a few ms were seen
//! on a busy shared machine (scheduling/GC noise, not a repeatable state).
//!
//! # Limits
//!
//! - Free-form objects (no `properties`) make the mask walk visit every token made of name
//!   characters while a key is being written (the keys given are tracked exactly, so duplicates
//!   are refused): correct, but slower than declared keys. No built-in tool has one.
//! - The mask is for the tokens themselves: it does not make the model's tokenization
//!   canonical (a call may be written with different pieces than the tokenizer would choose).
//! - The call's length is not bounded by the grammar (strings and arrays may go on); the
//!   session's token limit and [`crate::OutputParser`]'s call-length limit bound it.
//! - The vocabulary is read with Gemma 4's decoder in mind (`▁` -> space, byte fallback, fuse):
//!   the text of a token sequence is the concatenation of the tokens' texts.

mod automaton;
pub mod bench;
mod grammar;
mod mask;
mod vocab;

#[cfg(test)]
mod tests;

pub use automaton::{CallState, MAX_EXP_DIGITS, MAX_FRAC_DIGITS, MAX_INT_DIGITS};
pub use grammar::{GrammarError, MAX_PROPERTIES, Symbol, ToolGrammar};
pub use mask::{Bitset, MatcherVocab, Refused, TokenMatcher};
pub use vocab::VocabEntry;
