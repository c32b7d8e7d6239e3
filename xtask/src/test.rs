//! `cargo xtask test`: the whole suite, as `.ci/run` runs it.
//!
//! Installs what is missing, then: formatting, native tests (GPU tests on Mesa's software Vulkan),
//! wasm tests in headless Chromium, dev and release builds, and the browser end-to-end tests in
//! `tests/e2e/`. Clippy (warnings denied) runs inside the native tests' build, the wasm tests'
//! build and the dev build (`wasm32-unknown-unknown` and the content script's `wasm32v1-none`),
//! which between them compile every workspace crate for every target it ships on.
//! Prints the test counts of every stage and a summary.

use crate::install::{self, Tools};
use crate::util::{Clippy, cargo, root, show};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Also run the opt-in large tests (random weights for the real ~3 GB Gemma 3 graphs, and
    /// Gemma 4 E2B's full 35-layer shapes, generated into bench/cache/ on first use, natively and
    /// in headless Chromium through the extension's download -> Cache Storage -> GPU path).
    #[arg(long)]
    pub large: bool,
    /// Skip formatting and clippy (for quick local iterations; CI runs everything).
    #[arg(long)]
    pub no_lint: bool,
}

/// The `wasm-bindgen-test` suites that run in headless Chromium: (package, test target). One
/// cargo invocation builds and runs them all, so their dependencies are resolved and compiled
/// once. Each crate's `webdriver.json` sets the browser. The crates' library unit tests are
/// native-only and are not built for wasm32.
const WASM_TESTS: &[(&str, &str)] = &[
    ("gg-components", "browser"),
    ("gg-demo-site", "playground"),
    // The runtime's op families on WebGPU (SwiftShader in headless Chromium).
    ("gg-runtime", "browser_ops"),
    // Gemma 4 greedy generation on WebGPU, against ONNX Runtime's tokens.
    ("gg-llm", "browser_greedy"),
    // Gemma 4's vision encoder on WebGPU, against ONNX Runtime's and transformers' features.
    ("gg-llm", "browser_vision"),
    // The page tools as the embeddable widget uses them: scope, allow-list, hostile pages.
    ("gg-content", "embedded"),
];
/// Features for the wasm test invocation: the components' client-side renderer, and the page
/// tools' library build (`embedded`; the content script itself is built without it).
const WASM_TEST_FEATURES: &str = "gg-components/csr,gg-content/embedded";

/// A folder under the system's temporary folder, made empty and removed when dropped (also when
/// the stage using it fails).
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(prefix: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("xtask: cannot remove {}: {e}", self.0.display());
        }
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
    }
}

struct Stage {
    name: String,
    seconds: f64,
    counts: Option<Counts>,
}

/// Parses `test result: ok. 12 passed; 0 failed; 1 ignored; ...` (Rust test harness and
/// wasm-bindgen-test) and node's `ℹ pass 3` / `ℹ fail 0` / `ℹ skipped 0` summary lines.
fn parse_counts(line: &str, c: &mut Counts) {
    let number_before = |s: &str, word: &str| -> Option<u64> {
        let i = s.find(word)?;
        s[..i]
            .trim_end()
            .rsplit(|ch: char| !ch.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    if let Some(rest) = line.split("test result:").nth(1) {
        c.passed += number_before(rest, " passed").unwrap_or(0);
        c.failed += number_before(rest, " failed").unwrap_or(0);
        c.ignored += number_before(rest, " ignored").unwrap_or(0);
        return;
    }
    let l = line.trim_start_matches(|ch: char| !ch.is_ascii_alphanumeric());
    for (word, slot) in [
        ("pass ", &mut c.passed),
        ("fail ", &mut c.failed),
        ("skipped ", &mut c.ignored),
    ] {
        if let Some(n) = l
            .strip_prefix(word)
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            *slot += n;
        }
    }
}

/// Runs a command, echoing its output, and collects test counts from it.
fn run_counting(cmd: &mut Command) -> Result<Counts> {
    eprintln!("xtask: $ {}", show(cmd));
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", show(cmd)))?;
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let err_thread = std::thread::spawn(move || {
        let mut c = Counts::default();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            parse_counts(&line, &mut c);
        }
        c
    });
    let mut counts = Counts::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            parse_counts(&line, &mut counts);
        }
    }
    let status = child.wait()?;
    crate::util::took(started);
    counts.add(err_thread.join().unwrap_or_default());
    if !status.success() {
        bail!(
            "`{}` failed ({status}); {} passed, {} failed",
            show(cmd),
            counts.passed,
            counts.failed
        );
    }
    Ok(counts)
}

