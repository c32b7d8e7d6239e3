//! The agent loop against a scripted model, page and user: the "Native tests" of issue 5.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use gg_agent::untrusted::UNTRUSTED_NOTICE;
use gg_agent::*;
use serde_json::json;
use support::*;

const SITE: &str = "https://shop.example";

fn agent() -> Agent {
    Agent::new(AgentConfig::default())
}

#[test]
fn plain_answer() {
    let model = ScriptedModel::new(vec![vec![tok("Hello"), tok(" there."), end_turn()]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let mut agent = agent();
    let events = run_turn(&mut agent, "Hi", &model, &page, &user);

    assert_eq!(
        events,
        [
            AgentEvent::Token {
                text: "Hello".into()
            },
            AgentEvent::Token {
                text: " there.".into()
            },
            AgentEvent::Done {
                reason: StopReason::EndOfTurn
            },
        ]
    );
    assert_eq!(model.calls(), 1);
    let seen = &model.seen.borrow()[0];
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].role, Role::System);
    assert_eq!(seen[1], ChatMessage::user("Hi"));
    assert_eq!(model.seen_tools.borrow()[0].len(), 8);
    let roles: Vec<Role> = agent.messages().iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Model]);
    assert_eq!(agent.messages()[2].text(), "Hello there.");
    assert!(page.executed.borrow().is_empty());
}

