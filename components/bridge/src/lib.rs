//! Agent data -> UI data, for the extension's overlay and the embeddable widget: the agent's
//! events become reducer actions, model reports become status and errors, and a saved
//! conversation becomes the UI's message list. Pure functions, tested natively.

use gg_agent::{
    AgentError, AgentEvent, ChatMessage as AgentMessage, Role as AgentRole, StopReason,
};
use gg_components::{
    Action, ChatMessage, ErrorKind, ModelChoice, ModelStatus, ToolState, ToolStep, UiError,
};
use gg_messages::{ModelErrorKind, ModelReport, ModelState};

/// Longest result preview shown in the tool timeline.
const PREVIEW_CHARS: usize = 280;

fn preview(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= PREVIEW_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(PREVIEW_CHARS).collect();
    cut.push('…');
    cut
}

fn args_value(args: &serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    serde_json::Value::Object(args.clone())
}

/// The UI actions for one agent event.
pub fn event_actions(event: AgentEvent) -> Vec<Action> {
    match event {
        AgentEvent::Token { text } => vec![Action::Token { text }],
        AgentEvent::Thinking { text } => vec![Action::Thinking { text }],
        AgentEvent::ToolStart { call_id, call, .. } => {
            let mut step = ToolStep::new(call_id.to_string(), call.name, args_value(&call.args));
            step.state = ToolState::Running;
            vec![Action::ToolStarted { step }]
        }
        AgentEvent::AwaitingApproval { request } => {
            // run_javascript's code is shown in full: the user approves exactly what runs.
            let code = (request.call.name == "run_javascript")
                .then(|| request.call.args.get("code").and_then(|c| c.as_str()))
                .flatten()
                .map(str::to_owned);
            vec![
                Action::ApprovalRequested {
                    call_id: request.call_id.to_string(),
                    reason: request.summary,
                },
                Action::ApprovalOptions {
                    call_id: request.call_id.to_string(),
                    allow_always: request.allow_always,
                    for_task: true,
                    code,
                },
            ]
        }
        AgentEvent::PermissionGranted { .. } => Vec::new(),
        AgentEvent::ToolResult {
            call_id, output, ..
        } => {
            let screenshot = output.images.first().map(|img| img.data_url());
            vec![Action::ToolFinished {
                call_id: call_id.to_string(),
                ok: true,
                duration_ms: None,
                result_preview: Some(preview(&output.value)),
                screenshot,
            }]
        }
        AgentEvent::ToolError {
            call_id,
            name,
            error,
        } => {
            // Errors of calls that never started (unknown tool, malformed call) have no step yet.
            let mut step = ToolStep::new(
                call_id.to_string(),
                name.unwrap_or_else(|| "(malformed call)".into()),
                serde_json::Value::Null,
            );
            step.state = ToolState::Failed;
            step.result_preview = Some(error.message.clone());
            vec![
                Action::ToolUpdated { step },
                Action::ToolFinished {
                    call_id: call_id.to_string(),
                    ok: false,
                    duration_ms: None,
                    result_preview: Some(error.message),
                    screenshot: None,
                },
            ]
        }
        AgentEvent::Done { reason } => match reason {
            StopReason::EndOfTurn | StopReason::Cancelled => vec![Action::TurnFinished],
            other => vec![
                Action::Token {
                    text: format!("\n\n_{other}_"),
                },
                Action::TurnFinished,
            ],
        },
        AgentEvent::Error { error } => {
            let kind = match &error {
                AgentError::Backend(gg_agent::BackendError::NotReady { .. }) => {
                    ErrorKind::ModelLoadFailed
                }
                _ => ErrorKind::GenerationFailed,
            };
            vec![Action::ShowError {
                error: UiError::new(kind, error.to_string()),
            }]
        }
    }
}