pub fn run(args: &TestArgs) -> Result<()> {
    let started = Instant::now();
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage = |name: &str, f: &mut dyn FnMut() -> Result<Option<Counts>>| -> Result<()> {
        eprintln!("\nxtask: ==== {name} ====");
        let t = Instant::now();
        let counts = f().with_context(|| format!("stage `{name}` failed"))?;
        stages.push(Stage {
            name: name.to_owned(),
            seconds: t.elapsed().as_secs_f64(),
            counts,
        });
        Ok(())
    };

    let mut tools: Option<Tools> = None;
    stage("install", &mut || {
        tools = Some(install::install_all()?);
        Ok(None)
    })?;
    let tools = tools.context("tools were not installed")?;

    // Clippy runs inside the builds below (see [`Clippy`]): no separate check pass.
    let clippy = if args.no_lint {
        None
    } else {
        stage("rustfmt", &mut || {
            crate::util::exec(cargo().args(["fmt", "--all", "--", "--check"]))
                .context("formatting differs: run `cargo fmt --all`")?;
            Ok(None)
        })?;
        Some(Clippy::find()?)
    };

    stage("generate the ONNX conformance cases", &mut || {
        // The onnx package's node test cases, written as model.onnx + test_data_set_N (not
        // committed, ~60 MB); regenerated when the generator or the requirements change.
        let out = crate::util::target_dir().join("onnx-node-cases");
        let stamp = out.join(".generator-stamp");
        let want = format!(
            "{}\n{}",
            std::fs::read_to_string(root().join("tools/onnx/gen_conformance.py"))
                .context("reading tools/onnx/gen_conformance.py")?,
            std::fs::read_to_string(root().join("tools/requirements.txt"))
                .context("reading tools/requirements.txt")?
        );
        if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
            if out.exists() {
                std::fs::remove_dir_all(&out)?;
            }
            let python = install::ensure_python_venv()?;
            crate::util::exec(
                Command::new(python)
                    .arg(root().join("tools/onnx/gen_conformance.py"))
                    .arg("--out")
                    .arg(&out),
            )?;
            std::fs::write(&stamp, want)?;
        }
        Ok(None)
    })?;

    stage(
        "native clippy and tests (GPU on software Vulkan)",
        &mut || {
            let mut cmd = cargo();
            cmd.args(["test", "--workspace"]);
            if let Some(c) = &clippy {
                c.apply(&mut cmd);
            }
            cmd.env("WGPU_BACKEND", "vulkan").env(
                "GG_ONNX_CASES",
                crate::util::target_dir().join("onnx-node-cases"),
            );
            let mut counts = run_counting(&mut cmd)?;
            // The workspace build unifies features: the widget turns on gg-content's `embedded`,
            // which takes the content script's own entry points (and their tests) away. The
            // content script as it ships is tested on its own.
            let mut content = cargo();
            content.args(["test", "-p", "gg-content"]);
            if let Some(c) = &clippy {
                c.apply(&mut content);
            }
            counts.add(run_counting(&mut content)?);
            Ok(Some(counts))
        },
    )?;

    stage("wasm32 clippy and tests (headless Chromium)", &mut || {
        let mut cmd = cargo();
        cmd.args(["test", "--target", "wasm32-unknown-unknown"]);
        for (pkg, _) in WASM_TESTS {
            cmd.args(["-p", pkg]);
        }
        cmd.args(["--features", WASM_TEST_FEATURES]);
        for (_, test) in WASM_TESTS {
            cmd.args(["--test", test]);
        }
        if let Some(c) = &clippy {
            c.apply(&mut cmd);
        }
        cmd.env(
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER",
            tools.test_runner(),
        )
        .env("CHROMEDRIVER", "/usr/bin/chromedriver")
        .env("WASM_BINDGEN_TEST_TIMEOUT", "900");
        // wasm-bindgen-test-runner stops ChromeDriver without ending its session, so every test
        // binary left Chromium's profile (~35 MB, `org.chromium.Chromium.scoped_dir.*`) in the
        // temporary folder. They go into a folder of this run's own, removed when the stage ends.
        let scratch = ScratchDir::new("gg-wasm-tests")?;
        cmd.env("TMPDIR", scratch.path());
        Ok(Some(run_counting(&mut cmd)?))
    })?;

    stage("build (dev with clippy, and release)", &mut || {
        crate::build::build_with(&tools, false, clippy.as_ref())?;
        crate::build::build_with(&tools, true, None)?;
        Ok(None)
    })?;

    stage(
        "end-to-end tests (headless Chromium, the built extension)",
        &mut || {
            let mut cmd = Command::new("node");
            cmd.current_dir(root().join("tests"))
                .args(["--test", "--test-reporter=spec", "--test-concurrency=1"])
                .arg("e2e/")
                .env("GG_EXT_DEV", crate::build::extension_dir(false))
                .env("GG_EXT_RELEASE", crate::build::extension_dir(true))
                .env("GG_DEMO_SITE", root().join("dist/demo-site"))
                .env("GG_WIDGET_DEV", crate::widget::widget_dir(false))
                .env("GG_SCREENSHOTS", root().join("docs/screenshots"));
            Ok(Some(run_counting(&mut cmd)?))
        },
    )?;

    if args.large {
        stage("large tests (opt-in)", &mut || {
            let mut cmd = cargo();
            cmd.args([
                "test",
                "--release",
                "-p",
                "gg-cli",
                "--test",
                "large_real_graphs",
                "--",
                "--ignored",
                "--test-threads=1",
                "large_",
            ])
            .env("WGPU_BACKEND", "vulkan");
            Ok(Some(run_counting(&mut cmd)?))
        })?;
        stage("large: Gemma 4 E2B's full shapes (natively)", &mut || {
            // Generated on demand and cached (bench/cache/, not committed): the 35-layer model
            // and its ONNX Runtime reference.
            let dir = root().join("bench/cache/gemma4-e2b-full");
            let python = install::tools_python()?;
            crate::util::exec(
                Command::new(&python)
                    .current_dir(root())
                    .arg("tools/fixtures/gen_gemma4.py")
                    .args(["--preset", "e2b-full", "--dtypes", "q4", "--out"])
                    .arg(&dir)
                    .arg("--skip-existing"),
            )
            .context("generating the full-size E2B model")?;
            crate::util::exec(
                Command::new(&python)
                    .current_dir(root())
                    .args(["tools/fixtures/reference.py", "--large"])
                    .arg(&dir),
            )
            .context("ONNX Runtime reference of the full-size E2B model")?;
            let mut cmd = cargo();
            cmd.args([
                "test",
                "--release",
                "-p",
                "gg-llm",
                "--test",
                "large_e2b",
                "--",
                "--ignored",
                "--nocapture",
            ])
            .env("GG_E2B_FULL", &dir)
            .env("WGPU_BACKEND", "vulkan");
            Ok(Some(run_counting(&mut cmd)?))
        })?;
        stage(
            "large: Gemma 4 E2B's full shapes (in Chromium)",
            &mut || {
                // The model generated by the stage above, served by the fixture server in the Hugging
                // Face layout and loaded through the dev extension's download -> Cache Storage -> GPU
                // path (tests/e2e/large.test.mjs).
                let mut cmd = Command::new("node");
                cmd.current_dir(root().join("tests"))
                    .args(["--test", "--test-reporter=spec", "--test-concurrency=1"])
                    .arg("e2e/large.test.mjs")
                    .env("GG_EXT_DEV", crate::build::extension_dir(false))
                    .env("GG_E2B_FULL", root().join("bench/cache/gemma4-e2b-full"));
                Ok(Some(run_counting(&mut cmd)?))
            },
        )?;
    }

    let mut total = Counts::default();
    println!("\nTest summary");
    println!(
        "{:<58} {:>8} {:>7} {:>7} {:>8}",
        "stage", "passed", "failed", "skipped", "seconds"
    );
    for s in &stages {
        match s.counts {
            Some(c) => {
                total.add(c);
                println!(
                    "{:<58} {:>8} {:>7} {:>7} {:>8.0}",
                    s.name, c.passed, c.failed, c.ignored, s.seconds
                );
            }
            None => println!(
                "{:<58} {:>8} {:>7} {:>7} {:>8.0}",
                s.name, "ok", "", "", s.seconds
            ),
        }
    }
    println!(
        "{:<58} {:>8} {:>7} {:>7} {:>8.0}",
        "total",
        total.passed,
        total.failed,
        total.ignored,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_rust_and_node_output() {
        let mut c = Counts::default();
        parse_counts(
            "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            &mut c,
        );
        parse_counts(
            "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured",
            &mut c,
        );
        parse_counts("ℹ pass 4", &mut c);
        parse_counts("ℹ fail 1", &mut c);
        parse_counts("ℹ skipped 2", &mut c);
        parse_counts("ℹ tests 7", &mut c);
        assert_eq!((c.passed, c.failed, c.ignored), (17, 3, 5));
    }
}
