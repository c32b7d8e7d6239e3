//! The UI state and its reducer. Pure Rust (no DOM): hosts and tests drive it with [`Action`]s.
//!
//! Messages are kept as `Rc<ChatMessage>`: an action that changes the streaming message clones only
//! that one (`Rc::make_mut`), so earlier messages keep their pointer and their components skip
//! re-rendering.

use std::rc::Rc;

use serde::{Deserialize, Serialize};
use yew::Reducible;

use crate::launcher::LauncherStatus;
use crate::types::{
    ApprovalDecision, ChatMessage, Corner, ErrorKind, MessageId, ModelInfo, ModelStatus, Role,
    Settings, SitePermission, ToolState, ToolStep, UiError,
};

/// Which page of the panel is showing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    #[default]
    Chat,
    Settings,
}

/// Everything the UI shows.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ChatState {
    pub messages: Vec<Rc<ChatMessage>>,
    pub next_id: MessageId,
    /// An answer is being generated (Stop is offered).
    pub generating: bool,
    pub model: ModelStatus,
    /// Error banners, at most one per kind, newest last.
    pub errors: Vec<UiError>,
    pub settings: Settings,
    pub models: Vec<ModelInfo>,
    /// The site the UI is shown on (an origin), for "disable on this site" and approvals.
    pub site: Option<String>,
    pub panel_open: bool,
    pub view: View,
    pub corner: Corner,
}

/// Everything that changes the UI state. Host events (tokens, tool steps, model status, errors) and
/// the user's own actions go through the same reducer. Serde-tagged so hosts can send them across
/// contexts as they are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    /// The user sent a message: appends it and an empty, streaming assistant answer.
    UserSent {
        text: String,
        /// Images attached to the message.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::types::ImagePart>,
    },
    /// Answer text arrived.
    Token {
        text: String,
    },
    /// Thinking text arrived.
    Thinking {
        text: String,
    },
    /// A tool call started (or was announced); replaces a step with the same id.
    ToolStarted {
        step: ToolStep,
    },
    /// A tool call changed; replaces the step with the same id.
    ToolUpdated {
        step: ToolStep,
    },
    /// A tool call needs the user's approval.
    ApprovalRequested {
        call_id: String,
        reason: String,
    },
    /// What the approval card of a call offers: `allow_always` false hides "always on this
    /// site", `for_task` shows "for this task", `code` is shown in full.
    ApprovalOptions {
        call_id: String,
        allow_always: bool,
        for_task: bool,
        #[serde(default)]
        code: Option<String>,
    },
    /// The user answered an approval request.
    ApprovalAnswered {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// A tool call finished.
    ToolFinished {
        call_id: String,
        ok: bool,
        #[serde(default)]
        duration_ms: Option<f64>,
        #[serde(default)]
        result_preview: Option<String>,
        #[serde(default)]
        screenshot: Option<String>,
    },
    /// The model ended its turn.
    TurnFinished,
    /// The user stopped the answer.
    Stop,
    /// Forget the conversation.
    NewChat,
    /// Replace the conversation (restoring a saved one).
    LoadConversation {
        messages: Vec<ChatMessage>,
    },
    SetModelStatus {
        status: ModelStatus,
    },
    /// Show an error banner; ends a running answer.
    ShowError {
        error: UiError,
    },
    DismissError {
        kind: ErrorKind,
    },
    SetPanelOpen {
        open: bool,
    },
    SetView {
        view: View,
    },
    SetSettings {
        settings: Settings,
    },
    SetModels {
        models: Vec<ModelInfo>,
    },
    SetSite {
        site: Option<String>,
    },
    MoveLauncher {
        corner: Corner,
    },
}

