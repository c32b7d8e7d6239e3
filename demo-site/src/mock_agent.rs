//! A scripted stand-in for the model and agent loop, so the live widget in the playground behaves
//! like the real thing: the first message "downloads" the model, then every turn thinks, reads the
//! page, asks to run JavaScript (approval), and streams an answer. Stop and New chat cancel it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use gg_components::*;
use gloo_timers::future::TimeoutFuture;
use serde_json::json;
use wasm_bindgen_futures::spawn_local;
use yew::prelude::*;

const MODEL_BYTES: u64 = 1_540_000_000;

#[derive(Default)]
struct Script {
    dispatcher: RefCell<Option<ChatDispatcher>>,
    /// Bumped on Stop / New chat; a running script stops when it changes.
    turn: Cell<u64>,
    model_ready: Cell<bool>,
    tool_calls: Cell<u64>,
}

impl Script {
    /// Sends an action if the turn is still current.
    fn send(&self, turn: u64, action: Action) -> bool {
        if self.turn.get() != turn {
            return false;
        }
        if let Some(d) = self.dispatcher.borrow().as_ref() {
            d.dispatch(action);
        }
        true
    }

    fn next_call_id(&self) -> String {
        let n = self.tool_calls.get() + 1;
        self.tool_calls.set(n);
        format!("call-{n}")
    }
}

async fn stream(script: &Script, turn: u64, text: &str, thinking: bool) -> bool {
    for word in text.split_inclusive(' ') {
        let action = if thinking {
            Action::Thinking {
                text: word.to_owned(),
            }
        } else {
            Action::Token {
                text: word.to_owned(),
            }
        };
        if !script.send(turn, action) {
            return false;
        }
        TimeoutFuture::new(45).await;
    }
    true
}

async fn load_model(script: &Script, turn: u64) -> bool {
    let model = ModelChoice::E2b;
    for step in 0..=40u64 {
        let status = ModelStatus::Downloading {
            model,
            loaded_bytes: MODEL_BYTES * step / 40,
            total_bytes: MODEL_BYTES,
            bytes_per_second: Some(MODEL_BYTES as f64 / 4.0),
        };
        if !script.send(turn, Action::SetModelStatus { status }) {
            return false;
        }
        TimeoutFuture::new(100).await;
    }
    script.send(
        turn,
        Action::SetModelStatus {
            status: ModelStatus::Initializing { model },
        },
    );
    TimeoutFuture::new(700).await;
    script.model_ready.set(true);
    script.send(
        turn,
        Action::SetModelStatus {
            status: ModelStatus::Ready {
                model,
                unverified: Vec::new(),
            },
        },
    )
}

async fn start_turn(script: Rc<Script>, turn: u64, question: String) {
    if !script.model_ready.get() && !load_model(&script, turn).await {
        return;
    }
    if !stream(
        &script,
        turn,
        "The user asks about this page. I'll read it first, then check the prices with a script.",
        true,
    )
    .await
    {
        return;
    }
    let read = script.next_call_id();
    let mut step = ToolStep::new(
        read.clone(),
        "read_page_content",
        json!({"max_chars": 4000}),
    );
    step.state = ToolState::Running;
    script.send(turn, Action::ToolStarted { step });
    TimeoutFuture::new(600).await;
    script.send(
        turn,
        Action::ToolFinished {
            call_id: read,
            ok: true,
            duration_ms: Some(84.0),
            result_preview: Some("Gemma Gem component playground — Launcher, Chat: empty, Chat: model download in progress, …".into()),
            screenshot: None,
        },
    );
    let run = script.next_call_id();
    let mut step = ToolStep::new(
        run.clone(),
        "run_javascript",
        json!({"code": "document.querySelectorAll('[data-specimen]').length"}),
    );
    step.state = ToolState::Pending;
    if !script.send(turn, Action::ToolStarted { step }) {
        return;
    }
    TimeoutFuture::new(300).await;
    script.send(
        turn,
        Action::ApprovalRequested {
            call_id: run,
            reason: format!(
                "To answer \u{201c}{}\u{201d}, Gemma Gem wants to run JavaScript on this page.",
                question
            ),
        },
    );
    // The turn continues in `after_approval` when the user answers.
}

