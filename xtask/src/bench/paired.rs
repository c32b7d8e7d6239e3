//! The browser bench's paired summary: per runtime every sample with its median, min and max;
//! per peer the per-pair ratios (ours / peer) with their median, min and max, and whether the
//! greedy ids agreed. No I/O here (unit-tested).
//!
//! Raw input (`bench/run-browser.mjs`, one model): `{dtype, pairs: [{order, runs: {<runtime>:
//! {load_s, peak_heap_bytes, settings, prefill: [{tokens, cold_ttft_s, ttft_s, prefill_tok_s,
//! ids}], decode: [{context, tokens, ttft_s, decode_s, decode_tok_s, untimed_steps?, ids,
//! prompt_steps?, counters?}],
//! in_call?: {context, call_tokens, call_s, call_tok_s, free_tokens, free_s, free_tok_s,
//! mask_ms_per_token, bytes_uploaded_per_token} or {error}} or {error}}}], ort_web_placement}`
//! (`in_call`: ours only, decode inside a constrained tool call).

use super::report::{Unit, fmt_num, median, ratio};
use serde_json::{Map, Value, json};

/// The headline metrics and their ratio keys (ours / peer; for times below 1 is better).
pub const HEADLINE: [(&str, &str, &str, Unit, bool); 6] = [
    (
        "decode_tok_s",
        "decode_tok_s_ratio",
        "decode (shortest context)",
        Unit::TokPerS,
        true,
    ),
    (
        "prefill_tok_s",
        "prefill_tok_s_ratio",
        "prefill (longest prompt)",
        Unit::TokPerS,
        true,
    ),
    (
        "ttft_s",
        "ttft_ratio",
        "time to first token (longest prompt)",
        Unit::Seconds,
        false,
    ),
    (
        "cold_ttft_s",
        "cold_ttft_ratio",
        "first prompt after load (shader compilation)",
        Unit::Seconds,
        false,
    ),
    ("load_s", "load_ratio", "load time", Unit::Seconds, false),
    (
        "peak_heap_bytes",
        "peak_heap_ratio",
        "peak JS + wasm heap while loading",
        Unit::Bytes,
        false,
    ),
];

/// The metrics of one run, flattened: `load_s`, `peak_heap_bytes`, `prefill_<n>_tok_s`,
/// `ttft_<n>_s`, `cold_ttft_<n>_s`, `decode_<context>_tok_s`, and the headline aliases
/// (`prefill_tok_s` / `ttft_s` of the longest prompt, `cold_ttft_s` of the first, `decode_tok_s`
/// of the shortest context).
pub fn flatten(run: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    if run.get("error").is_some() {
        return m;
    }
    for k in ["load_s", "peak_heap_bytes"] {
        if let Some(v) = run.get(k).filter(|v| v.is_number()) {
            m.insert(k.into(), v.clone());
        }
    }
    let list = |k: &str| {
        run.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let f = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    let prefill = list("prefill");
    for (i, p) in prefill.iter().enumerate() {
        let n = p.get("tokens").and_then(Value::as_u64).unwrap_or(0);
        for (key, val) in [
            (format!("prefill_{n}_tok_s"), f(p, "prefill_tok_s")),
            (format!("ttft_{n}_s"), f(p, "ttft_s")),
            (format!("cold_ttft_{n}_s"), f(p, "cold_ttft_s")),
        ] {
            if let Some(x) = val {
                m.insert(key, json!(x));
            }
        }
        if i == 0
            && let Some(x) = f(p, "cold_ttft_s")
        {
            m.insert("cold_ttft_s".into(), json!(x));
        }
    }
    if let Some(p) = prefill
        .iter()
        .max_by_key(|p| p.get("tokens").and_then(Value::as_u64).unwrap_or(0))
    {
        for (key, src) in [("prefill_tok_s", "prefill_tok_s"), ("ttft_s", "ttft_s")] {
            if let Some(x) = f(p, src) {
                m.insert(key.into(), json!(x));
            }
        }
    }
    let decode = list("decode");
    for d in &decode {
        let c = d.get("context").and_then(Value::as_u64).unwrap_or(0);
        if let Some(x) = f(d, "decode_tok_s") {
            m.insert(format!("decode_{c}_tok_s"), json!(x));
        }
    }
    if let Some(x) = decode
        .iter()
        .min_by_key(|d| d.get("context").and_then(Value::as_u64).unwrap_or(u64::MAX))
        .and_then(|d| f(d, "decode_tok_s"))
    {
        m.insert("decode_tok_s".into(), json!(x));
    }
    m
}

/// `{median, min, max, samples}` of the finite values (samples keep `null` for failed runs).
pub fn stats(samples: &[Option<f64>]) -> Value {
    let ok: Vec<f64> = samples
        .iter()
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    let min = ok.iter().copied().reduce(f64::min);
    let max = ok.iter().copied().reduce(f64::max);
    json!({"median": median(&ok), "min": min, "max": max, "samples": samples})
}

/// The greedy ids of a run: `prefill <n>` and `decode <t> after <c>` -> ids.
pub fn ids_of(run: &Value) -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    let list = |k: &str| {
        run.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for p in list("prefill") {
        out.push((
            format!("prefill {}", p.get("tokens").unwrap_or(&Value::Null)),
            p.get("ids")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        ));
    }
    for d in list("decode") {
        out.push((
            format!(
                "decode {} after {}",
                d.get("tokens").unwrap_or(&Value::Null),
                d.get("context").unwrap_or(&Value::Null)
            ),
            d.get("ids")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        ));
    }
    out.retain(|(_, ids)| !ids.is_empty());
    out
}

/// [`ids_of`] as a map: `prefill <n>` / `decode <t> after <c>` -> the ids (a JSON array).
fn ids_map(run: &Value) -> Map<String, Value> {
    ids_of(run)
        .into_iter()
        .map(|(k, v)| (k, Value::Array(v)))
        .collect()
}

/// A native bench document (`gemma-gem bench --runs 1` or `bench/native/ort_ep.py`) in the
/// shape of a browser run, for [`browser_model`]: its first run of each configuration.
pub fn native_run(doc: &Value) -> Value {
    let list = |k: &str| {
        doc.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let first = |e: &Value, k: &str| {
        e.get("runs")
            .and_then(|r| r.get(0))
            .and_then(|r| r.get(k))
            .cloned()
    };
    let prefill: Vec<Value> = list("prefill")
        .iter()
        .filter(|p| p.get("skipped").is_none())
        .map(|p| {
            json!({"tokens": p.get("tokens"), "ttft_s": first(p, "ttft_s"),
                   "prefill_tok_s": first(p, "tok_s"), "ids": p.get("ids")})
        })
        .collect();
    let decode: Vec<Value> = list("decode")
        .iter()
        .filter(|d| d.get("skipped").is_none())
        .map(|d| {
            json!({"context": d.get("context"), "tokens": d.get("tokens"),
                   "decode_tok_s": first(d, "tok_s"), "decode_s": first(d, "decode_s"), "ids": d.get("ids")})
        })
        .collect();
    json!({"load_s": doc.get("load_s"), "adapter": doc.get("adapter"), "prefill": prefill, "decode": decode})
}

/// The summary of one model's pairs, for ours and each of `peers`.
pub fn browser_model(raw: &Value, peers: &[String]) -> Value {
    let pairs = raw
        .get("pairs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let run_of = |p: &Value, rt: &str| p.get("runs").and_then(|r| r.get(rt)).cloned();
    let mut runtimes = vec!["ours".to_string()];
    runtimes.extend(peers.iter().cloned());
    let mut out = Map::new();
    // The weights ours ran (a GenAI package has one variant whatever was asked: its dtype, not
    // the adapter's default), else the variant asked for.
    let ran = pairs
        .iter()
        .filter_map(|p| run_of(p, "ours"))
        .find_map(|r| r.get("dtype").filter(|d| d.is_string()).cloned());
    out.insert(
        "dtype".into(),
        ran.or_else(|| raw.get("dtype").cloned())
            .unwrap_or(Value::Null),
    );
    out.insert("pairs".into(), json!(pairs.len()));
    out.insert(
        "orders".into(),
        Value::Array(
            pairs
                .iter()
                .map(|p| p.get("order").cloned().unwrap_or(Value::Null))
                .collect(),
        ),
    );
    // Per runtime: every metric's samples (one per pair) and stats.
    let mut per_rt = Map::new();
    for rt in &runtimes {
        let runs: Vec<Map<String, Value>> = pairs
            .iter()
            .map(|p| run_of(p, rt).map(|r| flatten(&r)).unwrap_or_default())
            .collect();
        let mut keys: Vec<String> = runs.iter().flat_map(|r| r.keys().cloned()).collect();
        keys.sort();
        keys.dedup();
        let mut m = Map::new();
        for k in keys {
            let samples: Vec<Option<f64>> = runs
                .iter()
                .map(|r| r.get(&k).and_then(Value::as_f64))
                .collect();
            m.insert(k, stats(&samples));
        }
        let errors: Vec<Value> = pairs
            .iter()
            .filter_map(|p| run_of(p, rt).and_then(|r| r.get("error").cloned()))
            .collect();
        let ok = pairs
            .iter()
            .filter(|p| run_of(p, rt).is_some_and(|r| r.get("error").is_none()))
            .count();
        m.insert("runs".into(), json!(ok));
        if !errors.is_empty() {
            m.insert("errors".into(), Value::Array(errors));
        }
        if let Some(s) = pairs
            .iter()
            .find_map(|p| run_of(p, rt).and_then(|r| r.get("settings").cloned()))
        {
            m.insert("settings".into(), s);
        }
        // `ort_web_static`: whether onnxruntime-web took graph capture, or its error.
        if let Some(g) = pairs
            .iter()
            .find_map(|p| run_of(p, rt).and_then(|r| r.get("graph_capture").cloned()))
        {
            m.insert("graph_capture".into(), g);
        }
        // onnxruntime-web on a decoder without num_logits_to_keep fills a decode configuration's
        // context in parts (bench.mjs PEER_CONTEXT_FILL): the most steps any pair took, per
        // context, where more than one.
        let mut steps = Map::new();
        for p in &pairs {
            let decode = run_of(p, rt).and_then(|r| r.get("decode").cloned());
            for d in decode
                .as_ref()
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(c), Some(n)) = (
                    d.get("context").and_then(Value::as_u64),
                    d.get("prompt_steps").and_then(Value::as_u64),
                ) else {
                    continue;
                };
                let e = steps.entry(c.to_string()).or_insert(json!(1));
                if n > e.as_u64().unwrap_or(1) {
                    *e = json!(n);
                }
            }
        }
        // Contexts filled in one step everywhere are not listed.
        steps.retain(|_, v| v.as_u64() != Some(1));
        if !steps.is_empty() {
            m.insert("context_prompt_steps".into(), Value::Object(steps));
        }
        if rt == "ours" {
            // Our work counters per decoded token (shortest context), medians over the pairs.
            let mut counters = Map::new();
            for p in &pairs {
                let d = run_of(p, rt)
                    .and_then(|r| r.get("decode").and_then(|d| d.get(0)).cloned())
                    .and_then(|d| d.get("counters").cloned());
                for (k, v) in d.as_ref().and_then(Value::as_object).into_iter().flatten() {
                    if let Some(a) = counters
                        .entry(k.clone())
                        .or_insert_with(|| json!([]))
                        .as_array_mut()
                    {
                        a.push(v.clone());
                    }
                }
            }
            for (k, v) in counters {
                let xs: Vec<f64> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_f64)
                    .collect();
                m.insert(k, json!(median(&xs)));
            }
        }
        per_rt.insert(rt.clone(), Value::Object(m));
    }
    // Per peer: per-pair ratios, token agreement.
    for peer in peers {
        let mut ratios: Map<String, Value> = Map::new();
        let mut pair_ratios: Map<String, Value> = Map::new();
        let mut runs = 0;
        let mut compared = 0;
        let mut mismatches = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        let both: Vec<(usize, Value, Value)> = pairs
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let (a, b) = (run_of(p, "ours")?, run_of(p, peer)?);
                (a.get("error").is_none() && b.get("error").is_none()).then_some((i, a, b))
            })
            .collect();
        for (_, a, b) in &both {
            runs += 1;
            let (fa, fb) = (flatten(a), flatten(b));
            keys.extend(fa.keys().filter(|k| fb.contains_key(*k)).cloned());
        }
        keys.sort();
        keys.dedup();
        for k in &keys {
            let rs: Vec<Option<f64>> = both
                .iter()
                .map(|(_, a, b)| {
                    ratio(
                        flatten(a).get(k).and_then(Value::as_f64),
                        flatten(b).get(k).and_then(Value::as_f64),
                    )
                })
                .collect();
            let st = stats(&rs);
            let name = HEADLINE
                .iter()
                .find(|h| h.0 == k)
                .map_or_else(|| format!("{k}_ratio"), |h| h.1.to_string());
            ratios.insert(name.clone(), st["median"].clone());
            pair_ratios.insert(name, st);
        }
        for (i, a, b) in &both {
            let theirs = ids_map(b);
            for (what, ours) in ids_of(a) {
                let Some(t) = theirs.get(&what).and_then(Value::as_array) else {
                    continue;
                };
                compared += 1;
                if &ours != t {
                    let first = ours
                        .iter()
                        .zip(t.iter())
                        .position(|(x, y)| x != y)
                        .unwrap_or(ours.len().min(t.len()));
                    mismatches.push(json!({"pair": i, "what": what, "first_difference": first, "ours": ours, "peer": t}));
                }
            }
        }
        let mut p = ratios;
        p.insert("runs".into(), json!(runs));
        p.insert(
            "tokens_match".into(),
            if compared == 0 {
                Value::Null
            } else {
                json!(mismatches.is_empty())
            },
        );
        p.insert("token_sequences_compared".into(), json!(compared));
        if !mismatches.is_empty() {
            p.insert("token_mismatches".into(), Value::Array(mismatches));
        }
        p.insert("pair_ratios".into(), Value::Object(pair_ratios));
        out.insert(peer.clone(), Value::Object(p));
    }
    if let Some(c) = ours_in_call(&pairs, &per_rt) {
        out.insert("ours_in_call".into(), c);
    }
    if let Some(pl) = raw.get("ort_web_placement") {
        out.insert(
            "ort_web_placement".into(),
            json!({"providers": pl.get("providers"), "cpu_node_count": pl.get("cpu_node_count"), "cpu_nodes": pl.get("cpu_nodes")}),
        );
    }
    out.insert("runtimes".into(), Value::Object(per_rt));
    Value::Object(out)
}

