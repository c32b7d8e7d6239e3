//! The streaming output parser: text, thinking, tool calls, and every way a small model breaks
//! the tool-call syntax. Every case is also checked for chunk invariance: the events must not
//! depend on where the text is split.

use gg_gemma::syntax::{format_argument, parse_value, render_tool_call};
use gg_gemma::{EndMarker, OutputEvent, OutputParser, ParsedToolCall, ToolCallErrorKind};
use serde_json::{Map, Value, json};

/// Merges adjacent text/thinking events (chunking may split them).
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

fn run_chunks(chunks: &[&str]) -> Vec<OutputEvent> {
    let mut p = OutputParser::new();
    let mut events = Vec::new();
    for c in chunks {
        events.extend(p.push(c));
    }
    events.extend(p.finish());
    coalesce(events)
}

/// Parses `text` in one piece, then split at every character boundary, then character by
/// character; all must give the same events. Returns them.
fn parse(text: &str) -> Vec<OutputEvent> {
    let whole = run_chunks(&[text]);
    for (i, _) in text.char_indices().skip(1) {
        let split = run_chunks(&[&text[..i], &text[i..]]);
        assert_eq!(split, whole, "split at byte {i} of {text:?}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run_chunks(&refs), whole, "char-by-char {text:?}");
    whole
}

fn text(s: &str) -> OutputEvent {
    OutputEvent::Text(s.into())
}

fn thinking(s: &str) -> OutputEvent {
    OutputEvent::Thinking(s.into())
}

fn start(name: &str) -> OutputEvent {
    OutputEvent::ToolCallStart { name: name.into() }
}

fn call(name: &str, args: Value) -> OutputEvent {
    let Value::Object(arguments) = args else {
        panic!("args must be an object")
    };
    OutputEvent::ToolCall(ParsedToolCall {
        name: name.into(),
        arguments,
    })
}

/// The single tool-call error among the events.
fn error_kind(events: &[OutputEvent]) -> ToolCallErrorKind {
    let errors: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            OutputEvent::ToolCallError(err) => Some(err.kind.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "expected exactly one error in {events:?}");
    errors.into_iter().next().expect("one error")
}

const Q: &str = "<|\"|>";

#[test]
fn plain_text_passes_through() {
    assert_eq!(
        parse("Hello, world! a < b and c > d, <b>bold</b>"),
        [text("Hello, world! a < b and c > d, <b>bold</b>")]
    );
    // A marker prefix at the end of the output that never completes is text.
    assert_eq!(parse("see <|tool_"), [text("see <|tool_")]);
    assert_eq!(parse(""), []);
}

#[test]
fn thinking_is_separated_from_the_answer() {
    assert_eq!(
        parse("<|channel>thought\nThe user greets me.\nReply.<channel|>Hi there!<turn|>"),
        [
            thinking("The user greets me.\nReply."),
            text("Hi there!"),
            OutputEvent::End(EndMarker::TurnEnd)
        ]
    );
    // Empty thought channel (what E2B writes with thinking off).
    assert_eq!(parse("<|channel>thought\n<channel|>Hi"), [text("Hi")]);
    assert_eq!(parse("<|channel>thought<channel|>Hi"), [text("Hi")]);
    // Unclosed channel at the end: all thinking.
    assert_eq!(
        parse("<|channel>thought\nstill thinking <|"),
        [thinking("still thinking <|")]
    );
    // A channel cut by an end marker.
    assert_eq!(
        parse("<|channel>thought\nhmm<eos>"),
        [thinking("hmm"), OutputEvent::End(EndMarker::Eos)]
    );
    // A stray closer is reported and dropped from the answer.
    assert_eq!(
        parse("thought: x<channel|>Answer"),
        [
            text("thought: x"),
            OutputEvent::StrayMarker("<channel|>".into()),
            text("Answer")
        ]
    );
}

#[test]
fn well_formed_calls_with_every_value_type() {
    let src = format!(
        "Let me check.<|tool_call>call:get_weather{{city:{Q}Paris, \"FR\" {{1}}{Q},n:3,x:-2.5e3,big:18446744073709551615,\
         f:0.5,flag:true,off:false,nothing:None,obj:{{a:{{b:[1,{Q}two{Q},[]]}}}},arr:[],empty:{{}}}}<tool_call|>\
         <|tool_call>call:take_screenshot{{}}<tool_call|><|tool_response>"
    );
    assert_eq!(
        parse(&src),
        [
            text("Let me check."),
            start("get_weather"),
            call(
                "get_weather",
                json!({"city": "Paris, \"FR\" {1}", "n": 3, "x": -2500.0, "big": 18446744073709551615u64,
                       "f": 0.5, "flag": true, "off": false, "nothing": null,
                       "obj": {"a": {"b": [1, "two", []]}}, "arr": [], "empty": {}})
            ),
            start("take_screenshot"),
            call("take_screenshot", json!({})),
            OutputEvent::End(EndMarker::ToolResponse),
        ]
    );
}

#[test]
fn unambiguous_deviations_are_accepted() {
    // JSON strings and keys, spaces and newlines, trailing commas, True/null.
    let src = format!(
        "<|tool_call> call: click_element {{ \"selector\" : \"#a\\\"b\\u00e9\" ,\n {Q}ref{Q}: 12 , ok: True, v: null, l: [1, 2,], }}\n<tool_call|>"
    );
    assert_eq!(
        parse(&src),
        [
            start("click_element"),
            call(
                "click_element",
                json!({"selector": "#a\"bé", "ref": 12, "ok": true, "v": null, "l": [1, 2]})
            ),
        ]
    );
}

#[test]
fn partial_input_is_not_yet_never_an_error() {
    let src = format!(
        "Sure<|tool_call>call:type_text{{text:{Q}hello <b> {{ world{Q},n:[1,{{a:2}}]}}<tool_call|>done"
    );
    let mut p = OutputParser::new();
    let mut events = Vec::new();
    for (i, c) in src.char_indices() {
        let got = p.push(&c.to_string());
        for e in &got {
            assert!(
                !matches!(e, OutputEvent::ToolCallError(_)),
                "error while streaming at byte {i}: {e:?}"
            );
        }
        events.extend(got);
    }
    // Before the last bytes arrive, the call is pending.
    events.extend(p.finish());
    assert_eq!(
        coalesce(events),
        [
            text("Sure"),
            start("type_text"),
            call(
                "type_text",
                json!({"text": "hello <b> { world", "n": [1, {"a": 2}]})
            ),
            text("done"),
        ]
    );
    let mut p = OutputParser::new();
    assert_eq!(
        p.push("ok <|tool_call>call:f{a:<|\"|>x"),
        [text("ok "), start("f")]
    );
    assert!(p.in_tool_call());
    assert_eq!(p.push(" y"), []);
}

#[test]
fn missing_close() {
    // The output ends inside a complete-looking call.
    let events = parse("<|tool_call>call:f{a:1}");
    assert_eq!(
        error_kind(&events),
        ToolCallErrorKind::MissingCallEnd { found: None }
    );
    assert_eq!(events[0], start("f"));
    // <|tool_response> instead of <tool_call|>: the call is an error, the end marker still counts.
    let events = parse("<|tool_call>call:f{a:1}<|tool_response>");
    assert_eq!(
        error_kind(&events),
        ToolCallErrorKind::MissingCallEnd {
            found: Some("<|tool_response>".into())
        }
    );
    assert_eq!(
        events.last(),
        Some(&OutputEvent::End(EndMarker::ToolResponse))
    );
    // The raw text is kept for the error report.
    let OutputEvent::ToolCallError(err) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(err.raw, "<|tool_call>call:f{a:1}");
}

#[test]
fn unknown_end() {
    for (marker, end) in [
        ("<turn|>", EndMarker::TurnEnd),
        ("<eos>", EndMarker::Eos),
        ("<|turn>", EndMarker::TurnStart),
    ] {
        let events = parse(&format!("<|tool_call>call:f{{a:{Q}x{Q}}}{marker}after"));
        assert_eq!(
            error_kind(&events),
            ToolCallErrorKind::MissingCallEnd {
                found: Some(marker.into())
            },
            "{marker}"
        );
        assert_eq!(
            events[events.len() - 2..],
            [OutputEvent::End(end), text("after")],
            "{marker}"
        );
    }
    // A stray closer without an opener.
    let events = parse("text<tool_call|>more");
    assert_eq!(error_kind(&events), ToolCallErrorKind::StrayCallEnd);
    assert_eq!(events.first(), Some(&text("text")));
    assert_eq!(events.last(), Some(&text("more")));
}

#[test]
fn unbalanced_braces() {
    let cases = [
        ("call:f{a:{b:1}", ToolCallErrorKind::Unclosed { close: '}' }),
        ("call:f{a:1", ToolCallErrorKind::Unclosed { close: '}' }),
        ("call:f{a:[1,2", ToolCallErrorKind::Unclosed { close: ']' }),
        (
            "call:f{a:[1,2}",
            ToolCallErrorKind::ExpectedCommaOrClose {
                close: ']',
                found: "`}`".into(),
            },
        ),
        (
            "call:f{a:{b:1]}",
            ToolCallErrorKind::ExpectedCommaOrClose {
                close: '}',
                found: "`]}`".into(),
            },
        ),
        (
            "call:f{a:1}}",
            ToolCallErrorKind::TrailingJunk { junk: "}".into() },
        ),
        ("call:f{a:1,", ToolCallErrorKind::Unclosed { close: '}' }),
        ("call:f{", ToolCallErrorKind::Unclosed { close: '}' }),
    ];
    for (body, want) in cases {
        let events = parse(&format!("<|tool_call>{body}<tool_call|>"));
        assert_eq!(error_kind(&events), want, "{body}");
    }
}

#[test]
fn unterminated_string() {
    let events = parse(&format!("<|tool_call>call:f{{a:{Q}abc}}<tool_call|>"));
    assert_eq!(
        error_kind(&events),
        ToolCallErrorKind::UnterminatedString {
            delimiter: Q.into()
        }
    );
    let events = parse("<|tool_call>call:f{a:\"abc}<tool_call|>");
    assert_eq!(
        error_kind(&events),
        ToolCallErrorKind::UnterminatedString {
            delimiter: "\"".into()
        }
    );
    // Cut by the end of the output.
    let events = parse(&format!("<|tool_call>call:f{{a:{Q}abc"));
    assert_eq!(
        error_kind(&events),
        ToolCallErrorKind::UnterminatedString {
            delimiter: Q.into()
        }
    );
    // Half a delimiter at the end of the output.
    let events = parse("<|tool_call>call:f{a:<|\"");
    assert!(
        matches!(error_kind(&events), ToolCallErrorKind::ExpectedValue { .. }),
        "{events:?}"
    );
}

#[test]
fn bad_keys_and_values() {
    type Check = fn(&ToolCallErrorKind) -> bool;
    let cases: [(&str, Check); 11] = [
        (
            "call:f{1a:2}",
            |k| matches!(k, ToolCallErrorKind::ExpectedKey { found } if found == "`1a:2}`"),
        ),
        ("call:f{:2}", |k| {
            matches!(k, ToolCallErrorKind::ExpectedKey { .. })
        }),
        (
            "call:f{a b:1}",
            |k| matches!(k, ToolCallErrorKind::ExpectedColon { key, .. } if key == "a"),
        ),
        (
            "call:f{a=1}",
            |k| matches!(k, ToolCallErrorKind::ExpectedColon { key, .. } if key == "a"),
        ),
        (
            "call:f{a:}",
            |k| matches!(k, ToolCallErrorKind::ExpectedValue { found } if found == "`}`"),
        ),
        (
            "call:f{city:Paris}",
            |k| matches!(k, ToolCallErrorKind::ExpectedValue { found } if found == "`Paris`"),
        ),
        ("call:f{a:'x'}", |k| {
            matches!(k, ToolCallErrorKind::ExpectedValue { .. })
        }),
        (
            "call:f{n:1.2.3}",
            |k| matches!(k, ToolCallErrorKind::InvalidNumber { text } if text == "1.2.3"),
        ),
        (
            "call:f{n:3px}",
            |k| matches!(k, ToolCallErrorKind::InvalidNumber { text } if text == "3px"),
        ),
        ("call:f{n:-}", |k| {
            matches!(k, ToolCallErrorKind::InvalidNumber { .. })
        }),
        (
            "call:f{a:1,a:2}",
            |k| matches!(k, ToolCallErrorKind::DuplicateKey { key } if key == "a"),
        ),
    ];
    for (body, ok) in cases {
        let events = parse(&format!("<|tool_call>{body}<tool_call|>"));
        let kind = error_kind(&events);
        assert!(ok(&kind), "{body}: {kind:?}");
    }
}

#[test]
fn bad_call_heads() {
    let cases = [
        (
            "f{a:1}",
            ToolCallErrorKind::MissingCallKeyword {
                found: "`f{a:1}`".into(),
            },
        ),
        (
            "",
            ToolCallErrorKind::MissingCallKeyword {
                found: "the end of the call".into(),
            },
        ),
        (
            "call:{a:1}",
            ToolCallErrorKind::InvalidName {
                found: "`{a:1}`".into(),
            },
        ),
        (
            "call:9f{a:1}",
            ToolCallErrorKind::InvalidName {
                found: "`9f{a:1}`".into(),
            },
        ),
        (
            "call:f",
            ToolCallErrorKind::MissingArguments {
                name: "f".into(),
                found: "the end of the call".into(),
            },
        ),
        (
            "call:f(a=1)",
            ToolCallErrorKind::MissingArguments {
                name: "f".into(),
                found: "`(a=1)`".into(),
            },
        ),
        (
            "call:f{a:1} please",
            ToolCallErrorKind::TrailingJunk {
                junk: "please".into(),
            },
        ),
        (
            "call:f{a:1}{b:2}",
            ToolCallErrorKind::TrailingJunk {
                junk: "{b:2}".into(),
            },
        ),
    ];
    for (body, want) in cases {
        let events = parse(&format!("<|tool_call>{body}<tool_call|>after"));
        assert_eq!(error_kind(&events), want, "{body}");
        assert_eq!(
            events.last(),
            Some(&text("after")),
            "{body}: text resumes after the bad call"
        );
    }
}

#[test]
fn nested_errors_recover_at_the_next_call() {
    // A call cut by a new <|tool_call>: the first is an error, the second parses.
    let events = parse(&format!(
        "<|tool_call>call:a{{x:<|tool_call>call:b{{y:{Q}ok{Q}}}<tool_call|>"
    ));
    assert_eq!(
        events[..],
        [
            start("a"),
            events[1].clone(),
            start("b"),
            call("b", json!({"y": "ok"})),
        ]
    );
    assert!(matches!(
        error_kind(&events),
        ToolCallErrorKind::ExpectedValue { .. }
    ));

    // Errors nested deep inside a structure report the innermost problem and its offset.
    let body = format!("call:f{{a:{{b:[1,{{c:{Q}x{Q},d:oops}}]}}}}");
    let events = parse(&format!("<|tool_call>{body}<tool_call|>"));
    let OutputEvent::ToolCallError(err) = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(
        err.kind,
        ToolCallErrorKind::ExpectedValue {
            found: "`oops`".into()
        }
    );
    assert_eq!(&body[err.offset..err.offset + 4], "oops");
    assert_eq!(err.raw, format!("<|tool_call>{body}<tool_call|>"));

    // Two bad calls in a row, then a good one, then text.
    let events = parse(&format!(
        "<|tool_call>call:a{{1:2}}<tool_call|><|tool_call>call:b{{x:{Q}open}}<tool_call|><|tool_call>call:c{{}}<tool_call|>end"
    ));
    let kinds: Vec<_> = events
        .iter()
        .filter_map(|e| {
            if let OutputEvent::ToolCallError(e) = e {
                Some(e.kind.clone())
            } else {
                None
            }
        })
        .collect();
    assert!(matches!(
        kinds[..],
        [
            ToolCallErrorKind::ExpectedKey { .. },
            ToolCallErrorKind::UnterminatedString { .. }
        ]
    ));
    assert_eq!(
        events[events.len() - 2..],
        [call("c", json!({})), text("end")]
    );
}

#[test]
fn limits() {
    let deep = format!(
        "<|tool_call>call:f{{a:{}{}}}<tool_call|>",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(
        error_kind(&parse(&deep)),
        ToolCallErrorKind::TooDeep {
            limit: gg_gemma::syntax::MAX_DEPTH
        }
    );

    let long = format!(
        "<|tool_call>call:f{{a:{Q}{}{Q}}}<tool_call|>after",
        "x".repeat(100)
    );
    for chunks in [
        vec![long.as_str()],
        long.as_bytes()
            .chunks(7)
            .map(|c| std::str::from_utf8(c).expect("ascii"))
            .collect(),
    ] {
        let mut p = OutputParser::with_max_call_len(40);
        let mut events = Vec::new();
        for c in chunks {
            events.extend(p.push(c));
        }
        events.extend(p.finish());
        let events = coalesce(events);
        assert_eq!(
            error_kind(&events),
            ToolCallErrorKind::TooLong { limit: 40 }
        );
        assert_eq!(events.last(), Some(&text("after")), "{events:?}");
    }
}

#[test]
fn thinking_then_call() {
    assert_eq!(
        parse(
            "<|channel>thought\nI need the weather.<channel|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>"
        ),
        [
            thinking("I need the weather."),
            start("get_weather"),
            call("get_weather", json!({"city": "Paris"})),
            OutputEvent::End(EndMarker::ToolResponse),
        ]
    );
    // A channel the model forgot to close before calling.
    assert_eq!(
        parse("<|channel>thought\nhmm<|tool_call>call:f{}<tool_call|>"),
        [thinking("hmm"), start("f"), call("f", json!({}))]
    );
}

/// A tiny deterministic generator (no external crates).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn key(&mut self) -> String {
        const START: &[u8] = b"abcxyzABC_$";
        const REST: &[u8] = b"abcxyz019_-.$K";
        let mut k = String::new();
        k.push(START[self.below(START.len() as u64) as usize] as char);
        for _ in 0..self.below(8) {
            k.push(REST[self.below(REST.len() as u64) as usize] as char);
        }
        k
    }
    fn string(&mut self) -> String {
        const PARTS: &[&str] = &[
            "a", "Z", " ", "\n", "\"", "'", "{", "}", "[", "]", ",", ":", "<", "|", ">", "é", "€",
            "😀", "\\", "call:", "None", "<b>", "|>", "<|", "\"",
        ];
        let mut s = String::new();
        for _ in 0..self.below(10) {
            s.push_str(PARTS[self.below(PARTS.len() as u64) as usize]);
        }
        s
    }
    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth > 3 { 5 } else { 7 }) {
            0 => Value::String(self.string()),
            1 => json!(self.next() as i64 - (1 << 30)),
            2 => {
                let f = (self.next() as f64 - 2e9) / [1.0, 3.0, 1e7, 1e-20][self.below(4) as usize];
                json!(f)
            }
            3 => Value::Bool(self.below(2) == 0),
            4 => Value::Null,
            5 => Value::Array((0..self.below(4)).map(|_| self.value(depth + 1)).collect()),
            _ => Value::Object(self.map(depth + 1)),
        }
    }
    fn map(&mut self, depth: u32) -> Map<String, Value> {
        (0..self.below(5))
            .map(|_| (self.key(), self.value(depth)))
            .collect()
    }
}