async fn after_approval(
    script: Rc<Script>,
    turn: u64,
    call_id: String,
    decision: ApprovalDecision,
) {
    let answer = if decision == ApprovalDecision::Deny {
        "Understood — I did not run the script. From the text alone: this page shows **every Gemma Gem component**, in light and dark.\n\nAsk me something else, or try *Stop* while I type."
    } else {
        TimeoutFuture::new(400).await;
        if !script.send(
            turn,
            Action::ToolFinished {
                call_id,
                ok: true,
                duration_ms: Some(12.0),
                result_preview: Some("14".into()),
                screenshot: None,
            },
        ) {
            return;
        }
        "This page has **14 specimens**, each shown in light and dark:\n\n1. the launcher in every state\n2. the chat in every state (empty, downloading, streaming, tools, errors…)\n3. the settings panel\n\n```js\ndocument.querySelectorAll('[data-specimen]').length // 14\n```"
    };
    if stream(&script, turn, answer, false).await {
        script.send(turn, Action::TurnFinished);
    }
}

#[derive(Clone, Properties, PartialEq)]
pub struct MockAgentProps {
    /// Mount in a closed shadow root over the page (the playground). `false` renders in place
    /// (tests, which need to reach the DOM).
    #[prop_or(true)]
    pub shadow: bool,
}

/// The live widget: a [`GemApp`] in a closed shadow root over the page, answered by the script.
#[function_component(MockAgent)]
pub fn mock_agent(props: &MockAgentProps) -> Html {
    let script = use_memo((), |_| Script::default());
    let on_ready = {
        let script = script.clone();
        Callback::from(move |d: ChatDispatcher| {
            d.dispatch(Action::SetSite {
                site: Some("https://playground.gemma-gem.example".into()),
            });
            d.dispatch(Action::SetModels {
                models: vec![
                    ModelInfo {
                        model: ModelChoice::E2b,
                        download_bytes: MODEL_BYTES,
                        cached_bytes: None,
                    },
                    ModelInfo {
                        model: ModelChoice::E4b,
                        download_bytes: 3_100_000_000,
                        cached_bytes: None,
                    },
                ],
            });
            *script.dispatcher.borrow_mut() = Some(d);
        })
    };
    let on_intent = {
        let script = script.clone();
        Callback::from(move |intent: UiIntent| match intent {
            UiIntent::Send { text, .. } => {
                let turn = script.turn.get() + 1;
                script.turn.set(turn);
                spawn_local(start_turn(Rc::clone(&script), turn, text));
            }
            UiIntent::Approve { call_id, decision } => {
                spawn_local(after_approval(
                    Rc::clone(&script),
                    script.turn.get(),
                    call_id,
                    decision,
                ));
            }
            UiIntent::Stop | UiIntent::NewChat => script.turn.set(script.turn.get() + 1),
            UiIntent::ErrorAction { .. }
            | UiIntent::SettingsChanged { .. }
            | UiIntent::ClearModel { .. }
            | UiIntent::DisableSite { .. }
            | UiIntent::MoveLauncher { .. }
            | UiIntent::PanelToggled { .. } => {}
        })
    };
    if props.shadow {
        html! {
            <ShadowHost layer={HostLayer::Overlay}>
                <GemApp markdown={MarkdownParser::here()} {on_intent} {on_ready} />
            </ShadowHost>
        }
    } else {
        html! {
            <ThemeRoot>
                <GemApp markdown={MarkdownParser::here()} {on_intent} {on_ready} />
            </ThemeRoot>
        }
    }
}