/// The keys of `ours_in_call` taken from each run's `in_call` (the same name in both).
pub const IN_CALL_KEYS: [&str; 5] = [
    "call_tok_s",
    "free_tok_s",
    "mask_ms_per_token",
    "call_tokens",
    "bytes_uploaded_per_token",
];

/// Ours inside a constrained tool call (each pair's `in_call`, measured after the other
/// configurations; the peers have no constraint): the medians of [`IN_CALL_KEYS`], `samples`
/// (each key's `{median, min, max, samples}`), `context` (prompt tokens with `<|tool_call>`),
/// `runs`, `errors`, and `unconstrained_tok_s`: the median of ours' `decode_<context>_tok_s` at
/// the same context without the call, from `per_rt`. `None` when no run has `in_call`.
fn ours_in_call(pairs: &[Value], per_rt: &Map<String, Value>) -> Option<Value> {
    let calls: Vec<Value> = pairs
        .iter()
        .filter_map(|p| p.get("runs")?.get("ours")?.get("in_call").cloned())
        .collect();
    if calls.is_empty() {
        return None;
    }
    let ok: Vec<&Value> = calls.iter().filter(|c| c.get("error").is_none()).collect();
    let mut out = Map::new();
    let mut samples = Map::new();
    for k in IN_CALL_KEYS {
        let st = stats(
            &ok.iter()
                .map(|c| c.get(k).and_then(Value::as_f64))
                .collect::<Vec<_>>(),
        );
        out.insert(k.into(), st["median"].clone());
        samples.insert(k.into(), st);
    }
    let context = ok
        .iter()
        .find_map(|c| c.get("context").and_then(Value::as_u64));
    out.insert("context".into(), json!(context));
    // The call's context counts `<|tool_call>`; the unconstrained decode's does not.
    let free_key = context.map(|c| format!("decode_{}_tok_s", c.saturating_sub(1)));
    out.insert(
        "unconstrained_tok_s".into(),
        free_key
            .and_then(|k| per_rt.get("ours")?.get(&k)?.get("median").cloned())
            .unwrap_or(Value::Null),
    );
    out.insert("runs".into(), json!(ok.len()));
    let errors: Vec<Value> = calls
        .iter()
        .filter_map(|c| c.get("error").cloned())
        .collect();
    if !errors.is_empty() {
        out.insert("errors".into(), Value::Array(errors));
    }
    out.insert("samples".into(), Value::Object(samples));
    Some(Value::Object(out))
}

/// Annotates each token mismatch of `summary` (one model's, from [`browser_model`]) with the
/// reference ids (`reference`: a run of ONNX Runtime's CPU EP in the shape of [`native_run`]):
/// `reference_ids`, `ours_matches_reference`, `peer_matches_reference`; and each peer with
/// `ours_matches_reference` over all its mismatches.
pub fn annotate_with_reference(summary: &mut Value, reference: &Value) {
    let refs = ids_map(reference);
    let Some(obj) = summary.as_object_mut() else {
        return;
    };
    for (_, p) in obj.iter_mut() {
        let Some(list) = p.get_mut("token_mismatches").and_then(Value::as_array_mut) else {
            continue;
        };
        let mut ours_all = true;
        for mm in list.iter_mut() {
            let what = mm["what"].as_str().unwrap_or("").to_string();
            if let Some(r) = refs.get(&what) {
                let ours = mm["ours"] == *r;
                ours_all &= ours;
                mm["reference_ids"] = r.clone();
                mm["ours_matches_reference"] = json!(ours);
                mm["peer_matches_reference"] = json!(mm["peer"] == *r);
            } else {
                ours_all = false;
            }
        }
        p["ours_matches_reference"] = json!(ours_all);
    }
}