/// The UI actions for a model report, in the overlay of tab `tab` (`None` until it knows its
/// tab): every overlay shows the model's status; a failure is shown as an error in the overlay
/// of the tab that asked (and in every overlay when no tab asked, e.g. the GPU was lost).
pub fn model_actions(report: ModelReport, tab: Option<i64>) -> Vec<Action> {
    let model = if report.model_size.eq_ignore_ascii_case("E4B") {
        ModelChoice::E4b
    } else {
        ModelChoice::E2b
    };
    let status = |status| Action::SetModelStatus { status };
    match report.state {
        ModelState::NotLoaded => vec![status(ModelStatus::NotLoaded)],
        ModelState::Downloading(p) => vec![status(ModelStatus::Downloading {
            model,
            loaded_bytes: p.loaded_bytes,
            total_bytes: p.total_bytes,
            bytes_per_second: p.bytes_per_second,
        })],
        ModelState::Initializing { .. } => vec![status(ModelStatus::Initializing { model })],
        ModelState::Ready { unverified, .. } => {
            vec![status(ModelStatus::Ready { model, unverified })]
        }
        ModelState::Failed {
            tab_id,
            kind,
            message,
        } => {
            let mut out = vec![status(ModelStatus::NotLoaded)];
            if tab_id.is_none() || tab_id == tab {
                let kind = match kind {
                    ModelErrorKind::WebgpuUnavailable => ErrorKind::WebGpuUnavailable,
                    ModelErrorKind::DownloadFailed => ErrorKind::DownloadFailed,
                    ModelErrorKind::OutOfSpace => ErrorKind::OutOfMemory,
                    ModelErrorKind::LoadFailed => ErrorKind::ModelLoadFailed,
                    ModelErrorKind::DeviceLost => ErrorKind::GenerationFailed,
                };
                out.push(Action::ShowError {
                    error: UiError::new(kind, message),
                });
            }
            out
        }
    }
}

/// The UI's message list for a saved agent conversation. Model messages of one turn (before and
/// after tool calls) become one assistant message with its tool steps.
/// [`conversation`], followed by `notice` (why the last turn stopped) as a closing line of the
/// last answer, or as an answer of its own when there is none.
pub fn conversation_with_notice(
    messages: &[AgentMessage],
    notice: Option<&str>,
) -> Vec<ChatMessage> {
    let mut out = conversation(messages);
    if let Some(notice) = notice {
        let line = format!("_{notice}_");
        match out.last_mut() {
            Some(last) if last.role == gg_components::Role::Model => {
                if !last.text.is_empty() {
                    last.text.push_str("\n\n");
                }
                last.text.push_str(&line);
            }
            _ => out.push(ChatMessage::assistant(out.len() as u64 + 1, line)),
        }
    }
    out
}

