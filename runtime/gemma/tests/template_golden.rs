//! The chat template rendered by minijinja must equal, byte for byte, what transformers'
//! `apply_chat_template` (Python jinja2) renders: golden files from tools/gemma/render_golden.py.

use std::path::{Path, PathBuf};

use gg_gemma::syntax::{render_tool_call, render_tool_response};
use gg_gemma::{ChatMessage, ChatTemplate, PromptOptions, TemplateTokens, ToolDeclaration};
use minijinja::value::{Serde, Value};
use serde_json::Value as Json;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma4")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn templates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("fixtures dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
        .collect();
    out.sort();
    assert!(
        out.len() >= 2,
        "expected both Gemma 4 templates in {}",
        fixtures().display()
    );
    out
}

fn cases() -> Vec<Json> {
    let text = read(&fixtures().join("cases.json"));
    let Json::Array(cases) = serde_json::from_str(&text).expect("cases.json") else {
        panic!("cases.json must be an array");
    };
    assert!(cases.len() >= 10, "too few cases");
    cases
}

fn tokens() -> TemplateTokens {
    TemplateTokens {
        bos_token: "<bos>".into(),
        eos_token: "<eos>".into(),
        pad_token: Some("<pad>".into()),
        unk_token: Some("<unk>".into()),
    }
}

fn golden(template: &Path, case: &str) -> String {
    let stem = template.file_stem().and_then(|s| s.to_str()).expect("stem");
    read(
        &fixtures()
            .join("golden")
            .join(stem)
            .join(format!("{case}.txt")),
    )
}

/// Byte-exact comparison with a readable first difference.
fn assert_same(got: &str, want: &str, what: &str) {
    if got == want {
        return;
    }
    let at = got
        .bytes()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let ctx = |s: &str| {
        let lo = at.saturating_sub(40);
        let hi = (at + 40).min(s.len());
        String::from_utf8_lossy(&s.as_bytes()[lo..hi]).into_owned()
    };
    panic!(
        "{what}: differs at byte {at} (got {} bytes, want {})\n got: {:?}\nwant: {:?}",
        got.len(),
        want.len(),
        ctx(got),
        ctx(want)
    );
}

/// The exact keyword arguments render_golden.py passes.
fn raw_context(case: &Json) -> Value {
    let mut ctx = serde_json::Map::new();
    ctx.insert("messages".into(), case["messages"].clone());
    ctx.insert(
        "tools".into(),
        case.get("tools").cloned().unwrap_or(Json::Null),
    );
    ctx.insert("documents".into(), Json::Null);
    ctx.insert(
        "add_generation_prompt".into(),
        case.get("add_generation_prompt")
            .cloned()
            .unwrap_or(Json::Bool(true)),
    );
    for (k, v) in [
        ("bos_token", "<bos>"),
        ("eos_token", "<eos>"),
        ("pad_token", "<pad>"),
        ("unk_token", "<unk>"),
    ] {
        ctx.insert(k.into(), Json::String(v.into()));
    }
    if let Some(thinking) = case.get("enable_thinking") {
        ctx.insert("enable_thinking".into(), thinking.clone());
    }
    Value::from(Serde(Json::Object(ctx)))
}

#[test]
fn raw_context_renders_byte_identical_to_jinja2() {
    let mut checked = 0;
    for path in templates() {
        let template = ChatTemplate::new(read(&path)).expect("template compiles");
        for case in cases() {
            let name = case["name"].as_str().expect("case name");
            let got = template
                .render_context(raw_context(&case))
                .unwrap_or_else(|e| panic!("{}/{name}: {e}", path.display()));
            assert_same(
                &got,
                &golden(&path, name),
                &format!("{}/{name}", path.display()),
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} renders checked");
}

#[test]
fn typed_messages_render_byte_identical_to_jinja2() {
    let mut checked = 0;
    for path in templates() {
        let template = ChatTemplate::new(read(&path)).expect("template compiles");
        for case in cases() {
            let name = case["name"].as_str().expect("case name");
            let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone())
                .unwrap_or_else(|e| panic!("{name}: messages do not fit ChatMessage: {e}"));
            let tools: Vec<ToolDeclaration> = match case.get("tools") {
                Some(t) => serde_json::from_value(t.clone())
                    .unwrap_or_else(|e| panic!("{name}: tools do not fit ToolDeclaration: {e}")),
                None => Vec::new(),
            };
            let options = PromptOptions {
                add_generation_prompt: case
                    .get("add_generation_prompt")
                    .and_then(Json::as_bool)
                    .unwrap_or(true),
                enable_thinking: case
                    .get("enable_thinking")
                    .and_then(Json::as_bool)
                    .unwrap_or(false),
            };
            let got = template
                .render(&messages, &tools, options, &tokens())
                .unwrap_or_else(|e| panic!("{}/{name}: {e}", path.display()));
            assert_same(
                &got,
                &golden(&path, name),
                &format!("typed {}/{name}", path.display()),
            );
            checked += 1;
        }
    }
    assert!(checked >= 36, "only {checked} typed renders checked");
}

/// The Rust renderers of calls and responses produce exactly the template's text, so a session
/// can append a tool response to the cached prompt without re-rendering the conversation.
#[test]
fn rust_call_and_response_renderers_match_template_output() {
    let path = fixtures().join("chat_template.jinja");
    let mut calls = 0;
    let mut responses = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("case name");
        let golden = golden(&path, name);
        let messages = case["messages"].as_array().expect("messages");
        for (i, m) in messages.iter().enumerate() {
            let Some(tool_calls) = m.get("tool_calls").and_then(Json::as_array) else {
                continue;
            };
            for tc in tool_calls {
                let f = &tc["function"];
                let args = f["arguments"].as_object().expect("arguments object");
                let fname = f["name"].as_str().expect("name");
                let text = render_tool_call(fname, args);
                assert!(golden.contains(&text), "{name}: {text:?} not in golden");
                calls += 1;
                // Tool messages that follow, resolved by id like the template does.
                for follow in messages[i + 1..].iter().take_while(|x| x["role"] == "tool") {
                    let Some(content) = follow.get("content").and_then(Json::as_str) else {
                        continue;
                    };
                    if follow.get("tool_call_id") != tc.get("id") {
                        continue;
                    }
                    let text = render_tool_response(fname, &Json::String(content.into()));
                    assert!(golden.contains(&text), "{name}: {text:?} not in golden");
                    responses += 1;
                }
            }
            if let Some(trs) = m.get("tool_responses").and_then(Json::as_array) {
                for tr in trs {
                    let text =
                        render_tool_response(tr["name"].as_str().expect("name"), &tr["response"]);
                    assert!(golden.contains(&text), "{name}: {text:?} not in golden");
                    responses += 1;
                }
            }
        }
    }
    assert!(
        calls >= 6 && responses >= 5,
        "calls {calls}, responses {responses}"
    );
}