/// The peers built on ONNX Runtime's WebGPU kernels (onnxruntime-web, transformers.js's build of
/// it, the native plug-in EP): the ones [`explain_with_windowless`] applies to.
pub const ORT_WEBGPU_PEERS: [&str; 4] = [
    "ort_web",
    "ort_web_static",
    "transformers_js",
    "ort_webgpu_ep",
];

/// `token_mismatch_cause` of a peer whose every differing sequence [`explain_with_windowless`]
/// explained.
pub const KV_SHARED_WINDOW_CAUSE: &str = "ONNX Runtime's WebGPU GroupQueryAttention applies no sliding window on KV-shared layers (onnxruntime #32462; bench/repro/README.md part 2): the peer's ids are ONNX Runtime CPU EP's on the graph without those windows, ours the CPU EP's on the graph as written (free-running, or teacher-forced at the first difference: token_mismatches[].windowless_referee)";

/// After [`annotate_with_reference`]: checks each differing sequence of an ONNX Runtime WebGPU
/// peer ([`ORT_WEBGPU_PEERS`]) against `windowless` (ONNX Runtime's CPU EP on the graph with no
/// window on its KV-shared GroupQueryAttention layers, `bench/native/ort_ep.py
/// --kv-shared-windowless`, in the shape of [`native_run`]). A mismatch is explained
/// (`explained_by: "kv_shared_window"`) when ours equal the reference on the graph as written and
/// the peer's ids equal the windowless reference's: both computed their model exactly, and the
/// models differ by that one known kernel behaviour. The peer gets `token_mismatches_explained`
/// (every mismatch explained) and, then, `token_mismatch_cause`; `tokens_match` stays false.
pub fn explain_with_windowless(summary: &mut Value, windowless: &Value) {
    let refs = ids_map(windowless);
    let Some(obj) = summary.as_object_mut() else {
        return;
    };
    for (peer, p) in obj.iter_mut() {
        if !ORT_WEBGPU_PEERS.contains(&peer.as_str()) {
            continue;
        }
        let Some(list) = p.get_mut("token_mismatches").and_then(Value::as_array_mut) else {
            continue;
        };
        for mm in list.iter_mut() {
            let r = refs.get(mm["what"].as_str().unwrap_or(""));
            let peer_windowless = r.map(|r| mm["peer"] == *r);
            if let Some(r) = r {
                mm["windowless_reference_ids"] = r.clone();
            }
            mm["peer_matches_windowless_reference"] = json!(peer_windowless);
            let explained =
                mm["ours_matches_reference"] == json!(true) && peer_windowless == Some(true);
            if explained {
                mm["explained_by"] = json!("kv_shared_window");
            }
        }
        settle(p);
    }
}

/// `explained_by` of a mismatch at whose first differing id the referee (ONNX Runtime's CPU EP,
/// teacher-forced on the common prefix: [`apply_judgement`]) picks ours' id.
pub const REFEREE_PICKS_OURS: &str = "referee_picks_ours";

/// `token_mismatch_cause` text of [`REFEREE_PICKS_OURS`].
pub const REFEREE_CAUSE: &str = "at the first differing id, ONNX Runtime's CPU EP (exact math), fed the same prompt and the ids both runtimes had generated up to there, picks ours' id, not the peer's: the peer left the greedy path there (its logits of both ids: token_mismatches[].referee)";

/// The cause text of an `explained_by` value.
fn cause_text(cause: &str) -> &str {
    match cause {
        "kv_shared_window" => KV_SHARED_WINDOW_CAUSE,
        REFEREE_PICKS_OURS => REFEREE_CAUSE,
        other => other,
    }
}

/// A peer's `token_mismatches_explained` (every mismatch has an `explained_by`) and, then,
/// `token_mismatch_cause` (the causes' texts, each once).
fn settle(p: &mut Value) {
    let Some(list) = p.get("token_mismatches").and_then(Value::as_array) else {
        return;
    };
    let mut causes: Vec<String> = Vec::new();
    for c in list
        .iter()
        .filter_map(|mm| mm.get("explained_by")?.as_str())
    {
        if !causes.iter().any(|x| x == c) {
            causes.push(c.to_string());
        }
    }
    let all = !list.is_empty()
        && list
            .iter()
            .all(|mm| mm.get("explained_by").is_some_and(Value::is_string));
    p["token_mismatches_explained"] = json!(all);
    if let Some(o) = p.as_object_mut() {
        if all {
            let text: Vec<&str> = causes.iter().map(|c| cause_text(c)).collect();
            o.insert("token_mismatch_cause".into(), json!(text.join("; ")));
        } else {
            o.remove("token_mismatch_cause");
        }
    }
}

/// The prompt length of a sequence's name: `prefill <n>` -> n, `decode <t> after <c>` -> c.
fn context_of(what: &str) -> Option<usize> {
    match what.strip_prefix("prefill ") {
        Some(n) => n.parse().ok(),
        None => what.rsplit_once(" after ")?.1.parse().ok(),
    }
}

/// The `bench/native/ort_ep.py --judge` request of a mismatch: ours' ids teacher-forced after
/// the prompt, the peer's id at the first difference as the alternative. None when one side
/// ended before the difference.
fn judge_request(mm: &Value) -> Option<Value> {
    let context = context_of(mm.get("what")?.as_str()?)?;
    let fd = usize::try_from(mm.get("first_difference")?.as_u64()?).ok()?;
    let ours = mm.get("ours")?.as_array()?;
    let peer = mm.get("peer")?.as_array()?;
    if fd >= ours.len() || fd >= peer.len() {
        return None;
    }
    Some(json!({"context": context, "ids": ours, "alternatives": [{"step": fd, "id": peer[fd]}]}))
}

/// The distinct `--judge` requests of every mismatch of `summary` (one model's, after
/// [`explain_with_windowless`]) that no cause explains yet.
pub fn judge_requests(summary: &Value) -> Vec<Value> {
    requests_of(summary, unexplained, judge_request)
}

/// Whether a mismatch has no cause yet (what [`apply_judgement`] judges).
fn unexplained(_peer: &str, mm: &Value) -> bool {
    mm.get("explained_by").is_none()
}

/// The distinct requests `make` writes for the mismatches `wanted` names (peer, mismatch).
fn requests_of(
    summary: &Value,
    wanted: fn(&str, &Value) -> bool,
    make: fn(&Value) -> Option<Value>,
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for (peer, p) in summary.as_object().into_iter().flatten() {
        let list = p.get("token_mismatches").and_then(Value::as_array);
        for mm in list.into_iter().flatten().filter(|mm| wanted(peer, mm)) {
            if let Some(r) = make(mm)
                && !out.contains(&r)
            {
                out.push(r);
            }
        }
    }
    out
}

/// For each mismatch `wanted` names whose request (`make`) has an answer (`judged[i]` answers
/// `requests[i]`) that reads as a [`Verdict`]: `mark(mismatch, verdict, answer)`; then every peer
/// is [`settle`]d.
fn judge_each(
    summary: &mut Value,
    requests: &[Value],
    judged: &[Value],
    wanted: fn(&str, &Value) -> bool,
    make: fn(&Value) -> Option<Value>,
    mark: impl Fn(&mut Value, Option<&Verdict<'_>>, &Value),
) {
    let Some(obj) = summary.as_object_mut() else {
        return;
    };
    for (peer, p) in obj.iter_mut() {
        let Some(list) = p.get_mut("token_mismatches").and_then(Value::as_array_mut) else {
            continue;
        };
        for mm in list.iter_mut().filter(|mm| wanted(peer, mm)) {
            let Some(req) = make(mm) else {
                continue;
            };
            let Some(j) = requests
                .iter()
                .position(|r| *r == req)
                .and_then(|i| judged.get(i))
            else {
                continue;
            };
            mark(mm, Verdict::of(&req, j).as_ref(), j);
        }
        settle(p);
    }
}

/// Annotates each unexplained mismatch with the referee's scores (`judged[i]` answers
/// `requests[i]`, from `ort_ep.py --judge`): `referee` = `{picks: "ours" | "peer" | "neither",
/// top, top_logit, ours_id, ours_logit, peer_id, peer_logit}` at the first differing id, and over
/// ours' whole sequence `ours_ids_picked` / `ours_ids_scored` (steps where ours' id is the CPU
/// EP's own pick) with `largest_gap_elsewhere` (its top logit minus ours' id's logit where not).
/// `picks: "ours"` explains the mismatch ([`REFEREE_PICKS_OURS`]); the peers are [`settle`]d.
pub fn apply_judgement(summary: &mut Value, requests: &[Value], judged: &[Value]) {
    judge_each(
        summary,
        requests,
        judged,
        unexplained,
        judge_request,
        |mm, v, j| {
            let Some(v) = v else {
                return;
            };
            let picks = v.picks("ours", "peer");
            mm["referee"] = json!({
                "what": "ONNX Runtime's CPU EP (bench/native/ort_ep.py --judge), fed the prompt and ours' ids teacher-forced",
                "picks": picks, "top": v.at["top"], "top_logit": v.at["top_logit"],
                "ours_id": v.fed, "ours_logit": v.at["logit"],
                "peer_id": v.other, "peer_logit": j["alternatives"][0],
                "ours_ids_picked": v.picked, "ours_ids_scored": v.scored,
                "largest_gap_elsewhere": v.gap,
            });
            if picks == "ours" {
                mm["explained_by"] = json!(REFEREE_PICKS_OURS);
            }
        },
    );
}

/// One `ort_ep.py --judge` answer read against its request: the step `at` of the first
/// difference, the id fed there (`fed`) and the alternative (`other`), how many of the fed ids
/// are the CPU EP's own pick (`picked` of `scored`) and by how much its pick led the fed id at
/// most elsewhere (`gap`).
struct Verdict<'a> {
    at: &'a Value,
    fed: &'a Value,
    other: &'a Value,
    picked: usize,
    scored: usize,
    gap: Option<f64>,
}

