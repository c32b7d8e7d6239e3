//! `cargo xtask bench`: our runtime natively (`gemma-gem bench`, against ONNX Runtime's WebGPU EP
//! with `--ort-ep`) and in headless Chromium against onnxruntime-web and transformers.js on the
//! same ONNX files, timed by one clock in seeded, shuffled pairs (issue 33); results as JSON +
//! Markdown under `bench/results/`.
//!
//! Results document (`bench/results/<date>-<time>.json`):
//! - `date`, `note`, `native_config`, `native.<model>`: medians per configuration
//!   (`prefill_<n>_tok_s`, `ttft_<n>_s`, `decode_<context>_tok_s`, `dispatches_per_token`,
//!   `dispatches_per_layer_per_token`, `submits_per_token`, `bytes_read_back_per_token`,
//!   `buffers_created_per_token`, `bytes_uploaded_per_token`, `bind_groups_created_per_token`,
//!   `record_ms_per_token`, `gpu_memory_after_load_bytes`, `gpu_memory_peak_bytes`, `adapter`,
//!   `dtype`, `skipped`);
//!   with `--ort-ep` also `ort_webgpu_ep` (the paired summary below, against ONNX Runtime's
//!   WebGPU plug-in EP: `bench/native/ort_ep.py`);
//! - `native_vision`: the vision encoder (`gemma-gem bench-vision` on the mobius split fixture's
//!   tiny tower) for an image of 280 soft tokens: `encode_ms_median`, `encode_ms_min`,
//!   `encode_ms_max`, `runs_ms` (`--runs` of them, after a warm-up), `dispatches`, `submits`,
//!   `slots`, `adapter`;
//! - `browser`: `browser_version`, `adapter`, `adapter_info`, `cross_origin_isolated`, `config`,
//!   `vision` (the same encoder and image in headless Chromium: `gg_llm::VisionEncoder` in the
//!   bench wasm on WebGPU, timed with `performance.now()` in the page from the host patches to
//!   the features read back; the keys of `native_vision` plus `encode_ms_min`, `encode_ms_max`,
//!   `warm_up_ms`, `load_s`, `rows`, `hidden`, or `error`),
//!   (with the pairs' `seed`), `ort_web_static` (what the variant is and where it cannot run),
//!   and per model `models.<model>` ([`paired::browser_model`]): `graph_form` (ours or the
//!   exporters'), `not_run` (the peers that cannot read that graph form, and why),
//!   `ort_web_static_capacity` (its fixed cache's rows), `transformers_js_layout` (on a GenAI
//!   package: the view transformers.js read, see [`tjs_layout`]), `runtimes.<runtime>` with every sample
//!   and its median / min / max, and per peer (`ort_web`, `ort_web_static`, `transformers_js`)
//!   `decode_tok_s_ratio`,
//!   `prefill_tok_s_ratio`, `ttft_ratio` (ours / peer, medians of the per-pair ratios), `runs`,
//!   `tokens_match` and `pair_ratios`; a peer whose greedy ids differ fails the bench after the
//!   results are written, with ONNX Runtime's CPU EP as the referee (free-running, windowless
//!   on KV-shared layers, and teacher-forced at the first difference: [`judge_mismatches`]);
//!   `ours_in_call` (ours only,
//!   the peers have no constraint): decode inside a constrained tool call after the shortest
//!   decode context (`gg_llm::bench::decode_in_call` in wasm), the medians over the pairs of
//!   `call_tok_s`, `free_tok_s` (after the call closed; null when it did not),
//!   `mask_ms_per_token`, `call_tokens`, `bytes_uploaded_per_token`, with `context` (prompt
//!   tokens with `<|tool_call>`), `unconstrained_tok_s` (ours' decode at that context without
//!   the call), `runs`, `errors` and `samples` (each key's median / min / max / samples);
//! - `sizes`: shipped bundles, raw and gzip;
//! - `pages`: the page tools on the real-page corpus and the stress pages ([`pages`]);
//! - `raw`: every run as measured.

mod pages;
mod paired;
mod report;

use crate::util::{cargo, exec, output, root, target_dir, which};
use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Run the native bench (wgpu on the default adapter; set WGPU_BACKEND=vulkan for lavapipe).
    /// With neither --native nor --browser, both run.
    #[arg(long)]
    pub native: bool,
    /// Run the browser bench: ours (wasm) vs onnxruntime-web in headless Chromium (WebGPU).
    #[arg(long)]
    pub browser: bool,
    /// Run the page-tools bench: snapshot_page and read_page_content on the 44 real pages of
    /// tests/pages/real and the stress pages (dev extension, headless Chromium): median and
    /// worst times, the longest main-thread task, the content script's memory peak. With none
    /// of --native, --browser, --pages, all three run.
    #[arg(long)]
    pub pages: bool,
    /// Which model(s): the tiny fixture, the E2B-shaped synthetic model (10 layers), the same two
    /// in the exporters' graph form (mobius GenAI packages, its `--ep cpu` profile:
    /// `mobius-tiny` committed, `mobius-e2b-bench` generated on demand with mobius in its own
    /// venv) and in mobius's `--ep webgpu` profile (`mobius-tiny-webgpu` q4 and
    /// `mobius-tiny-webgpu-q4f16` committed, `mobius-e2b-bench-webgpu-q4f16` generated on
    /// demand), or
    /// `all`: `tiny`, `e2b-bench` and `mobius-tiny`; `e2b-full`: Gemma 4 E2B's full shapes (35
    /// layers, ~6.3 GB for q4 and q4f16). `e2b-full` and the generated mobius models (torch,
    /// ~4 GB) are never part of `all`. The synthetic models are generated on demand into
    /// bench/cache/.
    #[arg(long, value_enum, default_value_t = ModelChoice::All)]
    pub model: ModelChoice,
    /// Native: measured runs per configuration (the browser measures --pairs); the vision
    /// encoder's timed runs, natively and in the browser.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Where the results go (JSON + Markdown, named by date and time).
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Scaled-down configuration for software adapters (lavapipe, SwiftShader): prefill 128,
    /// decode 8 tokens after 128 (the full one: prefill 128 and 512, decode 32 tokens after 128
    /// and 1024). Results say which configuration ran.
    #[arg(long)]
    pub quick: bool,
    /// Override the prefill lengths (comma-separated), e.g. `--prefill 16` on a software adapter.
    #[arg(long, value_delimiter = ',')]
    pub prefill: Option<Vec<usize>>,
    /// Override the decode contexts (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub decode_context: Option<Vec<usize>>,
    /// Override the number of decode steps measured.
    #[arg(long)]
    pub decode_tokens: Option<usize>,
    /// Native adapter: a case-insensitive substring of its description.
    #[arg(long)]
    pub adapter: Option<String>,
    /// Native weight variant (q4 or q4f16; default: q4f16 with shader-f16, else q4). The browser
    /// picks by the same rule for both runtimes. A synthetic model is generated in this variant
    /// only (both without --dtype).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Browser: pairs measured per model; each pair runs every runtime once, in an order shuffled
    /// with --seed.
    #[arg(long, default_value_t = 5)]
    pub pairs: usize,
    /// Browser: the seed of the per-pair order (default: from the clock; recorded either way).
    #[arg(long)]
    pub seed: Option<u32>,
    /// Browser: the peers measured against ours (comma-separated: ort_web, ort_web_static,
    /// transformers_js; `--peers ''`: none, ours alone). A peer that cannot read a model's graph
    /// form is left out for it and says why (`not_run`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ort_web,ort_web_static,transformers_js"
    )]
    pub peers: Vec<String>,
    /// Browser: fail unless Chromium's WebGPU adapter is a hardware one (not SwiftShader).
    #[arg(long)]
    pub require_gpu: bool,
    /// Browser: extra Chromium flags (repeatable), e.g. the real-GPU flags of bench/device.sh.
    #[arg(long = "chromium-arg", allow_hyphen_values = true)]
    pub chromium_args: Vec<String>,
    /// Native: also measure ONNX Runtime's WebGPU plug-in EP (`bench/native/ort_ep.py`, PyPI
    /// onnxruntime-ep-webgpu; its Python from GEMMA_GEM_ORT_EP_PYTHON, else python3) as peer
    /// `ort_webgpu_ep`: --pairs pairs, each running both once in an order shuffled with --seed.
    #[arg(long)]
    pub ort_ep: bool,
    /// Native: also check ours' greedy ids (each decode configuration's first token and
    /// --decode-tokens more) against ONNX Runtime's CPU EP on the same model and ids
    /// (`bench/native/ort_ep.py --ep cpu`; its Python from GEMMA_GEM_ORT_EP_PYTHON, else the
    /// repo's .venv): `native.<model>.ort_cpu.tokens_match`; the bench fails when they differ.
    #[arg(long)]
    pub cpu_reference: bool,
    /// Exporters' graph form (GenAI packages) only: run every runtime on a copy of the package
    /// whose MatMulNBits all have this `accuracy_level` (0 to 4; `bench/accuracy_level.py` writes
    /// it to bench/cache/<model>-accuracy<N>/). mobius writes 4 (int8 activations allowed: the
    /// level ONNX Runtime's fast int paths need); 0 is exact math, what ours computes at any
    /// level. Without it the package runs as exported. Recorded in `graph_form`.
    #[arg(long, value_name = "N")]
    pub accuracy_level: Option<u8>,
    /// Port of the local server for the browser bench.
    #[arg(long, default_value_t = 8093)]
    pub port: u16,
    /// Only rewrite the Markdown report of an existing results JSON (next to it) and print it.
    #[arg(long, value_name = "RESULTS.json")]
    pub render: Option<PathBuf>,
    /// Browser only: summarise the raw record a browser run's driver wrote
    /// (`target/bench-web/raw.json`: every pair's samples and ids, written before the summary)
    /// instead of measuring, e.g. of a run stopped after its pairs. The other flags must be
    /// that run's (--model, --peers, the configuration, --pairs, --accuracy-level): the record's
    /// models, runtimes and configurations are checked against them. The token check and its
    /// CPU references run as after a measurement; shipped sizes are not measured.
    #[arg(long, value_name = "RAW.json")]
    pub from_raw: Option<PathBuf>,
    /// Use this prebuilt `gemma-gem` binary instead of building it (bench/device.sh).
    #[arg(long)]
    pub gemma_gem: Option<PathBuf>,
    /// Skip `cargo xtask build --release` (sizes of an existing dist/chrome-mv3, or none when missing).
    #[arg(long)]
    pub no_release_build: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelChoice {
    Tiny,
    #[value(name = "e2b-bench")]
    E2bBench,
    #[value(name = "e2b-full")]
    E2bFull,
    #[value(name = "mobius-tiny")]
    MobiusTiny,
    #[value(name = "mobius-e2b-bench")]
    MobiusE2bBench,
    /// The same weights in mobius's `--ep webgpu` profile, q4f16 (generated on demand; its
    /// per-layer table split into float16 tables, as mobius does for WebGPU): the peers' graph
    /// capture form at E2B's shapes. The peers need `shader-f16`.
    #[value(name = "mobius-e2b-bench-webgpu-q4f16")]
    MobiusE2bBenchWebgpuQ4f16,
    /// mobius's `--ep webgpu` profile (committed, q4): graph-capture-ready in float16 only.
    #[value(name = "mobius-tiny-webgpu")]
    MobiusTinyWebgpu,
    /// The same in float16 (q4f16; the peers need `shader-f16`, which SwiftShader lacks).
    #[value(name = "mobius-tiny-webgpu-q4f16")]
    MobiusTinyWebgpuQ4f16,
    All,
}