#[test]
fn thinking_is_streamed_and_kept_apart_from_the_answer() {
    let model = ScriptedModel::new(vec![vec![
        think("Hmm, "),
        think("easy."),
        tok("Yes."),
        end_turn(),
    ]]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    let events = run_turn(&mut agent, "?", &model, &page, &ScriptedUser::default());
    assert_eq!(kinds(&events), ["thinking", "thinking", "token", "done"]);
    let answer = agent.messages().last().unwrap();
    assert_eq!(answer.text(), "Yes.");
    assert_eq!(answer.thinking.as_deref(), Some("Hmm, easy."));
}

#[test]
fn one_tool_call() {
    let model = ScriptedModel::new(vec![
        vec![
            tok("Let me look."),
            call("get_page_title", json!({})),
            end_for_tools(),
        ],
        vec![tok("The page is called Shop."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE).then(
        "get_page_title",
        Ok(ToolOutput::new(json!({"title": "Shop", "url": SITE}))),
    );
    let mut agent = agent();
    let events = run_turn(
        &mut agent,
        "What page is this?",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    assert_eq!(
        kinds(&events),
        ["token", "tool_start", "tool_result", "token", "done"]
    );
    let AgentEvent::ToolStart {
        call_id,
        call,
        class,
    } = &events[1]
    else {
        panic!("{:?}", events[1]);
    };
    assert_eq!(call.name, "get_page_title");
    assert_eq!(*class, RiskClass::Read);
    assert!(
        matches!(&events[2], AgentEvent::ToolResult { call_id: id, output, .. } if id == call_id && output.value["title"] == "Shop")
    );
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
    assert_eq!(page.executed_names(), ["get_page_title"]);

    // The second step saw the call and its (wrapped) response.
    let seen = &model.seen.borrow()[1];
    let roles: Vec<Role> = seen.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Model, Role::Tool]);
    assert_eq!(seen[2].text(), "Let me look.");
    assert_eq!(
        seen[2].tool_calls,
        [ToolCall::from_value("get_page_title", json!({}))]
    );
    let answer = response(&seen[3]);
    assert_eq!(answer["notice"], UNTRUSTED_NOTICE);
    assert_eq!(answer["page_data"]["title"], "Shop");
    assert_eq!(agent.messages().len(), 5);
}

#[test]
fn several_tool_calls_in_one_step_and_across_steps() {
    let model = ScriptedModel::new(vec![
        vec![
            call("snapshot_page", json!({})),
            call(
                "read_page_content",
                json!({"format": "text", "max_chars": "100"}),
            ),
            end_for_tools(),
        ],
        vec![call("click_element", json!({"ref": "e3"})), end_for_tools()],
        vec![tok("Added to the cart."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e3".into()), button_facts())
        .then(
            "snapshot_page",
            Ok(ToolOutput::new(json!("e3 button \"Add to cart\""))),
        )
        .then(
            "read_page_content",
            Ok(ToolOutput::new(json!({"text": "A mug", "remaining": 0}))),
        );
    let mut agent = agent();
    let events = run_turn(
        &mut agent,
        "Buy the mug",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    assert_eq!(
        kinds(&events),
        [
            "tool_start",
            "tool_result",
            "tool_start",
            "tool_result",
            "tool_start",
            "tool_result",
            "token",
            "done"
        ]
    );
    assert_eq!(
        page.executed_names(),
        ["snapshot_page", "read_page_content", "click_element"]
    );
    // Arguments reach the executor normalized.
    assert_eq!(
        page.executed.borrow()[1].args,
        *json!({"format": "text", "mode": "all", "offset": 0, "max_chars": 100})
            .as_object()
            .unwrap()
    );
    assert_eq!(*page.inspected.borrow(), [ElementTarget::Ref("e3".into())]);
    let ids: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStart { call_id, .. } => Some(*call_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    let classes: Vec<RiskClass> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolStart { class, .. } => Some(*class),
            _ => None,
        })
        .collect();
    assert_eq!(classes, [RiskClass::Read, RiskClass::Read, RiskClass::Act]);
    // One model message with both calls, then both responses, in order.
    let roles: Vec<Role> = agent.messages().iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Model,
            Role::Tool,
            Role::Tool,
            Role::Model,
            Role::Tool,
            Role::Model
        ]
    );
    assert_eq!(agent.messages()[2].tool_calls.len(), 2);
    let names: Vec<&str> = agent.messages()[3..5]
        .iter()
        .filter_map(|m| m.tool_response.as_ref().map(|r| r.name.as_str()))
        .collect();
    assert_eq!(names, ["snapshot_page", "read_page_content"]);
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
}

#[test]
fn tool_error_then_recovery() {
    let model = ScriptedModel::new(vec![
        vec![call("click_element", json!({"ref": "e9"})), end_for_tools()],
        vec![call("click_element", json!({"ref": "e2"})), end_for_tools()],
        vec![call("click_element", json!({"ref": "e4"})), end_for_tools()],
        vec![tok("Done."), end_turn()],
    ]);
    // e9 is gone (stale ref); e2 is covered by a dialog; e4 works.
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e2".into()), button_facts())
        .with_element(ElementTarget::Ref("e4".into()), button_facts())
        .then(
            "click_element",
            Err(ToolError::not_interactable(
                "e2 is covered by another element (a dialog); close it first",
            )),
        );
    let mut agent = agent();
    let events = run_turn(
        &mut agent,
        "Click it",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    assert_eq!(
        kinds(&events),
        [
            "tool_error",
            "tool_start",
            "tool_error",
            "tool_start",
            "tool_result",
            "token",
            "done"
        ]
    );
    let errors = tool_errors(&events);
    assert_eq!(errors[0].kind, ToolErrorKind::StaleRef);
    assert_eq!(errors[1].kind, ToolErrorKind::NotInteractable);
    // The stale ref never reached execution; the covered one did and failed.
    assert_eq!(page.executed.borrow().len(), 2);
    // Each error went back to the model as the tool's response.
    let after_stale = model.last_message_of_step(1);
    // A tool's error is untrusted data, wrapped like its output.
    assert_eq!(
        response(&after_stale),
        json!({"notice": UNTRUSTED_NOTICE, "page_data": {
            "error": "e9 is no longer in the page; call snapshot_page for fresh refs"}})
    );
    let after_covered = model.last_message_of_step(2);
    assert_eq!(
        response(&after_covered)["page_data"]["error"],
        "e2 is covered by another element (a dialog); close it first"
    );
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
}

#[test]
fn unknown_tool_goes_back_to_the_model() {
    let model = ScriptedModel::new(vec![
        vec![
            call("open_new_tab", json!({"url": "https://x.test"})),
            end_for_tools(),
        ],
        vec![tok("I cannot open tabs."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    let events = run_turn(
        &mut agent,
        "Open a tab",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    assert_eq!(kinds(&events), ["tool_error", "token", "done"]);
    let errors = tool_errors(&events);
    assert_eq!(errors[0].kind, ToolErrorKind::UnknownTool);
    let told = response(&model.last_message_of_step(1));
    let message = told["error"].as_str().unwrap();
    assert!(
        message.contains("no tool named `open_new_tab`"),
        "{message}"
    );
    assert!(message.contains("snapshot_page"), "{message}");
    assert!(page.executed.borrow().is_empty());
}

#[test]
fn malformed_call_and_bad_arguments_go_back_to_the_model() {
    let model = ScriptedModel::new(vec![
        vec![
            malformed(
                Some("type_text"),
                "call:type_text{ref:e1,text:<|\"|>hi}",
                "unterminated string",
            ),
            end_for_tools(),
        ],
        vec![call("type_text", json!({"ref": "e1"})), end_for_tools()],
        vec![
            call("type_text", json!({"ref": "e1", "text": "hi"})),
            end_for_tools(),
        ],
        vec![tok("Typed."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e1".into()), input_facts("search", "q"));
    let mut agent = agent();
    let events = run_turn(
        &mut agent,
        "Type hi",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    assert_eq!(
        kinds(&events),
        [
            "tool_error",
            "tool_error",
            "tool_start",
            "tool_result",
            "token",
            "done"
        ]
    );
    let errors = tool_errors(&events);
    assert_eq!(errors[0].kind, ToolErrorKind::MalformedCall);
    assert!(errors[0].message.contains("unterminated string"));
    assert_eq!(errors[1].kind, ToolErrorKind::InvalidArguments);
    assert!(matches!(&events[0], AgentEvent::ToolError { name: Some(n), .. } if n == "type_text"));
    let told = response(&model.last_message_of_step(1));
    assert!(
        told["error"]
            .as_str()
            .unwrap()
            .contains("could not be read")
    );
    let told = response(&model.last_message_of_step(2));
    assert!(
        told["error"]
            .as_str()
            .unwrap()
            .contains("`text` is required")
    );
    assert_eq!(page.executed.borrow().len(), 1);
}

#[test]
fn the_same_failing_call_twice_ends_the_loop() {
    let model = ScriptedModel::new(vec![
        vec![call("click_element", json!({"ref": "e5"})), end_for_tools()],
        vec![call("click_element", json!({"ref": "e5"})), end_for_tools()],
        vec![tok("never reached"), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e5".into()), button_facts())
        .then(
            "click_element",
            Err(ToolError::not_interactable("e5 is disabled")),
        )
        .then(
            "click_element",
            Err(ToolError::not_interactable("e5 is disabled")),
        );
    let mut agent = agent();
    let events = run_turn(&mut agent, "Click", &model, &page, &ScriptedUser::default());

    let stop = last_stop(&events);
    assert_eq!(
        stop,
        StopReason::RepeatedFailure {
            tool: "click_element".into(),
            error: "e5 is disabled".into()
        }
    );
    let explanation = stop.to_string();
    assert!(explanation.contains("already failed"), "{explanation}");
    assert_eq!(model.calls(), 2);
    assert_eq!(model.remaining_steps(), 1);
    // The history still ends with the response to the last call.
    assert_eq!(
        response(agent.messages().last().unwrap())["page_data"]["error"],
        "e5 is disabled"
    );
}

#[test]
fn different_failing_calls_do_not_end_the_loop() {
    let model = ScriptedModel::new(vec![
        vec![call("click_element", json!({"ref": "e5"})), end_for_tools()],
        vec![call("click_element", json!({"ref": "e6"})), end_for_tools()],
        vec![tok("Both are disabled."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e5".into()), button_facts())
        .with_element(ElementTarget::Ref("e6".into()), button_facts())
        .then(
            "click_element",
            Err(ToolError::not_interactable("disabled")),
        )
        .then(
            "click_element",
            Err(ToolError::not_interactable("disabled")),
        );
    let mut agent = agent();
    let events = run_turn(&mut agent, "Click", &model, &page, &ScriptedUser::default());
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
    assert_eq!(model.calls(), 3);
}

#[test]
fn max_iterations_stops_and_says_so() {
    let looping = || {
        vec![
            call("scroll_page", json!({"direction": "down"})),
            end_for_tools(),
        ]
    };
    let model = ScriptedModel::new(vec![looping(), looping(), looping(), looping()]);
    let page = ScriptedPage::new(SITE);
    let mut agent = Agent::new(AgentConfig {
        max_iterations: 3,
        ..AgentConfig::default()
    });
    let events = run_turn(
        &mut agent,
        "Scroll forever",
        &model,
        &page,
        &ScriptedUser::default(),
    );

    let stop = last_stop(&events);
    assert_eq!(stop, StopReason::MaxIterations { limit: 3 });
    assert!(stop.to_string().contains("max_iterations"));
    assert_eq!(model.calls(), 3);
    assert_eq!(page.executed.borrow().len(), 3);
}

#[test]
fn max_new_tokens_is_reported() {
    let model = ScriptedModel::new(vec![vec![
        tok("A very long"),
        Scripted::Chunk(StreamChunk::Done {
            reason: FinishReason::MaxNewTokens,
        }),
    ]]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Write", &model, &page, &ScriptedUser::default());
    assert_eq!(last_stop(&events), StopReason::MaxNewTokens { limit: 1024 });
}

#[test]
fn cancel_mid_stream_stops_between_tokens() {
    let model = ScriptedModel::new(vec![vec![
        tok("one "),
        tok("two "),
        tok("three "),
        tok("four"),
        end_turn(),
    ]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let counter = ApproxTokenCounter::default();
    let cancel = CancellationToken::new();
    let mut agent = agent();
    let mut events = Vec::new();
    {
        let mut stream = run_agent_loop(
            &mut agent,
            ChatMessage::user("Count"),
            env(&model, &page, &user, &counter, cancel.clone()),
        );
        futures::executor::block_on(async {
            while let Some(event) = stream.next().await {
                if events.len() == 1 {
                    cancel.cancel();
                }
                events.push(event);
            }
        });
    }
    assert_eq!(
        events,
        [
            AgentEvent::Token {
                text: "one ".into()
            },
            AgentEvent::Token {
                text: "two ".into()
            },
            AgentEvent::Done {
                reason: StopReason::Cancelled
            },
        ]
    );
    // What the model said so far is kept.
    assert_eq!(
        agent.messages().last().map(ChatMessage::text).as_deref(),
        Some("one two ")
    );
}

/// Runs a step with two calls, cancelling when the `nth` tool result (1-based) arrives.
fn cancel_on_result(nth: usize) -> (Vec<AgentEvent>, ScriptedModel, ScriptedPage, Agent) {
    let model = ScriptedModel::new(vec![
        vec![
            call("get_page_title", json!({})),
            call("snapshot_page", json!({})),
            end_for_tools(),
        ],
        vec![tok("never"), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let counter = ApproxTokenCounter::default();
    let cancel = CancellationToken::new();
    let mut agent = agent();
    let mut events = Vec::new();
    {
        let mut stream = run_agent_loop(
            &mut agent,
            ChatMessage::user("Look"),
            env(&model, &page, &user, &counter, cancel.clone()),
        );
        futures::executor::block_on(async {
            let mut results = 0;
            while let Some(event) = stream.next().await {
                if matches!(event, AgentEvent::ToolResult { .. }) {
                    results += 1;
                    if results == nth {
                        cancel.cancel();
                    }
                }
                events.push(event);
            }
        });
    }
    (events, model, page, agent)
}

#[test]
fn cancel_after_a_tool_result_runs_no_further_call() {
    let (events, model, page, agent) = cancel_on_result(1);
    assert_eq!(kinds(&events), ["tool_start", "tool_result", "done"]);
    assert_eq!(last_stop(&events), StopReason::Cancelled);
    assert_eq!(page.executed_names(), ["get_page_title"]);
    assert_eq!(model.calls(), 1);
    let last = response(agent.messages().last().unwrap());
    assert!(
        last["error"].as_str().unwrap().contains("not run"),
        "{last}"
    );
}

#[test]
fn cancel_after_the_last_tool_result_starts_no_model_step() {
    let (events, model, page, _agent) = cancel_on_result(2);
    assert_eq!(
        kinds(&events),
        [
            "tool_start",
            "tool_result",
            "tool_start",
            "tool_result",
            "done"
        ]
    );
    assert_eq!(last_stop(&events), StopReason::Cancelled);
    assert_eq!(page.executed.borrow().len(), 2);
    assert_eq!(model.calls(), 1, "no new generation after cancel");
}

#[test]
fn cancel_wakes_a_busy_model_promptly() {
    let model = ScriptedModel::new(vec![vec![
        tok("Thinking about it"),
        Scripted::Delay(Duration::from_secs(3)),
        tok(" late"),
        end_turn(),
    ]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let counter = ApproxTokenCounter::default();
    let cancel = CancellationToken::new();
    let remote = cancel.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        remote.cancel();
    });
    let started = Instant::now();
    let mut agent = agent();
    let events: Vec<AgentEvent> = futures::executor::block_on(
        run_agent_loop(
            &mut agent,
            ChatMessage::user("Go"),
            env(&model, &page, &user, &counter, cancel),
        )
        .collect(),
    );
    canceller.join().unwrap();
    assert_eq!(kinds(&events), ["token", "done"]);
    assert_eq!(last_stop(&events), StopReason::Cancelled);
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(2), "cancel took {elapsed:?}");
}

#[test]
fn cancel_while_waiting_for_approval_runs_nothing() {
    let model = ScriptedModel::new(vec![vec![
        call("run_javascript", json!({"code": "1+1"})),
        call("get_page_title", json!({})),
        end_for_tools(),
    ]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser {
        never_answers: true,
        ..ScriptedUser::default()
    };
    let counter = ApproxTokenCounter::default();
    let cancel = CancellationToken::new();
    let mut agent = agent();
    let mut events = Vec::new();
    {
        let mut stream = run_agent_loop(
            &mut agent,
            ChatMessage::user("Compute"),
            env(&model, &page, &user, &counter, cancel.clone()),
        );
        futures::executor::block_on(async {
            while let Some(event) = stream.next().await {
                if matches!(event, AgentEvent::AwaitingApproval { .. }) {
                    cancel.cancel();
                }
                events.push(event);
            }
        });
    }
    assert_eq!(kinds(&events), ["tool_start", "awaiting_approval", "done"]);
    assert_eq!(last_stop(&events), StopReason::Cancelled);
    assert!(page.executed.borrow().is_empty());
    // Both calls got a response, so the history stays well-formed.
    let tail: Vec<String> = agent.messages()[3..]
        .iter()
        .map(|m| response(m)["error"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(tail.len(), 2);
    assert!(tail[0].contains("cancelled"), "{tail:?}");
    assert!(tail[1].contains("not run"), "{tail:?}");
}

#[test]
fn approval_allowed_once_runs_and_asks_again_next_time() {
    let model = ScriptedModel::new(vec![
        vec![
            call("run_javascript", json!({"code": "document.title"})),
            end_for_tools(),
        ],
        vec![
            call("run_javascript", json!({"code": "location.href"})),
            end_for_tools(),
        ],
        vec![tok("The title is Shop."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE).then("run_javascript", Ok(ToolOutput::new(json!("Shop"))));
    let user = ScriptedUser::answering(&[ApprovalDecision::AllowOnce, ApprovalDecision::AllowOnce]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Title?", &model, &page, &user);

    assert_eq!(
        kinds(&events),
        [
            "tool_start",
            "awaiting_approval",
            "tool_result",
            "tool_start",
            "awaiting_approval",
            "tool_result",
            "token",
            "done"
        ]
    );
    let asked = user.asked.borrow();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].site, SITE);
    assert_eq!(asked[0].reasons, [SensitiveReason::RunJavascript]);
    assert_eq!(asked[0].call.args["code"], "document.title");
    assert!(asked[0].summary.contains("run JavaScript"));
    assert!(matches!(&events[1], AgentEvent::AwaitingApproval { request } if request == &asked[0]));
    assert_eq!(page.executed_names(), ["run_javascript", "run_javascript"]);
    assert!(agent.permissions().sites().next().is_none());
}

#[test]
fn approval_always_on_site_is_remembered_for_that_site_only() {
    let click = || vec![call("click_element", json!({"ref": "e1"})), end_for_tools()];
    let model = ScriptedModel::new(vec![
        click(),
        click(),
        vec![tok("ok"), end_turn()],
        click(),
        vec![tok("ok"), end_turn()],
    ]);
    let delete = ElementFacts {
        field: FieldFacts {
            tag: "button".into(),
            text: Some("Delete photo".into()),
            ..FieldFacts::default()
        },
        identity: Some("n7".into()),
        ..ElementFacts::default()
    };
    let page = ScriptedPage::new("https://shop.example/products/1")
        .with_element(ElementTarget::Ref("e1".into()), delete.clone());
    let user = ScriptedUser::answering(&[ApprovalDecision::AlwaysOnSite]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Delete", &model, &page, &user);

    assert_eq!(
        kinds(&events),
        [
            "tool_start",
            "awaiting_approval",
            "permission_granted",
            "tool_result",
            "tool_start",
            "tool_result",
            "token",
            "done"
        ]
    );
    let destructive = Permission::Consequential(ActionKind::Destructive);
    assert_eq!(
        events[2],
        AgentEvent::PermissionGranted {
            site: SITE.into(),
            permission: destructive.clone()
        }
    );
    assert_eq!(user.asked.borrow().len(), 1);
    assert!(agent.permissions().is_allowed(SITE, &destructive));
    // The approval named the element, and the executor was told which one to act on.
    assert_eq!(user.asked.borrow()[0].element.as_deref(), Some("n7"));
    assert_eq!(
        *page.executed_on.borrow(),
        [Some("n7".to_owned()), Some("n7".to_owned())]
    );

    // On another site the user is asked again (and denies).
    let other = ScriptedPage::new("https://other.example")
        .with_element(ElementTarget::Ref("e1".into()), delete);
    let events = run_turn(&mut agent, "Delete there", &model, &other, &user);
    assert_eq!(user.asked.borrow().len(), 2);
    assert!(other.executed.borrow().is_empty());
    assert_eq!(tool_errors(&events)[0].kind, ToolErrorKind::Denied);
    assert_eq!(page.executed.borrow().len(), 2);
}

#[test]
fn run_javascript_is_never_allowed_for_good_and_for_this_task_ends_with_the_task() {
    let js = |code: &str| {
        vec![
            call("run_javascript", json!({"code": code})),
            end_for_tools(),
        ]
    };
    let model = ScriptedModel::new(vec![
        js("1"),
        js("2"),
        vec![tok("ok"), end_turn()],
        js("3"),
        js("4"),
        vec![tok("ok"), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    // "Always" is not offered for JavaScript; an answer saying so counts once.
    let user = ScriptedUser::answering(&[
        ApprovalDecision::AlwaysOnSite,
        ApprovalDecision::AllowOnce,
        ApprovalDecision::AllowForTask,
    ]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Run", &model, &page, &user);
    assert!(!kinds(&events).contains(&"permission_granted"));
    assert_eq!(user.asked.borrow().len(), 2);
    assert!(!user.asked.borrow()[0].allow_always);
    assert!(
        !agent
            .permissions()
            .is_allowed(SITE, &Permission::RunJavascript)
    );
    // For this task: the next call of the same run is not asked about...
    run_turn(&mut agent, "Run more", &model, &page, &user);
    assert_eq!(user.asked.borrow().len(), 3);
    assert_eq!(page.executed.borrow().len(), 4);
    // ...and the next task asks again (no answers left: denied).
    let model = ScriptedModel::new(vec![js("5"), vec![tok("no"), end_turn()]]);
    run_turn(&mut agent, "Again", &model, &page, &user);
    assert_eq!(user.asked.borrow().len(), 4);
    assert_eq!(page.executed.borrow().len(), 4);
    // Every request had its own nonce.
    let nonces: std::collections::BTreeSet<String> = user
        .asked
        .borrow()
        .iter()
        .map(|r| r.nonce.clone())
        .collect();
    assert_eq!(nonces.len(), 4);
    assert!(nonces.iter().all(|n| n.len() >= 16));
}

#[test]
fn approval_denied_runs_nothing_and_tells_the_model() {
    let model = ScriptedModel::new(vec![
        vec![
            call("run_javascript", json!({"code": "document.cookie"})),
            end_for_tools(),
        ],
        vec![
            tok("You declined, so I did not read the cookies."),
            end_turn(),
        ],
    ]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::answering(&[ApprovalDecision::Deny]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Cookies?", &model, &page, &user);

    assert_eq!(
        kinds(&events),
        [
            "tool_start",
            "awaiting_approval",
            "tool_error",
            "token",
            "done"
        ]
    );
    assert_eq!(tool_errors(&events)[0].kind, ToolErrorKind::Denied);
    assert!(page.executed.borrow().is_empty());
    let told = response(&model.last_message_of_step(1));
    let message = told["error"].as_str().unwrap();
    assert!(message.contains("the user denied this action"), "{message}");
    assert!(message.contains("Do not try it again"), "{message}");
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
}

#[test]
fn a_denied_call_repeated_is_not_asked_again_and_ends_the_loop() {
    let js = || {
        vec![
            call("run_javascript", json!({"code": "steal()"})),
            end_for_tools(),
        ]
    };
    let model = ScriptedModel::new(vec![js(), js(), vec![tok("never"), end_turn()]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::answering(&[ApprovalDecision::Deny]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Go", &model, &page, &user);
    assert_eq!(user.asked.borrow().len(), 1);
    assert!(page.executed.borrow().is_empty());
    assert!(
        matches!(last_stop(&events), StopReason::RepeatedFailure { tool, .. } if tool == "run_javascript")
    );
}

#[test]
fn leaving_the_site_and_submitting_a_login_form_need_approval() {
    let login_form = FormFacts {
        action: Some("https://shop.example/login".into()),
        method: Some("post".into()),
        fields: vec![
            input_facts("email", "email").field,
            input_facts("password", "password").field,
        ],
    };
    let submit = ElementFacts {
        is_submit: true,
        form: Some(login_form),
        ..button_facts()
    };
    let link = ElementFacts {
        field: FieldFacts {
            tag: "a".into(),
            ..FieldFacts::default()
        },
        link_href: Some("https://evil.example/win".into()),
        ..ElementFacts::default()
    };
    let model = ScriptedModel::new(vec![
        vec![call("click_element", json!({"ref": "e1"})), end_for_tools()],
        vec![call("click_element", json!({"ref": "e2"})), end_for_tools()],
        vec![tok("Logged in."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE)
        .with_element(ElementTarget::Ref("e1".into()), link)
        .with_element(ElementTarget::Ref("e2".into()), submit);
    let user = ScriptedUser::answering(&[ApprovalDecision::Deny, ApprovalDecision::AllowOnce]);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Log in", &model, &page, &user);

    let asked = user.asked.borrow();
    assert_eq!(
        asked[0].reasons,
        [SensitiveReason::LeaveSite {
            destination: "https://evil.example".into()
        }]
    );
    assert_eq!(
        asked[1].reasons,
        [
            SensitiveReason::SubmitForm {
                method: "post".into()
            },
            SensitiveReason::SubmitSensitiveForm {
                fields: vec![SensitiveField::Password]
            }
        ]
    );
    assert_eq!(page.executed.borrow().len(), 1);
    assert_eq!(page.executed.borrow()[0].args["ref"], "e2");
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
}

#[test]
fn no_tool_runs_on_a_disabled_site() {
    let model = ScriptedModel::new(vec![
        vec![call("get_page_title", json!({})), end_for_tools()],
        vec![tok("I cannot act on this site."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    agent.permissions_mut().set_disabled(SITE, true);
    let events = run_turn(
        &mut agent,
        "Title?",
        &model,
        &page,
        &ScriptedUser::default(),
    );
    assert_eq!(kinds(&events), ["tool_error", "token", "done"]);
    assert_eq!(tool_errors(&events)[0].kind, ToolErrorKind::Denied);
    assert!(page.executed.borrow().is_empty());
}

/// Counts one token per character of text and of JSON, so budgets are easy to check.
struct CharCounter;

impl TokenCounter for CharCounter {
    fn count_message(&self, message: &ChatMessage) -> usize {
        message.text().len()
            + message
                .tool_calls
                .iter()
                .map(|c| c.name.len())
                .sum::<usize>()
            + message
                .tool_response
                .as_ref()
                .map_or(0, |r| r.response.to_string().len())
    }
    fn count_tools(&self, tools: &[ToolDefinition]) -> usize {
        tools.len() * 100
    }
}

#[test]
fn trimming_keeps_the_budget_system_prompt_tools_and_latest_turns() {
    let system = "You are a test.";
    let config = AgentConfig {
        system_prompt: system.into(),
        context_window: 1100,
        options: GenerateOptions {
            max_new_tokens: 100,
            ..GenerateOptions::default()
        },
        ..AgentConfig::default()
    };
    // Prompt budget: 1100 - 100 = 1000; fixed part: 800 (tools) + 15 (system prompt), which
    // leaves 185 for the history: the current question (31) and two earlier turns (60 each).
    let budget = 1000;
    let mut agent = Agent::new(config);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    for turn in 0..10 {
        let question = format!("question {turn} {}", "?".repeat(20));
        let model = ScriptedModel::new(vec![vec![
            tok(&format!("answer {turn} {}", "!".repeat(20))),
            end_turn(),
        ]]);
        let events = {
            let env = env(&model, &page, &user, &CharCounter, CancellationToken::new());
            futures::executor::block_on(
                run_agent_loop(&mut agent, ChatMessage::user(&question), env).collect::<Vec<_>>(),
            )
        };
        assert_eq!(last_stop(&events), StopReason::EndOfTurn, "turn {turn}");
        let seen = &model.seen.borrow()[0];
        let tokens = CharCounter.count_tools(&agent.config().tools)
            + seen
                .iter()
                .map(|m| CharCounter.count_message(m))
                .sum::<usize>();
        assert!(tokens <= budget, "turn {turn}: {tokens} > {budget}");
        assert_eq!(seen[0].text(), system, "turn {turn}: system prompt kept");
        assert_eq!(
            seen.last().unwrap().text(),
            question,
            "turn {turn}: latest turn kept"
        );
        assert_eq!(
            model.seen_tools.borrow()[0].len(),
            8,
            "turn {turn}: tools kept"
        );
        if turn >= 2 {
            // Older turns were dropped whole; the two latest stay.
            let texts: Vec<String> = seen[1..].iter().map(ChatMessage::text).collect();
            let expected: Vec<String> = [turn - 2, turn - 1]
                .into_iter()
                .flat_map(|t| {
                    [
                        format!("question {t} {}", "?".repeat(20)),
                        format!("answer {t} {}", "!".repeat(20)),
                    ]
                })
                .chain([question.clone()])
                .collect();
            assert_eq!(texts, expected, "turn {turn}");
        } else {
            assert_eq!(seen.len(), 2 + 2 * turn, "turn {turn}: nothing to trim yet");
        }
    }
}

#[test]
fn a_turn_that_cannot_fit_is_an_error() {
    let mut agent = Agent::new(AgentConfig {
        context_window: 900,
        options: GenerateOptions {
            max_new_tokens: 100,
            ..GenerateOptions::default()
        },
        system_prompt: String::new(),
        ..AgentConfig::default()
    });
    let model = ScriptedModel::new(vec![vec![tok("never"), end_turn()]]);
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let env = env(&model, &page, &user, &CharCounter, CancellationToken::new());
    let events: Vec<AgentEvent> = futures::executor::block_on(
        run_agent_loop(&mut agent, ChatMessage::user("x".repeat(100)), env).collect(),
    );
    assert!(
        matches!(&events[..], [AgentEvent::Error { error: AgentError::ContextOverflow(o) }] if o.budget == 800 && o.needed == 900),
        "{events:?}"
    );
    assert_eq!(model.calls(), 0);
}

#[test]
fn backend_failure_ends_with_an_error() {
    let model = ScriptedModel::new(vec![vec![
        tok("Partial"),
        Scripted::Fail(BackendError::Device {
            message: "device lost".into(),
        }),
    ]]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    let events = run_turn(&mut agent, "Hi", &model, &page, &ScriptedUser::default());
    assert_eq!(kinds(&events), ["token", "error"]);
    let AgentEvent::Error { error } = &events[1] else {
        panic!("{events:?}");
    };
    assert!(error.to_string().contains("device lost"), "{error}");
}

#[test]
fn a_run_must_start_with_a_user_message() {
    let model = ScriptedModel::new(Vec::new());
    let page = ScriptedPage::new(SITE);
    let user = ScriptedUser::default();
    let counter = ApproxTokenCounter::default();
    let mut agent = agent();
    let env = env(&model, &page, &user, &counter, CancellationToken::new());
    let events: Vec<AgentEvent> = futures::executor::block_on(
        run_agent_loop(&mut agent, ChatMessage::model("hi"), env).collect(),
    );
    assert!(matches!(
        &events[..],
        [AgentEvent::Error {
            error: AgentError::InvalidInput { .. }
        }]
    ));
    assert_eq!(agent.messages().len(), 1);
}

#[test]
fn clear_context_starts_over_but_keeps_permissions() {
    let model = ScriptedModel::new(vec![
        vec![tok("First."), end_turn()],
        vec![tok("Second."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    let mut agent = agent();
    agent
        .permissions_mut()
        .allow_always(SITE, Permission::SubmitForm);
    run_turn(&mut agent, "One", &model, &page, &ScriptedUser::default());
    assert_eq!(agent.messages().len(), 3);
    agent.clear_context();
    assert_eq!(agent.messages().len(), 1);
    run_turn(&mut agent, "Two", &model, &page, &ScriptedUser::default());
    assert_eq!(model.seen.borrow()[1].len(), 2, "the old turn is gone");
    assert!(
        agent
            .permissions()
            .is_allowed(SITE, &Permission::SubmitForm)
    );
}

#[test]
fn custom_tools_are_sensitive_unless_classed_and_trusted_output_is_not_wrapped() {
    let weather = ToolDefinition {
        name: "weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    };
    let mut config = AgentConfig::default();
    config.tools.push(weather);
    let mut agent = Agent::new(config);
    let model = ScriptedModel::new(vec![
        vec![call("weather", json!({"city": "Paris"})), end_for_tools()],
        vec![tok("Sunny."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE).then("weather", Ok(ToolOutput::new(json!("sunny"))));
    let user = ScriptedUser::answering(&[ApprovalDecision::AllowOnce]);
    run_turn(&mut agent, "Weather?", &model, &page, &user);
    assert_eq!(user.asked.borrow().len(), 1);
    assert_eq!(page.executed_names(), ["weather"]);
    assert_eq!(
        response(&model.last_message_of_step(1))["page_data"],
        "sunny",
        "custom tool output is wrapped by default"
    );
    assert_eq!(
        user.asked.borrow()[0].reasons,
        [SensitiveReason::UnclassifiedTool {
            name: "weather".into()
        }]
    );

    agent
        .config_mut()
        .tool_classes
        .insert("weather".into(), RiskClass::Read);
    agent
        .config_mut()
        .trusted_output_tools
        .insert("weather".into());
    let model = ScriptedModel::new(vec![
        vec![call("weather", json!({"city": "Oslo"})), end_for_tools()],
        vec![tok("Cold."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE).then("weather", Ok(ToolOutput::new(json!("cold"))));
    let user = ScriptedUser::default();
    run_turn(&mut agent, "And Oslo?", &model, &page, &user);
    assert!(user.asked.borrow().is_empty());
    assert_eq!(response(&model.last_message_of_step(1)), json!("cold"));
}

#[test]
fn restored_conversation_continues_with_the_current_system_prompt() {
    let model = ScriptedModel::new(vec![
        vec![tok("First."), end_turn()],
        vec![tok("Second."), end_turn()],
    ]);
    let page = ScriptedPage::new(SITE);
    let mut first = agent();
    run_turn(&mut first, "One", &model, &page, &ScriptedUser::default());
    let saved = first.messages().to_vec();
    assert_eq!(saved.len(), 3);

    // A new host (say, a recreated offscreen document) restores the saved messages.
    let mut second = agent();
    second.restore_messages(saved.clone());
    assert_eq!(
        second.messages(),
        &saved[..],
        "one system prompt, then the old turn"
    );
    run_turn(&mut second, "Two", &model, &page, &ScriptedUser::default());
    let seen = model.seen.borrow();
    assert_eq!(
        seen[1].len(),
        4,
        "the model sees the old turn before the new message"
    );
    assert_eq!(seen[1][1].text(), "One");
}

#[test]
fn tool_outputs_fit_a_token_cap_counted_by_the_model_counter() {
    // CharCounter: one token per character. Prompt budget 8192 - 1024; one output at most
    // min(1200, budget / 2) = 1200 tokens.
    let cap = 1200;
    let config = AgentConfig {
        max_tool_output_tokens: cap,
        ..AgentConfig::default()
    };
    let long: String = (0..4000).map(|i| format!("word{i} ")).collect();
    let model = ScriptedModel::new(vec![
        vec![
            call("read_page_content", json!({"max_chars": 100_000})),
            call("snapshot_page", json!({"max_tokens": 50_000})),
            end_for_tools(),
        ],
        vec![tok("Read."), end_turn()],
    ]);
    let returned = long.chars().count();
    let page = ScriptedPage::new(SITE)
        .then(
            "read_page_content",
            Ok(ToolOutput::new(json!({
                "format": "text", "offset": 0, "returned_chars": returned,
                "total_chars": returned + 10, "remaining_chars": 10, "next_offset": returned,
                "note": "10 more characters", "content": long,
            }))),
        )
        .then(
            "snapshot_page",
            Ok(ToolOutput::new(json!({"outline": long, "url": SITE}))),
        );
    let user = ScriptedUser::default();
    let mut agent = Agent::new(config);
    let events = {
        let env = env(&model, &page, &user, &CharCounter, CancellationToken::new());
        futures::executor::block_on(
            run_agent_loop(&mut agent, ChatMessage::user("Read it"), env).collect::<Vec<_>>(),
        )
    };
    assert_eq!(last_stop(&events), StopReason::EndOfTurn);
    // The page was asked for no more than the cap allows.
    let executed = page.executed.borrow();
    assert_eq!(executed[0].args["max_chars"], json!(cap * 4));
    assert_eq!(executed[1].args["max_tokens"], json!(cap));
    // What the model saw of each output fits the cap, and the read says where to go on.
    let seen = &model.seen.borrow()[1];
    let outputs: Vec<&ChatMessage> = seen.iter().filter(|m| m.tool_response.is_some()).collect();
    assert_eq!(outputs.len(), 2);
    for output in &outputs {
        let n = CharCounter.count_message(output);
        assert!(n <= cap && n > cap * 3 / 4, "{n} tokens");
    }
    let read = &outputs[0].tool_response.as_ref().unwrap().response["page_data"];
    let kept = read["content"].as_str().unwrap().chars().count();
    assert!(kept < returned);
    assert_eq!(read["next_offset"], json!(kept));
    assert_eq!(read["remaining_chars"], json!(returned + 10 - kept));
    let snapshot = &outputs[1].tool_response.as_ref().unwrap().response["page_data"];
    assert!(
        snapshot["outline"]
            .as_str()
            .unwrap()
            .contains("more characters cut to fit the model's context")
    );
}