impl<'a> Verdict<'a> {
    fn of(req: &'a Value, judged: &'a Value) -> Option<Self> {
        let steps = judged.get("steps")?.as_array()?;
        let ids = req.get("ids")?.as_array()?;
        let fd = usize::try_from(req["alternatives"][0]["step"].as_u64()?).ok()?;
        let at = steps.get(fd)?;
        let mut picked = 0;
        let mut gap: Option<f64> = None;
        for (st, id) in steps.iter().zip(ids) {
            if st["top"] == *id {
                picked += 1;
            } else if !std::ptr::eq(st, at) {
                let g =
                    st["top_logit"].as_f64().unwrap_or(0.0) - st["logit"].as_f64().unwrap_or(0.0);
                gap = Some(gap.map_or(g, |x: f64| x.max(g)));
            }
        }
        Some(Verdict {
            at,
            fed: ids.get(fd)?,
            other: &req["alternatives"][0]["id"],
            picked,
            scored: steps.len(),
            gap,
        })
    }

    /// `fed` where the CPU EP's pick at the first difference is the fed id, `other` where it is
    /// the alternative, else "neither".
    fn picks(&self, fed: &'static str, other: &'static str) -> &'static str {
        if self.at["top"] == *self.fed {
            fed
        } else if self.at["top"] == *self.other {
            other
        } else {
            "neither"
        }
    }
}

/// The `ort_ep.py --judge --kv-shared-windowless` request of a mismatch: the peer's ids
/// teacher-forced after the prompt, ours' id at the first difference as the alternative.
fn windowless_judge_request(mm: &Value) -> Option<Value> {
    let r = judge_request(mm)?;
    let fd = r["alternatives"][0]["step"].as_u64()? as usize;
    Some(json!({"context": r["context"], "ids": mm.get("peer")?,
                "alternatives": [{"step": fd, "id": mm.get("ours")?.get(fd)?}]}))
}

/// Whether a mismatch is one [`apply_windowless_judgement`] may settle: an ONNX Runtime WebGPU
/// peer's ([`ORT_WEBGPU_PEERS`]) whose first differing id the referee on the graph as written
/// gave to ours ([`REFEREE_PICKS_OURS`]).
fn wants_windowless_judgement(peer: &str, mm: &Value) -> bool {
    ORT_WEBGPU_PEERS.contains(&peer) && mm["explained_by"] == json!(REFEREE_PICKS_OURS)
}

/// After [`apply_judgement`], on an exporters' package: the distinct `--judge
/// --kv-shared-windowless` requests of the mismatches [`wants_windowless_judgement`] names.
/// A free-running windowless CPU EP ([`explain_with_windowless`]) is no proof at E2B's shapes,
/// where its own near ties part it from both runtimes after a few ids; teacher-forced, it says
/// whose id the windowless model picks where the two runtimes part.
pub fn windowless_judge_requests(summary: &Value) -> Vec<Value> {
    requests_of(
        summary,
        wants_windowless_judgement,
        windowless_judge_request,
    )
}

/// Annotates each mismatch of [`windowless_judge_requests`] with the windowless referee's scores
/// (`windowless_referee`: `{picks: "peer" | "ours" | "neither", top, top_logit, peer_id,
/// peer_logit, ours_id, ours_logit, peer_ids_picked, peer_ids_scored, largest_gap_elsewhere}`,
/// fed the peer's ids). Where the CPU EP on the graph as written picks ours' id and on the graph
/// without windows on its KV-shared layers the peer's, the two runtimes computed those two models
/// and the cause is the known kernel behaviour: `explained_by: "kv_shared_window"` (instead of
/// [`REFEREE_PICKS_OURS`]). A first difference inside the smallest KV-shared window is not run
/// (the two graphs are one model there): `windowless_referee: {inside_kv_shared_window: W}`, the
/// referee's verdict kept. The peers are [`settle`]d.
pub fn apply_windowless_judgement(summary: &mut Value, requests: &[Value], judged: &[Value]) {
    judge_each(
        summary,
        requests,
        judged,
        wants_windowless_judgement,
        windowless_judge_request,
        |mm, v, j| {
            let Some(v) = v else {
                // Not run: the first difference lies inside every KV-shared window, where the
                // graph without them is the graph as written, so the referee's verdict stands.
                if let Some(w) = j.get("inside_kv_shared_window").and_then(Value::as_u64) {
                    mm["windowless_referee"] = json!({"inside_kv_shared_window": w});
                }
                return;
            };
            let picks = v.picks("peer", "ours");
            mm["windowless_referee"] = json!({
                "what": "ONNX Runtime's CPU EP without windows on the KV-shared layers (bench/native/ort_ep.py --judge --kv-shared-windowless), fed the prompt and the peer's ids teacher-forced",
                "picks": picks, "top": v.at["top"], "top_logit": v.at["top_logit"],
                "peer_id": v.fed, "peer_logit": v.at["logit"],
                "ours_id": v.other, "ours_logit": j["alternatives"][0],
                "peer_ids_picked": v.picked, "peer_ids_scored": v.scored,
                "largest_gap_elsewhere": v.gap,
            });
            if picks == "peer" {
                mm["explained_by"] = json!("kv_shared_window");
            }
        },
    );
}

/// Whether a model's summary (from [`browser_model`], after [`annotate_with_reference`]) has an
/// ONNX Runtime WebGPU peer whose ids differ from ours where ours equal the CPU EP's: the case
/// [`explain_with_windowless`] can explain.
pub fn wants_windowless_check(summary: &Value) -> bool {
    ORT_WEBGPU_PEERS.iter().any(|peer| {
        summary
            .get(*peer)
            .and_then(|p| p.get("token_mismatches"))
            .and_then(Value::as_array)
            .is_some_and(|l| {
                l.iter().any(|mm| {
                    mm["ours_matches_reference"] == json!(true)
                        && mm["peer_matches_reference"] == json!(false)
                })
            })
    })
}

/// Every (model, peer, summary) of `browser`'s models whose greedy ids differed from ours.
fn differing_peers(browser: &Value) -> Vec<(&str, &str, &Value)> {
    browser
        .get("models")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .flat_map(|(name, m)| {
            m.as_object()
                .into_iter()
                .flatten()
                .filter(|(_, p)| p.get("tokens_match") == Some(&json!(false)))
                .map(move |(peer, p)| (name.as_str(), peer.as_str(), p))
        })
        .collect()
}

/// Whether a cause ([`explain_with_windowless`], [`apply_judgement`]) explained every mismatch of
/// a peer's summary.
fn explained(p: &Value) -> bool {
    p.get("token_mismatches_explained") == Some(&json!(true))
}

/// The peers whose greedy ids differed from ours for a cause [`explain_with_windowless`] proved,
/// over all models: not failures, but said on every run.
pub fn token_notes(browser: &Value) -> Vec<String> {
    differing_peers(browser)
        .into_iter()
        .filter(|(_, _, p)| explained(p))
        .map(|(name, peer, p)| {
            let n = p
                .get("token_mismatches")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            format!(
                "{name}: {peer}'s greedy ids differ from ours in {n} sequence(s), explained: {}",
                p.get("token_mismatch_cause")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            )
        })
        .collect()
}

/// The peers whose greedy ids differed from ours (with the first difference), over all models;
/// a peer whose every mismatch is explained ([`token_notes`]) is not among them.
pub fn token_failures(browser: &Value) -> Vec<String> {
    differing_peers(browser)
        .into_iter()
        .filter(|(_, _, p)| !explained(p))
        .map(|(name, peer, p)| {
            let first = p
                .get("token_mismatches")
                .and_then(|v| v.get(0))
                .map(|v| {
                    format!(
                        "pair {}, {}: first difference at id {}",
                        v["pair"],
                        v["what"].as_str().unwrap_or(""),
                        v["first_difference"]
                    )
                })
                .unwrap_or_default();
            let reference = match p.get("ours_matches_reference") {
                Some(Value::Bool(true)) => "; ours match ONNX Runtime's CPU EP",
                Some(Value::Bool(false)) => "; ours differ from ONNX Runtime's CPU EP too",
                _ => "",
            };
            let referee = p
                .get("token_mismatches")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|mm| mm.get("explained_by").is_none())
                .and_then(|mm| mm.get("referee")?.get("picks")?.as_str())
                .map(|w| match w {
                    "peer" => "; at the first difference the CPU EP, teacher-forced, picks the peer's id",
                    _ => "; at the first difference the CPU EP, teacher-forced, picks neither id",
                })
                .unwrap_or("");
            format!("{name}: {peer} computed other greedy tokens than ours ({first}{reference}{referee})")
        })
        .collect()
}

