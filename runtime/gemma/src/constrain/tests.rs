//! Tests of the grammar and the token matcher on the fixture tokenizer (a small Gemma-4-style
//! BPE vocabulary with Gemma 4's special tokens and byte fallback).

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use super::*;
use crate::special::text::{STRING_DELIM, TOOL_CALL_END};
use crate::syntax::render_tool_call;
use crate::{GemmaTokenizer, ToolDeclaration};

fn tokenizer() -> &'static GemmaTokenizer {
    static TOK: OnceLock<GemmaTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models/gemma4-tiny");
        GemmaTokenizer::from_dir(&dir).expect("fixture tokenizer")
    })
}

/// The built-in tools' declarations, as the agent sends them to the template.
fn builtin_declarations() -> Vec<Value> {
    gg_agent::builtin_tools()
        .iter()
        .map(|d| serde_json::to_value(ToolDeclaration::from(d)).expect("declaration JSON"))
        .collect()
}

fn builtin_matcher() -> &'static TokenMatcher {
    static M: OnceLock<TokenMatcher> = OnceLock::new();
    M.get_or_init(|| {
        let g = ToolGrammar::from_declarations(&builtin_declarations()).expect("grammar");
        TokenMatcher::new(tokenizer(), &g)
    })
}

fn matcher_for(decls: Value) -> TokenMatcher {
    let g = ToolGrammar::from_declarations(decls.as_array().expect("list")).expect("grammar");
    TokenMatcher::new(tokenizer(), &g)
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().expect("object").clone()
}

/// The ids of a call text after `<|tool_call>` (markers and `<|"|>` as their special tokens).
fn ids_after_start(text: &str) -> Vec<u32> {
    let tok = tokenizer();
    let ids = tok.encode_prompt(text).expect("encode");
    let start = tok.special().tool_call_start.id;
    match ids.split_first() {
        Some((&first, rest)) if first == start => rest.to_vec(),
        _ => ids,
    }
}

/// Checks, at `state`, that the mask says exactly what `advance` says for every token.
fn assert_mask_exact(m: &TokenMatcher, state: &CallState, context: &str) {
    let mask = m.allowed(state);
    for t in 0..m.vocab_size() as u32 {
        let ok = m.advance(&mut state.clone(), t).is_ok();
        assert_eq!(
            mask.contains(t),
            ok,
            "{context}: token {t} ({:?}): mask {} but advance {}",
            tokenizer().piece(t),
            mask.contains(t),
            ok
        );
    }
}

/// Feeds a whole call token by token: every token must be in the mask and accepted, the mask
/// must agree with `advance` everywhere, and the call must end closed.
fn accept_call(m: &TokenMatcher, text: &str) {
    let ids = ids_after_start(text);
    let mut state = m.start();
    for (i, &t) in ids.iter().enumerate() {
        let context = format!("{text:?} at token {i}");
        assert_mask_exact(m, &state, &context);
        assert!(
            m.allowed(&state).contains(t),
            "{context}: token {t} ({:?}) not allowed",
            tokenizer().piece(t)
        );
        m.advance(&mut state, t)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
    }
    assert!(state.is_closed(), "{text:?} did not close");
}

/// Feeds a call text and returns the index of the first refused token (checking the mask
/// agrees), or `None` when every token is accepted.
fn first_refusal(m: &TokenMatcher, text: &str) -> Option<usize> {
    let mut state = m.start();
    for (i, t) in ids_after_start(text).into_iter().enumerate() {
        let allowed = m.allowed(&state).contains(t);
        let before = state.clone();
        let result = m.advance(&mut state, t);
        assert_eq!(
            allowed,
            result.is_ok(),
            "{text:?} token {i}: mask vs advance"
        );
        if result.is_err() {
            assert_eq!(
                state, before,
                "a refused token must leave the state unchanged"
            );
            return Some(i);
        }
    }
    None
}

