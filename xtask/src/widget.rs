//! The embeddable widget (issue 32): `dist/widget/` (release) or `dist/widget-dev/` (development
//! builds: debug logging and the scripted model). Built by [`crate::build::build_with`]: the
//! widget's wasm32 crates ([`WASM`]) compile in the same cargo invocation as the extension's, then
//! [`package`] writes their wasm-bindgen output (`--target web`, `wasm-opt -Oz` for release) and
//! the static files into the widget's folder.
//!
//! Files: `gemma-gem-widget.js` (the loader a page includes: defines `<gemma-gem-widget>`),
//! `gg_widget.js` and `gg_widget_bg.wasm` (the page side: UI, page tools, `gg-widget`),
//! `gemma-gem-widget-worker.js` (the module Worker's loader), `gg_widget_worker.js` and
//! `gg_widget_worker_bg.wasm` (the model and the agent loop, `gg-widget-worker`).

use crate::install::Tools;
use crate::util::{copy_dir, root};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The widget's wasm32-unknown-unknown crates: (package, library file stem, static files copied
/// beside its output).
pub const WASM: &[(&str, &str, &str)] = &[
    ("gg-widget", "gg_widget", "widget/static"),
    (
        "gg-widget-worker",
        "gg_widget_worker",
        "widget/worker/static",
    ),
];

/// Features of development builds: debug logging, the scripted model (`script:URL` sources) and
/// the worker's `wire_json` (its messages as JSON, for tests).
pub const DEV_FEATURES: &str =
    "gg-widget-worker/dev-log,gg-widget-worker/scripted-model,gg-widget-worker/wire-json";

/// Minifies the ES module `file` in place with terser (names mangled, exports and property names
/// kept: the glue's import object is looked up by name from the wasm).
fn minify(tools: &Tools, file: &Path) -> Result<()> {
    let tmp = file.with_extension("min.js");
    crate::util::exec(
        std::process::Command::new("node")
            .arg(&tools.terser)
            .arg(file)
            .args([
                "--module",
                "--ecma",
                "2020",
                "--compress",
                "passes=2",
                "--mangle",
            ])
            .arg("-o")
            .arg(&tmp),
    )?;
    std::fs::rename(&tmp, file).with_context(|| format!("replacing {}", file.display()))
}

/// Where the widget is written.
pub fn widget_dir(release: bool) -> PathBuf {
    root()
        .join("dist")
        .join(if release { "widget" } else { "widget-dev" })
}

/// Writes the widget ([`widget_dir`]) from the wasm files cargo built into `wasm_dir`.
pub fn package(tools: &Tools, wasm_dir: &Path, release: bool) -> Result<()> {
    let out = widget_dir(release);
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    for (_, stem, files) in WASM {
        crate::build::bindgen(
            tools,
            &wasm_dir.join(format!("{stem}.wasm")),
            &out,
            "web",
            release,
        )?;
        if release {
            // The page's main thread has a size budget (300 KB gzip with its glue and loader):
            // its wasm is optimised until binaryen finds nothing more to shrink, without the
            // producers section (~0.7 KB gzip), and with `--low-memory-unused` (~1.6 KB gzip:
            // `ptr + constant` folded into load/store offsets). That flag only changes an access
            // whose address wraps around 2^32 into the low 1 KiB, which Rust never makes: rustc
            // lays out wasm32 memory stack first (the stack grows down from 1 MiB, data above).
            let extra: &[&str] = if *stem == "gg_widget" {
                &["--converge", "--strip-producers", "--low-memory-unused"]
            } else {
                &[]
            };
            crate::build::optimise_with(tools, &out.join(format!("{stem}_bg.wasm")), extra)?;
        }
        copy_dir(&root().join(files), &out)?;
    }
    if release {
        // The page's loader and wasm-bindgen glue, minified (~2.7 KB gzip of the budget).
        for file in ["gemma-gem-widget.js", "gg_widget.js"] {
            minify(tools, &out.join(file))?;
        }
    }
    eprintln!("xtask: widget written to {}", out.display());
    Ok(())
}