/// One mismatch's referee verdict ([`apply_judgement`]) in words, for the Markdown and the
/// failure messages.
fn referee_line(mm: &Value) -> Option<String> {
    let r = mm.get("referee")?;
    let f = |k: &str| {
        r.get(k)
            .and_then(Value::as_f64)
            .map_or("?".into(), |x| format!("{x:.4}"))
    };
    let picks = match r["picks"].as_str() {
        Some("ours") => "picks ours'".to_string(),
        Some("peer") => "picks the peer's".to_string(),
        _ => format!(
            "picks neither: its own pick is {} (logit {})",
            r["top"],
            f("top_logit")
        ),
    };
    let elsewhere = match r.get("largest_gap_elsewhere").and_then(Value::as_f64) {
        Some(g) => format!("; elsewhere its own pick leads ours' id by at most {g:.4}"),
        None => String::new(),
    };
    let windowless = mm.get("windowless_referee").map_or(String::new(), |w| {
        if let Some(n) = w.get("inside_kv_shared_window") {
            return format!("; that is inside every KV-shared layer's window ({n} tokens), where the graph without those windows is the same model");
        }
        let g = |k: &str| {
            w.get(k)
                .and_then(Value::as_f64)
                .map_or("?".into(), |x| format!("{x:.4}"))
        };
        let picks = match w["picks"].as_str() {
            Some("peer") => "the peer's".to_string(),
            Some("ours") => "ours'".to_string(),
            _ => format!("neither: {} (logit {})", w["top"], g("top_logit")),
        };
        format!(
            "; without windows on the KV-shared layers, fed the peer's ids, it picks {picks} (the peer's logit {}, ours' {}), and the peer's ids are its own pick at {} of {} steps",
            g("peer_logit"),
            g("ours_logit"),
            w["peer_ids_picked"],
            w["peer_ids_scored"],
        )
    });
    Some(format!(
        "pair {}, {}, first difference at id {}: ours {} (logit {}), the peer's {} (logit {}); ONNX Runtime's CPU EP, fed the prompt and the common ids, {picks}; ours' ids are its own pick at {} of {} steps{elsewhere}{windowless}",
        mm["pair"],
        mm["what"].as_str().unwrap_or(""),
        mm["first_difference"],
        r["ours_id"],
        f("ours_logit"),
        r["peer_id"],
        f("peer_logit"),
        r["ours_ids_picked"],
        r["ours_ids_scored"],
    ))
}

fn spread(v: &Value, unit: Unit) -> String {
    let g = |k: &str| v.get(k).and_then(Value::as_f64);
    match (g("median"), g("min"), g("max")) {
        (Some(m), Some(lo), Some(hi)) => format!(
            "{} ({}–{})",
            fmt_num(Some(m), unit),
            fmt_num(Some(lo), unit),
            fmt_num(Some(hi), unit)
        ),
        _ => "–".into(),
    }
}

fn ratio_spread(v: &Value) -> String {
    let g = |k: &str| v.get(k).and_then(Value::as_f64);
    match (g("median"), g("min"), g("max")) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.2}× ({lo:.2}–{hi:.2})"),
        _ => "–".into(),
    }
}

