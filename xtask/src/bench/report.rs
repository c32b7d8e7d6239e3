//! The pure part of the bench: medians, ratios, summaries of the raw runs, the results JSON and
//! the Markdown table. No I/O here (unit-tested).

use serde_json::{Map, Value, json};

/// Median of the finite values (mean of the two middle ones for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// ours / theirs, when both exist and theirs is not zero.
pub fn ratio(ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    match (ours, theirs) {
        (Some(a), Some(b)) if b != 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// A browser metric: its key in the JSON, the key of its ratio, a label, its unit and whether
/// larger is better.
pub struct Metric {
    pub key: &'static str,
    pub ratio_key: &'static str,
    pub label: &'static str,
    pub unit: Unit,
    pub higher_is_better: bool,
}

#[derive(Clone, Copy)]
pub enum Unit {
    Seconds,
    TokPerS,
    Bytes,
}

/// Per-decoded-token work the bench reports for our runtime (native and browser), from the
/// decode runs.
const DECODE_COUNTERS: [&str; 7] = [
    "dispatches_per_token",
    "submits_per_token",
    "bytes_read_back_per_token",
    "buffers_created_per_token",
    "bytes_uploaded_per_token",
    "bind_groups_created_per_token",
    "record_ms_per_token",
];

/// The browser metrics, in table order. Ratios are always ours / theirs.
pub const BROWSER_METRICS: &[Metric] = &[
    Metric {
        key: "load_s",
        ratio_key: "load_ratio",
        label: "load time",
        unit: Unit::Seconds,
        higher_is_better: false,
    },
    Metric {
        key: "peak_heap_bytes",
        ratio_key: "peak_heap_ratio",
        label: "peak JS + wasm heap while loading",
        unit: Unit::Bytes,
        higher_is_better: false,
    },
    Metric {
        key: "cold_ttft_s",
        ratio_key: "cold_ttft_ratio",
        label: "time to first token, first prompt after load (shader compilation)",
        unit: Unit::Seconds,
        higher_is_better: false,
    },
    Metric {
        key: "ttft_s",
        ratio_key: "ttft_ratio",
        label: "time to first token",
        unit: Unit::Seconds,
        higher_is_better: false,
    },
    Metric {
        key: "prefill_tok_s",
        ratio_key: "prefill_tok_s_ratio",
        label: "prefill",
        unit: Unit::TokPerS,
        higher_is_better: true,
    },
    Metric {
        key: "decode_tok_s",
        ratio_key: "decode_tok_s_ratio",
        label: "decode",
        unit: Unit::TokPerS,
        higher_is_better: true,
    },
];

/// Values of `key` over the successful runs (those without `error`).
fn values(runs: &[Value], key: &str) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.get("error").is_none())
        .filter_map(|r| r.get(key).and_then(Value::as_f64))
        .collect()
}