/// A model of the bench: its name in the results and its folder.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchModel {
    pub name: &'static str,
    pub dir: PathBuf,
    /// The `tools/fixtures/gen_gemma4.py` preset that generates it into `dir` on demand (None:
    /// a committed fixture).
    pub preset: Option<&'static str>,
}

/// The measured configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: &'static str,
    pub prefill: Vec<usize>,
    pub decode_context: Vec<usize>,
    pub decode_tokens: usize,
}

impl Plan {
    /// The configuration for `args`: full or quick, with the explicit overrides applied.
    pub fn of(args: &BenchArgs) -> Self {
        let mut p = if args.quick {
            Plan {
                name: "quick",
                prefill: vec![128],
                decode_context: vec![128],
                decode_tokens: 8,
            }
        } else {
            Plan {
                name: "full",
                prefill: vec![128, 512],
                decode_context: vec![128, 1024],
                decode_tokens: 32,
            }
        };
        if let Some(v) = &args.prefill {
            p.prefill = v.clone();
            p.name = "custom";
        }
        if let Some(v) = &args.decode_context {
            p.decode_context = v.clone();
            p.name = "custom";
        }
        if let Some(n) = args.decode_tokens {
            p.decode_tokens = n;
            p.name = "custom";
        }
        p
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "prefill": self.prefill,
            "decode_context": self.decode_context,
            "decode_tokens": self.decode_tokens,
        })
    }

    /// The browser's configuration for a model of context `limit` (None: unbounded): its prefill
    /// lengths and (context, tokens) decode runs that fit, and a note per one that does not.
    fn browser(&self, limit: Option<usize>) -> (Vec<usize>, Vec<(usize, usize)>, Vec<String>) {
        let fits = |n: usize| limit.is_none_or(|l| n <= l);
        let mut skipped = Vec::new();
        let prefill = self
            .prefill
            .iter()
            .copied()
            .filter(|&n| {
                let ok = fits(n + 1);
                if !ok {
                    skipped.push(format!("prefill {n}: over the model's context"));
                }
                ok
            })
            .collect();
        let decode = self
            .decode_context
            .iter()
            .map(|&c| (c, self.decode_tokens))
            .filter(|&(c, t)| {
                let n = c + UNTIMED_DECODE_STEPS + t + 1;
                let ok = fits(n);
                if !ok {
                    skipped.push(format!(
                        "decode {t} after {c}: {n} tokens over the model's context"
                    ));
                }
                ok
            })
            .collect();
        (prefill, decode, skipped)
    }
}

/// The runtimes of the browser bench: ours first, then the peers asked for.
pub const BROWSER_PEERS: [&str; 3] = ["ort_web", "ort_web_static", "transformers_js"];

/// The decode steps the bench page runs between the first token and the decode clock
/// (`DECODE_UNTIMED_STEPS` in bench/web/bench.mjs: the same number).
pub const UNTIMED_DECODE_STEPS: usize = 1;

/// The rows of `ort_web_static`'s fixed KV cache for a model's configuration: the longest
/// sequence any measured generation reaches (a prompt, a decode context plus its untimed and
/// timed steps, the warm-up's 8 + 2).
pub fn static_capacity(prefill: &[usize], decode: &[(usize, usize)]) -> usize {
    prefill
        .iter()
        .copied()
        .chain(decode.iter().map(|&(c, t)| c + UNTIMED_DECODE_STEPS + t))
        .chain([10])
        .max()
        .unwrap_or(10)
}

impl BenchArgs {
    /// (native, browser): both when neither flag is given.
    pub fn sides(&self) -> (bool, bool) {
        if !self.native && !self.browser && !self.pages {
            (true, true)
        } else {
            (self.native, self.browser)
        }
    }

    /// The arguments with `--peers ''` (an empty name) read as no peer: ours alone.
    fn normalized(&self) -> BenchArgs {
        let mut a = self.clone();
        a.peers.retain(|p| !p.is_empty());
        a
    }

    fn check(&self) -> Result<()> {
        let plan = Plan::of(self);
        if self.runs == 0 {
            bail!("--runs must be at least 1");
        }
        if plan.prefill.is_empty() || plan.prefill.contains(&0) {
            bail!("--prefill needs lengths of at least 1 token");
        }
        if plan.decode_context.is_empty() || plan.decode_context.contains(&0) {
            bail!("--decode-context needs lengths of at least 1 token");
        }
        if plan.decode_tokens == 0 {
            bail!("--decode-tokens must be at least 1");
        }
        if let Some(d) = &self.dtype
            && d != "q4"
            && d != "q4f16"
        {
            bail!("--dtype must be q4 or q4f16 (got {d})");
        }
        if self.pairs == 0 {
            bail!("--pairs must be at least 1");
        }
        if let Some(n) = self.accuracy_level
            && n > 4
        {
            bail!("--accuracy-level must be 0 to 4, MatMulNBits' levels (got {n})");
        }
        if self.from_raw.is_some() && (self.native || self.pages || !self.browser) {
            bail!("--from-raw summarises a browser run: give it with --browser alone");
        }
        if let Some(p) = self
            .peers
            .iter()
            .find(|p| !BROWSER_PEERS.contains(&p.as_str()))
        {
            bail!(
                "--peers: unknown peer {p} (known: {})",
                BROWSER_PEERS.join(", ")
            );
        }
        Ok(())
    }
}

pub fn models(choice: ModelChoice) -> Vec<BenchModel> {
    let tiny = BenchModel {
        name: "gemma4-tiny",
        dir: root().join("tests/fixtures/models/gemma4-tiny"),
        preset: None,
    };
    let generated = |name: &'static str, preset: &'static str| BenchModel {
        name,
        dir: root().join("bench/cache").join(name),
        preset: Some(preset),
    };
    let e2b = generated("gemma4-e2b-bench", "e2b-bench");
    let mobius_tiny = BenchModel {
        name: "mobius-tiny",
        dir: root().join("tests/fixtures/models/mobius-tiny-gqa-int4-split"),
        preset: None,
    };
    let mobius_e2b = BenchModel {
        name: "mobius-e2b-bench",
        dir: root().join("bench/cache/mobius-e2b-bench"),
        preset: None,
    };
    let fixture = |name: &'static str, folder: &str| BenchModel {
        name,
        dir: root().join("tests/fixtures/models").join(folder),
        preset: None,
    };
    match choice {
        ModelChoice::Tiny => vec![tiny],
        ModelChoice::E2bBench => vec![e2b],
        ModelChoice::E2bFull => vec![generated("gemma4-e2b-full", "e2b-full")],
        ModelChoice::MobiusTiny => vec![mobius_tiny],
        ModelChoice::MobiusE2bBench => vec![mobius_e2b],
        ModelChoice::MobiusE2bBenchWebgpuQ4f16 => vec![BenchModel {
            name: "mobius-e2b-bench-webgpu-q4f16",
            dir: root().join("bench/cache/mobius-e2b-bench-webgpu-q4f16"),
            preset: None,
        }],
        ModelChoice::MobiusTinyWebgpu => {
            vec![fixture(
                "mobius-tiny-webgpu",
                "mobius-tiny-webgpu-int4-split",
            )]
        }
        ModelChoice::MobiusTinyWebgpuQ4f16 => vec![fixture(
            "mobius-tiny-webgpu-q4f16",
            "mobius-tiny-webgpu-int4f16-split",
        )],
        ModelChoice::All => vec![tiny, e2b, mobius_tiny],
    }
}

impl BenchModel {
    /// Whether the folder is an ONNX Runtime GenAI package (the exporters' graph form:
    /// `genai_config.json`, GroupQueryAttention) rather than the onnx-community layout.
    pub fn is_genai(&self) -> bool {
        self.dir.join("genai_config.json").is_file() || self.name.starts_with("mobius-")
    }
}

/// Why a browser peer does not run on a model's graph form (None: it does).
pub fn peer_not_run(peer: &str, genai: bool) -> Option<&'static str> {
    match (peer, genai) {
        ("ort_web_static", false) => Some(
            "this graph's attention concatenates past and new keys (present = Concat(past, new)), so the KV cache grows each step: no fixed-capacity cache bound in place, and graph capture needs fixed shapes; it needs GroupQueryAttention's shared past/present buffer (the exporters' form)",
        ),
        _ => None,
    }
}

/// Generates a synthetic model (E2B-shaped, or E2B's full shapes) into bench/cache unless the
/// generator's stamp says it is current (the stamp hashes the generator's code, so a generator
/// change regenerates it). The weight variant `dtype` (`--dtype`), else both, q4 and q4f16; a
/// cache holding both serves a run asking for one. `mobius-e2b-bench`: [`ensure_mobius_e2b`].
fn ensure_model(model: &BenchModel, dtype: Option<&str>) -> Result<()> {
    if model.name.starts_with("mobius-e2b-bench") {
        return ensure_mobius_e2b(model);
    }
    let Some(preset) = model.preset else {
        if !model.dir.join("config.json").is_file()
            && !model.dir.join("genai_config.json").is_file()
        {
            bail!("{} is missing (a committed fixture)", model.dir.display());
        }
        return Ok(());
    };
    // GEMMA_GEM_PYTHON (bench/device.sh), else the repo's .venv.
    let python = crate::install::tools_python()?;
    exec(
        Command::new(python)
            .current_dir(root())
            .arg("tools/fixtures/gen_gemma4.py")
            .args([
                "--preset",
                preset,
                "--dtypes",
                dtype.unwrap_or("q4,q4f16"),
                "--out",
            ])
            .arg(&model.dir)
            .arg("--skip-existing"),
    )
    .with_context(|| format!("generating the bench model {}", model.name))
}

/// The E2B-shaped model in the exporters' form: `tools/fixtures/gen_mobius.py --only
/// mobius-e2b-bench` or `mobius-e2b-bench-webgpu-q4f16` (mobius-onnx, in its own venv: GEMMA_GEM_MOBIUS_PYTHON, else `.venv-mobius`
/// made from tools/requirements-mobius.txt) on the weights of `gemma4-e2b-bench` (generated
/// first); its stamp hashes the generator, the source's stamp and mobius's version.
fn ensure_mobius_e2b(model: &BenchModel) -> Result<()> {
    ensure_model(
        &BenchModel {
            name: "gemma4-e2b-bench",
            dir: root().join("bench/cache/gemma4-e2b-bench"),
            preset: Some("e2b-bench"),
        },
        None,
    )?;
    let python = match std::env::var_os("GEMMA_GEM_MOBIUS_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = root().join(".venv-mobius");
            let py = venv.join("bin/python");
            if !py.is_file() {
                eprintln!(
                    "xtask: creating .venv-mobius (tools/requirements-mobius.txt: mobius-onnx, transformers, torch; ~4 GB)"
                );
                exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
                exec(
                    Command::new(venv.join("bin/pip"))
                        .args(["install", "-q", "-r"])
                        .arg(root().join("tools/requirements-mobius.txt")),
                )
                .context("installing tools/requirements-mobius.txt into .venv-mobius")?;
            }
            py
        }
    };
    let parent = model
        .dir
        .parent()
        .context("the model folder has no parent")?;
    exec(
        Command::new(python)
            .current_dir(root())
            .arg("tools/fixtures/gen_mobius.py")
            .args(["--only", model.name, "--out"])
            .arg(parent)
            .arg("--skip-existing"),
    )
    .context("exporting the E2B-shaped bench model with mobius")
}