/// The Markdown of one model's paired summary.
pub fn markdown_model(name: &str, m: &Value, software: bool) -> String {
    let mut s = String::new();
    let rts: Vec<String> = m
        .get("runtimes")
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let mut rts: Vec<String> = rts;
    rts.sort_by_key(|r| (r != "ours", r.clone()));
    let peers: Vec<&String> = rts.iter().filter(|r| *r != "ours").collect();
    s.push_str(&format!(
        "### {name} ({}, {} pairs){}\n\n",
        m.get("dtype").and_then(Value::as_str).unwrap_or("?"),
        m.get("pairs").unwrap_or(&Value::Null),
        if software {
            " — SwiftShader regression indicators, not speed claims"
        } else {
            ""
        }
    ));
    s.push_str("Medians (min–max) over the pairs; ratios are ours / peer, the median (min–max) of the per-pair ratios.\n\n| metric |");
    for r in &rts {
        s.push_str(&format!(" {r} |"));
    }
    for p in &peers {
        s.push_str(&format!(" ours / {p} |"));
    }
    s.push_str("\n|---|");
    for _ in 0..rts.len() + peers.len() {
        s.push_str("---|");
    }
    s.push('\n');
    let mut keys: Vec<String> = m
        .get("runtimes")
        .and_then(|r| r.get("ours"))
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(_, v)| v.get("median").is_some())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    for k in keys {
        let unit = if k.ends_with("_tok_s") {
            Unit::TokPerS
        } else if k.ends_with("_bytes") {
            Unit::Bytes
        } else {
            Unit::Seconds
        };
        s.push_str(&format!("| `{k}` |"));
        for r in &rts {
            let v = m
                .get("runtimes")
                .and_then(|x| x.get(r))
                .and_then(|x| x.get(&k))
                .cloned()
                .unwrap_or(Value::Null);
            s.push_str(&format!(" {} |", spread(&v, unit)));
        }
        let rk = HEADLINE
            .iter()
            .find(|h| h.0 == k)
            .map_or_else(|| format!("{k}_ratio"), |h| h.1.to_string());
        for p in &peers {
            let v = m
                .get(p.as_str())
                .and_then(|x| x.get("pair_ratios"))
                .and_then(|x| x.get(&rk))
                .cloned()
                .unwrap_or(Value::Null);
            s.push_str(&format!(" {} |", ratio_spread(&v)));
        }
        s.push('\n');
    }
    s.push('\n');
    for p in &peers {
        let pv = m.get(p.as_str()).cloned().unwrap_or(Value::Null);
        let tm = match pv.get("tokens_match") {
            Some(Value::Bool(true)) => "identical greedy ids".to_string(),
            Some(Value::Bool(false)) if explained(&pv) => format!(
                "**greedy ids differ**, explained: {} (see token_mismatches)",
                pv.get("token_mismatch_cause")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ),
            Some(Value::Bool(false)) => "**greedy ids differ** (see token_mismatches)".to_string(),
            _ => "no ids compared".to_string(),
        };
        s.push_str(&format!(
            "- {p}: {} pairs with both runs, {tm} ({} sequences compared).\n",
            pv.get("runs").unwrap_or(&Value::Null),
            pv.get("token_sequences_compared").unwrap_or(&Value::Null)
        ));
        let list = pv.get("token_mismatches").and_then(Value::as_array);
        for mm in list.into_iter().flatten() {
            if let Some(line) = referee_line(mm) {
                s.push_str(&format!("  - {line}\n"));
            }
        }
    }
    for r in &rts {
        for e in m
            .get("runtimes")
            .and_then(|x| x.get(r))
            .and_then(|x| x.get("errors"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            s.push_str(&format!(
                "- {r} failed a run: {}\n",
                e.as_str().unwrap_or("")
            ));
        }
    }
    if let Some(f) = m.get("graph_form").and_then(Value::as_str) {
        s.push_str(&format!("- graph form: {f}.\n"));
    }
    if let Some(t) = m.get("transformers_js_layout") {
        s.push_str(&format!(
            "- transformers_js read it as `{}` ({}): {}.\n",
            t["name"].as_str().unwrap_or(""),
            t["dtype"].as_str().unwrap_or(""),
            t["layout"].as_str().unwrap_or("")
        ));
    }
    for (peer, why) in m
        .get("not_run")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        s.push_str(&format!(
            "- {peer}: not run on this model: {}.\n",
            why.as_str().unwrap_or("")
        ));
    }
    if let Some(g) = m
        .get("runtimes")
        .and_then(|x| x.get("ort_web_static"))
        .and_then(|x| x.get("graph_capture"))
    {
        let rows = m
            .get("ort_web_static_capacity")
            .map_or("?".into(), Value::to_string);
        let error = g
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no answer");
        let line = match (g.get("accepted"), g.get("measured")) {
            (Some(Value::Bool(true)), Some(Value::Bool(true))) => {
                "measured with graph capture (decode steps replay a captured graph; the prompt runs uncaptured)".to_string()
            }
            (Some(Value::Bool(true)), _) => format!(
                "measured without graph capture; graph capture accepted by onnxruntime-web but not measured: {error}"
            ),
            _ => format!("measured without graph capture; graph capture refused: {error}"),
        };
        s.push_str(&format!(
            "- ort_web_static: fixed cache of {rows} rows bound in place, {line}.\n"
        ));
    }
    for (rt, r) in m
        .get("runtimes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(steps) = r.get("context_prompt_steps").and_then(Value::as_object) else {
            continue;
        };
        let each: Vec<String> = steps
            .iter()
            .map(|(c, n)| format!("{c} in {n} steps"))
            .collect();
        s.push_str(&format!(
            "- {rt}: the decode context filled in parts (its decoder computes every position's logits): {}; the decode clock starts after the context either way.\n",
            each.join(", ")
        ));
    }
    if let Some(pl) = m.get("ort_web_placement") {
        s.push_str(&format!(
            "- onnxruntime-web node placement: {}; nodes on the CPU: {}\n",
            pl.get("providers").unwrap_or(&Value::Null),
            pl.get("cpu_node_count").unwrap_or(&Value::Null)
        ));
    }
    let o = m
        .get("runtimes")
        .and_then(|x| x.get("ours"))
        .cloned()
        .unwrap_or(Value::Null);
    let plain = |k: &str| {
        o.get(k)
            .and_then(Value::as_f64)
            .map_or("–".into(), |x| format!("{x:.1}"))
    };
    if o.get("dispatches_per_token")
        .and_then(Value::as_f64)
        .is_some()
    {
        s.push_str(&format!(
        "- ours per decoded token: {} dispatches, {} submits, {} bytes read back, {} bytes uploaded, {} ms of host recording.\n",
        plain("dispatches_per_token"),
        plain("submits_per_token"),
        plain("bytes_read_back_per_token"),
        plain("bytes_uploaded_per_token"),
        o.get("record_ms_per_token").and_then(Value::as_f64).map_or("–".into(), |x| format!("{x:.2}")),
    ));
    }
    if let Some(c) = m.get("ours_in_call") {
        let sample = |k: &str| {
            c.get("samples")
                .and_then(|x| x.get(k))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let g = |k: &str| c.get(k).and_then(Value::as_f64);
        s.push_str(&format!(
            "- ours inside a constrained tool call after {} tokens ({} runs): {} over {} tokens, {} of mask per token, {} bytes uploaded per token; after the call closed {}; unconstrained at the same context {}.\n",
            c.get("context").and_then(Value::as_u64).map_or("–".into(), |x| x.to_string()),
            c.get("runs").unwrap_or(&Value::Null),
            spread(&sample("call_tok_s"), Unit::TokPerS),
            g("call_tokens").map_or("–".into(), |x| format!("{x:.0}")),
            g("mask_ms_per_token").map_or("–".into(), |x| format!("{x:.3} ms")),
            g("bytes_uploaded_per_token").map_or("–".into(), |x| format!("{x:.0}")),
            spread(&sample("free_tok_s"), Unit::TokPerS),
            fmt_num(g("unconstrained_tok_s"), Unit::TokPerS),
        ));
        for e in c
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            s.push_str(&format!(
                "- ours failed inside a tool call: {}\n",
                e.as_str().unwrap_or("")
            ));
        }
    }
    for why in m
        .get("skipped")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        s.push_str(&format!("- skipped: {}\n", why.as_str().unwrap_or("")));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(load: f64, ttft: f64, decode_s: f64, ids: &[u32]) -> Value {
        json!({
            "load_s": load,
            "prefill": [{"tokens": 16, "cold_ttft_s": ttft * 2.0, "ttft_s": ttft, "prefill_tok_s": 16.0 / ttft, "ids": [ids[0]]}],
            "decode": [{"context": 16, "tokens": ids.len() - 1, "decode_s": decode_s,
                        "decode_tok_s": (ids.len() - 1) as f64 / decode_s, "ids": ids,
                        "counters": {"dispatches_per_token": 62.0}}]
        })
    }

    #[test]
    fn a_context_filled_in_parts_is_reported_and_leaves_the_ratios_alone() {
        let parts = |steps: u64| {
            let mut r = run(2.0, 1.0, 4.0, &[5, 6, 7]);
            r["decode"][0]["prompt_steps"] = json!(steps);
            r
        };
        let mut ours = run(1.0, 0.5, 1.0, &[5, 6, 7]);
        ours["decode"][0]["prompt_steps"] = json!(1);
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", "ort_web"], "runs": {"ours": ours.clone(), "ort_web": parts(4)}},
            {"order": ["ort_web", "ours"], "runs": {"ours": ours, "ort_web": parts(1)}},
        ]});
        let s = browser_model(&raw, &["ort_web".to_string()]);
        assert_eq!(
            s["runtimes"]["ort_web"]["context_prompt_steps"],
            json!({"16": 4})
        );
        assert!(s["runtimes"]["ours"].get("context_prompt_steps").is_none());
        // Not a metric: no ratio of it, the decode ratio as without it.
        let p = s["ort_web"].as_object().unwrap();
        assert!(p.keys().all(|k| !k.contains("prompt_steps")), "{p:?}");
        assert_eq!(s["ort_web"]["decode_tok_s_ratio"], json!(4.0));
        let md = markdown_model("m", &s, true);
        assert!(
            md.contains("- ort_web: the decode context filled in parts (its decoder computes every position's logits): 16 in 4 steps;"),
            "{md}"
        );
        assert!(!md.contains("- ours: the decode context"), "{md}");
    }

    #[test]
    fn paired_ratios_spread_and_token_check() {
        let raw = json!({
            "dtype": "q4",
            "pairs": [
                {"order": ["ort_web", "ours"], "runs": {"ours": run(1.0, 0.5, 1.0, &[5, 6, 7]), "ort_web": run(2.0, 1.0, 4.0, &[5, 6, 7])}},
                {"order": ["ours", "ort_web"], "runs": {"ours": run(1.0, 0.5, 2.0, &[5, 6, 7]), "ort_web": run(2.0, 1.0, 4.0, &[5, 6, 7])}},
                {"order": ["ours", "ort_web"], "runs": {"ours": {"error": "boom"}, "ort_web": run(2.0, 1.0, 4.0, &[5, 6, 7])}}
            ]
        });
        let s = browser_model(&raw, &["ort_web".to_string()]);
        let p = &s["ort_web"];
        // Per-pair decode ratios 4 and 2: median 3.
        assert_eq!(p["decode_tok_s_ratio"], json!(3.0));
        assert_eq!(p["pair_ratios"]["decode_tok_s_ratio"]["min"], json!(2.0));
        assert_eq!(p["pair_ratios"]["decode_tok_s_ratio"]["max"], json!(4.0));
        assert_eq!(p["ttft_ratio"], json!(0.5));
        assert_eq!(p["prefill_tok_s_ratio"], json!(2.0));
        assert_eq!(p["runs"], json!(2));
        assert_eq!(p["tokens_match"], json!(true));
        assert_eq!(s["runtimes"]["ours"]["runs"], json!(2));
        assert_eq!(s["runtimes"]["ours"]["errors"], json!(["boom"]));
        assert_eq!(
            s["runtimes"]["ours"]["decode_16_tok_s"]["samples"],
            json!([2.0, 1.0, null])
        );
        assert_eq!(s["runtimes"]["ours"]["dispatches_per_token"], json!(62.0));
        // No run says its weights: the variant asked for. A GenAI package's own variant (ours
        // reports the weights it ran) wins over the adapter's default.
        assert_eq!(s["dtype"], json!("q4"));
        let mut ran = raw.clone();
        ran["pairs"][1]["runs"]["ours"]["dtype"] = json!("q4f16");
        assert_eq!(
            browser_model(&ran, &["ort_web".to_string()])["dtype"],
            json!("q4f16")
        );
        assert!(token_failures(&json!({"models": {"tiny": s.clone()}})).is_empty());
        let md = markdown_model("tiny", &s, true);
        assert!(md.contains("| `decode_tok_s` | 1.5 tok/s (1.0 tok/s–2.0 tok/s) | 0.500 tok/s (0.500 tok/s–0.500 tok/s) | 3.00× (2.00–4.00) |"), "{md}");
        assert!(md.contains("SwiftShader regression indicators"), "{md}");
        assert!(md.contains("ours failed a run: boom"), "{md}");
        // No run measured a call: no summary.
        assert!(s.get("ours_in_call").is_none());
    }

    #[test]
    fn decode_in_a_tool_call_is_summarised_for_ours() {
        let with_call = |call_tok_s: f64, mask: f64| {
            let mut r = run(1.0, 0.5, 1.0, &[5, 6, 7]);
            r["in_call"] = json!({"context": 17, "call_tokens": 2, "call_s": 2.0 / call_tok_s,
                "call_tok_s": call_tok_s, "free_tokens": 0, "free_s": 0.0, "free_tok_s": null,
                "mask_ms_per_token": mask, "bytes_uploaded_per_token": 300.0});
            r
        };
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", "ort_web"], "runs": {"ours": with_call(4.0, 0.02), "ort_web": run(1.0, 0.5, 1.0, &[5, 6, 7])}},
            {"order": ["ort_web", "ours"], "runs": {"ours": with_call(8.0, 0.04), "ort_web": run(1.0, 0.5, 1.0, &[5, 6, 7])}},
            {"order": ["ours", "ort_web"], "runs": {"ours": {"load_s": 1.0, "in_call": {"error": "no grammar"}}, "ort_web": run(1.0, 0.5, 1.0, &[5, 6, 7])}}
        ]});
        let s = browser_model(&raw, &["ort_web".to_string()]);
        let c = &s["ours_in_call"];
        assert_eq!(c["call_tok_s"], json!(6.0));
        assert_eq!(c["samples"]["call_tok_s"]["min"], json!(4.0));
        assert_eq!(c["samples"]["call_tok_s"]["max"], json!(8.0));
        assert_eq!(c["mask_ms_per_token"], json!(0.03));
        assert_eq!(c["call_tokens"], json!(2.0));
        assert_eq!(c["free_tok_s"], Value::Null);
        assert_eq!(c["context"], json!(17));
        assert_eq!(c["runs"], json!(2));
        assert_eq!(c["errors"], json!(["no grammar"]));
        // decode_16_tok_s of ours: 2 tokens in 1 s in both measured pairs.
        assert_eq!(c["unconstrained_tok_s"], json!(2.0));
        // Not a peer: the token check ignores it.
        assert!(token_failures(&json!({"models": {"tiny": s.clone()}})).is_empty());
        let md = markdown_model("tiny", &s, true);
        assert!(
            md.contains("ours inside a constrained tool call after 17 tokens (2 runs): 6.0 tok/s (4.0 tok/s–8.0 tok/s) over 2 tokens, 0.030 ms of mask per token"),
            "{md}"
        );
        assert!(
            md.contains("ours failed inside a tool call: no grammar"),
            "{md}"
        );
    }

    #[test]
    fn native_documents_pair_up() {
        let ours = json!({"load_s": 1.0, "prefill": [{"tokens": 16, "runs": [{"ttft_s": 0.5, "tok_s": 32.0}]},
                                                     {"tokens": 512, "skipped": "too long"}],
                          "decode": [{"context": 16, "tokens": 2, "runs": [{"decode_s": 0.2, "tok_s": 10.0}], "ids": [4, 5, 6]}]});
        let peer = json!({"load_s": 2.0, "prefill": [{"tokens": 16, "runs": [{"ttft_s": 1.0, "tok_s": 16.0}], "ids": [4]}],
                          "decode": [{"context": 16, "tokens": 2, "runs": [{"decode_s": 0.4, "tok_s": 5.0}], "ids": [4, 5, 6]}]});
        let raw = json!({"pairs": [{"order": ["ours", "ort_webgpu_ep"],
                                    "runs": {"ours": native_run(&ours), "ort_webgpu_ep": native_run(&peer)}}]});
        let s = browser_model(&raw, &["ort_webgpu_ep".to_string()]);
        let p = &s["ort_webgpu_ep"];
        assert_eq!(p["decode_tok_s_ratio"], json!(2.0));
        assert_eq!(p["prefill_tok_s_ratio"], json!(2.0));
        assert_eq!(p["ttft_ratio"], json!(0.5));
        assert_eq!(p["tokens_match"], json!(true));
        // Only the decode ids exist on both sides.
        assert_eq!(p["token_sequences_compared"], json!(1));
    }

    #[test]
    fn mismatches_are_checked_against_the_reference() {
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", "ort_web"], "runs": {"ours": run(1.0, 0.5, 1.0, &[5, 6, 7]), "ort_web": run(1.0, 0.5, 1.0, &[5, 9, 7])}}
        ]});
        let mut s = browser_model(&raw, &["ort_web".to_string()]);
        let reference = native_run(
            &json!({"decode": [{"context": 16, "tokens": 2, "runs": [{"tok_s": 1.0}], "ids": [5, 6, 7]}]}),
        );
        annotate_with_reference(&mut s, &reference);
        assert_eq!(s["ort_web"]["ours_matches_reference"], json!(true));
        assert_eq!(
            s["ort_web"]["token_mismatches"][0]["peer_matches_reference"],
            json!(false)
        );
        let f = token_failures(&json!({"models": {"tiny": s}}));
        assert!(f[0].contains("ours match ONNX Runtime's CPU EP"), "{f:?}");
    }

    #[test]
    fn a_mismatch_is_explained_only_by_both_references() {
        // Ours [5, 6, 7] (= the CPU EP on the graph as written); the windowless CPU EP [5, 9, 4].
        let reference = native_run(
            &json!({"decode": [{"context": 16, "tokens": 2, "runs": [{"tok_s": 1.0}], "ids": [5, 6, 7]}]}),
        );
        let windowless = native_run(
            &json!({"decode": [{"context": 16, "tokens": 2, "runs": [{"tok_s": 1.0}], "ids": [5, 9, 4]}]}),
        );
        let summary = |peer: &str, ours: &[u32], theirs: &[u32]| {
            let raw = json!({"dtype": "q4", "pairs": [
                {"order": ["ours", peer], "runs": {"ours": run(1.0, 0.5, 1.0, ours), peer: run(1.0, 0.5, 1.0, theirs)}}
            ]});
            let mut s = browser_model(&raw, &[peer.to_string()]);
            annotate_with_reference(&mut s, &reference);
            s
        };
        // The peer computes the windowless graph exactly: explained, not a failure, said.
        let mut s = summary("ort_web", &[5, 6, 7], &[5, 9, 4]);
        assert!(wants_windowless_check(&s));
        explain_with_windowless(&mut s, &windowless);
        assert_eq!(s["ort_web"]["tokens_match"], json!(false));
        assert_eq!(s["ort_web"]["token_mismatches_explained"], json!(true));
        assert_eq!(
            s["ort_web"]["token_mismatches"][0]["explained_by"],
            json!("kv_shared_window")
        );
        let models = json!({"models": {"mobius": s.clone()}});
        assert!(token_failures(&models).is_empty());
        let notes = token_notes(&models);
        assert!(
            notes.len() == 1 && notes[0].contains("ort_web's greedy ids differ from ours in 1"),
            "{notes:?}"
        );
        let md = markdown_model("mobius", &s, true);
        assert!(md.contains("explained: ONNX Runtime's WebGPU"), "{md}");
        // The peer's ids are neither model's: unexplained, a failure.
        let mut s = summary("transformers_js", &[5, 6, 7], &[5, 9, 8]);
        explain_with_windowless(&mut s, &windowless);
        assert_eq!(
            s["transformers_js"]["token_mismatches_explained"],
            json!(false)
        );
        assert!(s["transformers_js"].get("token_mismatch_cause").is_none());
        assert_eq!(token_failures(&json!({"models": {"m": s}})).len(), 1);
        // Ours differ from the CPU EP: nothing to explain the peer by.
        let mut s = summary("ort_webgpu_ep", &[5, 6, 8], &[5, 9, 4]);
        assert!(!wants_windowless_check(&s));
        explain_with_windowless(&mut s, &windowless);
        assert_eq!(
            s["ort_webgpu_ep"]["token_mismatches_explained"],
            json!(false)
        );
        assert_eq!(token_failures(&json!({"models": {"m": s}})).len(), 1);
        // A peer that is not ONNX Runtime's WebGPU kernels is never explained this way.
        let mut s = summary("other", &[5, 6, 7], &[5, 9, 4]);
        assert!(!wants_windowless_check(&s));
        explain_with_windowless(&mut s, &windowless);
        assert!(s["other"].get("token_mismatches_explained").is_none());
        assert_eq!(token_failures(&json!({"models": {"m": s}})).len(), 1);
    }

    #[test]
    fn graph_form_and_peers_not_run_are_reported() {
        let m = json!({
            "dtype": "q4", "pairs": 1,
            "graph_form": "exporter",
            "not_run": {"transformers_js": "it cannot read a GenAI package"},
            "transformers_js_layout": {"name": "mobius-tiny-tjs", "dtype": "q4", "layout": "the package's graphs"},
            "ort_web_static_capacity": 136,
            "runtimes": {"ours": {}, "ort_web_static": {"graph_capture": {"accepted": false, "error": "not all nodes on WebGPU"}}},
        });
        let md = markdown_model("mobius-tiny", &m, true);
        assert!(md.contains("- graph form: exporter."), "{md}");
        assert!(
            md.contains(
                "- transformers_js read it as `mobius-tiny-tjs` (q4): the package's graphs."
            ),
            "{md}"
        );
        assert!(
            md.contains("transformers_js: not run on this model: it cannot read a GenAI package"),
            "{md}"
        );
        assert!(
            md.contains("fixed cache of 136 rows")
                && md.contains("refused: not all nodes on WebGPU"),
            "{md}"
        );
        for (capture, want) in [
            (
                json!({"accepted": true, "measured": true, "error": null}),
                "136 rows bound in place, measured with graph capture",
            ),
            (
                json!({"accepted": true, "measured": false, "error": "a replay failed"}),
                "measured without graph capture; graph capture accepted by onnxruntime-web but not measured: a replay failed",
            ),
        ] {
            let mut m = m.clone();
            m["runtimes"]["ort_web_static"]["graph_capture"] = capture;
            let md = markdown_model("mobius-tiny", &m, true);
            assert!(md.contains(want), "{md}");
        }
    }

    #[test]
    fn differing_ids_fail_the_check() {
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", "transformers_js"], "runs": {"ours": run(1.0, 0.5, 1.0, &[5, 6, 7]), "transformers_js": run(1.0, 0.5, 1.0, &[5, 6, 8])}}
        ]});
        let s = browser_model(&raw, &["transformers_js".to_string()]);
        assert_eq!(s["transformers_js"]["tokens_match"], json!(false));
        assert_eq!(
            s["transformers_js"]["token_mismatches"][0]["first_difference"],
            json!(2)
        );
        let f = token_failures(&json!({"models": {"tiny": s}}));
        assert_eq!(f.len(), 1);
        assert!(f[0].contains("transformers_js"), "{f:?}");
    }

    /// A judged mismatch of peer `peer`: ours [5, 6, 7, 8], the peer [5, 6, 9, 4]; the referee's
    /// pick at the first difference (step 2) is `top`, and at step 3 it leads ours' 8 by 0.25.
    fn judged(peer: &str, top: u32) -> Value {
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", peer], "runs": {"ours": run(1.0, 0.5, 1.0, &[5, 6, 7, 8]), peer: run(1.0, 0.5, 1.0, &[5, 6, 9, 4])}}
        ]});
        let mut s = browser_model(&raw, &[peer.to_string()]);
        let requests = judge_requests(&s);
        assert_eq!(
            requests,
            vec![
                json!({"context": 16, "ids": [5, 6, 7, 8], "alternatives": [{"step": 2, "id": 9}]})
            ]
        );
        let step = |top: u32, top_logit: f64, logit: f64| json!({"top": top, "top_logit": top_logit, "logit": logit});
        let answer = json!({"steps": [step(5, 3.0, 3.0), step(6, 2.0, 2.0),
                                      step(top, 1.5, if top == 7 { 1.5 } else { 1.2 }), step(3, 1.0, 0.75)],
                            "alternatives": [if top == 9 { 1.5 } else { 1.4 }]});
        apply_judgement(&mut s, &requests, &[answer]);
        s
    }

    #[test]
    fn the_referee_settles_a_mismatch_only_where_it_picks_ours() {
        assert_eq!(context_of("decode 32 after 128"), Some(128));
        assert_eq!(context_of("prefill 512"), Some(512));
        assert_eq!(context_of("something else"), None);
        // It picks ours' 7: explained, said, not a failure.
        let s = judged("ort_web", 7);
        let mm = &s["ort_web"]["token_mismatches"][0];
        assert_eq!(mm["explained_by"], json!(REFEREE_PICKS_OURS));
        assert_eq!(mm["referee"]["picks"], json!("ours"));
        assert_eq!(mm["referee"]["peer_logit"], json!(1.4));
        // Steps 0, 1 and 2 are its own picks; step 3 is not, by 0.25.
        assert_eq!(mm["referee"]["ours_ids_picked"], json!(3));
        assert_eq!(mm["referee"]["ours_ids_scored"], json!(4));
        assert_eq!(mm["referee"]["largest_gap_elsewhere"], json!(0.25));
        assert_eq!(s["ort_web"]["tokens_match"], json!(false));
        assert_eq!(s["ort_web"]["token_mismatches_explained"], json!(true));
        assert_eq!(s["ort_web"]["token_mismatch_cause"], json!(REFEREE_CAUSE));
        let models = json!({"models": {"m": s.clone()}});
        assert!(token_failures(&models).is_empty());
        assert_eq!(token_notes(&models).len(), 1);
        let md = markdown_model("m", &s, true);
        assert!(
            md.contains("picks ours'; ours' ids are its own pick at 3 of 4 steps"),
            "{md}"
        );
        // Already explained: nothing more to judge.
        assert!(judge_requests(&s).is_empty());
        // It picks the peer's 9, or a third id: a failure that says so.
        for (top, words) in [(9, "picks the peer's id"), (11, "picks neither id")] {
            let s = judged("transformers_js", top);
            assert_eq!(
                s["transformers_js"]["token_mismatches_explained"],
                json!(false)
            );
            assert!(s["transformers_js"].get("token_mismatch_cause").is_none());
            let f = token_failures(&json!({"models": {"m": s.clone()}}));
            assert!(f.len() == 1 && f[0].contains(words), "{f:?}");
            assert!(token_notes(&json!({"models": {"m": s}})).is_empty());
        }
        // An as-written verdict other than ours' id asks no windowless question.
        assert!(windowless_judge_requests(&judged("ort_web", 9)).is_empty());
        // No answer for a request (the referee failed): the mismatch stays unexplained.
        let raw = json!({"dtype": "q4", "pairs": [
            {"order": ["ours", "ort_web"], "runs": {"ours": run(1.0, 0.5, 1.0, &[5, 6]), "ort_web": run(1.0, 0.5, 1.0, &[5, 9])}}
        ]});
        let mut s = browser_model(&raw, &["ort_web".to_string()]);
        apply_judgement(&mut s, &[], &[]);
        assert!(s["ort_web"]["token_mismatches"][0].get("referee").is_none());
        assert_eq!(token_failures(&json!({"models": {"m": s}})).len(), 1);
    }

    #[test]
    fn the_windowless_referee_moves_the_cause_only_where_it_picks_the_peers_id() {
        // As written the CPU EP picks ours' 7 at step 2; the peer's ids are [5, 6, 9, 4].
        let windowless = |peer: &str, top: u32| {
            let mut s = judged(peer, 7);
            let requests = windowless_judge_requests(&s);
            if peer == "ort_cpu" {
                assert!(requests.is_empty(), "{requests:?}");
                return s;
            }
            assert_eq!(
                requests,
                vec![
                    json!({"context": 16, "ids": [5, 6, 9, 4], "alternatives": [{"step": 2, "id": 7}]})
                ]
            );
            let step = |top: u32, top_logit: f64, logit: f64| json!({"top": top, "top_logit": top_logit, "logit": logit});
            let answer = json!({"steps": [step(5, 3.0, 3.0), step(6, 2.0, 2.0),
                                          step(top, 2.5, if top == 9 { 2.5 } else { 1.0 }), step(4, 1.0, 1.0)],
                                "alternatives": [if top == 7 { 2.5 } else { 0.5 }]});
            apply_windowless_judgement(&mut s, &requests, &[answer]);
            s
        };
        let s = windowless("ort_web_static", 9);
        let mm = &s["ort_web_static"]["token_mismatches"][0];
        assert_eq!(mm["explained_by"], json!("kv_shared_window"));
        let w = &mm["windowless_referee"];
        assert_eq!(w["picks"], json!("peer"));
        assert_eq!(
            (w["peer_logit"].clone(), w["ours_logit"].clone()),
            (json!(2.5), json!(0.5))
        );
        assert_eq!(
            (w["peer_ids_picked"].clone(), w["peer_ids_scored"].clone()),
            (json!(4), json!(4))
        );
        assert_eq!(
            s["ort_web_static"]["token_mismatch_cause"],
            json!(KV_SHARED_WINDOW_CAUSE)
        );
        let md = markdown_model("m", &s, true);
        assert!(md.contains("picks ours'; ours' ids are its own pick at 3 of 4 steps; elsewhere its own pick leads ours' id by at most 0.2500; without windows on the KV-shared layers, fed the peer's ids, it picks the peer's (the peer's logit 2.5000, ours' 0.5000), and the peer's ids are its own pick at 4 of 4 steps"), "{md}");
        // It picks ours' id, or a third: the as-written verdict stands.
        for (top, picks) in [(7, "ours"), (11, "neither")] {
            let s = windowless("ort_web", top);
            let mm = &s["ort_web"]["token_mismatches"][0];
            assert_eq!(mm["windowless_referee"]["picks"], json!(picks));
            assert_eq!(mm["explained_by"], json!(REFEREE_PICKS_OURS));
            assert_eq!(s["ort_web"]["token_mismatch_cause"], json!(REFEREE_CAUSE));
        }
        // Answered unrun, inside every KV-shared window: the verdict stands and the line says why.
        let mut s = judged("ort_web", 7);
        let requests = windowless_judge_requests(&s);
        apply_windowless_judgement(
            &mut s,
            &requests,
            &[json!({"inside_kv_shared_window": 512})],
        );
        let mm = &s["ort_web"]["token_mismatches"][0];
        assert_eq!(
            mm["windowless_referee"],
            json!({"inside_kv_shared_window": 512})
        );
        assert_eq!(mm["explained_by"], json!(REFEREE_PICKS_OURS));
        let md = markdown_model("m", &s, true);
        assert!(md.contains("at most 0.2500; that is inside every KV-shared layer's window (512 tokens), where the graph without those windows is the same model"), "{md}");
        // Not an ONNX Runtime WebGPU peer (the native CPU reference): nothing asked.
        let s = windowless("ort_cpu", 9);
        assert!(
            s["ort_cpu"]["token_mismatches"][0]
                .get("windowless_referee")
                .is_none()
        );
    }
}
