//! `cargo xtask build`: the extension (dev or release) and the demo site.
//!
//! Pipeline per context:
//! - service worker, offscreen document, overlay page, demo site, the widget's worker
//!   ([`crate::widget`]): `wasm32-unknown-unknown` →
//!   `wasm-bindgen --target web` (→ `wasm-opt -Oz` for release);
//! - content script: `no_std` crate for `wasm32v1-none` → `wasm-bindgen --target bundler` →
//!   `wasm2js -O`, giving plain JavaScript that runs on pages whose CSP forbids WebAssembly.

use crate::install::{self, Tools};
use crate::util::{Clippy, copy_dir, exec, root};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Clone, Default)]
pub struct BuildArgs {
    /// Production build: errors-only logging, size-optimised wasm, written to dist/chrome-mv3/.
    #[arg(long)]
    pub release: bool,
}

/// Where a build wrote its outputs.
pub struct Built {
    pub extension: PathBuf,
    pub demo_site: PathBuf,
    /// The embeddable widget's folder (`gemma-gem-widget.js` and what it loads).
    pub widget: PathBuf,
}

/// wasm-bindgen crates of the extension: (package, library file stem, output folder in the extension).
const EXTENSION_WASM: &[(&str, &str, &str)] = &[
    ("gg-background", "gg_background", "background"),
    ("gg-offscreen", "gg_offscreen", "offscreen"),
    ("gg-overlay", "gg_overlay", "overlay"),
];
/// Development builds: debug logging, and the scripted model and the greedy probe for tests.
const DEV_FEATURES: &str = "gg-background/dev-log,gg-offscreen/dev-log,gg-offscreen/scripted-model,gg-offscreen/dev-probe,gg-overlay/dev-log";

pub fn extension_dir(release: bool) -> PathBuf {
    root().join("dist").join(if release {
        "chrome-mv3"
    } else {
        "chrome-mv3-dev"
    })
}

pub fn run(args: &BuildArgs) -> Result<Built> {
    let tools = install::install_build()?;
    build_with(&tools, args.release, None)
}

/// Builds the extension and the demo site. With `clippy`, every workspace crate compiled is also
/// linted (warnings denied), and the browser bench's wasm crate is built with them so that its
/// wasm32-only code is linted too.
pub fn build_with(tools: &Tools, release: bool, clippy: Option<&Clippy>) -> Result<Built> {
    let (profile, profile_dir) = if release {
        ("wasm-release", "wasm-release")
    } else {
        ("dev", "debug")
    };
    let target_dir = crate::util::target_dir();
    let ext = extension_dir(release);
    let demo = root().join("dist/demo-site");
    let widget = crate::widget::widget_dir(release);
    for dir in [&ext, &demo] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
    }

    // 1. The wasm32-unknown-unknown crates, in one cargo invocation.
    let mut cmd = crate::util::cargo();
    cmd.args([
        "build",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        profile,
    ]);
    for (pkg, _, _) in EXTENSION_WASM {
        cmd.args(["-p", pkg]);
    }
    cmd.args(["-p", "gg-demo-site"]);
    for (pkg, _, _) in crate::widget::WASM {
        cmd.args(["-p", pkg]);
    }
    if !release {
        cmd.args([
            "--features",
            &format!("{DEV_FEATURES},{}", crate::widget::DEV_FEATURES),
        ]);
    }
    if let Some(c) = clippy {
        cmd.args(["-p", "gg-bench-wasm"]);
        c.apply(&mut cmd);
    }
    exec(&mut cmd)?;
    let wasm_dir = target_dir.join("wasm32-unknown-unknown").join(profile_dir);
    for (_, stem, out) in EXTENSION_WASM {
        bindgen(
            tools,
            &wasm_dir.join(format!("{stem}.wasm")),
            &ext.join(out),
            "web",
            release,
        )?;
        if release {
            optimise(tools, &ext.join(out).join(format!("{stem}_bg.wasm")))?;
        }
    }
    bindgen(
        tools,
        &wasm_dir.join("gg_demo_site.wasm"),
        &demo.join("pkg"),
        "web",
        release,
    )?;
    if release {
        optimise(tools, &demo.join("pkg/gg_demo_site_bg.wasm"))?;
    }
    crate::widget::package(tools, &wasm_dir, release)?;

    // 2. The content script: no_std → wasm32v1-none → bundler glue → wasm2js.
    let mut cmd = crate::util::cargo();
    cmd.args([
        "build",
        "--target",
        "wasm32v1-none",
        "--profile",
        profile,
        "-p",
        "gg-content",
    ]);
    if !release {
        cmd.args(["--features", "dev-log"]);
    }
    if let Some(c) = clippy {
        c.apply(&mut cmd);
    }
    exec(&mut cmd)?;
    let content_wasm = target_dir
        .join("wasm32v1-none")
        .join(profile_dir)
        .join("gg_content.wasm");
    content_to_js(tools, &content_wasm, &ext.join("content"), release)?;

    // 3. Static files, manifest, demo site pages.
    copy_dir(&root().join("extension-shell/static"), &ext)?;
    let manifest = manifest(release)?;
    std::fs::write(
        ext.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    copy_dir(&root().join("demo-site/static"), &demo)?;
    // The demo site embeds the widget from its own folder (same origin, relative URLs).
    copy_dir(&widget, &demo.join("widget"))?;
    eprintln!("xtask: extension written to {}", ext.display());
    eprintln!("xtask: demo site written to {}", demo.display());
    Ok(Built {
        extension: ext,
        demo_site: demo,
        widget,
    })
}