fn valid_builtin_calls() -> Vec<String> {
    let calls = [
        ("read_page_content", json!({"format": "text"})),
        (
            "read_page_content",
            json!({"selector": "#main > p", "format": "html", "mode": "main", "offset": 4000, "max_chars": 500}),
        ),
        (
            "read_page_content",
            json!({"mode": "all", "format": "text", "offset": 0}),
        ),
        ("snapshot_page", json!({})),
        ("snapshot_page", json!({"max_tokens": 2048})),
        ("click_element", json!({"ref": "e12"})),
        (
            "click_element",
            json!({"selector": "button[type=\"submit\"]"}),
        ),
        ("click_element", json!({})),
        (
            "type_text",
            json!({"ref": "e7", "text": "café ☕ — naïve \"quotes\" {braces}, <tags> & 100%", "submit": true, "clear": false}),
        ),
        ("type_text", json!({"selector": "#q", "text": ""})),
        ("type_text", json!({"text": "line one\nline two"})),
        ("scroll_page", json!({"direction": "down", "amount": 600})),
        ("scroll_page", json!({"ref": "e3"})),
        ("scroll_page", json!({"direction": "left"})),
        ("get_page_title", json!({})),
        ("take_screenshot", json!({})),
        (
            "run_javascript",
            json!({"code": "document.querySelectorAll('a').length < 5 ? {a: [1, 2]} : null"}),
        ),
    ];
    calls
        .into_iter()
        .map(|(name, a)| render_tool_call(name, &args(a)))
        .collect()
}

#[test]
fn every_prefix_of_valid_builtin_calls_is_accepted_token_by_token() {
    let m = builtin_matcher();
    let calls = valid_builtin_calls();
    // Each built-in tool is covered.
    for tool in gg_agent::builtin_tools() {
        assert!(
            calls
                .iter()
                .any(|c| c.contains(&format!("call:{}{{", tool.name))),
            "{} has no test call",
            tool.name
        );
    }
    for call in &calls {
        accept_call(m, call);
    }
}

#[test]
fn arguments_in_any_order_are_accepted() {
    let m = builtin_matcher();
    let q = STRING_DELIM;
    accept_call(
        m,
        &format!(
            "<|tool_call>call:type_text{{submit:true,text:{q}hi{q},ref:{q}e1{q}}}{TOOL_CALL_END}"
        ),
    );
    accept_call(
        m,
        &format!(
            "<|tool_call>call:read_page_content{{max_chars:10,format:{q}html{q}}}{TOOL_CALL_END}"
        ),
    );
}

