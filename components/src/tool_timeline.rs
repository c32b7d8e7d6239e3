//! One row per tool call: tool, arguments, state, duration, result preview, screenshot, and the
//! approval buttons for calls that need the user's go-ahead.

use yew::prelude::*;

use crate::arming::{Arming, use_arming};
use crate::format;
use crate::types::{ApprovalDecision, ToolState, ToolStep};

/// Characters of arguments shown on the row (the full JSON is in the tooltip).
const ARGS_PREVIEW_CHARS: usize = 160;
/// Characters of the result preview shown.
const RESULT_PREVIEW_CHARS: usize = 600;

/// Properties of [`ToolTimeline`].
#[derive(Clone, Properties, PartialEq)]
pub struct ToolTimelineProps {
    /// The tool calls of a turn, in order.
    pub steps: Vec<ToolStep>,
    /// `(call id, decision)` when the user answers an approval request.
    #[prop_or_default]
    pub on_approve: Callback<(String, ApprovalDecision)>,
    /// The site shown in the "always on this site" button, if known.
    #[prop_or_default]
    pub site: Option<AttrValue>,
}

fn state_icon(state: ToolState) -> &'static str {
    match state {
        ToolState::Pending => "○",
        ToolState::AwaitingApproval => "!",
        ToolState::Running => "◌",
        ToolState::Done => "✓",
        ToolState::Failed => "✕",
    }
}

#[derive(Clone, Properties, PartialEq)]
struct ToolRowProps {
    step: ToolStep,
    on_approve: Callback<(String, ApprovalDecision)>,
    site: Option<AttrValue>,
}

#[function_component(ToolRow)]
fn tool_row(props: &ToolRowProps) -> Html {
    let step = &props.step;
    let args = format::args_preview(&step.args, ARGS_PREVIEW_CHARS);
    let args_full = (!args.is_empty()).then(|| step.args.to_string());
    let duration = step
        .duration_ms
        .map(format::duration_ms)
        .unwrap_or_default();

    let approval = (step.state == ToolState::AwaitingApproval).then(|| {
        html! { <ApprovalCard step={step.clone()} on_approve={props.on_approve.clone()} site={props.site.clone()} /> }
    });

    let result = step.result_preview.as_ref().map(|preview| {
        let preview = format::truncate(preview, RESULT_PREVIEW_CHARS);
        if step.state == ToolState::Failed {
            html! { <p class="gg-tool-error">{ preview }</p> }
        } else {
            html! {
                <details class="gg-tool-result">
                    <summary>{ "Result" }</summary>
                    <pre>{ preview }</pre>
                </details>
            }
        }
    });

    let screenshot = step.safe_screenshot().map(|src| {
        html! { <img class="gg-tool-shot" src={src.to_owned()} alt={format!("Screenshot taken by {}", step.tool)} loading="lazy" /> }
    });

    html! {
        <li class="gg-tool" data-testid="gg-tool-step" data-tool={step.tool.clone()} data-state={step.state.as_str()}
            aria-label={format!("{}: {}", step.tool, step.state.label())}>
            <div class="gg-tool-head">
                <span class="gg-tool-icon" aria-hidden="true">{ state_icon(step.state) }</span>
                <code class="gg-tool-name">{ step.tool.clone() }</code>
                <span class="gg-tool-state">{ step.state.label() }</span>
                if !duration.is_empty() {
                    <span class="gg-tool-duration">{ duration }</span>
                }
            </div>
            if !args.is_empty() {
                <code class="gg-tool-args" title={args_full}>{ args }</code>
            }
            { for approval }
            { for result }
            { for screenshot }
        </li>
    }
}

/// The approval request of one call: why, the code that would run, and the buttons. The
/// buttons are enabled only once they have been fully visible and unobscured for a moment
/// ([`crate::arming`]); a page that covers the overlay disables them again.
#[function_component(ApprovalCard)]
fn approval_card(props: &ToolRowProps) -> Html {
    let step = &props.step;
    let actions = use_node_ref();
    let arming = use_arming(actions.clone());
    let armed = arming.armed();
    let decide = |decision: ApprovalDecision| {
        let on_approve = props.on_approve.clone();
        let id = step.id.clone();
        // A disabled button gets no click; the check stands for any other way in.
        Callback::from(move |_: MouseEvent| {
            if armed {
                on_approve.emit((id.clone(), decision))
            }
        })
    };
    let always = match &props.site {
        Some(site) => format!("Always on {site}"),
        None => "Always on this site".to_owned(),
    };
    html! {
        <div class="gg-approval" role="group" aria-label={format!("Allow {}?", step.tool)}
            data-testid="gg-approval" data-arming={arming.as_str()}>
            if let Some(reason) = &step.approval_reason {
                <p class="gg-approval-reason">{ reason.clone() }</p>
            }
            if let Some(code) = &step.approval_code {
                // The whole code, never cut: the user approves exactly what runs.
                <pre class="gg-approval-code" data-testid="gg-approval-code">{ code.clone() }</pre>
            }
            <div class="gg-approval-actions" ref={actions}>
                <button type="button" class="gg-btn gg-btn-primary gg-btn-small" data-testid="gg-approve-once"
                    disabled={!armed} onclick={decide(ApprovalDecision::AllowOnce)}>{ "Allow once" }</button>
                if step.approval_for_task {
                    <button type="button" class="gg-btn gg-btn-small" data-testid="gg-approve-task"
                        disabled={!armed} onclick={decide(ApprovalDecision::AllowForTask)}>{ "For this task" }</button>
                }
                if !step.approval_no_always {
                    <button type="button" class="gg-btn gg-btn-small" data-testid="gg-approve-always"
                        disabled={!armed} onclick={decide(ApprovalDecision::AlwaysOnSite)}>{ always }</button>
                }
                <button type="button" class="gg-btn gg-btn-small" data-testid="gg-deny"
                    disabled={!armed} onclick={decide(ApprovalDecision::Deny)}>{ "Deny" }</button>
            </div>
            if arming == Arming::Obscured {
                <p class="gg-approval-hint" role="status">
                    { "Something covers this panel. The buttons work again once it is fully visible." }
                </p>
            }
        </div>
    }
}

/// The tool calls of one answer, in order. The list element is always rendered (hidden while
/// empty), so the component's root node never appears or disappears between renders.
#[function_component(ToolTimeline)]
pub fn tool_timeline(props: &ToolTimelineProps) -> Html {
    html! {
        <ol class="gg-tools" aria-label="Actions on the page">
            { for props.steps.iter().map(|step| html! {
                <ToolRow key={step.id.clone()} step={step.clone()} on_approve={props.on_approve.clone()} site={props.site.clone()} />
            }) }
        </ol>
    }
}