fn contains_marker(v: &Value) -> bool {
    const MARKERS: &[&str] = &[
        "<|\"|>",
        "<tool_call|>",
        "<|tool_call>",
        "<turn|>",
        "<|turn>",
        "<|tool_response>",
        "<eos>",
    ];
    match v {
        Value::String(s) => MARKERS.iter().any(|m| s.contains(m)),
        Value::Array(a) => a.iter().any(contains_marker),
        Value::Object(o) => o.values().any(contains_marker),
        _ => false,
    }
}

#[test]
fn rendered_calls_parse_back_to_the_same_arguments() {
    let mut rng = Rng(0x5EED);
    let mut checked = 0;
    for _ in 0..400 {
        let args = rng.map(0);
        if contains_marker(&Value::Object(args.clone())) {
            continue;
        }
        let name = rng.key();
        let rendered = render_tool_call(&name, &args);
        let mut p = OutputParser::new();
        let mut events = p.push(&rendered);
        events.extend(p.finish());
        assert_eq!(
            events,
            [
                start(&name),
                OutputEvent::ToolCall(ParsedToolCall {
                    name: name.clone(),
                    arguments: args.clone()
                })
            ],
            "{rendered}"
        );
        // format_argument / parse_value round-trip for the whole object, with escaped keys too.
        for escape in [false, true] {
            let text = format_argument(&Value::Object(args.clone()), escape);
            assert_eq!(
                parse_value(&text).expect("parses"),
                Value::Object(args.clone()),
                "{text}"
            );
        }
        checked += 1;
    }
    assert!(checked > 300, "only {checked} round trips");
}