#[test]
fn invalid_continuations_are_refused() {
    let m = builtin_matcher();
    let q = STRING_DELIM;
    let end = TOOL_CALL_END;
    let cases = [
        // Unknown tool.
        format!("<|tool_call>call:‖open_tab{{}}{end}"),
        format!("<|tool_call>call:click‖{{}}{end}"),
        // Unknown parameter.
        format!("<|tool_call>call:click_element{{‖foo:{q}x{q}}}{end}"),
        format!("<|tool_call>call:snapshot_page{{max_token‖:5}}{end}"),
        // Wrong type.
        format!("<|tool_call>call:snapshot_page{{max_tokens:‖{q}5{q}}}{end}"),
        format!("<|tool_call>call:snapshot_page{{max_tokens:5‖.5}}{end}"),
        format!("<|tool_call>call:type_text{{text:‖5}}{end}"),
        format!("<|tool_call>call:type_text{{text:{q}a{q},submit:‖{q}yes{q}}}{end}"),
        format!("<|tool_call>call:type_text{{text:{q}a{q},submit:‖1}}{end}"),
        // Enum value not declared.
        format!("<|tool_call>call:read_page_content{{format:{q}‖markdown{q}}}{end}"),
        format!("<|tool_call>call:scroll_page{{direction:{q}‖Up{q}}}{end}"),
        // Missing required parameter.
        format!("<|tool_call>call:type_text{{ref:{q}e1{q}‖}}{end}"),
        format!("<|tool_call>call:read_page_content{{‖}}{end}"),
        format!("<|tool_call>call:run_javascript{{‖}}{end}"),
        // Duplicate parameter.
        format!("<|tool_call>call:click_element{{ref:{q}a{q},‖ref:{q}b{q}}}{end}"),
        // Stray `}`.
        format!("<|tool_call>call:click_element{{ref:{q}e1{q}}}‖}}{end}"),
        format!("<|tool_call>call:get_page_title‖}}{end}"),
        format!("<|tool_call>call:click_element{{ref:‖}}{end}"),
        // `<tool_call|>` too early.
        format!("<|tool_call>call:click_element{{ref:{q}e1{q}‖{end}"),
        format!("<|tool_call>call:click_element‖{end}"),
        format!("<|tool_call>‖{end}"),
        format!("<|tool_call>call:type_text{{text:{q}abc‖{end}"),
        // Not the canonical syntax: whitespace, JSON strings, trailing commas, no `call:`.
        format!("<|tool_call>call:click_element{{‖ ref:{q}e1{q}}}{end}"),
        format!("<|tool_call>call:click_element{{ref:‖\"e1\"}}{end}"),
        format!("<|tool_call>call:click_element{{ref:{q}e1{q},‖}}{end}"),
        format!("<|tool_call>‖click_element{{}}{end}"),
        // A marker's text inside a string would end the call region in the output parser.
        format!("<|tool_call>call:type_text{{text:{q}a<turn|‖>b{q}}}{end}"),
        format!("<|tool_call>call:type_text{{text:{q}a<tool_call|‖>{q}}}{end}"),
    ];
    // `‖` marks where each case goes wrong: the text before it is accepted, the whole refused.
    for case in &cases {
        let (prefix, _) = case.split_once('‖').expect("a split mark");
        assert_eq!(
            first_refusal(m, prefix),
            None,
            "{prefix:?} should be accepted"
        );
        let whole = case.replace('‖', "");
        assert!(
            first_refusal(m, &whole).is_some(),
            "{whole:?} should be refused"
        );
    }
    // And the valid calls are not.
    for call in valid_builtin_calls() {
        assert_eq!(first_refusal(m, &call), None, "{call:?}");
    }
}

#[test]
fn the_refusal_is_where_the_call_goes_wrong() {
    let m = builtin_matcher();
    let q = STRING_DELIM;
    // Everything up to the missing required parameter is fine; the `}` is refused.
    let text = format!("<|tool_call>call:type_text{{ref:{q}e1{q}}}{TOOL_CALL_END}");
    let ids = ids_after_start(&text);
    let at = first_refusal(m, &text).expect("refused");
    assert_eq!(tokenizer().piece(ids[at]).as_deref(), Some("}"));
    // `<tool_call|>` is only allowed once the arguments are closed.
    let mut state = m.start();
    let end = tokenizer().special().tool_call_end.id;
    for t in ids_after_start("<|tool_call>call:get_page_title{") {
        assert!(!m.allowed(&state).contains(end));
        m.advance(&mut state, t).expect("prefix accepted");
    }
    assert!(!m.allowed(&state).contains(end));
    let close = tokenizer().token_id("}").expect("`}` piece");
    m.advance(&mut state, close).expect("`}` closes");
    assert!(state.is_complete());
    let mask = m.allowed(&state);
    assert_eq!(
        mask.iter().collect::<Vec<_>>(),
        vec![end],
        "only <tool_call|>"
    );
}

#[test]
fn special_tokens_are_refused_inside_a_call() {
    let m = builtin_matcher();
    let tok = tokenizer();
    let s = tok.special();
    let mut state = m.start();
    for t in ids_after_start(&format!(
        "<|tool_call>call:type_text{{text:{STRING_DELIM}ab"
    )) {
        m.advance(&mut state, t).expect("prefix");
    }
    let mask = m.allowed(&state);
    for special in [
        &s.turn_end,
        &s.turn_start,
        &s.tool_call_start,
        &s.tool_call_end,
        &s.tool_response_start,
        &s.eos,
        &s.bos,
        &s.channel_start,
        &s.think,
    ] {
        assert!(
            !mask.contains(special.id),
            "{} allowed in a string",
            special.text
        );
        assert!(m.advance(&mut state.clone(), special.id).is_err());
    }
    assert!(mask.contains(s.string_delim.id));
    // Every added token but the delimiter is refused in a string.
    for &id in tok.added_token_ids() {
        assert_eq!(
            mask.contains(id),
            id == s.string_delim.id,
            "added token {id}"
        );
    }
}