/// `--accuracy-level`: a GenAI package's copy with every MatMulNBits at `level`
/// (`bench/accuracy_level.py`, reused while current); other graph forms are returned as they are
/// (our generator writes no accuracy_level: exact math).
fn with_accuracy_level(model: BenchModel, level: u8) -> Result<BenchModel> {
    if !model.is_genai() {
        eprintln!(
            "xtask: note: --accuracy-level applies to the exporters' graph form; {} runs as it is",
            model.name
        );
        return Ok(model);
    }
    let python = crate::install::tools_python()?;
    let dir = root()
        .join("bench/cache")
        .join(format!("{}-accuracy{level}", model.name));
    exec(
        Command::new(python)
            .current_dir(root())
            .arg("bench/accuracy_level.py")
            .arg(&model.dir)
            .arg(&dir)
            .arg(level.to_string()),
    )
    .with_context(|| format!("rewriting {}'s accuracy_level to {level}", model.name))?;
    Ok(BenchModel { dir, ..model })
}

/// transformers.js's view of a GenAI package: `bench/tjs_layout.py` writes the package's own
/// graphs and weights under the onnx-community file names into `bench/cache/<folder>-tjs/`
/// (reused while current). Returns the folder and the weight variant's name there (`q4`...).
fn tjs_layout(model: &BenchModel) -> Result<(PathBuf, String)> {
    let folder = model
        .dir
        .file_name()
        .context("the model folder has no name")?
        .to_string_lossy()
        .into_owned();
    let dir = root().join("bench/cache").join(format!("{folder}-tjs"));
    let out = Command::new(crate::install::tools_python()?)
        .current_dir(root())
        .arg("bench/tjs_layout.py")
        .arg(&model.dir)
        .arg(&dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running bench/tjs_layout.py")?;
    let text = String::from_utf8_lossy(&out.stdout);
    eprint!("{text}");
    if !out.status.success() {
        bail!(
            "bench/tjs_layout.py could not lay {} out for transformers.js ({})",
            model.name,
            out.status
        );
    }
    let dtype = text
        .lines()
        .find_map(|l| l.strip_prefix("dtype "))
        .context("bench/tjs_layout.py printed no dtype line")?
        .trim()
        .to_string();
    Ok((dir, dtype))
}

/// What the results say about the folder transformers.js reads for a GenAI package.
pub const TJS_LAYOUT_NOTE: &str = "the GenAI package's own graphs and weights under transformers.js's file names (bench/tjs_layout.py): onnx/embed_tokens_<dtype>.onnx with its image_features input bound to an empty constant (text only, what the other runtimes feed it), onnx/decoder_model_merged_<dtype>.onnx with its batch dimension labelled batch_size; config.json from genai_config.json";

/// `graph_form` of a model in the results: whose graph, and the MatMulNBits' accuracy_level.
fn graph_form(genai: bool, accuracy_level: Option<u8>) -> String {
    match (genai, accuracy_level) {
        (false, _) => "ours (onnx-community layout, gen_gemma4.py)".into(),
        (true, None) => "exporter (ONNX Runtime GenAI package, mobius: GroupQueryAttention, MatMulNBits accuracy_level as exported)".into(),
        (true, Some(n)) => format!("exporter (ONNX Runtime GenAI package, mobius: GroupQueryAttention, MatMulNBits accuracy_level rewritten to {n} by --accuracy-level)"),
    }
}

/// A number of the model's text config (`config.json`, `text_config` or the top level; a GenAI
/// package's `genai_config.json`: `vocab_size`, `max_position_embeddings` as its
/// `context_length`, `num_hidden_layers` from its decoder).
fn text_config_u64(model: &BenchModel, key: &str) -> Option<u64> {
    if let Ok(bytes) = std::fs::read(model.dir.join("genai_config.json")) {
        let g: Value = serde_json::from_slice(&bytes).ok()?;
        let m = &g["model"];
        return match key {
            "max_position_embeddings" => m["context_length"].as_u64(),
            "num_hidden_layers" => m["decoder"]["num_hidden_layers"].as_u64(),
            k => m[k].as_u64(),
        };
    }
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(model.dir.join("config.json")).ok()?).ok()?;
    cfg.get("text_config")
        .unwrap_or(&cfg)
        .get(key)
        .and_then(Value::as_u64)
}

/// The positions every runtime can compute on `model`: its configuration's limit; on a GenAI
/// package the fewest of `context_length` and the rows of the decoder's rotary tables
/// (`bench/native/positions.py`, which ort_ep.py reads too; mobius may state a longer
/// `context_length` than its tables have, and past them ONNX Runtime refuses the sequence and
/// ours too). None: unbounded.
fn context_limit(model: &BenchModel) -> Result<Option<usize>> {
    if !model.is_genai() {
        return Ok(text_config_u64(model, "max_position_embeddings").map(|l| l as usize));
    }
    let out = output(
        Command::new(crate::install::tools_python()?)
            .current_dir(root())
            .arg("bench/native/positions.py")
            .arg(&model.dir)
            .stderr(std::process::Stdio::inherit()),
    )
    .with_context(|| format!("reading the rotary tables of {}", model.name))?;
    match out.trim() {
        "none" => Ok(None),
        n => Ok(Some(n.parse::<usize>().with_context(|| {
            format!("bench/native/positions.py printed {n:?} for {}", model.name)
        })?)),
    }
}

fn layers_of(model: &BenchModel) -> Option<u64> {
    text_config_u64(model, "num_hidden_layers")
}

/// The `gemma-gem` binary: `--gemma-gem`, or built (release).
fn gemma_gem_bin(args: &BenchArgs) -> Result<PathBuf> {
    Ok(match &args.gemma_gem {
        Some(b) => b.clone(),
        None => {
            exec(cargo().args(["build", "--release", "-p", "gg-cli", "--bin", "gemma-gem"]))?;
            target_dir().join("release/gemma-gem")
        }
    })
}

/// The fixture whose vision encoder the native bench measures (mobius-onnx's tiny Gemma 4
/// vision tower: patch 4, pooling 3×3, positions up to 63, so 280 soft tokens = 60 × 42
/// patches fit).
const VISION_FIXTURE: &str = "tests/fixtures/models/mobius-tiny-gqa-int4-split";
/// Soft tokens of the measured image (Gemma 4's default budget).
const VISION_SOFT_TOKENS: usize = 280;

/// `gemma-gem bench-vision` on [`VISION_FIXTURE`]: the encoder's time for an image of
/// [`VISION_SOFT_TOKENS`] soft tokens.
fn run_native_vision(args: &BenchArgs) -> Result<Value> {
    let bin = gemma_gem_bin(args)?;
    let mut cmd = Command::new(&bin);
    cmd.arg("bench-vision")
        .arg("--model")
        .arg(root().join(VISION_FIXTURE))
        .args(["--soft-tokens", &VISION_SOFT_TOKENS.to_string()])
        .args(["--runs", &args.runs.to_string()]);
    if let Some(a) = &args.adapter {
        cmd.args(["--adapter", a]);
    }
    eprintln!("xtask: native bench of the vision encoder ({VISION_SOFT_TOKENS} soft tokens)");
    let out = output(cmd.stderr(std::process::Stdio::inherit()))?;
    serde_json::from_str(&out).context("gemma-gem bench-vision printed no JSON")
}

/// `browser.vision`: the browser driver's vision measurement (`window.bench.vision` in
/// bench/web/bench.mjs) with the keys of `native_vision`, the median / min / max of `runs_ms`
/// computed here; `{model, error}` when it failed or did not run.
fn browser_vision(raw: Option<&Value>) -> Value {
    let model = root().join(VISION_FIXTURE).display().to_string();
    let Some(Value::Object(v)) = raw else {
        return json!({"model": model, "error": "the browser driver returned no vision measurement"});
    };
    let mut out = v.clone();
    out.insert("model".into(), json!(model));
    if !out.contains_key("error") {
        let mut ms: Vec<f64> = v
            .get("runs_ms")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        ms.sort_by(f64::total_cmp);
        match (ms.first(), ms.last()) {
            (Some(&min), Some(&max)) => {
                out.insert("encode_ms_median".into(), json!(ms[ms.len() / 2]));
                out.insert("encode_ms_min".into(), json!(min));
                out.insert("encode_ms_max".into(), json!(max));
            }
            _ => {
                out.insert("error".into(), json!("no timed runs (runs_ms is empty)"));
            }
        }
    }
    Value::Object(out)
}

fn run_native(args: &BenchArgs, plan: &Plan, models: &[BenchModel]) -> Result<(Value, Value)> {
    let bin = gemma_gem_bin(args)?;
    let list = |v: &[usize]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut summary = Map::new();
    let mut raw = Value::Object(Map::new());
    // `gemma-gem bench` on `m` with the plan's configuration (the caller adds --runs).
    let base_cmd = |m: &BenchModel| {
        let mut cmd = Command::new(&bin);
        cmd.arg("bench")
            .arg("--model")
            .arg(&m.dir)
            .args(["--prefill", &list(&plan.prefill)])
            .args(["--decode-context", &list(&plan.decode_context)])
            .args(["--decode-tokens", &plan.decode_tokens.to_string()]);
        if let Some(a) = &args.adapter {
            cmd.args(["--adapter", a]);
        }
        if let Some(d) = &args.dtype {
            cmd.args(["--dtype", d]);
        }
        cmd
    };
    for m in models {
        let mut cmd = base_cmd(m);
        cmd.args(["--runs", &args.runs.to_string()]);
        if args.cpu_reference {
            cmd.arg("--token-ids");
        }
        eprintln!(
            "xtask: native bench of {} ({} configuration)",
            m.name, plan.name
        );
        let out = output(cmd.stderr(std::process::Stdio::inherit()))?;
        let doc: Value = serde_json::from_str(&out)
            .with_context(|| format!("gemma-gem bench printed no JSON for {}", m.name))?;
        let mut model_summary = report::native_model(&doc, layers_of(m));
        model_summary["graph_form"] = json!(graph_form(m.is_genai(), args.accuracy_level));
        summary.insert(m.name.into(), model_summary);
        if args.cpu_reference {
            let dtype = doc["dtype"].as_str().unwrap_or("q4").to_string();
            let check = cpu_reference(plan, m, &dtype, false).map(|r| cpu_check(&doc, &r))?;
            // A difference gets the CPU EP's logits of both ids there (teacher-forced on ours'):
            // how near a tie it was. Still a failure: here the CPU EP is the other side.
            let mut judged = json!({ "ort_cpu": check });
            if judged["ort_cpu"]["tokens_match"] == json!(false) {
                judge_mismatches(m, &dtype, &mut judged);
            }
            if let Some(Value::Object(o)) = summary.get_mut(m.name) {
                o.insert("ort_cpu".into(), judged["ort_cpu"].take());
            }
        }
        raw[m.name] = doc;
        if args.ort_ep {
            // The weight variant ours chose (or --dtype), for both.
            let dtype = raw[m.name]["dtype"].as_str().unwrap_or("q4").to_string();
            let (peer, pairs) = native_pairs(args, plan, m, &base_cmd(m), &dtype)?;
            if let Some(Value::Object(o)) = summary.get_mut(m.name) {
                o.insert("ort_webgpu_ep".into(), peer);
            }
            raw[m.name]["ort_webgpu_ep_pairs"] = pairs;
        }
    }
    Ok((Value::Object(summary), raw))
}