pub fn bindgen(tools: &Tools, wasm: &Path, out: &Path, target: &str, release: bool) -> Result<()> {
    let mut cmd = Command::new(tools.wasm_bindgen());
    cmd.args(["--target", target, "--no-typescript", "--out-dir"])
        .arg(out)
        .arg(wasm);
    if !release {
        cmd.args(["--debug", "--keep-debug"]);
    }
    exec(&mut cmd)
}

/// What rustc's `wasm32-unknown-unknown` target enables by default (Rust ≥ 1.82).
const RUSTC_WASM_FEATURES: &[&str] = &[
    "--enable-bulk-memory",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-sign-ext",
    "--enable-multivalue",
    "--enable-reference-types",
];

/// Size optimisation with `wasm-opt -Oz` (Debian's binaryen where it understands the module,
/// otherwise the newer one from npm).
pub fn optimise(tools: &Tools, wasm: &Path) -> Result<()> {
    optimise_with(tools, wasm, &[])
}

/// [`optimise`] with more `wasm-opt` arguments.
pub fn optimise_with(tools: &Tools, wasm: &Path, extra: &[&str]) -> Result<()> {
    let npm_opt = root().join("xtask/js/node_modules/binaryen/bin/wasm-opt");
    let candidates: Vec<PathBuf> = tools
        .wasm_opt
        .iter()
        .cloned()
        .chain(std::iter::once(npm_opt))
        .collect();
    let tmp = wasm.with_extension("opt.wasm");
    for opt in &candidates {
        let mut cmd = Command::new(opt);
        // The features rustc enables for wasm32-unknown-unknown, and no more: `--all-features`
        // lets a new binaryen emit encodings (compact imports, …) that Chrome does not accept.
        cmd.args(["-Oz", "--strip-debug"])
            .args(extra)
            .args(RUSTC_WASM_FEATURES)
            .arg("-o")
            .arg(&tmp)
            .arg(wasm);
        match exec(&mut cmd) {
            Ok(()) => {
                std::fs::rename(&tmp, wasm)?;
                return Ok(());
            }
            Err(e) => eprintln!("xtask: note: {e:#}; trying the next wasm-opt"),
        }
    }
    bail!("no wasm-opt could optimise {}", wasm.display())
}

/// Binaryen inlines every function that has one caller, whatever its size: the content script's
/// message handler and its slice pump became ~330 KB JavaScript functions, which V8 compiles
/// whole on their first call (a long task on every page's first tool call) and never optimises
/// (TurboFan's bytecode size limit). Bounded, the largest function is ~75 KB and the script
/// ~15% smaller.
const ONE_CALLER_INLINE: &str = "--one-caller-inline-max-function-size=300";