#[test]
fn the_delimiter_written_as_text_is_refused_in_strings() {
    // `<|"|>` spelled with ordinary pieces would be read as the delimiter by the parser.
    let m = builtin_matcher();
    let tok = tokenizer();
    let piece = |p: &str| tok.token_id(p).unwrap_or_else(|| panic!("piece {p}"));
    let mut state = m.start();
    for t in ids_after_start(&format!("<|tool_call>call:type_text{{text:{STRING_DELIM}")) {
        m.advance(&mut state, t).expect("prefix");
    }
    for p in ["<", "|", "\"", "|"] {
        m.advance(&mut state, piece(p))
            .expect("partial marker text is fine");
        assert_mask_exact(m, &state, p);
    }
    assert!(!m.allowed(&state).contains(piece(">")));
    assert!(m.advance(&mut state.clone(), piece(">")).is_err());
    // Anything else goes on: `<|"|x` is ordinary text.
    m.advance(&mut state, piece("a")).expect("ordinary text");
}

#[test]
fn byte_fallback_pieces_follow_utf8() {
    let m = builtin_matcher();
    let tok = tokenizer();
    let delim = tok.special().string_delim.id;
    let byte = |b: u8| tok.token_id(&format!("<0x{b:02X}>")).expect("byte piece");
    let mut state = m.start();
    for t in ids_after_start(&format!("<|tool_call>call:type_text{{text:{STRING_DELIM}")) {
        m.advance(&mut state, t).expect("prefix");
    }
    // ☕ = E2 98 95: the string cannot close in the middle, a non-continuation byte is refused.
    m.advance(&mut state, byte(0xE2)).expect("lead byte");
    assert_mask_exact(m, &state, "after E2");
    let mask = m.allowed(&state);
    assert!(!mask.contains(delim));
    assert!(!mask.contains(byte(0x41)));
    assert!(mask.contains(byte(0x98)));
    m.advance(&mut state, byte(0x98)).expect("continuation");
    assert!(!m.allowed(&state).contains(delim));
    m.advance(&mut state, byte(0x95)).expect("last byte");
    assert!(m.allowed(&state).contains(delim));
    // Bytes that are never valid UTF-8, and bytes outside strings.
    assert!(!m.allowed(&state).contains(byte(0xC0)));
    assert!(!m.allowed(&state).contains(byte(0xFF)));
    m.advance(&mut state, delim).expect("close");
    assert_mask_exact(m, &state, "after the string");
    assert!(!m.allowed(&state).contains(byte(0xE2)));
}