fn num(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

/// Summary of one model's native bench output (`gemma-gem bench`): medians per configuration.
/// `layers` is the decoder's layer count (for dispatches per layer).
pub fn native_model(raw: &Value, layers: Option<u64>) -> Value {
    let mut out = Map::new();
    for key in ["adapter", "dtype", "load_s"] {
        out.insert(key.into(), raw.get(key).cloned().unwrap_or(Value::Null));
    }
    let mut skipped = Vec::new();
    let list = |k: &str| {
        raw.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for p in list("prefill") {
        let n = p.get("tokens").and_then(Value::as_u64).unwrap_or(0);
        if let Some(why) = p.get("skipped") {
            skipped.push(json!(format!(
                "prefill {n}: {}",
                why.as_str().unwrap_or("")
            )));
            continue;
        }
        let runs = p
            .get("runs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        out.insert(
            format!("prefill_{n}_tok_s"),
            num(median(&values(&runs, "tok_s"))),
        );
        out.insert(format!("ttft_{n}_s"), num(median(&values(&runs, "ttft_s"))));
    }
    let mut first_decode = true;
    for d in list("decode") {
        let c = d.get("context").and_then(Value::as_u64).unwrap_or(0);
        if let Some(why) = d.get("skipped") {
            skipped.push(json!(format!(
                "decode after {c}: {}",
                why.as_str().unwrap_or("")
            )));
            continue;
        }
        let runs = d
            .get("runs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        out.insert(
            format!("decode_{c}_tok_s"),
            num(median(&values(&runs, "tok_s"))),
        );
        if first_decode {
            // Work per token barely depends on the context; report it from the first context.
            first_decode = false;
            out.insert("decode_counters_context".into(), json!(c));
            for key in DECODE_COUNTERS {
                out.insert(key.into(), num(median(&values(&runs, key))));
            }
            let per_layer = median(&values(&runs, "dispatches_per_token"))
                .zip(layers.filter(|&l| l > 0))
                .map(|(d, l)| d / l as f64);
            out.insert("dispatches_per_layer_per_token".into(), num(per_layer));
        }
    }
    // Decode inside a constrained tool call (the mask computed, uploaded and applied) against
    // decode outside it, in the same generations.
    let calls: Vec<Value> = list("decode_in_call")
        .into_iter()
        .filter(|r| r.get("skipped").is_none())
        .collect();
    if !calls.is_empty() {
        for (key, from) in [
            ("call_tok_s", "call_tok_s"),
            ("call_free_tok_s", "free_tok_s"),
            ("call_mask_ms_per_token", "mask_ms_per_token"),
            ("call_tokens", "call_tokens"),
        ] {
            out.insert(key.into(), num(median(&values(&calls, from))));
        }
    }
    out.insert(
        "decoder_layers".into(),
        layers.map_or(Value::Null, |l| json!(l)),
    );
    let mem = |k: &str, f: &str| {
        raw.get(k)
            .and_then(|m| m.get(f))
            .cloned()
            .unwrap_or(Value::Null)
    };
    out.insert(
        "gpu_memory_after_load_bytes".into(),
        mem("gpu_memory_after_load", "allocated_bytes"),
    );
    out.insert(
        "gpu_memory_peak_bytes".into(),
        mem("gpu_memory_peak", "allocated_bytes"),
    );
    out.insert("skipped".into(), Value::Array(skipped));
    Value::Object(out)
}

/// `YYYY-MM-DD` and `HH:MM:SS` (UTC) of a Unix time.
pub fn utc(unix_s: u64) -> (String, String) {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60),
    )
}

pub(super) fn fmt_num(v: Option<f64>, unit: Unit) -> String {
    match v {
        None => "–".into(),
        Some(x) => match unit {
            Unit::Seconds if x < 1.0 => format!("{:.0} ms", x * 1000.0),
            Unit::Seconds => format!("{x:.2} s"),
            Unit::TokPerS if x < 1.0 => format!("{x:.3} tok/s"),
            Unit::TokPerS => format!("{x:.1} tok/s"),
            Unit::Bytes => mib(x),
        },
    }
}

fn mib(x: f64) -> String {
    format!("{:.1} MiB", x / (1024.0 * 1024.0))
}

fn get(v: &Value, path: &[&str]) -> Option<f64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_f64()
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or("–")
        .to_string()
}