/// The assistant turns the real template renders (golden files) parse back into the calls.
#[test]
fn template_rendered_calls_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gemma4/golden/chat_template");
    let golden = std::fs::read_to_string(dir.join("tool_call_and_response.txt")).expect("golden");
    let model_turn = golden.split("<|turn>model\n").nth(1).expect("model turn");
    let events = run_chunks(&[model_turn]);
    assert_eq!(events[0], start("fill_form"));
    assert_eq!(
        events[1],
        call(
            "fill_form",
            json!({"selector": "#signup", "submit": true, "retries": 3, "ratio": 0.5, "missing": null,
                   "address": {"street": "1 Rue de Rivoli", "geo": {"lat": 48.85, "lon": 2.35}},
                   "fields": [{"name": "email", "value": "a@b.c"}, {"name": "Pass", "value": "x"}],
                   "tags": ["a", "B", "c"]})
        )
    );
    assert_eq!(events[2], OutputEvent::End(EndMarker::ToolResponse));
}

#[test]
fn channel_headers_are_decided_on_a_fixed_window() {
    // A newline within 64 bytes ends the header.
    let name = "x".repeat(63);
    assert_eq!(
        parse(&format!("<|channel>{name}\nbody<channel|>ok")),
        [thinking("body"), text("ok")]
    );
    // No newline within 64 bytes: no header, everything is thinking (however it is chunked).
    let long = "y".repeat(80);
    assert_eq!(
        parse(&format!("<|channel>{long}\nbody<channel|>ok")),
        [thinking(&format!("{long}\nbody")), text("ok")]
    );
}