/// The Python that runs ONNX Runtime's CPU EP for the references: GEMMA_GEM_ORT_EP_PYTHON, else
/// the repo's .venv.
fn reference_python() -> Result<PathBuf> {
    match std::env::var_os("GEMMA_GEM_ORT_EP_PYTHON") {
        Some(p) => Ok(PathBuf::from(p)),
        None => crate::install::ensure_python_venv(),
    }
}

/// The greedy ids of ONNX Runtime's CPU EP on `m` for the plan's configurations
/// (`bench/native/ort_ep.py --ep cpu`), in the shape of [`paired::native_run`]: the referee when
/// the runtimes' ids differ. `windowless`: on the graph without a sliding window on its KV-shared
/// GroupQueryAttention layers (`--kv-shared-windowless`, GenAI packages only), what ONNX Runtime's
/// WebGPU kernels compute there. Its Python: GEMMA_GEM_ORT_EP_PYTHON, else the repo's .venv.
fn cpu_reference(plan: &Plan, m: &BenchModel, dtype: &str, windowless: bool) -> Result<Value> {
    let python = reference_python()?;
    let list = |v: &[usize]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    eprintln!(
        "xtask: ONNX Runtime's CPU EP's greedy ids on {} ({})",
        m.name,
        if windowless {
            "without a window on its KV-shared layers, as ONNX Runtime's WebGPU kernels compute them"
        } else {
            "the reference"
        }
    );
    let mut cmd = Command::new(python);
    cmd.arg(root().join("bench/native/ort_ep.py"));
    if windowless {
        cmd.arg("--kv-shared-windowless");
    }
    let out = output(
        cmd.args([
            "--ep",
            "cpu",
            "--runs",
            "1",
            "--token-ids",
            "--dtype",
            dtype,
        ])
        .arg("--model")
        .arg(&m.dir)
        .args(["--prefill", &list(&plan.prefill)])
        .args(["--decode-context", &list(&plan.decode_context)])
        .args(["--decode-tokens", &plan.decode_tokens.to_string()])
        .stderr(std::process::Stdio::inherit()),
    )?;
    let doc: Value = serde_json::from_str(&out).context("ort_ep.py --ep cpu printed no JSON")?;
    Ok(paired::native_run(&doc))
}

/// The decode steps the bench page ran between the first token and the decode clock in one
/// model's browser record (`untimed_steps` of its decode entries, bench/web/bench.mjs; records
/// from before it have none: 0). Its decode ids hold 1 + that + `decode_tokens` ids.
fn untimed_steps(raw_model: &Value) -> usize {
    raw_model
        .get("pairs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("runs")?.as_object())
        .flat_map(|runs| runs.values())
        .filter_map(|r| r.get("decode")?.as_array())
        .flatten()
        .filter_map(|d| d.get("untimed_steps")?.as_u64())
        .max()
        .unwrap_or(0) as usize
}

/// After the CPU reference: where an ONNX Runtime WebGPU peer's ids differ from ours and ours
/// equal the reference, on an exporters' package, checks the peer's ids against the CPU EP on the
/// graph without windows on its KV-shared layers ([`paired::explain_with_windowless`]). A
/// failure to run that check is a note; the mismatch then stays unexplained (and fails the bench).
fn explain_mismatches(plan: &Plan, m: &BenchModel, dtype: &str, summary: &mut Value) {
    if !m.is_genai() || !paired::wants_windowless_check(summary) {
        return;
    }
    match cpu_reference(plan, m, dtype, true) {
        Ok(windowless) => paired::explain_with_windowless(summary, &windowless),
        Err(e) => eprintln!(
            "xtask: note: no windowless CPU reference for {}: {e:#}",
            m.name
        ),
    }
}

/// ONNX Runtime's CPU EP as the referee of every mismatch no cause explains yet: teacher-forced
/// on ours' ids, which id does it pick at the first difference (`bench/native/ort_ep.py --judge`,
/// [`paired::judge_requests`], [`paired::apply_judgement`]). On random weights two exact
/// runtimes can part at a near tie; the referee says on whose side the model is there. On an
/// exporters' package, where it picks ours' id against an ONNX Runtime WebGPU peer's, the peer's
/// ids are judged the same way on the graph without windows on its KV-shared layers
/// ([`paired::apply_windowless_judgement`]): picking the peer's id there, it names the cause.
fn judge_mismatches(m: &BenchModel, dtype: &str, summary: &mut Value) {
    let requests = paired::judge_requests(summary);
    if requests.is_empty() {
        return;
    }
    match referee(m, dtype, &requests, false) {
        Ok(judged) => paired::apply_judgement(summary, &requests, &judged),
        Err(e) => {
            eprintln!(
                "xtask: note: no referee for {}'s differing ids: {e:#}",
                m.name
            );
            return;
        }
    }
    if !m.is_genai() {
        return;
    }
    let requests = paired::windowless_judge_requests(summary);
    if requests.is_empty() {
        return;
    }
    match referee(m, dtype, &requests, true) {
        Ok(judged) => paired::apply_windowless_judgement(summary, &requests, &judged),
        Err(e) => eprintln!(
            "xtask: note: no windowless referee for {}'s differing ids: {e:#}",
            m.name
        ),
    }
}

/// `bench/native/ort_ep.py --ep cpu --judge` on `requests` (`windowless`: with
/// `--kv-shared-windowless`): one `{steps, alternatives}` each.
fn referee(
    m: &BenchModel,
    dtype: &str,
    requests: &[Value],
    windowless: bool,
) -> Result<Vec<Value>> {
    let python = reference_python()?;
    // One file per call: two referees (tests, or benches side by side) never share one.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let file = target_dir().join(format!(
        "bench-judge-{}{}-{}-{}.json",
        m.name,
        if windowless { "-windowless" } else { "" },
        std::process::id(),
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(target_dir())?;
    std::fs::write(&file, serde_json::to_vec(requests)?)
        .with_context(|| format!("writing {}", file.display()))?;
    eprintln!(
        "xtask: ONNX Runtime's CPU EP{} judging {} differing sequence(s) of {} at their first difference",
        if windowless {
            " without windows on the KV-shared layers"
        } else {
            ""
        },
        requests.len(),
        m.name
    );
    let mut cmd = Command::new(python);
    cmd.arg(root().join("bench/native/ort_ep.py"))
        .args(["--ep", "cpu", "--dtype", dtype, "--judge"])
        .arg(&file)
        .arg("--model")
        .arg(&m.dir);
    if windowless {
        cmd.arg("--kv-shared-windowless");
    }
    let out = output(&mut cmd);
    let _ = std::fs::remove_file(&file);
    let out = out?;
    let doc: Value = serde_json::from_str(&out).context("ort_ep.py --judge printed no JSON")?;
    let judged = doc
        .get("judged")
        .and_then(Value::as_array)
        .cloned()
        .context("ort_ep.py --judge printed no `judged` list")?;
    if judged.len() != requests.len() {
        bail!(
            "ort_ep.py --judge answered {} of {} requests",
            judged.len(),
            requests.len()
        );
    }
    Ok(judged)
}

/// Ours' greedy ids (`ours`: a `gemma-gem bench --token-ids` document) against ONNX Runtime's
/// CPU EP's (`reference`, from [`cpu_reference`]): `tokens_match` (null when no sequence exists on
/// both sides), `token_sequences_compared`, `token_mismatches` (the first difference of each).
/// Only the ids: the CPU EP's speed is not a peer's.
fn cpu_check(ours: &Value, reference: &Value) -> Value {
    let raw = json!({"pairs": [{"order": ["ours", "ort_cpu"],
        "runs": {"ours": paired::native_run(ours), "ort_cpu": reference}}]});
    let s = paired::browser_model(&raw, &["ort_cpu".to_string()]);
    let p = &s["ort_cpu"];
    json!({
        "reference": "ONNX Runtime's CPU EP (bench/native/ort_ep.py --ep cpu), the same model, weight variant and ids",
        "tokens_match": p["tokens_match"],
        "token_sequences_compared": p["token_sequences_compared"],
        "token_mismatches": p.get("token_mismatches").cloned().unwrap_or_else(|| json!([])),
    })
}

/// Ours (`ours`: `gemma-gem bench --runs 1 --token-ids`) and ONNX Runtime's WebGPU EP
/// (`bench/native/ort_ep.py`) on model `m`, --pairs times, each pair in a seeded shuffled order;
/// returns the paired summary (peer `ort_webgpu_ep`) and the raw documents.
fn native_pairs(
    args: &BenchArgs,
    plan: &Plan,
    m: &BenchModel,
    ours: &Command,
    dtype: &str,
) -> Result<(Value, Value)> {
    let python = std::env::var_os("GEMMA_GEM_ORT_EP_PYTHON").unwrap_or_else(|| "python3".into());
    let list = |v: &[usize]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let dtype = dtype.to_string();
    let mut seed = args.seed.unwrap_or(0x5eed) as u64 | 1;
    let mut pairs = Vec::new();
    for pair in 0..args.pairs {
        // xorshift64: a reproducible order per pair from the recorded seed.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let order: [&str; 2] = if seed & 1 == 0 {
            ["ours", "ort_webgpu_ep"]
        } else {
            ["ort_webgpu_ep", "ours"]
        };
        let mut runs = Map::new();
        for who in order {
            eprintln!(
                "xtask: native pair {}/{} of {}: {who}",
                pair + 1,
                args.pairs,
                m.name
            );
            let mut cmd = if who == "ours" {
                let mut c = Command::new(ours.get_program());
                c.args(ours.get_args()).args(["--runs", "1", "--token-ids"]);
                if args.dtype.is_none() {
                    c.args(["--dtype", &dtype]);
                }
                c
            } else {
                let mut c = Command::new(&python);
                c.arg(root().join("bench/native/ort_ep.py"))
                    .arg("--model")
                    .arg(&m.dir)
                    .args(["--prefill", &list(&plan.prefill)])
                    .args(["--decode-context", &list(&plan.decode_context)])
                    .args(["--decode-tokens", &plan.decode_tokens.to_string()])
                    .args(["--runs", "1", "--token-ids", "--dtype", &dtype]);
                c
            };
            let run = output(cmd.stderr(std::process::Stdio::inherit()))
                .and_then(|out| {
                    serde_json::from_str::<Value>(&out)
                        .with_context(|| format!("{who} printed no JSON"))
                })
                .map(|doc| paired::native_run(&doc))
                .unwrap_or_else(|e| json!({"error": format!("{e:#}")}));
            runs.insert(who.into(), run);
        }
        pairs.push(json!({"order": order, "runs": runs}));
    }
    let raw = json!({"dtype": dtype, "seed": args.seed.unwrap_or(0x5eed), "pairs": pairs});
    let mut summary = paired::browser_model(&raw, &["ort_webgpu_ep".to_string()]);
    let peer = summary["ort_webgpu_ep"].take();
    let mut out = json!({ "ort_webgpu_ep": peer });
    if out["ort_webgpu_ep"]["tokens_match"] == json!(false) {
        match cpu_reference(plan, m, &dtype, false) {
            Ok(reference) => paired::annotate_with_reference(&mut out, &reference),
            Err(e) => eprintln!("xtask: note: no CPU reference for {}: {e:#}", m.name),
        }
        explain_mismatches(plan, m, &dtype, &mut out);
        judge_mismatches(m, &dtype, &mut out);
    }
    let mut out = out["ort_webgpu_ep"].take();
    out["runtimes"] = summary["runtimes"].take();
    out["pairs"] = json!(args.pairs);
    Ok((out, raw))
}