/// Turns the content script's wasm into one plain ES module, `content/gg_content.js`:
/// wasm-bindgen's bundler glue imports `./gg_content_bg.wasm` as a module; wasm2js makes that
/// module JavaScript, and [`content_bundle`] joins the two.
fn content_to_js(tools: &Tools, wasm: &Path, out: &Path, release: bool) -> Result<()> {
    let glue = crate::util::target_dir().join("content-glue");
    if glue.exists() {
        std::fs::remove_dir_all(&glue)?;
    }
    bindgen(tools, wasm, &glue, "bundler", release)?;
    std::fs::create_dir_all(out)?;
    let wasm_in = glue.join("gg_content_bg.wasm");
    if release {
        // Shrink first; MVP features only (no --all-features), so wasm2js still understands it.
        let npm_opt = root().join("xtask/js/node_modules/binaryen/bin/wasm-opt");
        exec(
            Command::new(npm_opt)
                .args(["-Oz", ONE_CALLER_INLINE, "--strip-debug", "-o"])
                .arg(&wasm_in)
                .arg(&wasm_in),
        )?;
    }
    let wasm_js = glue.join("gg_content_bg.wasm.js");
    let mut cmd = Command::new(&tools.wasm2js);
    cmd.arg(&wasm_in)
        .args([if release { "-Oz" } else { "-O" }, ONE_CALLER_INLINE, "-o"])
        .arg(&wasm_js);
    exec(&mut cmd).context(
        "wasm2js failed on the content script (it must stay MVP wasm: built for wasm32v1-none)",
    )?;
    let read = |name: &str| {
        std::fs::read_to_string(glue.join(name))
            .with_context(|| format!("reading {}", glue.join(name).display()))
    };
    let bundle = content_bundle(
        &read("gg_content.js")?,
        &read("gg_content_bg.js")?,
        &read("gg_content_bg.wasm.js")?,
    )
    .with_context(|| format!("bundling the content script from {}", glue.display()))?;
    std::fs::write(out.join("gg_content.js"), bundle)?;
    Ok(())
}

/// One ES module with no imports from wasm-bindgen's bundler output (`entry` importing `glue`
/// and the wasm module, here wasm2js's JavaScript `wasm_js`). Without imports, the loader can
/// start a fresh copy of the whole content script (`gg_content.js?instance=2`) after a crash.
///
/// wasm2js's `memory.grow` copies the memory into a new `ArrayBuffer` but leaves the old one
/// attached, unlike WebAssembly, which detaches it. wasm-bindgen's glue notices growth only by a
/// detached buffer (`byteLength === 0`, `buffer.detached`), so after the first growth it kept
/// writing through its cached views into the stale copy: the `(ptr, len)` of every string handed
/// to Rust through a return slot was lost, Rust read whatever its stack held there and freed it
/// (dlmalloc's `validate_size` panic in `free`). The grow here detaches the old buffer
/// (`ArrayBuffer.prototype.transfer`, Chrome 114+), as WebAssembly does.
pub fn content_bundle(entry: &str, glue: &str, wasm_js: &str) -> Result<String> {
    const WASM_IMPORT: &str = "import * as $_gg_content_bg_js from './gg_content_bg.js';";
    const GROW: &str = "buffer = newBuffer;";
    const INSTANCE: &str = "var retasmFunc = asmFunc(";
    if !entry.contains("./gg_content_bg.wasm\"") || !entry.contains("__wbg_set_wasm(wasm);") {
        bail!("unexpected wasm-bindgen bundler entry (no wasm import or __wbg_set_wasm)");
    }
    if !glue.contains("export function __wbg_set_wasm(") {
        bail!("the wasm-bindgen glue has no __wbg_set_wasm");
    }
    for (what, needle) in [
        ("import", WASM_IMPORT),
        ("grow", GROW),
        ("instance", INSTANCE),
    ] {
        let found = wasm_js.matches(needle).count();
        if found != 1 {
            bail!("wasm2js output: expected one {what} `{needle}`, found {found}");
        }
    }
    let grow_fn = wasm_js
        .find("function __wasm_memory_grow(")
        .context("wasm2js output has no __wasm_memory_grow")?;
    if wasm_js.find(GROW) < Some(grow_fn) {
        bail!("wasm2js output: `{GROW}` is not inside __wasm_memory_grow");
    }
    // The functions wasm2js's module imports (the glue's exports).
    let imports: Vec<&str> = glue
        .lines()
        .filter_map(|l| l.strip_prefix("export function "))
        .filter_map(|l| l.split('(').next())
        .map(str::trim)
        .collect();
    let mut body = String::with_capacity(wasm_js.len());
    for line in wasm_js.lines() {
        if line.trim() == WASM_IMPORT {
            continue;
        }
        // wasm2js re-exports every wasm export; the glue reaches them through `retasmFunc`.
        if line.starts_with("export var ") && line.contains("= retasmFunc.") {
            continue;
        }
        if line.starts_with("export ") {
            bail!("wasm2js output: unexpected export line `{line}`");
        }
        body.push_str(line);
        body.push('\n');
    }
    let body = body.replace(
        GROW,
        "buffer.transfer(0); /* detach the old memory, as wasm does */ buffer = newBuffer;",
    );
    let mut out = String::with_capacity(glue.len() + body.len() + 4096);
    out.push_str(
        "// Gemma Gem content script: wasm-bindgen glue and wasm2js output in one module.\n",
    );
    out.push_str(glue);
    out.push_str("\nconst $_gg_content_bg_js = {\n");
    for name in &imports {
        out.push_str("  ");
        out.push_str(name);
        out.push_str(",\n");
    }
    out.push_str("};\nconst __gg_wasm = (() => {\n");
    out.push_str(&body);
    out.push_str("return retasmFunc;\n})();\n__wbg_set_wasm(__gg_wasm);\n");
    if entry.contains("wasm.__wbindgen_start()") {
        out.push_str("__gg_wasm.__wbindgen_start();\n");
    }
    Ok(out)
}

