//! `cargo xtask bench --pages`: the page tools (the content script) on the real-page corpus of
//! `tests/pages/real/` and on the generated stress pages, in headless Chromium with the dev
//! extension (`pages.mjs` drives it).
//!
//! Results (`pages` in the results document): `corpus` — for the real pages, `pages`,
//! `snapshot_ms`, `read_ms`, `longest_task_ms`, `content_memory_bytes`, each `{median, worst,
//! worst_page}`; `stress` — the stress pages' rows; `rows` — every page as measured (`read_ms`
//! is all pages of text, 4,000 characters each; the stress pages read their first page only).

use crate::util::{exec, root, target_dir};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::process::Command;

pub fn run() -> Result<Value> {
    let built = crate::build::run(&crate::build::BuildArgs::default())?;
    crate::install::ensure_npm(&root().join("tests"))?;
    let out = target_dir().join("bench-pages.json");
    let _ = std::fs::remove_file(&out);
    exec(
        Command::new("node")
            .current_dir(root().join("tests"))
            .arg(root().join("xtask/src/bench/pages.mjs"))
            .env("GG_EXT_DEV", &built.extension)
            .env("GG_PAGES_OUT", &out),
    )?;
    let raw: Value =
        serde_json::from_slice(&std::fs::read(&out).context("the page bench wrote no results")?)?;
    Ok(summary(&raw))
}

/// Median and worst of `key` over `rows` (the worst with its page).
fn stat(rows: &[&Value], key: &str) -> Value {
    let mut values: Vec<(f64, &str)> = rows
        .iter()
        .filter_map(|r| {
            Some((
                r.get(key)?.as_f64()?,
                r.get("name").and_then(Value::as_str).unwrap_or("?"),
            ))
        })
        .collect();
    if values.is_empty() {
        return Value::Null;
    }
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2].0
    } else {
        (values[n / 2 - 1].0 + values[n / 2].0) / 2.0
    };
    let (worst, page) = values[n - 1];
    json!({"median": median, "worst": worst, "worst_page": page})
}

pub fn summary(raw: &Value) -> Value {
    let rows: Vec<&Value> = raw
        .get("pages")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let real: Vec<&Value> = rows
        .iter()
        .copied()
        .filter(|r| r.get("kind").and_then(Value::as_str) == Some("real"))
        .collect();
    let stress: Vec<&Value> = rows
        .iter()
        .copied()
        .filter(|r| r.get("kind").and_then(Value::as_str) == Some("stress"))
        .collect();
    let mut corpus = serde_json::Map::new();
    corpus.insert("pages".into(), json!(real.len()));
    for key in [
        "elements",
        "snapshot_ms",
        "read_ms",
        "longest_task_ms",
        "content_memory_bytes",
    ] {
        corpus.insert(key.into(), stat(&real, key));
    }
    json!({
        "browser": raw.get("browser"),
        "corpus": corpus,
        "stress": stress,
        "rows": rows,
    })
}

/// The Markdown section of the results.
pub fn markdown(pages: &Value) -> String {
    let mut s = String::from("## Page tools (content script)\n\n");
    let c = &pages["corpus"];
    s.push_str(&format!(
        "Real-page corpus: {} pages (tests/pages/real). Snapshot: `snapshot_page` with the default \
         budget; read: every page of `read_page_content` (4,000 characters each); longest task: \
         the page's longest main-thread task while they ran; memory: the content script's wasm2js \
         memory afterwards (its peak: it never shrinks).\n\n",
        c["pages"]
    ));
    s.push_str("| | median | worst | worst page |\n|---|---|---|---|\n");
    for (label, key, unit) in [
        ("elements", "elements", ""),
        ("snapshot", "snapshot_ms", " ms"),
        ("read (all pages)", "read_ms", " ms"),
        ("longest task", "longest_task_ms", " ms"),
        ("content memory", "content_memory_bytes", " B"),
    ] {
        let v = &c[key];
        let f = |x: &Value| x.as_f64().map_or("–".into(), |x| format!("{x:.0}{unit}"));
        s.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            f(&v["median"]),
            f(&v["worst"]),
            v["worst_page"].as_str().unwrap_or("–")
        ));
    }
    s.push_str("\n| stress page | elements | snapshot | read (first page) | longest task | content memory |\n|---|---|---|---|---|---|\n");
    for r in pages["stress"].as_array().into_iter().flatten() {
        let n = |k: &str| r[k].as_f64().map_or("–".into(), |x| format!("{x:.0}"));
        s.push_str(&format!(
            "| {} | {} | {} ms{} | {} ms{} | {} ms | {} B |\n",
            r["name"].as_str().unwrap_or("?"),
            n("elements"),
            n("snapshot_ms"),
            if r["snapshot_partial"] == json!(true) {
                " (partial)"
            } else {
                ""
            },
            n("read_ms"),
            if r["read_partial"] == json!(true) {
                " (partial)"
            } else {
                ""
            },
            n("longest_task_ms"),
            n("content_memory_bytes"),
        ));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_medians_and_worst() {
        let raw = json!({"pages": [
            {"name": "a", "kind": "real", "elements": 10, "snapshot_ms": 5, "read_ms": 50, "longest_task_ms": 20, "content_memory_bytes": 100},
            {"name": "b", "kind": "real", "elements": 30, "snapshot_ms": 9, "read_ms": 70, "longest_task_ms": 40, "content_memory_bytes": 300},
            {"name": "c", "kind": "real", "elements": 20, "snapshot_ms": 7, "read_ms": 90, "longest_task_ms": 30, "content_memory_bytes": 200},
            {"name": "big", "kind": "stress", "elements": 100000, "snapshot_ms": 9000, "read_ms": 8000, "longest_task_ms": 45, "content_memory_bytes": 9000},
        ]});
        let s = summary(&raw);
        assert_eq!(s["corpus"]["pages"], 3);
        assert_eq!(
            s["corpus"]["snapshot_ms"],
            json!({"median": 7.0, "worst": 9.0, "worst_page": "b"})
        );
        assert_eq!(s["corpus"]["read_ms"]["worst_page"], "c");
        assert_eq!(s["stress"].as_array().unwrap().len(), 1);
        let md = markdown(&s);
        assert!(md.contains("| snapshot | 7 ms | 9 ms | b |"), "{md}");
        assert!(
            md.contains("| big | 100000 | 9000 ms | 8000 ms | 45 ms | 9000 B |"),
            "{md}"
        );
    }
}