#[test]
fn tokens_crossing_grammar_boundaries_are_handled_exactly() {
    let tok = tokenizer();
    let piece = |p: &str| tok.token_id(p).unwrap_or_else(|| panic!("piece {p}"));
    let q = STRING_DELIM;
    let m = matcher_for(json!([
        {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}},
        {"name": "f", "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "code": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "re": {"type": "boolean"}, "opts": {"type": "object", "properties": {"x": {"type": "number"}}}}}}
    ]));
    // Walks `pieces` (each a piece text, or the delimiter), checking the mask at each step.
    let walk = |pieces: &[&str]| -> Result<CallState, String> {
        let mut state = m.start();
        for p in pieces {
            let id = if *p == q {
                tok.special().string_delim.id
            } else if *p == TOOL_CALL_END {
                tok.special().tool_call_end.id
            } else {
                piece(p)
            };
            assert_mask_exact(&m, &state, p);
            m.advance(&mut state, id)
                .map_err(|_| format!("{p:?} refused"))?;
        }
        Ok(state)
    };
    // `:get_weather{` crosses `call`, `:`, the name and `{`.
    let s = walk(&[
        "c",
        "a",
        "l",
        "l",
        ":get_weather{",
        "cit",
        "y",
        ":",
        q,
        "P",
        "a",
        q,
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    assert!(s.is_closed());
    // `1,c`: the end of a number, the comma and the start of the next key.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "a",
        ":",
        "1,c",
        "o",
        "d",
        "e",
        ":",
        q,
        "x",
        q,
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    // ... but not where no key starts with `c` (`scroll_page` has `direction`, `amount`, `ref`).
    let b = builtin_matcher();
    let mut state = b.start();
    for t in ids_after_start("<|tool_call>call:scroll_page{amount:") {
        b.advance(&mut state, t).expect("prefix");
    }
    assert_mask_exact(b, &state, "scroll_page amount");
    assert!(!b.allowed(&state).contains(piece("1,c")));
    assert!(b.allowed(&state).contains(piece("1,")));
    // `,re`: the comma and a key; `re` is itself a key here, so `,re` then `:`.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "a",
        ":",
        "1",
        ",re",
        ":",
        "t",
        "r",
        "u",
        "e",
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    // `:[]`: the colon, an empty array; refused for a string parameter.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "t",
        "a",
        "g",
        "s",
        ":[]",
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    assert!(walk(&["c", "a", "l", "l", ":", "f", "{", "c", "o", "d", "e", ":[]"]).is_err());
    // `:{`, `}}`: a nested object and two closing braces at once.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "o",
        "p",
        "t",
        "s",
        ":{",
        "x",
        ":",
        "-",
        "0",
        ".",
        "5",
        "}}",
        TOOL_CALL_END,
    ])
    .unwrap();
    // `},` after a nested object, then the next key.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "o",
        "p",
        "t",
        "s",
        ":{",
        "x",
        ":",
        "1",
        "},",
        "a",
        ":",
        "2",
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    // `}}` refused where only one object is open.
    assert!(walk(&["c", "a", "l", "l", ":", "f", "{", "a", ":", "1", "}}"]).is_err());
    // `"he` inside a string is just text.
    walk(&[
        "c",
        "a",
        "l",
        "l",
        ":",
        "f",
        "{",
        "c",
        "o",
        "d",
        "e",
        ":",
        q,
        "\"he",
        q,
        "}",
        TOOL_CALL_END,
    ])
    .unwrap();
    // `it:` ends a key (`submit:`) in the built-in `type_text`.
    let mut state = b.start();
    for t in ids_after_start("<|tool_call>call:type_text{subm") {
        b.advance(&mut state, t).expect("prefix");
    }
    assert!(b.allowed(&state).contains(piece("it:")));
    b.advance(&mut state, piece("it:")).expect("it:");
    assert!(b.allowed(&state).contains(tok.token_id("t").unwrap()));
    assert!(
        !b.allowed(&state).contains(tok.special().string_delim.id),
        "submit is a boolean"
    );
}

#[test]
fn values_nested_numbers_words_and_enums() {
    let m = matcher_for(json!([
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {
            "n": {"type": "number"}, "i": {"type": ["integer", "null"]},
            "any": {}, "list": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
            "k": {"enum": [1, 10, "x", true]}, "free": {"type": "object"}}}}}
    ]));
    let q = STRING_DELIM;
    let end = TOOL_CALL_END;
    let ok = [
        "n:-0.5e-3",
        "n:12.25",
        "n:1E+9",
        "n:0",
        "i:None",
        "i:-42",
        "list:[[1,2],[],[3]]",
        "list:[]",
        "k:1",
        "k:10",
        "k:true",
        &format!("k:{q}x{q}"),
        &format!("any:{{a:[1,{q}s{q},None,{{b:false}}]}}"),
        &format!("free:{{x_1:1,y:{q}z{q}}},n:1"),
        "free:{}",
        "i:123456789012345678",
        "n:-123456789012345678.123456789012345678e-99",
    ];
    for body in ok {
        let text = format!("<|tool_call>call:g{{{body}}}{end}");
        assert_eq!(first_refusal(&m, &text), None, "{body}");
    }
    let bad = [
        "n:01",
        "n:1.",
        "n:.5",
        "n:+1",
        "n:1e",
        "i:1.5",
        "i:null",
        "list:[1]",
        "list:[[1,]]",
        "k:2",
        "k:100",
        "k:false",
        &format!("k:{q}y{q}"),
        "free:{x:1,x:2}",
        "free:{1:1}",
        "n:true",
        "i:1234567890123456789",
        "n:1e100",
        "n:1.1234567890123456789",
    ];
    for body in bad {
        let text = format!("<|tool_call>call:g{{{body}}}{end}");
        assert!(
            first_refusal(&m, &text).is_some(),
            "{body} should be refused"
        );
    }
}