#[test]
fn too_long_errors_quote_the_same_text_however_chunked() {
    let src = format!(
        "<|tool_call>call:f{{a:{Q}{}{Q}}}<tool_call|>tail",
        "z".repeat(200)
    );
    let whole = {
        let mut p = OutputParser::with_max_call_len(50);
        let mut e = p.push(&src);
        e.extend(p.finish());
        coalesce(e)
    };
    for size in [1, 3, 16, 64] {
        let mut p = OutputParser::with_max_call_len(50);
        let mut e = Vec::new();
        for c in src.as_bytes().chunks(size) {
            e.extend(p.push(std::str::from_utf8(c).expect("ascii")));
        }
        e.extend(p.finish());
        assert_eq!(coalesce(e), whole, "chunks of {size}");
    }
    let OutputEvent::ToolCallError(err) = &whole[1] else {
        panic!("{whole:?}")
    };
    assert_eq!(err.raw.len(), "<|tool_call>".len() + 50);
}

/// Found by the fuzzer: a too-long call ended by a new call whose marker arrives split across
/// chunks; the partial marker must survive the switch to skipping.
#[test]
fn too_long_call_then_a_split_marker() {
    let src = format!(
        "<|tool_call>\0\0\u{FFFD}{}<|tool_call>call:g{{}}<tool_call|>",
        "thought\n".repeat(7)
    );
    let run = |size: usize| {
        let chars: Vec<char> = src.chars().collect();
        let mut p = OutputParser::with_max_call_len(48);
        let mut e = Vec::new();
        for c in chars.chunks(size) {
            e.extend(p.push(&c.iter().collect::<String>()));
        }
        e.extend(p.finish());
        coalesce(e)
    };
    let whole = run(usize::MAX);
    assert_eq!(
        whole[whole.len() - 2..],
        [start("g"), call("g", json!({}))],
        "{whole:?}"
    );
    for size in 1..=13 {
        assert_eq!(run(size), whole, "chunks of {size} chars");
    }
}