impl ChatState {
    /// Applies one action in place.
    pub fn apply(&mut self, action: Action) {
        match action {
            Action::UserSent { text, images } => {
                let text = text.trim().to_owned();
                if text.is_empty() && images.is_empty() {
                    return;
                }
                self.finish_streaming(false);
                self.errors
                    .retain(|e| e.kind != ErrorKind::GenerationFailed);
                let id = self.take_id();
                self.messages
                    .push(Rc::new(ChatMessage::user_with_images(id, text, images)));
                let id = self.take_id();
                let mut answer = ChatMessage::assistant(id, "");
                answer.streaming = true;
                self.messages.push(Rc::new(answer));
                self.generating = true;
            }
            Action::Token { text } => self.streaming_answer().text.push_str(&text),
            Action::Thinking { text } => self.streaming_answer().thinking.push_str(&text),
            Action::ToolStarted { step } | Action::ToolUpdated { step } => {
                let answer = self.streaming_answer();
                match answer.tools.iter_mut().find(|s| s.id == step.id) {
                    Some(existing) => *existing = step,
                    None => answer.tools.push(step),
                }
            }
            Action::ApprovalRequested { call_id, reason } => {
                self.update_step(&call_id, |s| {
                    s.state = ToolState::AwaitingApproval;
                    s.approval_reason = Some(reason);
                });
            }
            Action::ApprovalOptions {
                call_id,
                allow_always,
                for_task,
                code,
            } => {
                self.update_step(&call_id, |s| {
                    s.approval_no_always = !allow_always;
                    s.approval_for_task = for_task;
                    s.approval_code = code;
                });
            }
            Action::ApprovalAnswered { call_id, decision } => {
                let mut tool = None;
                self.update_step(&call_id, |s| {
                    if s.state != ToolState::AwaitingApproval {
                        return;
                    }
                    tool = Some(s.tool.clone());
                    match decision {
                        ApprovalDecision::Deny => {
                            s.state = ToolState::Failed;
                            s.result_preview = Some("Denied by you.".to_owned());
                        }
                        ApprovalDecision::AllowOnce
                        | ApprovalDecision::AlwaysOnSite
                        | ApprovalDecision::AllowForTask => {
                            s.state = ToolState::Running;
                        }
                    }
                });
                if let (ApprovalDecision::AlwaysOnSite, Some(tool), Some(site)) =
                    (decision, tool, self.site.clone())
                {
                    let perms = &mut self.settings.site_permissions;
                    perms.retain(|p| !(p.site == site && p.tool == tool));
                    perms.push(SitePermission {
                        site,
                        tool,
                        allowed: true,
                    });
                }
            }
            Action::ToolFinished {
                call_id,
                ok,
                duration_ms,
                result_preview,
                screenshot,
            } => {
                self.update_step(&call_id, |s| {
                    s.state = if ok {
                        ToolState::Done
                    } else {
                        ToolState::Failed
                    };
                    s.duration_ms = duration_ms.or(s.duration_ms);
                    if result_preview.is_some() {
                        s.result_preview = result_preview;
                    }
                    if screenshot.is_some() {
                        s.screenshot = screenshot;
                    }
                });
            }
            Action::TurnFinished => self.finish_streaming(false),
            Action::Stop => self.finish_streaming(true),
            Action::NewChat => {
                self.messages.clear();
                self.generating = false;
                self.errors
                    .retain(|e| e.kind != ErrorKind::GenerationFailed);
                self.view = View::Chat;
            }
            Action::LoadConversation { messages } => {
                self.next_id = messages
                    .iter()
                    .map(|m| m.id + 1)
                    .max()
                    .unwrap_or(0)
                    .max(self.next_id);
                self.messages = messages.into_iter().map(Rc::new).collect();
                self.generating = self.messages.iter().any(|m| m.streaming);
            }
            Action::SetModelStatus { status } => {
                if matches!(status, ModelStatus::Ready { .. }) {
                    self.errors.retain(|e| {
                        !matches!(
                            e.kind,
                            ErrorKind::DownloadFailed
                                | ErrorKind::ModelLoadFailed
                                | ErrorKind::OutOfMemory
                        )
                    });
                }
                self.model = status;
            }
            Action::ShowError { error } => {
                self.finish_streaming(false);
                self.errors.retain(|e| e.kind != error.kind);
                self.errors.push(error);
            }
            Action::DismissError { kind } => self.errors.retain(|e| e.kind != kind),
            Action::SetPanelOpen { open } => self.panel_open = open,
            Action::SetView { view } => self.view = view,
            Action::SetSettings { settings } => self.settings = settings,
            Action::SetModels { models } => self.models = models,
            Action::SetSite { site } => self.site = site,
            Action::MoveLauncher { corner } => self.corner = corner,
        }
    }