#[test]
fn states_clone_and_roll_back() {
    let m = builtin_matcher();
    let mut state = m.start();
    for t in ids_after_start(&format!(
        "<|tool_call>call:type_text{{text:{STRING_DELIM}hi"
    )) {
        m.advance(&mut state, t).expect("prefix");
    }
    let saved = state.clone();
    let delim = tokenizer().special().string_delim.id;
    m.advance(&mut state, delim).expect("close the string");
    assert_ne!(state, saved);
    let state = saved.clone();
    assert_eq!(m.allowed(&state), m.allowed(&saved));
    // Text-level stepping agrees with token-level stepping.
    let g = m.grammar();
    let mut by_text = g.start();
    g.advance_text(&mut by_text, b"call:type_text{text:")
        .unwrap();
    assert!(g.step(&mut by_text, Symbol::Delim));
    g.advance_text(&mut by_text, b"hi").unwrap();
    assert_eq!(by_text, saved);
    assert_eq!(g.advance_text(&mut by_text.clone(), b"\xFF"), Err(0));
}

#[test]
fn after_the_call_nothing_is_constrained() {
    let m = builtin_matcher();
    let mut state = m.start();
    for t in ids_after_start(&format!(
        "<|tool_call>call:get_page_title{{}}{TOOL_CALL_END}"
    )) {
        m.advance(&mut state, t).expect("call");
    }
    assert!(state.is_closed());
    assert_eq!(m.allowed(&state).count(), m.vocab_size());
}

#[test]
fn synthetic_vocabulary_has_the_requested_size_and_tokenizes_calls() {
    let vocab = bench::synthetic_vocab(&[b"call".to_vec(), b":{".to_vec()], 5000);
    assert_eq!(vocab.len(), 5000);
    let g = ToolGrammar::from_declarations(&builtin_declarations()).unwrap();
    let calls: Vec<String> = valid_builtin_calls()
        .into_iter()
        .map(|c| c.trim_start_matches("<|tool_call>").to_owned())
        .collect();
    let t = bench::bench_mask(vocab, &g, &calls);
    assert_eq!(t.vocab, 5000);
    assert!(t.steps > 0 && t.string_steps > 0);
}

/// Whether a parsed argument value fits its declared schema (the subset the built-in tools use).
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