/// The Markdown report of a results document (see [`crate::bench`] for its layout).
pub fn markdown(doc: &Value) -> String {
    let mut s = String::new();
    let date = text(doc, "date");
    s.push_str(&format!("# Gemma Gem bench, {date}\n\n"));
    if let Some(note) = doc.get("note").and_then(Value::as_str) {
        s.push_str(&format!("{note}\n\n"));
    }
    if let Some(from) = doc.get("summarised_from").and_then(Value::as_str) {
        s.push_str(&format!("Summarised from {from}.\n\n"));
    }
    if let Some(pages) = doc.get("pages") {
        s.push_str(&super::pages::markdown(pages));
    }
    if let Some(native) = doc.get("native").and_then(Value::as_object) {
        s.push_str("## Native (wgpu)\n\n");
        s.push_str(&format!(
            "Configuration: {}.\n\n",
            doc.get("native_config")
                .map(Value::to_string)
                .unwrap_or_default()
        ));
        s.push_str("| model | adapter | dtype | load | prefill 128 | prefill 512 | TTFT 128 | decode after 128 | decode after 1024 | dispatches / token | dispatches / layer / token | submits / token | bytes read back / token | host recording / token | GPU memory (after load / peak) |\n");
        s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (name, m) in native {
            let g = |k: &str| m.get(k).and_then(Value::as_f64);
            let mem = match (g("gpu_memory_after_load_bytes"), g("gpu_memory_peak_bytes")) {
                (Some(a), Some(p)) => format!("{} / {}", mib(a), mib(p)),
                _ => "not reported by this backend".into(),
            };
            let plain = |k: &str| g(k).map_or("–".into(), |x| format!("{x:.1}"));
            s.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {mem} |\n",
                text(m, "adapter"),
                text(m, "dtype"),
                fmt_num(g("load_s"), Unit::Seconds),
                fmt_num(g("prefill_128_tok_s"), Unit::TokPerS),
                fmt_num(g("prefill_512_tok_s"), Unit::TokPerS),
                fmt_num(g("ttft_128_s"), Unit::Seconds),
                fmt_num(g("decode_128_tok_s"), Unit::TokPerS),
                fmt_num(g("decode_1024_tok_s"), Unit::TokPerS),
                plain("dispatches_per_token"),
                plain("dispatches_per_layer_per_token"),
                plain("submits_per_token"),
                plain("bytes_read_back_per_token"),
                g("record_ms_per_token").map_or("–".into(), |x| format!("{x:.2} ms")),
            ));
        }
        let mut extra = String::new();
        for (name, m) in native {
            // Configurations outside the fixed columns (e.g. --prefill 16 on a software adapter).
            if let Some(obj) = m.as_object() {
                for (k, v) in obj {
                    let fixed = [
                        "prefill_128_tok_s",
                        "prefill_512_tok_s",
                        "ttft_128_s",
                        "decode_128_tok_s",
                        "decode_1024_tok_s",
                    ];
                    let measured = (k.starts_with("prefill_") && k.ends_with("_tok_s"))
                        || (k.starts_with("ttft_") && k.ends_with("_s"))
                        || (k.starts_with("decode_") && k.ends_with("_tok_s"));
                    if measured && !fixed.contains(&k.as_str()) {
                        let unit = if k.ends_with("_tok_s") {
                            Unit::TokPerS
                        } else {
                            Unit::Seconds
                        };
                        extra.push_str(&format!(
                            "- {name}: `{k}` = {}\n",
                            fmt_num(v.as_f64(), unit)
                        ));
                    }
                }
                if let Some(inside) = obj.get("call_tok_s").and_then(Value::as_f64) {
                    let g = |k: &str| obj.get(k).and_then(Value::as_f64);
                    extra.push_str(&format!(
                        "- {name}: decode inside a constrained tool call {} ({} tokens, {} of mask per token) vs {} outside it\n",
                        fmt_num(Some(inside), Unit::TokPerS),
                        g("call_tokens").map_or("–".into(), |x| format!("{x:.0}")),
                        g("call_mask_ms_per_token").map_or("–".into(), |x| format!("{x:.3} ms")),
                        fmt_num(g("call_free_tok_s"), Unit::TokPerS),
                    ));
                }
                if let Some(c) = obj.get("ort_cpu") {
                    let what = match c.get("tokens_match") {
                        Some(Value::Bool(true)) => "equal to",
                        Some(Value::Bool(false)) => "**differ** from",
                        _ => "not compared with",
                    };
                    extra.push_str(&format!(
                        "- {name}: ours' greedy ids {what} ONNX Runtime's CPU EP's ({} sequence(s) compared)\n",
                        c.get("token_sequences_compared").unwrap_or(&Value::Null)
                    ));
                }
                for why in m
                    .get("skipped")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    extra.push_str(&format!(
                        "- {name}: skipped {}\n",
                        why.as_str().unwrap_or("")
                    ));
                }
            }
        }
        if !extra.is_empty() {
            s.push('\n');
            s.push_str(&extra);
        }
        s.push('\n');
        for (name, m) in native {
            // Ours vs ONNX Runtime's WebGPU EP (--ort-ep): the paired table.
            if let Some(peer) = m.get("ort_webgpu_ep") {
                let software = ["swiftshader", "llvmpipe", "lavapipe"]
                    .iter()
                    .any(|a| text(m, "adapter").to_lowercase().contains(a));
                let view = json!({
                    "dtype": m.get("dtype"),
                    "pairs": peer.get("pairs"),
                    "runtimes": peer.get("runtimes"),
                    "ort_webgpu_ep": peer,
                });
                s.push_str(&super::paired::markdown_model(
                    &format!("{name}: ours vs ort_webgpu_ep (native)"),
                    &view,
                    software,
                ));
            }
        }
    }
    let vision: Vec<(&str, &Value)> = [
        ("native", doc.get("native_vision")),
        ("Chromium", doc.get("browser").and_then(|b| b.get("vision"))),
    ]
    .into_iter()
    .filter_map(|(w, v)| Some((w, v?)))
    .collect();
    if !vision.is_empty() {
        s.push_str("## Vision encoder\n\n");
        s.push_str("From the host patches of a synthetic image to the features read back (native: `gemma-gem bench-vision`; Chromium: the bench page's `performance.now()`), after a warm-up.\n\n");
        s.push_str("| where | model | adapter | soft tokens | patch slots | encode (median) | min–max | runs | dispatches | submits |\n");
        s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        for (place, v) in vision {
            let g = |k: &str| v.get(k).and_then(Value::as_f64);
            let model = text(v, "model")
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            if let Some(e) = v.get("error").and_then(Value::as_str) {
                s.push_str(&format!(
                    "| {place} | {model} | error: {e} | | | | | | | |\n"
                ));
                continue;
            }
            let runs = v.get("runs_ms").and_then(Value::as_array).map(Vec::len);
            s.push_str(&format!(
                "| {place} | {model} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                text(v, "adapter"),
                g("soft_tokens").map_or("–".into(), |x| format!("{x}")),
                g("slots").map_or("–".into(), |x| format!("{x}")),
                g("encode_ms_median").map_or("–".into(), |x| format!("{x:.1} ms")),
                match (g("encode_ms_min"), g("encode_ms_max")) {
                    (Some(a), Some(b)) => format!("{a:.1}–{b:.1} ms"),
                    _ => "–".into(),
                },
                runs.map_or("–".into(), |n| n.to_string()),
                g("dispatches").map_or("–".into(), |x| format!("{x}")),
                g("submits").map_or("–".into(), |x| format!("{x}")),
            ));
        }
        s.push('\n');
    }
    if let Some(browser) = doc.get("browser") {
        s.push_str(
            "## Browser: ours (wasm) vs onnxruntime-web (WebGPU EP) and transformers.js\n\n",
        );
        s.push_str(&format!(
            "Chromium {} (headless), adapter {}. Configuration: {}. Medians over the runs; ratio = ours / theirs.\n\n",
            text(browser, "browser_version"),
            text(browser, "adapter"),
            browser
                .get("config")
                .map(Value::to_string)
                .unwrap_or_default()
        ));
        let software = ["swiftshader", "llvmpipe", "lavapipe"]
            .iter()
            .any(|a| text(browser, "adapter").to_lowercase().contains(a))
            || get(browser, &["adapter_info", "isFallbackAdapter"]).is_some()
                && browser["adapter_info"]["isFallbackAdapter"] == json!(true)
            || text(browser, "adapter").trim().is_empty()
            || text(browser, "adapter").contains("unknown");
        if let Some(models) = browser.get("models").and_then(Value::as_object) {
            for (name, m) in models {
                if m.get("runtimes").is_some() {
                    // Paired results (issue 33): every runtime, spreads, per-pair ratios.
                    s.push_str(&super::paired::markdown_model(name, m, software));
                    continue;
                }
                s.push_str(&format!("### {name} ({})\n\n", text(m, "dtype")));
                s.push_str(
                    "| metric | ours | onnxruntime-web | ours / theirs |\n|---|---|---|---|\n",
                );
                for metric in BROWSER_METRICS {
                    let a = get(m, &["ours", metric.key]);
                    let b = get(m, &["onnxruntime_web", metric.key]);
                    let r = get(m, &[metric.ratio_key]);
                    let better = if metric.higher_is_better {
                        "higher is better"
                    } else {
                        "lower is better"
                    };
                    s.push_str(&format!(
                        "| {} ({better}) | {} | {} | {} |\n",
                        metric.label,
                        fmt_num(a, metric.unit),
                        fmt_num(b, metric.unit),
                        r.map_or("–".into(), |x| format!("{x:.2}×"))
                    ));
                }
                let plain =
                    |k: &str| get(m, &["ours", k]).map_or("–".into(), |x| format!("{x:.1}"));
                s.push_str(&format!(
                    "\nOurs per decoded token: {} dispatches, {} submits, {} bytes read back, {} bytes uploaded, {} buffers and {} bind groups created, {} ms of host recording (overlapping the GPU's step before); wasm memory after load {}.\n",
                    plain("dispatches_per_token"),
                    plain("submits_per_token"),
                    plain("bytes_read_back_per_token"),
                    plain("bytes_uploaded_per_token"),
                    plain("buffers_created_per_token"),
                    plain("bind_groups_created_per_token"),
                    get(m, &["ours", "record_ms_per_token"]).map_or("–".into(), |x| format!("{x:.2}")),
                    fmt_num(get(m, &["ours", "wasm_memory_bytes"]), Unit::Bytes),
                ));
                for (who, key) in [("ours", "ours"), ("onnxruntime-web", "onnxruntime_web")] {
                    for e in m
                        .get(key)
                        .and_then(|x| x.get("errors"))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        s.push_str(&format!(
                            "\n- {who} failed a run: {}\n",
                            e.as_str().unwrap_or("")
                        ));
                    }
                }
                s.push('\n');
            }
        }
    }
    if let Some(sizes) = doc.get("sizes").and_then(Value::as_array) {
        s.push_str(
            "## Shipped sizes\n\n| bundle | files | raw | gzip -9 | budget (gzip) |\n|---|---|---|---|---|\n",
        );
        for b in sizes {
            let gzip = b.get("gzip_bytes").and_then(Value::as_f64);
            let budget = match (b.get("budget_gzip_bytes").and_then(Value::as_f64), gzip) {
                (Some(limit), Some(size)) => format!(
                    "{} ({})",
                    fmt_kb(Some(limit)),
                    if size <= limit { "met" } else { "**over**" }
                ),
                _ => "–".into(),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                text(b, "name"),
                text(b, "files"),
                fmt_kb(b.get("raw_bytes").and_then(Value::as_f64)),
                fmt_kb(gzip),
                budget,
            ));
        }
        s.push('\n');
    }
    s
}

