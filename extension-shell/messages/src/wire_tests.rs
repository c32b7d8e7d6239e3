//! Wire compatibility: every variant of every channel enum serialises to exactly the JSON the
//! single `Body` enum of earlier versions wrote (the expected strings are written by hand from
//! it), parses back from it, and a `type` of another channel (or none of ours) is an error.

use super::*;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Serialises `value`, compares with `expected` byte for byte, and parses `expected` back.
fn wire<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: T, expected: &str) {
    assert_eq!(serde_json::to_string(&value).unwrap(), expected);
    assert_eq!(
        serde_json::from_str::<T>(expected).unwrap(),
        value,
        "{expected}"
    );
}

/// `body` is refused by the enum `T`.
fn refused<T: DeserializeOwned + std::fmt::Debug>(body: serde_json::Value) {
    let env = json!({"protocol": PROTOCOL, "id": 1, "from": "overlay", "body": body});
    assert!(
        matches!(
            Envelope::<T>::from_json(env),
            Err(MessageError::Malformed(_))
        ),
        "{body} accepted as {}",
        std::any::type_name::<T>()
    );
    assert!(serde_json::from_value::<T>(body).is_err());
}

fn call() -> gg_agent::ToolCall {
    gg_agent::ToolCall::new(
        "click_element",
        json!({"ref": "e3"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn stale() -> gg_agent::ToolError {
    gg_agent::ToolError::new(gg_agent::ToolErrorKind::StaleRef, "gone")
}

fn report() -> ModelReport {
    ModelReport {
        seq: 1,
        epoch: 2,
        model_size: "E2B".into(),
        source: "s".into(),
        state: ModelState::NotLoaded,
    }
}
const REPORT: &str =
    r#""seq":1,"epoch":2,"model_size":"E2B","source":"s","state":{"phase":"not_loaded"}"#;

fn stored() -> StoredModel {
    StoredModel {
        repository: "r".into(),
        stored_bytes: 1,
        total_bytes: 2,
        files: 3,
        complete_files: 1,
    }
}
const STORED: &str =
    r#"{"repository":"r","stored_bytes":1,"total_bytes":2,"files":3,"complete_files":1}"#;

fn conversation() -> ConversationView {
    ConversationView {
        tab_id: 4,
        messages: vec![gg_agent::ChatMessage::user("hi")],
        running: true,
        notice: None,
    }
}
const CONVERSATION: &str = r#"{"type":"conversation","tab_id":4,"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}],"running":true,"notice":null}"#;

fn status() -> StatusReport {
    StatusReport {
        offscreen_alive: true,
        adapter: None,
    }
}
const STATUS: &str = r#"{"type":"status","offscreenAlive":true,"adapter":null}"#;

#[test]
fn overlay_requests() {
    use OverlayRequest::*;
    wire(
        ActivateOverlay { token: "ab".into() },
        r#"{"type":"activate_overlay","token":"ab"}"#,
    );
    wire(
        ChatSend {
            text: "hi".into(),
            images: Vec::new(),
        },
        r#"{"type":"chat_send","text":"hi"}"#,
    );
    wire(
        ChatSend {
            text: "".into(),
            images: vec![gg_agent::ImagePart::png(vec![137, 80, 78, 71])],
        },
        r#"{"type":"chat_send","text":"","images":[{"mime_type":"image/png","data":"iVBORw=="}]}"#,
    );
    wire(ChatStop, r#"{"type":"chat_stop"}"#);
    wire(ChatNew, r#"{"type":"chat_new"}"#);
    wire(
        ChatApproval {
            call_id: 1,
            nonce: "00".into(),
            decision: gg_agent::ApprovalDecision::AllowOnce,
        },
        r#"{"type":"chat_approval","call_id":1,"nonce":"00","decision":"allow_once"}"#,
    );
    wire(GetConversation, r#"{"type":"get_conversation"}"#);
    wire(GetPageSite, r#"{"type":"get_page_site"}"#);
    wire(
        SaveSettings {
            settings: Settings {
                model_source: "https://m.example".into(),
                ..Settings::default()
            },
        },
        r#"{"type":"save_settings","settings":{"modelSize":"E2B","thinking":false,"maxIterations":10,"temperature":1.0,"modelSource":"https://m.example","confirmedHttpMirror":"","imageTokens":280,"constrainToolCalls":true}}"#,
    );
    // Settings stored before constrainToolCalls existed read as on.
    let old: Settings = serde_json::from_str(
        r#"{"modelSize":"E2B","thinking":false,"maxIterations":10,"temperature":1.0,"modelSource":"https://m.example","confirmedHttpMirror":"","imageTokens":280}"#,
    )
    .expect("old settings");
    assert!(old.constrain_tool_calls);
    wire(
        SetSiteDisabled {
            site: "https://a.example".into(),
            disabled: true,
        },
        r#"{"type":"set_site_disabled","site":"https://a.example","disabled":true}"#,
    );
    wire(
        GrantSitePermission {
            site: "https://a.example".into(),
            permission: gg_agent::Permission::SubmitForm,
        },
        r#"{"type":"grant_site_permission","site":"https://a.example","permission":"submit_form"}"#,
    );
    wire(
        RevokeSitePermission {
            site: "https://a.example".into(),
            permission: gg_agent::Permission::SubmitForm,
        },
        r#"{"type":"revoke_site_permission","site":"https://a.example","permission":"submit_form"}"#,
    );
    wire(ClosePanel, r#"{"type":"close_panel"}"#);
    wire(GetModelStatus, r#"{"type":"get_model_status"}"#);
    wire(
        GetStoredModels {
            repositories: vec!["r".into()],
        },
        r#"{"type":"get_stored_models","repositories":["r"]}"#,
    );
    wire(
        ClearModel {
            repository: "r".into(),
        },
        r#"{"type":"clear_model","repository":"r"}"#,
    );
    wire(GetStatus, r#"{"type":"get_status"}"#);
}

#[test]
fn overlay_answers() {
    use OverlayAnswer::*;
    wire(Ack, r#"{"type":"ack"}"#);
    wire(
        Error {
            message: "no".into(),
        },
        r#"{"type":"error","message":"no"}"#,
    );
    wire(Status(status()), STATUS);
    wire(Conversation(conversation()), CONVERSATION);
    wire(
        Site {
            site: "https://a.example".into(),
        },
        r#"{"type":"site","site":"https://a.example"}"#,
    );
    wire(
        ModelStatus(report()),
        &format!(r#"{{"type":"model_status",{REPORT}}}"#),
    );
    wire(
        StoredModels {
            models: vec![stored()],
        },
        &format!(r#"{{"type":"stored_models","models":[{STORED}]}}"#),
    );
}

#[test]
fn content_requests_and_answers() {
    wire(
        ContentRequest::OverlayTokenRequest,
        r#"{"type":"overlay_token_request"}"#,
    );
    wire(
        ContentRequest::ContentCrashed {
            detail: "boom".into(),
        },
        r#"{"type":"content_crashed","detail":"boom"}"#,
    );
    wire(ContentRequest::GetStatus, r#"{"type":"get_status"}"#);
    wire(ContentAnswer::Ack, r#"{"type":"ack"}"#);
    wire(
        ContentAnswer::Error {
            message: "no".into(),
        },
        r#"{"type":"error","message":"no"}"#,
    );
    wire(ContentAnswer::Status(status()), STATUS);
    wire(
        ContentAnswer::OverlayToken { token: "ab".into() },
        r#"{"type":"overlay_token","token":"ab"}"#,
    );
}

#[test]
fn offscreen_requests_and_answers() {
    use OffscreenRequest::*;
    wire(OffscreenReady, r#"{"type":"offscreen_ready"}"#);
    wire(
        AdapterReport(crate::AdapterReport {
            webgpu_available: false,
            adapter: None,
            error: Some("no".into()),
        }),
        r#"{"type":"adapter_report","webgpuAvailable":false,"adapter":null,"error":"no"}"#,
    );
    wire(
        TabToolCall {
            tab_id: 4,
            document_id: "D".into(),
            call_id: "c1".into(),
            call: call(),
        },
        r#"{"type":"tab_tool_call","tab_id":4,"document_id":"D","call_id":"c1","call":{"name":"click_element","args":{"ref":"e3"}}}"#,
    );
    wire(
        TabElementFacts {
            tab_id: 4,
            document_id: "D".into(),
            target: gg_agent::ElementTarget::Ref("e1".into()),
        },
        r#"{"type":"tab_element_facts","tab_id":4,"document_id":"D","target":{"ref":"e1"}}"#,
    );
    wire(
        TabSite {
            tab_id: 4,
            document_id: "D".into(),
        },
        r#"{"type":"tab_site","tab_id":4,"document_id":"D"}"#,
    );
    wire(
        ConversationSnapshot {
            tab_id: 4,
            origin: "https://a.example".into(),
            messages: vec![],
        },
        r#"{"type":"conversation_snapshot","tab_id":4,"origin":"https://a.example","messages":[]}"#,
    );
    wire(GetStatus, r#"{"type":"get_status"}"#);

    wire(OffscreenAnswer::Ack, r#"{"type":"ack"}"#);
    wire(
        OffscreenAnswer::Error {
            message: "no".into(),
        },
        r#"{"type":"error","message":"no"}"#,
    );
    wire(OffscreenAnswer::Status(status()), STATUS);
    wire(
        OffscreenAnswer::ToolOutcome {
            call_id: "c1".into(),
            result: Ok(gg_agent::ToolOutput::new(json!({"clicked": true}))),
        },
        r#"{"type":"tool_outcome","call_id":"c1","result":{"Ok":{"value":{"clicked":true}}}}"#,
    );
    wire(
        OffscreenAnswer::ElementFacts {
            result: Err(stale()),
        },
        r#"{"type":"element_facts","result":{"Err":{"kind":"stale_ref","message":"gone"}}}"#,
    );
    wire(
        OffscreenAnswer::Site {
            site: "https://a.example".into(),
        },
        r#"{"type":"site","site":"https://a.example"}"#,
    );
}

#[test]
fn offscreen_commands_and_replies() {
    use OffscreenCommand::*;
    wire(Ping, r#"{"type":"ping"}"#);
    wire(
        RunTurn {
            tab_id: 4,
            text: "hi".into(),
            images: Vec::new(),
            image_tokens: 280,
            constrain_tool_calls: false,
            model_source: "m".into(),
            model_size: "E2B".into(),
            max_iterations: 3,
            thinking: false,
            temperature: 0.5,
            site_permissions: json!({}),
            binding: PageBinding {
                document_id: "D".into(),
                origin: "https://a.example".into(),
            },
        },
        r#"{"type":"run_turn","tab_id":4,"text":"hi","image_tokens":280,"constrain_tool_calls":false,"model_source":"m","model_size":"E2B","max_iterations":3,"thinking":false,"temperature":0.5,"site_permissions":{},"binding":{"document_id":"D","origin":"https://a.example"}}"#,
    );
    // A RunTurn without constrain_tool_calls (an older service worker) constrains.
    let old: OffscreenCommand = serde_json::from_str(
        r#"{"type":"run_turn","tab_id":4,"text":"hi","model_source":"m","max_iterations":3,"thinking":false,"site_permissions":{},"binding":{"document_id":"D","origin":"https://a.example"}}"#,
    )
    .expect("old run_turn");
    assert!(matches!(
        old,
        RunTurn {
            constrain_tool_calls: true,
            ..
        }
    ));
    wire(
        PageChanged {
            tab_id: 4,
            document_id: "D".into(),
            url: "https://a.example/x".into(),
            same_document: true,
        },
        r#"{"type":"page_changed","tab_id":4,"document_id":"D","url":"https://a.example/x","same_document":true}"#,
    );
    wire(
        ForgetTab { tab_id: 4 },
        r#"{"type":"forget_tab","tab_id":4}"#,
    );
    wire(
        CancelTurn { tab_id: 4 },
        r#"{"type":"cancel_turn","tab_id":4}"#,
    );
    wire(
        ApprovalAnswer {
            tab_id: 4,
            call_id: 1,
            nonce: "00".into(),
            decision: gg_agent::ApprovalDecision::Deny,
        },
        r#"{"type":"approval_answer","tab_id":4,"call_id":1,"nonce":"00","decision":"deny"}"#,
    );
    wire(
        ClearConversation {
            tab_id: 4,
            origin: "o".into(),
        },
        r#"{"type":"clear_conversation","tab_id":4,"origin":"o"}"#,
    );
    wire(
        RestoreConversation {
            tab_id: 4,
            origin: "o".into(),
            messages: vec![],
        },
        r#"{"type":"restore_conversation","tab_id":4,"origin":"o","messages":[]}"#,
    );
    wire(
        GetTabConversation {
            tab_id: 4,
            origin: "o".into(),
        },
        r#"{"type":"get_tab_conversation","tab_id":4,"origin":"o"}"#,
    );
    wire(GetModelStatus, r#"{"type":"get_model_status"}"#);
    wire(
        GetStoredModels {
            repositories: vec!["r".into()],
        },
        r#"{"type":"get_stored_models","repositories":["r"]}"#,
    );
    wire(
        ClearModel {
            repository: "r".into(),
        },
        r#"{"type":"clear_model","repository":"r"}"#,
    );
    wire(
        DevGreedy {
            model_source: "m".into(),
            model_size: "e2b".into(),
            input_ids: vec![2, 3],
            max_new_tokens: 4,
        },
        r#"{"type":"dev_greedy","model_source":"m","model_size":"e2b","input_ids":[2,3],"max_new_tokens":4}"#,
    );

    wire(OffscreenReply::Pong, r#"{"type":"pong"}"#);
    wire(OffscreenReply::Ack, r#"{"type":"ack"}"#);
    wire(
        OffscreenReply::Error {
            message: "no".into(),
        },
        r#"{"type":"error","message":"no"}"#,
    );
    wire(OffscreenReply::Conversation(conversation()), CONVERSATION);
    wire(
        OffscreenReply::ModelStatus(report()),
        &format!(r#"{{"type":"model_status",{REPORT}}}"#),
    );
    wire(
        OffscreenReply::StoredModels {
            models: vec![stored()],
        },
        &format!(r#"{{"type":"stored_models","models":[{STORED}]}}"#),
    );
    wire(
        OffscreenReply::DevGreedyResult(DevGreedyResult {
            tokens: vec![1, 2],
            prefill_ms: 1.5,
            decode_ms: 2.5,
            wasm_memory_bytes: 3,
            gpu_bytes_uploaded: 4,
            dtype: "q4".into(),
        }),
        r#"{"type":"dev_greedy_result","tokens":[1,2],"prefill_ms":1.5,"decode_ms":2.5,"wasm_memory_bytes":3,"gpu_bytes_uploaded":4,"dtype":"q4"}"#,
    );
}

#[test]
fn content_commands_and_replies() {
    wire(
        ContentCommand::ExecuteTool {
            call_id: "c1".into(),
            call: call(),
        },
        r#"{"type":"execute_tool","call_id":"c1","call":{"name":"click_element","args":{"ref":"e3"}}}"#,
    );
    wire(
        ContentCommand::GetElementFacts {
            target: gg_agent::ElementTarget::Selector("#a".into()),
        },
        r##"{"type":"get_element_facts","target":{"selector":"#a"}}"##,
    );
    wire(
        ContentCommand::PanelCommand {
            action: PanelAction::Toggle,
        },
        r#"{"type":"panel_command","action":"toggle"}"#,
    );
    wire(ContentReply::Ack, r#"{"type":"ack"}"#);
    wire(
        ContentReply::ToolOutcome {
            call_id: "c1".into(),
            result: Err(stale()),
        },
        r#"{"type":"tool_outcome","call_id":"c1","result":{"Err":{"kind":"stale_ref","message":"gone"}}}"#,
    );
    wire(
        ContentReply::ElementFacts {
            result: Err(stale()),
        },
        r#"{"type":"element_facts","result":{"Err":{"kind":"stale_ref","message":"gone"}}}"#,
    );
}

#[test]
fn broadcasts() {
    wire(
        Broadcast::AgentEvent {
            tab_id: 4,
            seq: 7,
            event: gg_agent::AgentEvent::Token { text: "a".into() },
        },
        r#"{"type":"agent_event","tab_id":4,"seq":7,"event":{"type":"token","text":"a"}}"#,
    );
    wire(
        Broadcast::ModelStatus(report()),
        &format!(r#"{{"type":"model_status",{REPORT}}}"#),
    );
    for tag in Broadcast::TYPES {
        assert!(serde_json::from_value::<OffscreenRequest>(json!({"type": tag})).is_err());
    }
}

#[test]
fn bodies_of_other_channels_and_unknown_types_are_refused() {
    let chat_send = json!({"type": "chat_send", "text": "hi"});
    let run_turn = json!({"type": "run_turn", "tab_id": 1, "text": "hi", "model_source": "x",
        "max_iterations": 3, "thinking": false});
    let tool_call = json!({"type": "tab_tool_call", "tab_id": 1, "document_id": "D",
        "call_id": "c", "call": {"name": "click_element"}});
    let execute =
        json!({"type": "execute_tool", "call_id": "c", "call": {"name": "click_element"}});
    let token = json!({"type": "overlay_token_request"});
    let unknown = json!({"type": "nope"});
    let untagged = json!({"text": "hi"});
    // A content script (or the offscreen document) sending an overlay's chat message.
    refused::<ContentRequest>(chat_send.clone());
    refused::<OffscreenRequest>(chat_send.clone());
    // An overlay asking for a turn, a tool call, or a content script's token.
    for body in [&run_turn, &tool_call, &execute, &token] {
        refused::<OverlayRequest>(body.clone());
    }
    refused::<ContentRequest>(tool_call.clone());
    refused::<OffscreenCommand>(chat_send.clone());
    refused::<OffscreenCommand>(tool_call.clone());
    refused::<ContentCommand>(run_turn.clone());
    refused::<Broadcast>(chat_send.clone());
    refused::<OffscreenRequest>(json!({"type": "ping"}));
    refused::<ContentReply>(json!({"type": "error", "message": "m"}));
    refused::<OffscreenReply>(
        json!({"type": "tool_outcome", "call_id": "c", "result": {"Ok": {"value": 1}}}),
    );
    refused::<OverlayAnswer>(json!({"type": "pong"}));
    refused::<ContentAnswer>(
        json!({"type": "conversation", "tab_id": 1, "messages": [], "running": false}),
    );
    refused::<OffscreenAnswer>(json!({"type": "overlay_token", "token": "ab"}));
    for body in [&unknown, &untagged] {
        refused::<OverlayRequest>(body.clone());
        refused::<OverlayAnswer>(body.clone());
        refused::<ContentRequest>(body.clone());
        refused::<ContentAnswer>(body.clone());
        refused::<OffscreenRequest>(body.clone());
        refused::<OffscreenAnswer>(body.clone());
        refused::<OffscreenCommand>(body.clone());
        refused::<OffscreenReply>(body.clone());
        refused::<ContentCommand>(body.clone());
        refused::<ContentReply>(body.clone());
        refused::<Broadcast>(body.clone());
    }
}

#[test]
fn envelopes_keep_their_wire_form() {
    let env = Envelope::new(
        RequestId(77),
        Context::Overlay,
        OverlayRequest::ChatSend {
            text: "hi".into(),
            images: Vec::new(),
        },
    );
    let text = r#"{"protocol":"gemma-gem/1","id":77,"from":"overlay","body":{"type":"chat_send","text":"hi"}}"#;
    assert_eq!(serde_json::to_string(&env).unwrap(), text);
    let raw: Envelope<serde_json::Value> =
        Envelope::from_json(serde_json::from_str(text).unwrap()).unwrap();
    assert_eq!(raw.body_type(), Some("chat_send"));
    assert_eq!(raw.clone().parse_body::<OverlayRequest>().unwrap(), env);
    assert!(raw.parse_body::<ContentRequest>().is_err());
}