/// The MV3 manifest. The version comes from the workspace.
fn manifest(release: bool) -> Result<serde_json::Value> {
    let version = env!("CARGO_PKG_VERSION");
    let icons = json!({ "16": "icons/icon-16.png", "32": "icons/icon-32.png", "48": "icons/icon-48.png", "128": "icons/icon-128.png" });
    let pages = ["http://*/*", "https://*/*"];
    Ok(json!({
        "manifest_version": 3,
        "name": if release { "Gemma Gem" } else { "Gemma Gem (dev)" },
        "short_name": "Gemma Gem",
        "version": version,
        "description": "A private AI assistant that runs Gemma 4 on your own GPU and can act on the page. Nothing leaves your machine.",
        "minimum_chrome_version": "116",
        "icons": icons,
        "action": { "default_title": "Gemma Gem", "default_icon": icons },
        "background": { "service_worker": "background.js", "type": "module" },
        "permissions": ["offscreen", "storage", "unlimitedStorage", "scripting", "activeTab", "webNavigation"],
        // Incognito tabs get their own service worker, offscreen document and storage.
        "incognito": "split",
        "host_permissions": ["<all_urls>"],
        "content_scripts": [{ "matches": pages, "js": ["content.js"], "run_at": "document_idle" }],
        // Reachable only through the per-session dynamic id: a page cannot guess the overlay URL.
        "web_accessible_resources": [{ "resources": ["content/*", "overlay/*"], "matches": pages, "use_dynamic_url": true }],
        "content_security_policy": { "extension_pages": "script-src 'self' 'wasm-unsafe-eval'; object-src 'self'" },
        "commands": {
            "toggle-overlay": {
                "suggested_key": { "default": "Alt+Shift+G" },
                "description": "Open or close Gemma Gem on this page",
            },
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::content_bundle;

    const ENTRY: &str = "import * as wasm from \"./gg_content_bg.wasm\";\nimport { __wbg_set_wasm } from \"./gg_content_bg.js\";\n__wbg_set_wasm(wasm);\nexport { start } from \"./gg_content_bg.js\";\n";
    const GLUE: &str = "let wasm;\nexport function __wbg_set_wasm(val) { wasm = val; }\nexport function start() { wasm.start(); }\nexport function __wbg_log_1(a) { console.log(a); }\n";
    const WASM_JS: &str = "import * as $_gg_content_bg_js from './gg_content_bg.js';\nfunction asmFunc(imports) {\n var buffer = new ArrayBuffer(65536);\n function __wasm_memory_grow(pagesToAdd) {\n   var newBuffer = new ArrayBuffer(131072);\n   buffer = newBuffer;\n }\n return { start: function () {} };\n}\nvar retasmFunc = asmFunc({\n  \"./gg_content_bg.js\": $_gg_content_bg_js,\n});\nexport var memory = retasmFunc.memory;\nexport var start = retasmFunc.start;\n";

    #[test]
    fn the_bundle_has_no_imports_and_grow_detaches() {
        let out = content_bundle(ENTRY, GLUE, WASM_JS).unwrap();
        assert!(!out.contains("import "), "{out}");
        assert!(!out.contains("export var"), "{out}");
        assert_eq!(out.matches("export function start()").count(), 1);
        assert!(out.contains(
            "const $_gg_content_bg_js = {\n  __wbg_set_wasm,\n  start,\n  __wbg_log_1,\n};"
        ));
        assert!(out.contains(
            "buffer.transfer(0); /* detach the old memory, as wasm does */ buffer = newBuffer;"
        ));
        assert!(out.ends_with("return retasmFunc;\n})();\n__wbg_set_wasm(__gg_wasm);\n"));
    }

    #[test]
    fn unexpected_shapes_are_errors() {
        assert!(content_bundle("", GLUE, WASM_JS).is_err());
        assert!(content_bundle(ENTRY, "export function start() {}", WASM_JS).is_err());
        let no_grow = WASM_JS.replace("buffer = newBuffer;", "");
        assert!(content_bundle(ENTRY, GLUE, &no_grow).is_err());
        let extra = format!("{WASM_JS}export default 1;\n");
        assert!(content_bundle(ENTRY, GLUE, &extra).is_err());
    }
}