    /// What the launcher's status dot shows.
    pub fn launcher_status(&self) -> LauncherStatus {
        if !self.errors.is_empty() {
            return LauncherStatus::Error;
        }
        if self.model.is_loading() {
            return LauncherStatus::Loading;
        }
        if self.generating {
            let acting = self.messages.last().is_some_and(|m| {
                m.tools
                    .iter()
                    .any(|t| matches!(t.state, ToolState::Running | ToolState::AwaitingApproval))
            });
            return if acting {
                LauncherStatus::Acting
            } else {
                LauncherStatus::Thinking
            };
        }
        LauncherStatus::Idle
    }

    /// Tool calls waiting for the user.
    pub fn pending_approvals(&self) -> impl Iterator<Item = &ToolStep> {
        self.messages
            .iter()
            .flat_map(|m| m.tools.iter())
            .filter(|t| t.state == ToolState::AwaitingApproval)
    }

    fn take_id(&mut self) -> MessageId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The assistant message being streamed, created if the host starts a turn on its own.
    fn streaming_answer(&mut self) -> &mut ChatMessage {
        let needs_new = !self
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Model && m.streaming);
        if needs_new {
            let id = self.take_id();
            let mut answer = ChatMessage::assistant(id, "");
            answer.streaming = true;
            self.messages.push(Rc::new(answer));
        }
        self.generating = true;
        let last = self.messages.len() - 1;
        Rc::make_mut(&mut self.messages[last])
    }

    /// Updates the step with `call_id`, searching from the newest message; earlier messages are
    /// cloned only if they hold the step.
    fn update_step(&mut self, call_id: &str, f: impl FnOnce(&mut ToolStep)) {
        let Some(index) = self
            .messages
            .iter()
            .rposition(|m| m.tools.iter().any(|t| t.id == call_id))
        else {
            return;
        };
        let message = Rc::make_mut(&mut self.messages[index]);
        if let Some(step) = message.tools.iter_mut().find(|t| t.id == call_id) {
            f(step);
        }
    }

    /// Ends the streaming answer; `stopped` marks it as cut short and fails unfinished tool calls.
    fn finish_streaming(&mut self, stopped: bool) {
        self.generating = false;
        let Some(last) = self.messages.last_mut() else {
            return;
        };
        if !last.streaming {
            return;
        }
        let message = Rc::make_mut(last);
        message.streaming = false;
        message.stopped = stopped;
        for step in &mut message.tools {
            if !step.state.is_finished() {
                step.state = ToolState::Failed;
                step.result_preview =
                    Some(if stopped { "Stopped." } else { "Not finished." }.to_owned());
            }
        }
    }
}

impl Reducible for ChatState {
    type Action = Action;