#[test]
fn sampling_only_allowed_tokens_always_gives_a_call_the_parser_accepts() {
    let m = builtin_matcher();
    let tok = tokenizer();
    let s = tok.special();
    let definitions = gg_agent::builtin_tools();
    let closers: Vec<u32> = ["}", "]"]
        .iter()
        .filter_map(|p| tok.token_id(p))
        .chain([s.string_delim.id, s.tool_call_end.id])
        .collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rand = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    let (mut closed, mut with_args) = (0, 0);
    for walk in 0..300 {
        let mut state = m.start();
        let mut ids = vec![s.tool_call_start.id];
        for step in 0..400 {
            if state.is_closed() {
                break;
            }
            let mask = m.allowed(&state);
            let allowed: Vec<u32> = mask.iter().collect();
            assert!(
                !allowed.is_empty(),
                "walk {walk}: dead end at {:?}",
                tok.decode(&ids)
            );
            // After a while, head for the end: close strings and brackets when allowed.
            let closing: Vec<u32> = closers
                .iter()
                .copied()
                .filter(|&c| mask.contains(c))
                .collect();
            let pick = if step > 24 && !closing.is_empty() && rand() % 3 == 0 {
                closing[(rand() % closing.len() as u64) as usize]
            } else {
                allowed[(rand() % allowed.len() as u64) as usize]
            };
            m.advance(&mut state, pick)
                .expect("an allowed token is accepted");
            ids.push(pick);
        }
        if !state.is_closed() {
            continue;
        }
        closed += 1;
        let text = tok.decode(&ids).expect("decode");
        let mut parser = crate::OutputParser::new();
        let mut events = parser.push(&text);
        events.extend(parser.finish());
        let calls: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                crate::OutputEvent::ToolCall(c) => Some(c),
                _ => None,
            })
            .collect();
        assert!(
            events
                .iter()
                .all(|e| !matches!(e, crate::OutputEvent::ToolCallError(_))),
            "walk {walk}: {text:?} gave {events:?}"
        );
        assert_eq!(calls.len(), 1, "walk {walk}: {text:?} gave {events:?}");
        let call = calls[0];
        if call.arguments.len() >= 2 {
            with_args += 1;
        }
        let def = definitions
            .iter()
            .find(|d| d.name == call.name)
            .unwrap_or_else(|| panic!("undeclared tool in {text:?}"));
        let props = def.parameters["properties"]
            .as_object()
            .expect("properties");
        for (key, value) in &call.arguments {
            let schema = props
                .get(key)
                .unwrap_or_else(|| panic!("{text:?}: undeclared `{key}`"));
            assert!(fits(schema, value), "{text:?}: `{key}` = {value}");
        }
        for required in def.parameters["required"].as_array().expect("required") {
            let required = required.as_str().expect("name");
            assert!(
                call.arguments.contains_key(required),
                "{text:?}: `{required}` missing"
            );
        }
    }
    assert!(closed >= 200, "only {closed} of 300 walks closed");
    assert!(
        with_args >= 20,
        "only {with_args} calls with two arguments or more"
    );
}

#[test]
fn a_shared_vocabulary_serves_other_grammars_exactly() {
    // The built-in tools' matcher has filled the shared caches (strings, numbers) first.
    let builtin = builtin_matcher();
    accept_call(
        builtin,
        &format!(
            "<|tool_call>call:scroll_page{{direction:{STRING_DELIM}down{STRING_DELIM},amount:250}}{TOOL_CALL_END}"
        ),
    );
    let decls = json!([
        {"name": "set", "description": "", "parameters": {"type": "object", "properties": {
            "level": {"type": "number"}, "label": {"type": "string"}, "on": {"type": "boolean"}},
            "required": ["level"]}}
    ]);
    let g = ToolGrammar::from_declarations(decls.as_array().expect("list")).expect("grammar");
    let shared = TokenMatcher::with_vocab(builtin.vocab().clone(), &g);
    assert!(std::sync::Arc::ptr_eq(shared.vocab(), builtin.vocab()));
    let own = matcher_for(decls);
    for text in [
        format!(
            "<|tool_call>call:set{{level:-12.5e3,label:{STRING_DELIM}é <b{STRING_DELIM},on:true}}{TOOL_CALL_END}"
        ),
        format!("<|tool_call>call:set{{on:false,level:7}}{TOOL_CALL_END}"),
    ] {
        accept_call(&shared, &text);
        let mut state = shared.start();
        for t in ids_after_start(&text) {
            assert_eq!(shared.allowed(&state), own.allowed(&state), "{text:?}");
            shared.advance(&mut state, t).expect("accepted");
        }
    }
    // The other grammar's names are not the built-in tools'.
    assert_eq!(
        first_refusal(&shared, "<|tool_call>call:scroll_page{"),
        first_refusal(&own, "<|tool_call>call:scroll_page{")
    );
}