fn fmt_kb(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(x) if x >= 1024.0 * 1024.0 => mib(x),
        Some(x) => format!("{:.1} KiB", x / 1024.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 2.0]), Some(2.0));
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), ("1970-01-01".into(), "00:00:00".into()));
        assert_eq!(utc(951_782_400), ("2000-02-29".into(), "00:00:00".into()));
        assert_eq!(utc(1_796_050_000), ("2026-11-30".into(), "14:46:40".into()));
    }

    #[test]
    fn native_summary() {
        let raw = json!({
            "adapter": "llvmpipe", "dtype": "q4", "load_s": 0.5,
            "gpu_memory_after_load": {"allocated_bytes": 1048576, "reserved_bytes": 2},
            "gpu_memory_peak": {"allocated_bytes": 2097152, "reserved_bytes": 2},
            "prefill": [{"tokens": 128, "runs": [{"tok_s": 10.0, "ttft_s": 12.8}, {"tok_s": 20.0, "ttft_s": 6.4}, {"tok_s": 30.0, "ttft_s": 4.0}]},
                        {"tokens": 512, "skipped": "too long"}],
            "decode": [{"context": 128, "tokens": 8, "runs": [{"tok_s": 5.0, "dispatches_per_token": 60.0, "submits_per_token": 3.0, "bytes_read_back_per_token": 4.0, "buffers_created_per_token": 0.0, "record_ms_per_token": 1.234}]}],
            "decode_in_call": [
                {"context": 129, "call_tokens": 8, "call_tok_s": 4.0, "free_tokens": 0, "free_tok_s": null, "mask_ms_per_token": 0.05},
                {"context": 129, "call_tokens": 8, "call_tok_s": 6.0, "free_tokens": 0, "free_tok_s": null, "mask_ms_per_token": 0.07}
            ]
        });
        let s = native_model(&raw, Some(6));
        assert_eq!(s["prefill_128_tok_s"], json!(20.0));
        assert_eq!(s["ttft_128_s"], json!(6.4));
        assert_eq!(s["decode_128_tok_s"], json!(5.0));
        assert_eq!(s["dispatches_per_layer_per_token"], json!(10.0));
        assert_eq!(s["gpu_memory_peak_bytes"], json!(2097152));
        assert_eq!(s["skipped"], json!(["prefill 512: too long"]));
        let md = markdown(&json!({"date": "d", "native": {"tiny": s},
            "native_vision": {"model": "/x/mobius-tiny-gqa-int4-split", "adapter": "llvmpipe",
                "soft_tokens": 280, "slots": 2520, "encode_ms_median": 41.31, "encode_ms_min": 40.0,
                "encode_ms_max": 44.25, "runs_ms": [44.25, 41.31, 40.0], "dispatches": 75, "submits": 2},
            "browser": {"vision": {"model": "/x/mobius-tiny-gqa-int4-split", "adapter": "google swiftshader",
                "soft_tokens": 280, "slots": 2520, "encode_ms_median": 900.0, "encode_ms_min": 850.5,
                "encode_ms_max": 990.0, "runs_ms": [900.0, 850.5, 990.0], "dispatches": 39, "submits": 2}}}));
        assert!(
            md.contains(
                "| native | mobius-tiny-gqa-int4-split | llvmpipe | 280 | 2520 | 41.3 ms | 40.0–44.2 ms | 3 | 75 | 2 |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| Chromium | mobius-tiny-gqa-int4-split | google swiftshader | 280 | 2520 | 900.0 ms | 850.5–990.0 ms | 3 | 39 | 2 |"
            ),
            "{md}"
        );
        let failed = markdown(
            &json!({"date": "d", "browser": {"vision": {"model": "/x/m", "error": "no WebGPU"}}}),
        );
        assert!(
            failed.contains("| Chromium | m | error: no WebGPU |"),
            "{failed}"
        );
        assert!(md.contains("| tiny | llvmpipe | q4 | 500 ms | 20.0 tok/s | – | 6.40 s | 5.0 tok/s | – | 60.0 | 10.0 | 3.0 | 4.0 | 1.23 ms | 1.0 MiB / 2.0 MiB |"), "{md}");
        assert!(md.contains("tiny: skipped prefill 512: too long"), "{md}");
        assert_eq!(s["call_tok_s"], json!(5.0));
        assert_eq!(s["call_free_tok_s"], Value::Null);
        assert!(
            md.contains("tiny: decode inside a constrained tool call 5.0 tok/s (8 tokens, 0.060 ms of mask per token) vs – outside it"),
            "{md}"
        );
        // --cpu-reference: the ids' check against ONNX Runtime's CPU EP.
        let mut checked = s.clone();
        checked["ort_cpu"] = json!({"tokens_match": false, "token_sequences_compared": 1});
        let md = markdown(&json!({"date": "d", "native": {"tiny": checked}}));
        assert!(
            md.contains("tiny: ours' greedy ids **differ** from ONNX Runtime's CPU EP's (1 sequence(s) compared)"),
            "{md}"
        );
    }
}
