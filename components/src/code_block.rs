//! A fenced code block with a copy button.

use yew::prelude::*;

/// Properties of [`CodeBlock`].
#[derive(Clone, Properties, PartialEq)]
pub struct CodeBlockProps {
    /// The code, shown as text (never as HTML).
    pub code: AttrValue,
    /// The fence's language tag (shown, and as `data-lang`).
    #[prop_or_default]
    pub lang: Option<AttrValue>,
}

#[derive(Clone, Copy, PartialEq)]
enum CopyState {
    Idle,
    Copied,
    Failed,
}

/// Writes `text` to the clipboard; `false` if the API is missing or refused.
async fn write_clipboard(text: String) -> bool {
    let Some(window) = web_sys::window() else {
        return false;
    };
    let promise = window.navigator().clipboard().write_text(&text);
    wasm_bindgen_futures::JsFuture::from(promise).await.is_ok()
}

/// A code block (`<pre><code>`), its language and a "Copy" button.
#[function_component(CodeBlock)]
pub fn code_block(props: &CodeBlockProps) -> Html {
    let state = use_state(|| CopyState::Idle);
    let onclick = {
        let state = state.clone();
        let code = props.code.to_string();
        Callback::from(move |_: MouseEvent| {
            let state = state.clone();
            let code = code.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let ok = write_clipboard(code).await;
                state.set(if ok {
                    CopyState::Copied
                } else {
                    CopyState::Failed
                });
                let reset = state.clone();
                gloo_timers::callback::Timeout::new(1_500, move || reset.set(CopyState::Idle))
                    .forget();
            });
        })
    };
    let label = match *state {
        CopyState::Idle => "Copy",
        CopyState::Copied => "Copied",
        CopyState::Failed => "Copy failed",
    };
    let lang = props.lang.clone();
    let code_class = lang.as_ref().map(|l| format!("language-{l}"));
    html! {
        <figure class="gg-code">
            <figcaption class="gg-code-bar">
                <span class="gg-code-lang">{ lang.clone().unwrap_or_else(|| AttrValue::from("code")) }</span>
                <button type="button" class="gg-btn gg-btn-ghost gg-btn-small" data-testid="gg-copy-code"
                    aria-label={if *state == CopyState::Idle { "Copy code".to_owned() } else { label.to_owned() }}
                    {onclick}>
                    { label }
                </button>
            </figcaption>
            <pre><code class={code_class}>{ props.code.clone() }</code></pre>
        </figure>
    }
}
