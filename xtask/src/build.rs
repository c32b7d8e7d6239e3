//! `cargo xtask build`: the extension (dev or release) and the demo site.
//!
//! Pipeline per context:
//! - service worker, offscreen document, overlay page, demo site: `wasm32-unknown-unknown` →
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
}

/// wasm-bindgen crates of the extension: (package, library file stem, output folder in the extension).
const EXTENSION_WASM: &[(&str, &str, &str)] = &[
    ("gg-background", "gg_background", "background"),
    ("gg-offscreen", "gg_offscreen", "offscreen"),
    ("gg-overlay", "gg_overlay", "overlay"),
];
/// Development builds: debug logging, and the scripted model for tests.
const DEV_FEATURES: &str =
    "gg-background/dev-log,gg-offscreen/dev-log,gg-offscreen/scripted-model,gg-overlay/dev-log";

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
    if !release {
        cmd.args(["--features", DEV_FEATURES]);
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
    eprintln!("xtask: extension written to {}", ext.display());
    eprintln!("xtask: demo site written to {}", demo.display());
    Ok(Built {
        extension: ext,
        demo_site: demo,
    })
}

fn bindgen(tools: &Tools, wasm: &Path, out: &Path, target: &str, release: bool) -> Result<()> {
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
fn optimise(tools: &Tools, wasm: &Path) -> Result<()> {
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

/// Turns the content script's wasm into plain ES modules: wasm-bindgen's bundler glue imports
/// `./gg_content_bg.wasm` as a module; wasm2js makes that module JavaScript, and the import is
/// pointed at it.
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
                .args(["-Oz", "--strip-debug", "-o"])
                .arg(&wasm_in)
                .arg(&wasm_in),
        )?;
    }
    let mut cmd = Command::new(&tools.wasm2js);
    cmd.arg(&wasm_in)
        .args([if release { "-Oz" } else { "-O" }, "-o"])
        .arg(out.join("gg_content_bg.wasm.js"));
    exec(&mut cmd).context(
        "wasm2js failed on the content script (it must stay MVP wasm: built for wasm32v1-none)",
    )?;
    let entry = std::fs::read_to_string(glue.join("gg_content.js"))?;
    if !entry.contains("./gg_content_bg.wasm\"") {
        bail!(
            "unexpected wasm-bindgen bundler output in {}: no import of ./gg_content_bg.wasm",
            glue.display()
        );
    }
    std::fs::write(
        out.join("gg_content.js"),
        entry.replace("./gg_content_bg.wasm\"", "./gg_content_bg.wasm.js\""),
    )?;
    std::fs::copy(glue.join("gg_content_bg.js"), out.join("gg_content_bg.js"))?;
    Ok(())
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
        "web_accessible_resources": [{ "resources": ["content/*", "overlay/*"], "matches": pages }],
        "content_security_policy": { "extension_pages": "script-src 'self' 'wasm-unsafe-eval'; object-src 'self'" },
        "commands": {
            "toggle-overlay": {
                "suggested_key": { "default": "Alt+Shift+G" },
                "description": "Open or close Gemma Gem on this page",
            },
        },
    }))
}
