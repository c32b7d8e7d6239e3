//! The page tools the service worker runs itself: `take_screenshot` (`chrome.tabs.captureVisibleTab`,
//! downscaled for the model) and `run_javascript` (`chrome.scripting.executeScript` in the page's
//! main world, the code passed as data to a fixed function, so the extension never evaluates it).

use gg_agent::{ImagePart, ToolError, ToolErrorKind, ToolOutput};
use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// Widest screenshot handed to the model, in pixels.
const SCREENSHOT_MAX_WIDTH: f64 = 768.0;

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn js_err(what: &str) -> impl Fn(JsValue) -> ToolError + '_ {
    move |e| {
        let msg = e
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .or_else(|| e.as_string())
            .unwrap_or_else(|| format!("{e:?}"));
        ToolError::new(ToolErrorKind::Failed, format!("{what}: {msg}"))
    }
}

async fn call_promise(obj: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(obj, method).dyn_into()?;
    let arr: Array = args.iter().collect();
    let p: Promise = f.apply(obj, &arr)?.dyn_into()?;
    JsFuture::from(p).await
}

fn chrome(path: &[&str]) -> JsValue {
    path.iter()
        .fold(js_sys::global().into(), |obj, key| get(&obj, key))
}

/// Fails unless the top frame of `tab_id` still shows `document_id` (the turn's page).
async fn still_on(tab_id: i64, document_id: &str) -> Result<(), ToolError> {
    let top = gg_chrome::top_frame(tab_id)
        .await
        .map_err(|e| ToolError::new(ToolErrorKind::Unavailable, e.to_string()))?;
    if top.document_id != document_id {
        return Err(ToolError::new(
            ToolErrorKind::Unavailable,
            crate::PAGE_CHANGED,
        ));
    }
    Ok(())
}

/// Screenshot of the visible part of `tab_id` as PNG, at most [`SCREENSHOT_MAX_WIDTH`] wide.
/// `captureVisibleTab` cannot name a document, so the tab must show `document_id` both before
/// and after the capture (a capture taken across a navigation is thrown away).
pub async fn take_screenshot(tab_id: i64, document_id: &str) -> Result<ToolOutput, ToolError> {
    still_on(tab_id, document_id).await?;
    let tabs = chrome(&["chrome", "tabs"]);
    let tab = call_promise(&tabs, "get", &[JsValue::from_f64(tab_id as f64)])
        .await
        .map_err(js_err("chrome.tabs.get"))?;
    if get(&tab, "active").as_bool() != Some(true) {
        return Err(ToolError::new(
            ToolErrorKind::Unavailable,
            "the tab is not the visible one in its window, so it cannot be captured; ask the user to switch to it",
        ));
    }
    let options = Object::new();
    Reflect::set(&options, &"format".into(), &"png".into()).map_err(js_err("options"))?;
    let data_url = call_promise(
        &tabs,
        "captureVisibleTab",
        &[get(&tab, "windowId"), options.into()],
    )
    .await
    .map_err(js_err("chrome.tabs.captureVisibleTab"))?;
    still_on(tab_id, document_id).await?;
    let global: JsValue = js_sys::global().into();
    let response = call_promise(&global, "fetch", &[data_url])
        .await
        .map_err(js_err("decoding the capture"))?;
    let blob = call_promise(&response, "blob", &[])
        .await
        .map_err(js_err("decoding the capture"))?;
    let bitmap = call_promise(&global, "createImageBitmap", &[blob])
        .await
        .map_err(js_err("createImageBitmap"))?;
    let (w, h) = (
        get(&bitmap, "width").as_f64().unwrap_or(0.0),
        get(&bitmap, "height").as_f64().unwrap_or(0.0),
    );
    if w < 1.0 || h < 1.0 {
        return Err(ToolError::new(
            ToolErrorKind::Failed,
            "the capture is empty",
        ));
    }
    let scale = (SCREENSHOT_MAX_WIDTH / w).min(1.0);
    let (tw, th) = ((w * scale).round().max(1.0), (h * scale).round().max(1.0));
    let canvas_ctor: Function = get(&global, "OffscreenCanvas")
        .dyn_into()
        .map_err(js_err("OffscreenCanvas"))?;
    let canvas = Reflect::construct(&canvas_ctor, &Array::of2(&tw.into(), &th.into()))
        .map_err(js_err("OffscreenCanvas"))?;
    let get_context: Function = get(&canvas, "getContext")
        .dyn_into()
        .map_err(js_err("getContext"))?;
    let ctx = get_context
        .call1(&canvas, &"2d".into())
        .map_err(js_err("getContext"))?;
    let draw: Function = get(&ctx, "drawImage")
        .dyn_into()
        .map_err(js_err("drawImage"))?;
    draw.apply(
        &ctx,
        &[
            bitmap,
            JsValue::from(0),
            JsValue::from(0),
            tw.into(),
            th.into(),
        ]
        .into_iter()
        .collect::<Array>(),
    )
    .map_err(js_err("drawImage"))?;
    let png = call_promise(&canvas, "convertToBlob", &[])
        .await
        .map_err(js_err("convertToBlob"))?;
    let buffer = call_promise(&png, "arrayBuffer", &[])
        .await
        .map_err(js_err("arrayBuffer"))?;
    let bytes = Uint8Array::new(&buffer).to_vec();
    Ok(ToolOutput {
        value: serde_json::json!({ "width": tw as u32, "height": th as u32, "format": "png", "note": "The screenshot is attached as an image." }),
        images: vec![ImagePart::png(bytes)],
    })
}