    fn reduce(self: Rc<Self>, action: Action) -> Rc<Self> {
        let mut next = Rc::unwrap_or_clone(self);
        next.apply(action);
        Rc::new(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ErrorAction, ModelChoice};
    use serde_json::json;

    fn sent(text: &str) -> ChatState {
        let mut s = ChatState::default();
        s.apply(Action::UserSent {
            text: text.into(),
            images: Vec::new(),
        });
        s
    }

    #[test]
    fn user_sent_appends_user_message_and_streaming_answer() {
        let s = sent("  hello  ");
        assert_eq!(s.messages.len(), 2);
        assert_eq!(s.messages[0].role, Role::User);
        assert_eq!(s.messages[0].text, "hello");
        assert_eq!(s.messages[1].role, Role::Model);
        assert!(s.messages[1].streaming);
        assert!(s.generating);
        assert_eq!(s.messages[0].id, 0);
        assert_eq!(s.messages[1].id, 1);
    }

    #[test]
    fn blank_message_is_ignored() {
        let mut s = ChatState::default();
        s.apply(Action::UserSent {
            text: " \n ".into(),
            images: Vec::new(),
        });
        assert!(s.messages.is_empty());
        assert!(!s.generating);
    }

    #[test]
    fn tokens_append_and_keep_earlier_messages_shared() {
        let mut s = sent("hi");
        s.apply(Action::Token { text: "Hel".into() });
        let user_before = Rc::clone(&s.messages[0]);
        s.apply(Action::Token { text: "lo".into() });
        s.apply(Action::Thinking { text: "hmm".into() });
        assert_eq!(s.messages[1].text, "Hello");
        assert_eq!(s.messages[1].thinking, "hmm");
        assert!(
            Rc::ptr_eq(&user_before, &s.messages[0]),
            "the user message must not be cloned"
        );
    }

    #[test]
    fn reducer_does_not_mutate_previous_state() {
        let before = Rc::new(sent("hi"));
        let after = Rc::clone(&before).reduce(Action::Token { text: "x".into() });
        assert_eq!(before.messages[1].text, "");
        assert_eq!(after.messages[1].text, "x");
        assert!(Rc::ptr_eq(&before.messages[0], &after.messages[0]));
    }

    #[test]
    fn token_without_user_message_starts_an_answer() {
        let mut s = ChatState::default();
        s.apply(Action::Token { text: "Hi".into() });
        assert_eq!(s.messages.len(), 1);
        assert_eq!(s.messages[0].role, Role::Model);
        assert!(s.generating);
    }

    #[test]
    fn tool_lifecycle_with_approval() {
        let mut s = sent("buy it");
        s.site = Some("https://shop.example".into());
        s.apply(Action::ToolStarted {
            step: ToolStep::new("c1", "run_javascript", json!({"code": "1+1"})),
        });
        s.apply(Action::ApprovalRequested {
            call_id: "c1".into(),
            reason: "Runs code on the page".into(),
        });
        assert_eq!(s.messages[1].tools[0].state, ToolState::AwaitingApproval);
        assert_eq!(s.launcher_status(), LauncherStatus::Acting);
        assert_eq!(s.pending_approvals().count(), 1);
        s.apply(Action::ApprovalAnswered {
            call_id: "c1".into(),
            decision: ApprovalDecision::AlwaysOnSite,
        });
        assert_eq!(s.messages[1].tools[0].state, ToolState::Running);
        assert_eq!(
            s.settings.site_permissions,
            vec![SitePermission {
                site: "https://shop.example".into(),
                tool: "run_javascript".into(),
                allowed: true
            }]
        );
        s.apply(Action::ToolFinished {
            call_id: "c1".into(),
            ok: true,
            duration_ms: Some(12.0),
            result_preview: Some("2".into()),
            screenshot: None,
        });
        let step = &s.messages[1].tools[0];
        assert_eq!(step.state, ToolState::Done);
        assert_eq!(step.duration_ms, Some(12.0));
        assert_eq!(step.result_preview.as_deref(), Some("2"));
        assert_eq!(s.launcher_status(), LauncherStatus::Thinking);
    }

    #[test]
    fn deny_fails_the_step_and_answer_twice_is_ignored() {
        let mut s = sent("x");
        s.apply(Action::ToolStarted {
            step: ToolStep::new("c1", "type_text", json!({})),
        });
        s.apply(Action::ApprovalRequested {
            call_id: "c1".into(),
            reason: "Password field".into(),
        });
        s.apply(Action::ApprovalAnswered {
            call_id: "c1".into(),
            decision: ApprovalDecision::Deny,
        });
        assert_eq!(s.messages[1].tools[0].state, ToolState::Failed);
        s.apply(Action::ApprovalAnswered {
            call_id: "c1".into(),
            decision: ApprovalDecision::AllowOnce,
        });
        assert_eq!(
            s.messages[1].tools[0].state,
            ToolState::Failed,
            "a late answer must not revive it"
        );
    }

    #[test]
    fn stop_ends_streaming_and_fails_unfinished_tools() {
        let mut s = sent("x");
        s.apply(Action::ToolStarted {
            step: ToolStep::new("c1", "click_element", json!({"ref": 3})),
        });
        s.apply(Action::Stop);
        assert!(!s.generating);
        assert!(!s.messages[1].streaming);
        assert!(s.messages[1].stopped);
        assert_eq!(s.messages[1].tools[0].state, ToolState::Failed);
        assert_eq!(s.launcher_status(), LauncherStatus::Idle);
    }

    #[test]
    fn turn_finished_is_not_stopped() {
        let mut s = sent("x");
        s.apply(Action::Token {
            text: "done".into(),
        });
        s.apply(Action::TurnFinished);
        assert!(!s.messages[1].streaming);
        assert!(!s.messages[1].stopped);
        assert!(!s.generating);
    }

    #[test]
    fn errors_replace_same_kind_end_generation_and_dismiss() {
        let mut s = sent("x");
        s.apply(Action::ShowError {
            error: UiError::new(ErrorKind::GenerationFailed, "a"),
        });
        s.apply(Action::ShowError {
            error: UiError::new(ErrorKind::GenerationFailed, "b"),
        });
        assert_eq!(s.errors.len(), 1);
        assert_eq!(s.errors[0].detail, "b");
        assert!(!s.generating);
        assert_eq!(s.launcher_status(), LauncherStatus::Error);
        s.apply(Action::DismissError {
            kind: ErrorKind::GenerationFailed,
        });
        assert!(s.errors.is_empty());
        // Sending again also clears a generation error.
        s.apply(Action::ShowError {
            error: UiError::new(ErrorKind::GenerationFailed, "c"),
        });
        s.apply(Action::UserSent {
            text: "again".into(),
            images: Vec::new(),
        });
        assert!(s.errors.is_empty());
    }

    #[test]
    fn ready_model_clears_download_errors() {
        let mut s = ChatState::default();
        s.apply(Action::ShowError {
            error: UiError::new(ErrorKind::DownloadFailed, "net"),
        });
        s.apply(Action::ShowError {
            error: UiError::new(ErrorKind::WebGpuUnavailable, ""),
        });
        s.apply(Action::SetModelStatus {
            status: ModelStatus::Ready {
                model: ModelChoice::E2b,
                unverified: Vec::new(),
            },
        });
        assert_eq!(s.errors.len(), 1);
        assert_eq!(s.errors[0].kind, ErrorKind::WebGpuUnavailable);
    }

    #[test]
    fn loading_model_shows_loading_status() {
        let mut s = ChatState::default();
        s.apply(Action::SetModelStatus {
            status: ModelStatus::Downloading {
                model: ModelChoice::E4b,
                loaded_bytes: 1,
                total_bytes: 4,
                bytes_per_second: None,
            },
        });
        assert_eq!(s.launcher_status(), LauncherStatus::Loading);
    }

    #[test]
    fn new_chat_and_load_conversation() {
        let mut s = sent("x");
        s.apply(Action::SetView {
            view: View::Settings,
        });
        s.apply(Action::NewChat);
        assert!(s.messages.is_empty());
        assert_eq!(s.view, View::Chat);
        s.apply(Action::LoadConversation {
            messages: vec![ChatMessage::user(7, "a"), ChatMessage::assistant(9, "b")],
        });
        assert_eq!(s.messages.len(), 2);
        s.apply(Action::UserSent {
            text: "c".into(),
            images: Vec::new(),
        });
        assert_eq!(s.messages[2].id, 10, "ids continue after restored ones");
    }

    #[test]
    fn actions_round_trip_through_json() {
        let actions = vec![
            Action::UserSent {
                text: "hi".into(),
                images: Vec::new(),
            },
            Action::ToolStarted {
                step: ToolStep::new("c", "scroll_page", json!({"dy": 400})),
            },
            Action::ShowError {
                error: UiError::new(ErrorKind::OutOfMemory, "4 GB needed"),
            },
            Action::SetModelStatus {
                status: ModelStatus::Downloading {
                    model: ModelChoice::E2b,
                    loaded_bytes: 5,
                    total_bytes: 10,
                    bytes_per_second: Some(2.0),
                },
            },
            Action::SetSettings {
                settings: Settings::default(),
            },
        ];
        for action in actions {
            let json = serde_json::to_string(&action).expect("serialize");
            let back: Action = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, action, "{json}");
        }
        let json = serde_json::to_value(Action::Token { text: "x".into() }).expect("serialize");
        assert_eq!(json, json!({"type": "token", "text": "x"}));
        let intent = crate::types::UiIntent::ErrorAction {
            kind: ErrorKind::WebGpuUnavailable,
            action: ErrorAction::WebGpuHelp,
        };
        assert_eq!(
            serde_json::to_value(intent).expect("serialize"),
            json!({"type": "error_action", "kind": "webgpu_unavailable", "action": "webgpu_help"})
        );
    }
}