fn find_chromium() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("GEMMA_GEM_BROWSER") {
        return Ok(PathBuf::from(p));
    }
    ["chromium", "chromium-browser"]
        .iter()
        .find_map(|b| which(b))
        .context("no Chromium found: `apt-get install -y chromium`, or set GEMMA_GEM_BROWSER")
}

fn run_browser(args: &BenchArgs, plan: &Plan, models: &[BenchModel]) -> Result<(Value, Value)> {
    let bench_dir = root().join("bench");
    let measure = args.from_raw.is_none();
    let stage = target_dir().join("bench-web");
    if measure {
        crate::install::ensure_npm(&bench_dir)?;
        let tools = crate::install::install_build()?;
        exec(cargo().args([
            "build",
            "--release",
            "--target",
            "wasm32-unknown-unknown",
            "-p",
            "gg-bench-wasm",
        ]))?;
        if stage.exists() {
            std::fs::remove_dir_all(&stage)?;
        }
        crate::util::copy_dir(&bench_dir.join("web"), &stage)?;
        exec(
            Command::new(tools.wasm_bindgen())
                .args(["--target", "web", "--no-typescript", "--out-dir"])
                .arg(stage.join("pkg"))
                .arg(target_dir().join("wasm32-unknown-unknown/release/gg_bench_wasm.wasm")),
        )?;
    }
    let node_modules = bench_dir.join("node_modules");
    let tjs = node_modules.join("@huggingface/transformers");
    let mut mounts = vec![
        crate::serve::Mount {
            prefix: "/ort/".into(),
            dir: node_modules.join("onnxruntime-web/dist"),
        },
        crate::serve::Mount {
            prefix: "/tjs/".into(),
            dir: tjs.join("dist"),
        },
        // transformers.js's own onnxruntime-web (its pinned build; a CDN otherwise).
        crate::serve::Mount {
            prefix: "/tjs-ort/".into(),
            dir: [
                tjs.join("node_modules/onnxruntime-web/dist"),
                node_modules.join("onnxruntime-web/dist"),
            ]
            .into_iter()
            .find(|d| d.is_dir())
            .unwrap_or_default(),
        },
    ];
    // transformers.js on a GenAI package: its onnx-community view, served beside the package.
    let mut tjs_views: Vec<Result<(String, String), String>> = Vec::new();
    for m in models {
        mounts.push(crate::serve::Mount {
            prefix: format!("/models/{}/", m.name),
            dir: m.dir.clone(),
        });
        let view = if m.is_genai() && args.peers.iter().any(|p| p == "transformers_js") {
            match tjs_layout(m) {
                Ok((dir, dtype)) => {
                    let name = format!("{}-tjs", m.name);
                    mounts.push(crate::serve::Mount {
                        prefix: format!("/models/{name}/"),
                        dir,
                    });
                    Ok((name, dtype))
                }
                Err(e) => {
                    eprintln!(
                        "xtask: warning: transformers.js will not run on {}: {e:#}",
                        m.name
                    );
                    Err(format!("{e:#}"))
                }
            }
        } else {
            Err(String::new())
        };
        tjs_views.push(view);
    }
    mounts.push(crate::serve::Mount {
        prefix: "/vision/".into(),
        dir: root().join(VISION_FIXTURE),
    });
    mounts.push(crate::serve::Mount {
        prefix: "/".into(),
        dir: stage.clone(),
    });
    // Cross-origin isolated: onnxruntime-web and transformers.js may use wasm threads.
    let _server = if measure {
        Some(crate::serve::start_with(args.port, mounts, true)?)
    } else {
        None
    };
    let base = format!("http://127.0.0.1:{}/", args.port);
    let mut runtimes = vec!["ours".to_string()];
    runtimes.extend(args.peers.iter().cloned());
    let mut model_cfg = Vec::new();
    for (m, tjs_view) in models.iter().zip(&tjs_views) {
        let limit = context_limit(m)?;
        let (prefill, decode, skipped) = plan.browser(limit);
        let genai = m.is_genai();
        let mut model_runtimes = vec!["ours".to_string()];
        let mut not_run = Map::new();
        for p in &args.peers {
            let why = match (p.as_str(), tjs_view) {
                ("transformers_js", Err(e)) if genai => Some(format!(
                    "its onnx-community view of the GenAI package could not be made: {e}"
                )),
                _ => peer_not_run(p, genai).map(str::to_string),
            };
            match why {
                Some(why) => {
                    not_run.insert(p.clone(), json!(why));
                }
                None => model_runtimes.push(p.clone()),
            }
        }
        let tjs = match tjs_view {
            Ok((name, dtype)) => json!({"name": name, "dtype": dtype, "layout": TJS_LAYOUT_NOTE}),
            Err(_) => Value::Null,
        };
        model_cfg.push(json!({
            "name": m.name,
            "url": format!("{base}models/{}/", m.name),
            "vocab": text_config_u64(m, "vocab_size"),
            "prefill": prefill,
            "decode": decode.iter().map(|&(context, tokens)| json!({"context": context, "tokens": tokens})).collect::<Vec<_>>(),
            "skipped": skipped,
            "graph_form": graph_form(genai, args.accuracy_level),
            "runtimes": model_runtimes,
            "not_run": not_run,
            "capacity": static_capacity(&prefill, &decode),
            "tjs": tjs,
        }));
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
            .unwrap_or(1)
            & 0x7fff_ffff
    });
    let config = json!({
        "url": base,
        "chromium": find_chromium()?,
        "chromiumArgs": args.chromium_args,
        "pairs": args.pairs,
        "seed": seed,
        "runtimes": runtimes,
        "requireGpu": args.require_gpu,
        "dtype": args.dtype,
        "models": model_cfg,
        "vision": {"url": format!("{base}vision/"), "softTokens": VISION_SOFT_TOKENS, "runs": args.runs},
    });
    let raw: Value = match &args.from_raw {
        None => {
            let cfg_path = stage.join("config.json");
            let raw_path = stage.join("raw.json");
            std::fs::write(&cfg_path, serde_json::to_string_pretty(&config)?)?;
            exec(
                Command::new("node")
                    .current_dir(&bench_dir)
                    .arg("run-browser.mjs")
                    .arg(&cfg_path)
                    .arg(&raw_path),
            )?;
            serde_json::from_slice(&std::fs::read(&raw_path)?)
                .context("the browser driver wrote no results")?
        }
        Some(path) => {
            let raw: Value = serde_json::from_slice(
                &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            )
            .with_context(|| format!("{} is not JSON", path.display()))?;
            check_raw(&raw, &model_cfg, args.pairs)
                .with_context(|| format!("{} is not a record of this run", path.display()))?;
            eprintln!(
                "xtask: summarising the browser record {} (nothing measured)",
                path.display()
            );
            raw
        }
    };
    let mut per_model = Map::new();
    if let Some(ms) = raw.get("models").and_then(Value::as_object) {
        for (name, r) in ms {
            let cfg = model_cfg.iter().find(|c| c["name"] == name.as_str());
            let peers: Vec<String> = args
                .peers
                .iter()
                .filter(|p| cfg.is_none_or(|c| c["not_run"].get(p.as_str()).is_none()))
                .cloned()
                .collect();
            let mut summary = paired::browser_model(r, &peers);
            if let Some(c) = cfg {
                for k in ["skipped", "graph_form", "not_run"] {
                    summary[k] = c[k].clone();
                }
                if peers.iter().any(|p| p == "ort_web_static") {
                    summary["ort_web_static_capacity"] = c["capacity"].clone();
                }
                if peers.iter().any(|p| p == "transformers_js") && !c["tjs"].is_null() {
                    summary["transformers_js_layout"] = c["tjs"].clone();
                }
            }
            let mismatch = peers
                .iter()
                .any(|p| summary[p.as_str()]["tokens_match"] == json!(false));
            if let Some(m) = models.iter().find(|m| m.name == name.as_str())
                && mismatch
            {
                let dtype = r["dtype"].as_str().unwrap_or("q4").to_string();
                // The references generate the ids the page did: its untimed steps too.
                let plan = &Plan {
                    decode_tokens: plan.decode_tokens + untimed_steps(r),
                    ..plan.clone()
                };
                match cpu_reference(plan, m, &dtype, false) {
                    Ok(reference) => paired::annotate_with_reference(&mut summary, &reference),
                    Err(e) => eprintln!("xtask: note: no CPU reference for {name}: {e:#}"),
                }
                explain_mismatches(plan, m, &dtype, &mut summary);
                judge_mismatches(m, &dtype, &mut summary);
            }
            per_model.insert(name.clone(), summary);
        }
    }
    let summary = json!({
        "browser_version": raw.get("browser_version"),
        "user_agent": raw.get("user_agent"),
        "adapter": raw.get("adapter"),
        "adapter_info": raw.get("adapter_info"),
        "cross_origin_isolated": raw.get("cross_origin_isolated"),
        "config": {"prefill": plan.prefill, "decode_context": plan.decode_context, "decode_tokens": plan.decode_tokens,
                   "pairs": args.pairs, "seed": raw.get("seed"), "runtimes": runtimes,
                   "order": "per pair every runtime once, a fresh page each, in an order shuffled by a PRNG seeded with `seed`",
                   "clock": "performance.now() in the bench page around the same awaited calls for every runtime; after the first token on the CPU one untimed decode step (its id on the CPU, nothing of ours in flight after it), then decode timed from there to the last token on the CPU"},
        "ort_web_static": {"what": "onnxruntime-web with a fixed-capacity KV cache bound in place (each past and its present one preallocated GPU tensor: GroupQueryAttention's shared buffer) and graph capture (enableGraphCapture; the prompt uncaptured, decode steps with fixed shapes and buffers)", "runs_on": "GenAI packages (the exporters' form) only", "not_run": peer_not_run("ort_web_static", false)},
        "models": per_model,
        "vision": browser_vision(raw.get("vision")),
    });
    Ok((summary, raw))
}