/// How long `run_javascript` waits for the page's answer.
pub const RUN_JAVASCRIPT_TIMEOUT_MS: u32 = 10_000;

/// Runs `code` in the main world of the document `document_id` of `tab_id` (and nowhere else)
/// through the function `globalThis.ggPageEval` that `background.js` defines (Chrome needs a
/// function object to inject). Everything in the page's world may have been replaced by the page
/// (`eval`, `JSON`, `Promise`...), so the page's answer is only data: it is serialized by Chrome,
/// checked and capped here, and the wait ends after [`RUN_JAVASCRIPT_TIMEOUT_MS`].
pub async fn run_javascript(
    tab_id: i64,
    document_id: &str,
    code: &str,
) -> Result<ToolOutput, ToolError> {
    let func = get(&js_sys::global(), "ggPageEval");
    if !func.is_function() {
        return Err(ToolError::new(
            ToolErrorKind::Unavailable,
            "ggPageEval is missing from background.js",
        ));
    }
    if document_id.is_empty() {
        return Err(ToolError::new(
            ToolErrorKind::Unavailable,
            "no page to run the code in",
        ));
    }
    let details = Object::new();
    let target = Object::new();
    Reflect::set(&target, &"tabId".into(), &JsValue::from_f64(tab_id as f64))
        .map_err(js_err("target"))?;
    Reflect::set(
        &target,
        &"documentIds".into(),
        &Array::of1(&document_id.into()),
    )
    .map_err(js_err("target"))?;
    Reflect::set(&details, &"target".into(), &target).map_err(js_err("details"))?;
    Reflect::set(&details, &"world".into(), &"MAIN".into()).map_err(js_err("details"))?;
    Reflect::set(&details, &"func".into(), &func).map_err(js_err("details"))?;
    Reflect::set(&details, &"args".into(), &Array::of1(&code.into())).map_err(js_err("details"))?;
    let scripting = chrome(&["chrome", "scripting"]);
    let details: JsValue = details.into();
    let run = call_promise(&scripting, "executeScript", std::slice::from_ref(&details));
    let timeout = gloo_timers::future::TimeoutFuture::new(RUN_JAVASCRIPT_TIMEOUT_MS);
    let results = match futures::future::select(Box::pin(run), timeout).await {
        futures::future::Either::Left((results, _)) => results.map_err(|e| {
            let message = js_err("chrome.scripting.executeScript")(e).message;
            if message.contains("No document") || message.contains("No frame") {
                ToolError::new(ToolErrorKind::Unavailable, crate::PAGE_CHANGED)
            } else {
                ToolError::new(ToolErrorKind::Unavailable, message)
            }
        })?,
        futures::future::Either::Right(((), _)) => {
            return Err(ToolError::new(
                ToolErrorKind::Failed,
                format!(
                    "the code did not finish within {} s, so the extension stopped waiting for \
                     it (the page may still be running it); write code that returns at once",
                    RUN_JAVASCRIPT_TIMEOUT_MS / 1000
                ),
            ));
        }
    };
    let first = Array::from(&results).get(0);
    let result = gg_chrome::from_js(&get(&first, "result"))
        .map_err(|e| ToolError::new(ToolErrorKind::Failed, e))?;
    gg_agent::javascript_answer(&result)
}