pub fn conversation(messages: &[AgentMessage]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    let mut in_turn = false;
    let mut step_id = 0u64;
    for m in messages {
        match m.role {
            AgentRole::System => {}
            AgentRole::User => {
                out.push(ChatMessage::user_with_images(
                    out.len() as u64 + 1,
                    m.text(),
                    m.images().cloned().collect(),
                ));
                in_turn = false;
            }
            AgentRole::Model => {
                if !in_turn
                    || !matches!(out.last(), Some(last) if last.role == gg_components::Role::Model)
                {
                    out.push(ChatMessage::assistant(out.len() as u64 + 1, String::new()));
                    in_turn = true;
                }
                if let Some(last) = out.last_mut() {
                    last.text.push_str(&m.text());
                    if let Some(thinking) = &m.thinking {
                        last.thinking.push_str(thinking);
                    }
                    for call in &m.tool_calls {
                        step_id += 1;
                        let mut step = ToolStep::new(
                            format!("restored-{step_id}"),
                            call.name.clone(),
                            args_value(&call.args),
                        );
                        step.state = ToolState::Done;
                        last.tools.push(step);
                    }
                }
            }
            AgentRole::Tool => {
                let Some(response) = &m.tool_response else {
                    continue;
                };
                let Some(last) = out.last_mut() else { continue };
                // The first step of that tool still without a result.
                if let Some(step) = last
                    .tools
                    .iter_mut()
                    .find(|s| s.tool == response.name && s.result_preview.is_none())
                {
                    let failed = response.response.get("error").is_some();
                    step.state = if failed {
                        ToolState::Failed
                    } else {
                        ToolState::Done
                    };
                    step.result_preview = Some(preview(&response.response));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gg_agent::{ToolCall, ToolOutput};
    use serde_json::json;

    fn report(state: ModelState) -> ModelReport {
        ModelReport {
            seq: 1,
            epoch: 1,
            model_size: "E2B".into(),
            source: "http://x/m".into(),
            state,
        }
    }

    #[test]
    fn a_notice_closes_the_restored_conversation() {
        let ui = conversation_with_notice(
            &[AgentMessage::user("Go"), AgentMessage::model("Clicking.")],
            Some("The page changed — the task was stopped"),
        );
        assert_eq!(ui.len(), 2);
        assert_eq!(
            ui[1].text,
            "Clicking.\n\n_The page changed — the task was stopped_"
        );
        let alone = conversation_with_notice(&[AgentMessage::user("Go")], Some("Stopped"));
        assert_eq!(alone.len(), 2);
        assert_eq!(alone[1].text, "_Stopped_");
    }

    #[test]
    fn model_reports_become_status_and_errors_for_the_right_tab() {
        let a = model_actions(
            report(ModelState::Downloading(gg_messages::DownloadProgress {
                loaded_bytes: 5,
                total_bytes: 10,
                percent: 50.0,
                bytes_per_second: Some(2.0),
                eta_seconds: Some(2.5),
                files: Vec::new(),
            })),
            Some(1),
        );
        assert_eq!(
            a,
            vec![Action::SetModelStatus {
                status: ModelStatus::Downloading {
                    model: ModelChoice::E2b,
                    loaded_bytes: 5,
                    total_bytes: 10,
                    bytes_per_second: Some(2.0),
                }
            }]
        );
        let failed = |tab_id| {
            report(ModelState::Failed {
                tab_id,
                kind: ModelErrorKind::DownloadFailed,
                message: "cut".into(),
            })
        };
        let mine = model_actions(failed(Some(1)), Some(1));
        assert_eq!(mine.len(), 2);
        assert!(
            matches!(&mine[1], Action::ShowError { error } if error.kind == ErrorKind::DownloadFailed)
        );
        // Another tab's failure only resets the status here.
        assert_eq!(
            model_actions(failed(Some(2)), Some(1)),
            vec![Action::SetModelStatus {
                status: ModelStatus::NotLoaded
            }]
        );
        // A failure no tab asked for (the GPU was lost) shows everywhere.
        assert_eq!(model_actions(failed(None), Some(1)).len(), 2);
        let mut e4b = report(ModelState::Ready {
            dtype: "q4".into(),
            adapter: "a".into(),
            unverified: vec!["config.json".into()],
        });
        e4b.model_size = "E4B".into();
        assert_eq!(
            model_actions(e4b, None),
            vec![Action::SetModelStatus {
                status: ModelStatus::Ready {
                    model: ModelChoice::E4b,
                    unverified: vec!["config.json".into()],
                }
            }]
        );
    }

    fn call(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::new(name, args.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn events_become_actions() {
        let a = event_actions(AgentEvent::ToolStart {
            call_id: 3,
            call: call("click_element", json!({"ref": "e2"})),
            class: gg_agent::RiskClass::Act,
        });
        match &a[..] {
            [Action::ToolStarted { step }] => {
                assert_eq!(step.id, "3");
                assert_eq!(step.tool, "click_element");
                assert_eq!(step.state, ToolState::Running);
                assert_eq!(step.args, json!({"ref": "e2"}));
            }
            other => panic!("{other:?}"),
        }
        let a = event_actions(AgentEvent::ToolResult {
            call_id: 3,
            name: "click_element".into(),
            output: ToolOutput::new(json!("x".repeat(1000))),
        });
        match &a[..] {
            [
                Action::ToolFinished {
                    ok: true,
                    result_preview: Some(p),
                    ..
                },
            ] => assert_eq!(p.chars().count(), PREVIEW_CHARS + 1),
            other => panic!("{other:?}"),
        }
        let a = event_actions(AgentEvent::Done {
            reason: StopReason::MaxIterations { limit: 4 },
        });
        assert!(
            matches!(&a[..], [Action::Token { text }, Action::TurnFinished] if text.contains("4 model steps"))
        );
        assert_eq!(
            event_actions(AgentEvent::Done {
                reason: StopReason::EndOfTurn
            }),
            vec![Action::TurnFinished]
        );
    }

    #[test]
    fn saved_conversation_groups_a_turn() {
        let msgs = vec![
            AgentMessage::system("sys"),
            AgentMessage::user("Click go"),
            AgentMessage::model_with_calls(
                "Clicking. ",
                vec![call("click_element", json!({"ref": "e1"}))],
            ),
            AgentMessage::tool("click_element", json!({"clicked": true}), vec![]),
            AgentMessage::model("Done."),
            AgentMessage::user("Thanks"),
            AgentMessage::model("You're welcome."),
        ];
        let ui = conversation(&msgs);
        assert_eq!(ui.len(), 4);
        assert_eq!(ui[0].text, "Click go");
        assert_eq!(ui[1].text, "Clicking. Done.");
        assert_eq!(ui[1].tools.len(), 1);
        assert_eq!(ui[1].tools[0].state, ToolState::Done);
        assert_eq!(
            ui[1].tools[0].result_preview.as_deref(),
            Some("{\"clicked\":true}")
        );
        assert_eq!(ui[3].text, "You're welcome.");
        assert!(ui.iter().all(|m| !m.streaming));
    }
}