/// `--from-raw`: the record's models, runtimes and configurations are the ones `model_cfg` (this
/// run's flags) describes (every pair has exactly the runtimes measured on that model, and every
/// sequence of ids is of a configured prompt or decode), with no more pairs than `--pairs`.
fn check_raw(raw: &Value, model_cfg: &[Value], pairs: usize) -> Result<()> {
    let models = raw
        .get("models")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .context("it has no models (the browser driver's raw.json has `models`)")?;
    for (name, r) in models {
        let cfg = model_cfg
            .iter()
            .find(|c| c["name"] == name.as_str())
            .with_context(|| format!("it measured {name}, which --model does not name"))?;
        let want: Vec<&str> = cfg["runtimes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let list = r
            .get("pairs")
            .and_then(Value::as_array)
            .filter(|l| !l.is_empty())
            .with_context(|| format!("{name}: no pairs"))?;
        if list.len() > pairs {
            bail!("{name}: {} pairs, more than --pairs {pairs}", list.len());
        }
        let prefill: Vec<String> = cfg["prefill"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| format!("prefill {n}"))
            .collect();
        let decode: Vec<String> = cfg["decode"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| format!("decode {} after {}", d["tokens"], d["context"]))
            .collect();
        for (i, pair) in list.iter().enumerate() {
            let runs = pair
                .get("runs")
                .and_then(Value::as_object)
                .with_context(|| format!("{name}, pair {i}: no runs"))?;
            let mut got: Vec<&str> = runs.keys().map(String::as_str).collect();
            let mut expected = want.clone();
            got.sort_unstable();
            expected.sort_unstable();
            if got != expected {
                bail!(
                    "{name}, pair {i}: runtimes {got:?}, but these flags measure {expected:?} (--peers)"
                );
            }
            for (rt, run) in runs {
                for (what, _) in paired::ids_of(run) {
                    if !prefill.contains(&what) && !decode.contains(&what) {
                        bail!(
                            "{name}, pair {i}, {rt}: `{what}` is not in this configuration (--prefill {:?}, decodes {:?})",
                            prefill,
                            decode
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

fn gzip_len(path: &Path) -> Result<u64> {
    let out = Command::new("gzip")
        .args(["-9", "-c"])
        .arg(path)
        .output()
        .with_context(|| format!("gzip {}", path.display()))?;
    if !out.status.success() {
        bail!("gzip failed on {}", path.display());
    }
    Ok(out.stdout.len() as u64)
}

/// The `version` of an npm package.json ("?" when unreadable: a size label, not a check).
fn npm_version(package_json: &Path) -> String {
    std::fs::read(package_json)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn bundle(name: &str, base: &Path, files: &[&str]) -> Result<Value> {
    let (mut raw, mut gz) = (0, 0);
    for f in files {
        let p = base.join(f);
        raw += std::fs::metadata(&p)
            .with_context(|| format!("{} is missing", p.display()))?
            .len();
        gz += gzip_len(&p)?;
    }
    Ok(json!({"name": name, "files": files.join(", "), "raw_bytes": raw, "gzip_bytes": gz}))
}

/// Shipped sizes: our release bundles (dist/chrome-mv3) and onnxruntime-web's WebGPU build.
fn sizes(args: &BenchArgs) -> Result<Value> {
    let ext = crate::build::extension_dir(true);
    if !args.no_release_build {
        // Always rebuilt: an earlier dist/chrome-mv3 may be from other sources.
        crate::build::run(&crate::build::BuildArgs { release: true })?;
    } else if !ext.join("manifest.json").is_file() {
        return Ok(Value::Null);
    }
    let ort = root().join("bench/node_modules/onnxruntime-web/dist");
    let bench_pkg = target_dir().join("bench-web/pkg");
    let mut content: Vec<String> = vec!["content.js".into()];
    let mut entries: Vec<String> = std::fs::read_dir(ext.join("content"))?
        .filter_map(|e| e.ok())
        .map(|e| format!("content/{}", e.file_name().to_string_lossy()))
        .collect();
    entries.sort();
    content.extend(entries);
    let content: Vec<&str> = content.iter().map(String::as_str).collect();
    let mut list = vec![
        bundle("our content script (plain JS from wasm2js)", &ext, &content)?,
        bundle(
            "our offscreen document (runtime wasm + glue)",
            &ext,
            &[
                "offscreen/gg_offscreen_bg.wasm",
                "offscreen/gg_offscreen.js",
                "offscreen/offscreen.js",
                "offscreen/offscreen.html",
            ],
        )?,
        bundle(
            "our offscreen runtime wasm alone",
            &ext,
            &["offscreen/gg_offscreen_bg.wasm"],
        )?,
        bundle(
            &format!(
                "onnxruntime-web {} WebGPU (ort.webgpu.min.mjs + asyncify wasm + glue)",
                npm_version(&ort.join("../package.json"))
            ),
            &ort,
            &[
                "ort.webgpu.min.mjs",
                "ort-wasm-simd-threaded.asyncify.mjs",
                "ort-wasm-simd-threaded.asyncify.wasm",
            ],
        )?,
    ];
    // The embeddable widget (issue 32): what the page's main thread loads (budget 300 KB gzip)
    // and the model worker (budget 3 MB gzip).
    let widget = crate::widget::widget_dir(true);
    let mut page = bundle(
        "our widget, page main thread (loader + glue + wasm: UI and page tools)",
        &widget,
        &["gemma-gem-widget.js", "gg_widget.js", "gg_widget_bg.wasm"],
    )?;
    // 300 KB read as 300,000 bytes (the stricter reading of the issue's "300 KB").
    page["budget_gzip_bytes"] = json!(300_000);
    list.push(page);
    let mut worker = bundle(
        "our widget, model worker (loader + glue + wasm: runtime, model, agent)",
        &widget,
        &[
            "gemma-gem-widget-worker.js",
            "gg_widget_worker.js",
            "gg_widget_worker_bg.wasm",
        ],
    )?;
    worker["budget_gzip_bytes"] = json!(3 * 1024 * 1024);
    list.push(worker);
    if bench_pkg.join("gg_bench_wasm_bg.wasm").is_file() {
        // The offscreen document does not link gg-llm yet; the bench entry does (runtime + Gemma
        // session + tokenizer), built with the release profile, without wasm-opt.
        list.push(bundle(
            "bench/wasm: runtime + Gemma session + tokenizer (release profile, no wasm-opt)",
            &bench_pkg,
            &["gg_bench_wasm_bg.wasm", "gg_bench_wasm.js"],
        )?);
    }
    Ok(Value::Array(list))
}

const SOFTWARE_NOTE: &str = "Numbers from software adapters (Mesa lavapipe natively, SwiftShader in headless Chromium) measure the work each runtime does on a CPU, not GPU speed: a run on a real GPU is needed to judge the targets.";

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(json_path) = &args.render {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(json_path)
                .with_context(|| format!("reading {}", json_path.display()))?,
        )
        .with_context(|| format!("{} is not a results JSON", json_path.display()))?;
        let md = report::markdown(&doc);
        std::fs::write(json_path.with_extension("md"), &md)?;
        println!("{md}");
        return Ok(());
    }
    let args = &args.normalized();
    args.check()?;
    let plan = Plan::of(args);
    let (native, browser) = args.sides();
    let models = if native || browser {
        models(args.model)
    } else {
        Vec::new()
    };
    for m in &models {
        ensure_model(m, args.dtype.as_deref())?;
    }
    let models = match args.accuracy_level {
        Some(level) => models
            .into_iter()
            .map(|m| with_accuracy_level(m, level))
            .collect::<Result<Vec<_>>>()?,
        None => models,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (date, time) = report::utc(now);
    let mut doc = Map::new();
    doc.insert("date".into(), json!(format!("{date} {time} UTC")));
    let mut raw = Map::new();
    if native {
        let (summary, r) = run_native(args, &plan, &models)?;
        doc.insert("native_config".into(), plan.to_json());
        doc.insert("native".into(), summary);
        raw.insert("native".into(), r);
        doc.insert("native_vision".into(), run_native_vision(args)?);
    }
    if browser {
        let (summary, r) = run_browser(args, &plan, &models)?;
        doc.insert("browser".into(), summary);
        raw.insert("browser".into(), r);
        if let Some(p) = &args.from_raw {
            doc.insert(
                "summarised_from".into(),
                json!(format!("{} (a browser driver's raw record; --from-raw, nothing measured by this command, no shipped sizes)", p.display())),
            );
        } else {
            match sizes(args) {
                Ok(s) => {
                    doc.insert("sizes".into(), s);
                }
                Err(e) => eprintln!("xtask: note: shipped sizes not measured: {e:#}"),
            }
        }
    }
    if args.pages || (!args.native && !args.browser) {
        doc.insert("pages".into(), pages::run()?);
    }
    let software = doc
        .get("native")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|m| m.get("adapter").and_then(Value::as_str))
        .chain(
            doc.get("browser")
                .and_then(|b| b.get("adapter"))
                .and_then(Value::as_str),
        )
        .any(|a| {
            let a = a.to_lowercase();
            a.contains("llvmpipe") || a.contains("swiftshader") || a.contains("lavapipe")
        });
    if software {
        doc.insert("note".into(), json!(SOFTWARE_NOTE));
    }
    doc.insert("raw".into(), Value::Object(raw));
    let doc = Value::Object(doc);
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root().join(&args.out)
    };
    std::fs::create_dir_all(&out)?;
    let stem = format!("{date}-{}", time.replace(':', ""));
    let json_path = out.join(format!("{stem}.json"));
    let md_path = out.join(format!("{stem}.md"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    let md = report::markdown(&doc);
    std::fs::write(&md_path, &md)?;
    println!("{md}");
    eprintln!(
        "xtask: results written to {} and {}",
        json_path.display(),
        md_path.display()
    );
    // The peers must compute the same greedy tokens as ours, or the speeds compare other work.
    // A check over the browser's models and the native ones.
    let both = |check: fn(&Value) -> Vec<String>| {
        let mut out = doc.get("browser").map(check).unwrap_or_default();
        if let Some(native) = doc.get("native") {
            out.extend(check(&json!({ "models": native })));
        }
        out
    };
    let failures = both(paired::token_failures);
    for n in both(paired::token_notes) {
        eprintln!("xtask: note: {n}");
    }
    if !failures.is_empty() {
        bail!(
            "the runtimes disagree on the greedy tokens (results kept in {}):\n  {}",
            json_path.display(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(args.iter().copied())).bench
    }

    #[test]
    fn both_sides_by_default() {
        assert_eq!(parse(&[]).sides(), (true, true));
        assert_eq!(parse(&["--native"]).sides(), (true, false));
        assert_eq!(parse(&["--browser"]).sides(), (false, true));
        assert_eq!(parse(&["--native", "--browser"]).sides(), (true, true));
    }

    #[test]
    fn model_choice_and_defaults() {
        let a = parse(&[]);
        assert_eq!(a.model, ModelChoice::All);
        assert_eq!(a.runs, 3);
        assert_eq!(a.out, PathBuf::from("bench/results"));
        assert_eq!(models(a.model).len(), 3);
        let a = parse(&["--model", "e2b-bench", "--runs", "5", "--out", "x"]);
        assert_eq!(a.model, ModelChoice::E2bBench);
        assert_eq!(models(a.model)[0].name, "gemma4-e2b-bench");
        assert_eq!(a.runs, 5);
        assert_eq!(parse(&["--model", "tiny"]).model, ModelChoice::Tiny);
        let full = models(parse(&["--model", "e2b-full"]).model);
        assert_eq!(full.len(), 1);
        assert_eq!(full[0].name, "gemma4-e2b-full");
        assert_eq!(full[0].preset, Some("e2b-full"));
        assert!(full[0].dir.ends_with("bench/cache/gemma4-e2b-full"));
        // Opt-in: `all` never generates the 6 GB model.
        assert!(
            models(ModelChoice::All)
                .iter()
                .all(|m| m.preset != Some("e2b-full"))
        );
        let m = models(parse(&["--model", "mobius-tiny"]).model);
        assert_eq!(m[0].name, "mobius-tiny");
        assert!(
            m[0].is_genai(),
            "the committed mobius package is a GenAI package"
        );
        assert!(!models(ModelChoice::Tiny)[0].is_genai());
        for name in ["mobius-e2b-bench", "mobius-e2b-bench-webgpu-q4f16"] {
            let m = &models(parse(&["--model", name]).model)[0];
            assert_eq!(m.name, name);
            assert_eq!(m.dir, root().join("bench/cache").join(name));
            assert!(m.is_genai() && m.preset.is_none());
        }
        // mobius's --ep webgpu profile: the committed packages, read as GenAI packages.
        for (arg, folder) in [
            ("mobius-tiny-webgpu", "mobius-tiny-webgpu-int4-split"),
            (
                "mobius-tiny-webgpu-q4f16",
                "mobius-tiny-webgpu-int4f16-split",
            ),
        ] {
            let m = &models(parse(&["--model", arg]).model)[0];
            assert_eq!(m.name, arg);
            assert_eq!(m.dir.file_name().and_then(|n| n.to_str()), Some(folder));
            assert!(m.is_genai() && m.preset.is_none(), "{arg}");
            let genai = std::fs::read_to_string(m.dir.join("genai_config.json")).expect(arg);
            assert!(
                genai.contains("enableGraphCapture"),
                "{arg}: the webgpu profile"
            );
        }
        assert!(Cli::try_parse_from(["bench", "--model", "huge"]).is_err());
    }

    #[test]
    fn plans() {
        let full = Plan::of(&parse(&[]));
        assert_eq!(full.prefill, vec![128, 512]);
        assert_eq!(full.decode_context, vec![128, 1024]);
        assert_eq!(full.decode_tokens, 32);
        assert_eq!(
            full.browser(None),
            (vec![128, 512], vec![(128, 32), (1024, 32)], vec![])
        );
        let (prefill, decode, skipped) = full.browser(Some(1024));
        assert_eq!(prefill, vec![128, 512]);
        assert_eq!(decode, vec![(128, 32)]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        let quick = Plan::of(&parse(&["--quick"]));
        assert_eq!(quick.name, "quick");
        assert_eq!(quick.prefill, vec![128]);
        let custom = Plan::of(&parse(&[
            "--quick",
            "--prefill",
            "16,32",
            "--decode-tokens",
            "2",
        ]));
        assert_eq!(custom.name, "custom");
        assert_eq!(custom.prefill, vec![16, 32]);
        assert_eq!(custom.decode_context, vec![128]);
        assert_eq!(custom.decode_tokens, 2);
    }

    #[test]
    fn cpu_reference_check() {
        let ours = |ids: &[u32]| json!({"decode": [{"context": 16, "tokens": 2, "runs": [{"tok_s": 1.0, "decode_s": 2.0}], "ids": ids}]});
        let reference = paired::native_run(&ours(&[5, 6, 7]));
        let same = cpu_check(&ours(&[5, 6, 7]), &reference);
        assert_eq!(same["tokens_match"], json!(true));
        assert_eq!(same["token_sequences_compared"], json!(1));
        let other = cpu_check(&ours(&[5, 6, 8]), &reference);
        assert_eq!(other["tokens_match"], json!(false));
        assert_eq!(other["token_mismatches"][0]["first_difference"], json!(2));
        // A mismatch fails the bench like a peer's.
        let f = paired::token_failures(&json!({"models": {"m": {"ort_cpu": other}}}));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(parse(&["--cpu-reference"]).cpu_reference);
    }

    #[test]
    fn windowless_reference_is_what_onnx_runtime_webgpu_computed() {
        // onnxruntime-web 1.30 on SwiftShader (subgroups hidden) on mobius-tiny as exported, past
        // its 8-token window: its recorded ids differed from ours and from the CPU EP's. The CPU
        // EP without windows on the KV-shared layers gives exactly those ids; inside the window
        // the two references agree.
        let python = crate::install::ensure_python_venv().unwrap();
        let recorded: Value = serde_json::from_slice(
            &std::fs::read(root().join("bench/results/2026-12-06-082717.json")).unwrap(),
        )
        .unwrap();
        let mm = &recorded["browser"]["models"]["mobius-tiny"]["ort_web"]["token_mismatches"][1];
        assert_eq!(mm["what"], json!("decode 8 after 128"));
        let cpu = |windowless: bool, model: &str| {
            let mut cmd = Command::new(&python);
            cmd.current_dir(root())
                .arg("bench/native/ort_ep.py")
                .args(["--ep", "cpu", "--token-ids", "--model", model])
                .args([
                    "--prefill",
                    "8",
                    "--decode-context",
                    "128",
                    "--decode-tokens",
                    "8",
                ]);
            if windowless {
                cmd.arg("--kv-shared-windowless");
            }
            let o = cmd.output().unwrap();
            let text = String::from_utf8_lossy(&o.stderr).into_owned();
            (
                o.status.success(),
                serde_json::from_slice::<Value>(&o.stdout).ok(),
                text,
            )
        };
        let model = "tests/fixtures/models/mobius-tiny-gqa-int4-split";
        // The weights hard-linked elsewhere, as bench/tjs_layout.py links them: still readable.
        let link = std::env::temp_dir().join(format!("gg-windowless-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(root().join(model).join("decoder/model.onnx.data"), &link).unwrap();
        let (ok, written, err) = cpu(false, model);
        let _ = std::fs::remove_file(&link);
        assert!(ok, "{err}");
        let (ok, windowless, err) = cpu(true, model);
        assert!(ok, "{err}");
        let (written, windowless) = (written.unwrap(), windowless.unwrap());
        // Layer 4 (KV-shared, window 8); layer 5 is KV-shared without a window.
        assert_eq!(windowless["kv_shared_windows_removed"], json!(1));
        assert_eq!(written["kv_shared_windows_removed"], json!(0));
        assert_eq!(written["decode"][0]["ids"], mm["ours"]);
        assert_eq!(windowless["decode"][0]["ids"], mm["peer"]);
        assert_ne!(mm["ours"], mm["peer"]);
        assert_eq!(
            written["prefill"][0]["ids"],
            windowless["prefill"][0]["ids"]
        );
        // Our generator's graphs have no KV-shared GroupQueryAttention: a clear refusal.
        let (ok, _, err) = cpu(true, "tests/fixtures/models/gemma4-tiny");
        assert!(
            !ok && err.contains("needs --ep cpu and a GenAI package"),
            "{err}"
        );
    }

    /// bench/tjs_layout.py on the committed mobius fixture: the view runs bit-identically to the
    /// package on the CPU EP (`--check`), its config says which layers share a cache, a second
    /// run reuses it, and a folder that is no GenAI package is refused.
    #[test]
    fn tjs_layout_of_a_genai_package() {
        let python = crate::install::ensure_python_venv().unwrap();
        let src = root().join("tests/fixtures/models/mobius-tiny-gqa-int4-split");
        let dst = std::env::temp_dir().join(format!("gg-tjs-layout-{}", std::process::id()));
        let run = |src: &Path| {
            Command::new(&python)
                .current_dir(root())
                .arg("bench/tjs_layout.py")
                .arg(src)
                .arg(&dst)
                .arg("--check")
                .output()
                .unwrap()
        };
        let text = |o: &std::process::Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        let out = run(&src);
        assert!(out.status.success(), "{}", text(&out));
        let t = text(&out);
        assert!(
            t.contains("bit-identical") && t.ends_with("dtype q4\n"),
            "{t}"
        );
        let cfg: Value =
            serde_json::from_slice(&std::fs::read(dst.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["model_type"], json!("gemma4"));
        assert_eq!(cfg["text_config"]["num_hidden_layers"], json!(6));
        assert_eq!(cfg["text_config"]["num_kv_shared_layers"], json!(2));
        assert_eq!(
            cfg["transformers.js_config"]["use_external_data_format"],
            json!({"embed_tokens_q4.onnx": 1, "decoder_model_merged_q4.onnx": 1})
        );
        for f in [
            "onnx/embed_tokens_q4.onnx_data",
            "onnx/decoder_model_merged_q4.onnx_data",
            "tokenizer.json",
        ] {
            assert!(dst.join(f).is_file(), "{f}");
        }
        let again = run(&src);
        assert!(
            again.status.success() && text(&again).contains(": current"),
            "{}",
            text(&again)
        );
        let refused = run(&root().join("tests/fixtures/models/gemma4-tiny"));
        assert!(!refused.status.success());
        assert!(
            text(&refused).contains("is not an ONNX Runtime GenAI package"),
            "{}",
            text(&refused)
        );
        let _ = std::fs::remove_dir_all(&dst);
    }

    #[test]
    fn peers_per_graph_form() {
        assert!(peer_not_run("transformers_js", true).is_none());
        assert!(peer_not_run("transformers_js", false).is_none());
        assert!(peer_not_run("ort_web_static", false).is_some());
        assert!(peer_not_run("ort_web_static", true).is_none());
        assert!(
            peer_not_run("ort_web", true).is_none() && peer_not_run("ort_web", false).is_none()
        );
        // The fixed cache holds the longest generation: prompts, contexts plus their steps.
        assert_eq!(static_capacity(&[128, 512], &[(128, 32)]), 512);
        assert_eq!(static_capacity(&[16], &[(16, 4)]), 21);
        assert_eq!(static_capacity(&[16], &[(1024, 32)]), 1057);
        assert_eq!(static_capacity(&[4], &[(2, 2)]), 10);
    }

    #[test]
    fn accuracy_level_applies_to_the_exporters_form_only() {
        // Our generator's graphs run as they are (no Python is started for them).
        let tiny = models(ModelChoice::Tiny).remove(0);
        assert_eq!(with_accuracy_level(tiny.clone(), 0).unwrap(), tiny);
        assert!(graph_form(false, Some(0)).starts_with("ours"));
        assert!(graph_form(true, None).contains("as exported"));
        assert!(graph_form(true, Some(0)).contains("rewritten to 0"));
    }

    #[test]
    fn argument_checks() {
        assert!(parse(&["--runs", "0"]).check().is_err());
        assert!(parse(&["--prefill", "0"]).check().is_err());
        assert!(parse(&["--decode-tokens", "0"]).check().is_err());
        assert!(parse(&["--dtype", "fp32"]).check().is_err());
        assert!(parse(&["--dtype", "q4"]).check().is_ok());
        assert!(parse(&["--peers", "ort"]).check().is_err());
        assert!(parse(&["--accuracy-level", "5"]).check().is_err());
        assert!(parse(&["--accuracy-level", "0"]).check().is_ok());
        assert!(parse(&["--accuracy-level", "4"]).check().is_ok());
        // `--peers ''`: ours alone.
        let alone = parse(&["--peers", ""]).normalized();
        assert!(alone.peers.is_empty());
        assert!(alone.check().is_ok());
        assert_eq!(
            parse(&[]).normalized().peers,
            ["ort_web", "ort_web_static", "transformers_js"]
        );
        // --from-raw summarises a browser run, nothing else.
        assert!(
            parse(&["--browser", "--from-raw", "r.json"])
                .check()
                .is_ok()
        );
        for other in [
            &["--from-raw", "r.json"][..],
            &["--browser", "--native", "--from-raw", "r.json"],
            &["--browser", "--pages", "--from-raw", "r.json"],
        ] {
            let e = parse(other).check().unwrap_err().to_string();
            assert!(e.contains("--browser alone"), "{e}");
        }
    }

    /// mobius-tiny's genai_config.json states 4096 positions, its rotary tables have 1024 rows:
    /// the bench skips what does not fit them, as for our generator's config-stated 1024.
    #[test]
    fn context_limits_of_both_graph_forms() {
        let tiny = models(ModelChoice::Tiny);
        let mobius = models(ModelChoice::MobiusTiny);
        assert_eq!(
            text_config_u64(&mobius[0], "max_position_embeddings"),
            Some(4096)
        );
        // exported with 4096-row rotary tables (gen_mobius.py's LONG_TABLES)
        assert_eq!(context_limit(&mobius[0]).unwrap(), Some(4096));
        assert_eq!(context_limit(&tiny[0]).unwrap(), Some(1024));
        // genai_config.json says 4096, the tables (a Gather of position_ids) have 1024 rows
        let short = BenchModel {
            name: "mobius-tiny-attn-fp32-split",
            dir: root().join("tests/fixtures/models/mobius-tiny-attn-fp32-split"),
            preset: None,
        };
        assert_eq!(context_limit(&short).unwrap(), Some(1024));
    }

    /// `ort_ep.py --judge` on a real package: teacher-forced on the CPU EP's own greedy ids, each
    /// step's pick is the next id; a peer that differs there is the one the referee does not pick.
    #[test]
    fn the_referee_scores_ids_teacher_forced() {
        let python = crate::install::ensure_python_venv().unwrap();
        let model = root().join("tests/fixtures/models/mobius-tiny-gqa-int4-split");
        let o = Command::new(&python)
            .arg(root().join("bench/native/ort_ep.py"))
            .args(["--ep", "cpu", "--token-ids", "--prefill", ""])
            .args(["--decode-context", "16", "--decode-tokens", "5", "--model"])
            .arg(&model)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
        let greedy: Vec<u64> = doc["decode"][0]["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(greedy.len(), 6);
        let m = BenchModel {
            name: "mobius-tiny-gqa-int4-split",
            dir: model,
            preset: None,
        };
        let other = if greedy[3] == 1 { 2 } else { 1 };
        let judged = referee(
            &m,
            "q4",
            &[json!({"context": 16, "ids": greedy, "alternatives": [{"step": 3, "id": other}]})],
            false,
        )
        .unwrap();
        let steps = judged[0]["steps"].as_array().unwrap();
        for (st, id) in steps.iter().zip(&greedy) {
            assert_eq!(st["top"], json!(id));
            assert_eq!(st["top_logit"], st["logit"]);
        }
        assert!(
            judged[0]["alternatives"][0].as_f64().unwrap() < steps[3]["logit"].as_f64().unwrap()
        );
        // A browser peer that follows the CPU EP, and ours that leave it at step 3.
        let mut ours = greedy.clone();
        ours[3] = other;
        let run = |ids: &[u64]| json!({"load_s": 1.0, "decode": [{"context": 16, "tokens": 5, "tok_s": 1.0, "ids": ids}]});
        let raw = json!({"dtype": "q4", "pairs": [{"order": ["ours", "ort_web"],
            "runs": {"ours": run(&ours), "ort_web": run(&greedy)}}]});
        let mut s = paired::browser_model(&raw, &["ort_web".to_string()]);
        judge_mismatches(&m, "q4", &mut s);
        let mm = &s["ort_web"]["token_mismatches"][0];
        assert_eq!(mm["referee"]["picks"], json!("peer"), "{mm}");
        assert!(mm.get("explained_by").is_none());
        assert_eq!(
            paired::token_failures(&json!({"models": {"m": s}})).len(),
            1
        );
        // `--cpu-reference` natively: the CPU EP is the other side; its logits are recorded.
        let doc = |ids: &[u64]| json!({"decode": [{"context": 16, "tokens": 5, "runs": [{"tok_s": 1.0}], "ids": ids}]});
        let mut c = json!({"ort_cpu": cpu_check(&doc(&ours), &paired::native_run(&doc(&greedy)))});
        judge_mismatches(&m, "q4", &mut c);
        let r = &c["ort_cpu"]["token_mismatches"][0]["referee"];
        assert_eq!(r["picks"], json!("peer"), "{c}");
        assert!(r["peer_logit"].as_f64().unwrap() > r["ours_logit"].as_f64().unwrap());
        let f = paired::token_failures(&json!({"models": {"m": c}}));
        assert!(
            f.len() == 1 && f[0].contains("picks the peer's id"),
            "{f:?}"
        );
        // Bad requests are refused with the reason.
        let err = referee(
            &m,
            "q4",
            &[json!({"context": 16, "ids": [1, 99999999]})],
            false,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("out of the vocabulary"),
            "{err:#}"
        );
        let err = referee(&m, "q4", &[json!({"context": 5000, "ids": [1]})], false).unwrap_err();
        assert!(
            format!("{err:#}").contains("exceed the model's 4096"),
            "{err:#}"
        );
    }

    #[test]
    fn the_windowless_referee_names_the_kv_shared_window() {
        let python = crate::install::ensure_python_venv().unwrap();
        let model = root().join("tests/fixtures/models/mobius-tiny-gqa-int4-split");
        let greedy = |windowless: bool, context: u64| -> Vec<u64> {
            let mut cmd = Command::new(&python);
            cmd.arg(root().join("bench/native/ort_ep.py"))
                .args(["--ep", "cpu", "--token-ids", "--prefill", ""])
                .args(["--decode-context", &context.to_string()])
                .args(["--decode-tokens", "4", "--model"])
                .arg(&model);
            if windowless {
                cmd.arg("--kv-shared-windowless");
            }
            let o = cmd.output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
            doc["decode"][0]["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        let m = BenchModel {
            name: "mobius-tiny-gqa-int4-split",
            dir: model.clone(),
            preset: None,
        };
        let summary = |context: u64, ours: &[u64], peer: &[u64]| {
            let run = |ids: &[u64]| json!({"load_s": 1.0, "decode": [{"context": context, "tokens": 4, "tok_s": 1.0, "ids": ids}]});
            let raw = json!({"dtype": "q4", "pairs": [{"order": ["ours", "ort_web"],
                "runs": {"ours": run(ours), "ort_web": run(peer)}}]});
            let mut s = paired::browser_model(&raw, &["ort_web".to_string()]);
            judge_mismatches(&m, "q4", &mut s);
            s
        };
        // Past the 8-token window: ours compute the graph as written, the peer the graph without
        // windows on the KV-shared layers (as ONNX Runtime's WebGPU kernels do).
        let (ours, peer) = (greedy(false, 16), greedy(true, 16));
        assert_ne!(ours, peer);
        let s = summary(16, &ours, &peer);
        let mm = &s["ort_web"]["token_mismatches"][0];
        assert_eq!(mm["referee"]["picks"], json!("ours"), "{mm}");
        let w = &mm["windowless_referee"];
        assert_eq!(w["picks"], json!("peer"), "{mm}");
        assert_eq!(w["peer_ids_picked"], json!(5), "{mm}");
        assert!(w["peer_logit"].as_f64().unwrap() > w["ours_logit"].as_f64().unwrap());
        assert_eq!(mm["explained_by"], json!("kv_shared_window"));
        let models = json!({"models": {"m": s.clone()}});
        assert!(paired::token_failures(&models).is_empty());
        let notes = paired::token_notes(&models);
        assert!(
            notes.len() == 1 && notes[0].contains("without those windows"),
            "{notes:?}"
        );
        assert!(paired::markdown_model("m", &s, true).contains(
            "without windows on the KV-shared layers, fed the peer's ids, it picks the peer's"
        ),);
        // Inside the window the two graphs are one model: a peer that leaves the greedy path there
        // is the referee's case, not the window's, and the script answers without running it.
        let ours = greedy(false, 2);
        let mut peer = ours.clone();
        peer[2] = if ours[2] == 1 { 2 } else { 1 };
        let s = summary(2, &ours, &peer);
        let mm = &s["ort_web"]["token_mismatches"][0];
        assert_eq!(mm["referee"]["picks"], json!("ours"), "{mm}");
        assert_eq!(
            mm["windowless_referee"],
            json!({"inside_kv_shared_window": 8}),
            "{mm}"
        );
        assert_eq!(mm["explained_by"], json!(paired::REFEREE_PICKS_OURS));
        // At the window's last position (context 2 + step 6 = 8) still unrun; one further it is
        // run, step by step.
        let judged = |step: u64| {
            let req = json!({"context": 2, "ids": [5, 6, 7, 8, 9, 10, 11, 12],
                             "alternatives": [{"step": step, "id": 3}]});
            referee(&m, "q4", &[req], true).unwrap()
        };
        assert_eq!(judged(6), vec![json!({"inside_kv_shared_window": 8})]);
        assert!(
            judged(7)[0]["steps"]
                .as_array()
                .is_some_and(|s| s.len() == 8)
        );
        // A graph with no KV-shared window to take off: the windowless referee refuses it.
        let err = referee(
            &BenchModel {
                name: "mobius-tiny-gqa-int4-split",
                dir: root().join("tests/fixtures/models/mobius-tiny-attn-int4"),
                preset: None,
            },
            "q4",
            &[json!({"context": 4, "ids": [1]})],
            true,
        );
        assert!(
            err.as_ref()
                .is_err_and(|e| format!("{e:#}").contains("no KV-shared GroupQueryAttention")),
            "{err:?}"
        );
    }

    #[test]
    fn the_references_generate_the_pages_untimed_steps_too() {
        let run = |untimed: Option<u64>| {
            let mut d = json!({"context": 16, "tokens": 4, "ids": [1, 2, 3, 4, 5, 6]});
            if let Some(n) = untimed {
                d["untimed_steps"] = json!(n);
            }
            json!({"decode": [d]})
        };
        let rec = |runs: Value| json!({"pairs": [{"order": ["ours"], "runs": runs}]});
        assert_eq!(
            untimed_steps(&rec(json!({"ours": run(Some(1)), "ort_web": run(Some(1))}))),
            1
        );
        // A record from before the untimed step, or a failed run: none.
        assert_eq!(untimed_steps(&rec(json!({"ours": run(None)}))), 0);
        assert_eq!(untimed_steps(&rec(json!({"ours": {"error": "boom"}}))), 0);
    }

    /// `--from-raw`: the record must be of the run the flags describe.
    #[test]
    fn a_raw_record_is_checked_against_the_flags() {
        let cfg = [
            json!({"name": "tiny", "prefill": [16], "decode": [{"context": 16, "tokens": 4}],
            "runtimes": ["ours", "ort_web"]}),
        ];
        let run = |prefill: u64, context: u64| {
            json!({"prefill": [{"tokens": prefill, "ids": [1]}],
                   "decode": [{"context": context, "tokens": 4, "ids": [1, 2, 3, 4, 5]}]})
        };
        let raw = |runs: Value, pairs: usize| json!({"models": {"tiny": {"pairs": vec![json!({"order": ["ours"], "runs": runs}); pairs]}}});
        let good = json!({"ours": run(16, 16), "ort_web": run(16, 16)});
        assert!(check_raw(&raw(good.clone(), 2), &cfg, 5).is_ok());
        let err = |r: &Value, pairs: usize| check_raw(r, &cfg, pairs).unwrap_err().to_string();
        assert!(err(&raw(good.clone(), 2), 1).contains("more than --pairs 1"));
        assert!(err(&json!({"models": {}}), 5).contains("no models"));
        assert!(
            err(&json!({"models": {"e2b": {"pairs": []}}}), 5).contains("--model does not name")
        );
        let e = err(&raw(json!({"ours": run(16, 16)}), 1), 5);
        assert!(e.contains("--peers"), "{e}");
        let e = err(
            &raw(json!({"ours": run(16, 16), "ort_web": run(128, 16)}), 1),
            5,
        );
        assert!(
            e.contains("`prefill 128` is not in this configuration"),
            "{e}"
        );
        let e = err(
            &raw(json!({"ours": run(16, 1024), "ort_web": run(16, 16)}), 1),
            5,
        );
        assert!(e.contains("`decode 4 after 1024`"), "{e}");
    }
}
