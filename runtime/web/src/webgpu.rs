//! WebGPU probing: what the user's browser and GPU offer, with actionable messages.

use gg_messages::{AdapterReport, AdapterSummary};
use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn get_string(obj: &JsValue, key: &str) -> String {
    get(obj, key).as_string().unwrap_or_default()
}

fn get_u64(obj: &JsValue, key: &str) -> u64 {
    get(obj, key).as_f64().map_or(0, |v| v as u64)
}

async fn call_async(obj: &JsValue, method: &str) -> Result<JsValue, JsValue> {
    let f: Function = get(obj, method).dyn_into()?;
    let p: Promise = f.call0(obj)?.dyn_into()?;
    JsFuture::from(p).await
}

/// Asks `navigator.gpu` for an adapter and summarises it. Every failure becomes a message that
/// tells the user what to do.
pub async fn probe_webgpu() -> AdapterReport {
    let navigator = get(&js_sys::global(), "navigator");
    let gpu = get(&navigator, "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return AdapterReport {
            webgpu_available: false,
            adapter: None,
            error: Some(
                "This browser has no WebGPU (navigator.gpu is missing). Use a current Chrome, and check chrome://gpu: WebGPU must be enabled.".into(),
            ),
        };
    }
    let adapter = match call_async(&gpu, "requestAdapter").await {
        Ok(a) if !a.is_null() && !a.is_undefined() => a,
        Ok(_) => {
            return AdapterReport {
                webgpu_available: true,
                adapter: None,
                error: Some("WebGPU found no GPU adapter. Enable hardware acceleration in Chrome's settings and check chrome://gpu; on Linux, Vulkan drivers must be installed.".into()),
            };
        }
        Err(e) => {
            return AdapterReport {
                webgpu_available: true,
                adapter: None,
                error: Some(format!("requesting a WebGPU adapter failed: {e:?}")),
            };
        }
    };
    let info = get(&adapter, "info");
    let limits = get(&adapter, "limits");
    let features = get(&adapter, "features");
    let shader_f16 = get(&features, "has")
        .dyn_into::<Function>()
        .ok()
        .and_then(|has| has.call1(&features, &JsValue::from_str("shader-f16")).ok())
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    AdapterReport {
        webgpu_available: true,
        adapter: Some(AdapterSummary {
            vendor: get_string(&info, "vendor"),
            architecture: get_string(&info, "architecture"),
            device: get_string(&info, "device"),
            description: get_string(&info, "description"),
            shader_f16,
            max_storage_buffer_binding_size: get_u64(&limits, "maxStorageBufferBindingSize"),
            max_buffer_size: get_u64(&limits, "maxBufferSize"),
        }),
        error: None,
    }
}