#[test]
fn template_errors_are_reported_not_panicked() {
    assert!(
        ChatTemplate::new("{% for x in %}").is_err(),
        "syntax error must be an Err"
    );
    let t = ChatTemplate::new("{{ messages[0]['role'] + 1 }}").expect("compiles");
    let err = t.render(
        &[ChatMessage::user("hi")],
        &[],
        PromptOptions::default(),
        &tokens(),
    );
    assert!(err.is_err(), "type error must be an Err: {err:?}");
}

/// The agent's conversation, converted by `gg_gemma::agent`, gives the messages and the prompt
/// that Python renders for the same conversation (case `agent_conversation`).
#[test]
fn agent_conversation_converts_and_renders_like_python() {
    use gg_agent::{ChatMessage as A, ToolCall, ToolDefinition};
    use gg_gemma::agent::{messages_from_agent, tools_from_agent};
    use serde_json::json;

    let conversation = vec![
        A::system("You are Gemma Gem."),
        A::user("What's the weather in Paris? Then click OK."),
        A::model_with_calls(
            "",
            vec![ToolCall::from_value(
                "get_weather",
                json!({"city": "Paris"}),
            )],
        )
        .with_thinking("Need the weather first."),
        A::tool(
            "get_weather",
            json!({"temperature": 18, "sky": "sunny", "Wind": null}),
            Vec::new(),
        ),
        A::model_with_calls(
            "",
            vec![ToolCall::from_value("click_element", json!({"ref": "e3"}))],
        ),
        A::tool("click_element", json!({"clicked": true}), Vec::new()),
        A::model("It is 18 C and sunny; I clicked OK."),
        A::user("Thanks!"),
    ];
    let case = cases()
        .into_iter()
        .find(|c| c["name"] == "agent_conversation")
        .expect("agent_conversation case");
    let tool_defs: Vec<ToolDefinition> = case["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| ToolDefinition {
            name: t["function"]["name"].as_str().expect("name").into(),
            description: t["function"]["description"]
                .as_str()
                .expect("description")
                .into(),
            parameters: t["function"]["parameters"].clone(),
        })
        .collect();

    let messages = messages_from_agent(&conversation, false);
    let tools = tools_from_agent(&tool_defs);
    // Every string but the system prompt is marked as an untrusted span; without the marks the
    // messages are Python's.
    let json = serde_json::to_string(&messages).expect("json");
    assert!(json.contains('\u{FDD0}'), "untrusted spans are marked");
    let unmarked: serde_json::Value =
        serde_json::from_str(&gg_gemma::untrusted::unmarked(&json)).expect("json");
    assert_eq!(unmarked, case["messages"]);
    assert_eq!(serde_json::to_value(&tools).expect("json"), case["tools"]);

    let options = PromptOptions {
        add_generation_prompt: true,
        enable_thinking: true,
    };
    for path in templates() {
        let template = ChatTemplate::new(read(&path)).expect("template compiles");
        let got = template
            .render(&messages, &tools, options, &tokens())
            .expect("renders");
        assert_same(
            &gg_gemma::untrusted::unmarked(&got),
            &golden(&path, "agent_conversation"),
            &format!("agent {}", path.display()),
        );
    }
}
