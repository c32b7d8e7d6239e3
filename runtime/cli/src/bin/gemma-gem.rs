//! `gemma-gem generate`: Gemma 4 text generation on the GPU from a model folder or URL: the
//! onnx-community Hugging Face layout (`config.json`, `onnx/`) or an ONNX Runtime GenAI package
//! (`genai_config.json`: mobius' single `model.onnx` or split `embedding/` + `decoder/`).
//!
//! Text streams to stdout; `--json` prints one line per generated token (`{"id":..,"text":..}`)
//! and a last line with the counters. Errors exit with status 1 and a one-line message.
//!
//! `--image FILE` (repeatable) shows images to the model with the prompt: preprocessed like
//! transformers' Gemma 4 processor at `--image-tokens` soft tokens each, encoded by the model's
//! vision encoder on the GPU and merged into the prompt's embeddings.
//!
//! `--tools builtin` (the extension's tools) or `--tools FILE` (a JSON array of declarations)
//! offers tools to the model; its calls are then sampled under the tools' grammar unless
//! `--no-constrain` is given.
use clap::{Args, Parser, Subcommand};
use gg_llm::{Dtype, GemmaModel, LoadOptions, LoadStage, ModelRepo, Sampling, TextOptions};
use std::io::Write;
use std::process::ExitCode;
use std::rc::Rc;

#[derive(Parser)]
#[command(name = "gemma-gem", about = "Gemma 4 on the GPU", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text for a prompt (rendered with the model's chat template) or raw token ids.
    Generate(GenerateArgs),
    /// Measure prefill and decode speed and the work per decoded token; prints one JSON document
    /// (used by `cargo xtask bench --native`).
    Bench(BenchArgs),
    /// Measure the vision encoder on a synthetic image of a given number of soft tokens; prints
    /// one JSON document (used by `cargo xtask bench --native`).
    BenchVision(BenchVisionArgs),
}

#[derive(Args)]
struct BenchVisionArgs {
    /// Model folder with a vision encoder (genai_config.json's model.vision, or
    /// onnx/vision_encoder_*.onnx).
    #[arg(long)]
    model: String,
    /// Soft tokens of the image (Gemma 4: 70, 140, 280, 560 or 1120).
    #[arg(long, default_value_t = 280)]
    soft_tokens: usize,
    /// Measured runs (after one unmeasured warm-up run).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Weight variant of the onnx-community layout (default: q4f16 if the adapter has
    /// shader-f16, else q4).
    #[arg(long)]
    dtype: Option<Dtype>,
    /// Adapter to use: a case-insensitive substring of its description.
    #[arg(long)]
    adapter: Option<String>,
    /// Print the dispatches per node kind of one encode and the fused groups on stderr.
    #[arg(long)]
    dispatch_profile: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RunAhead {
    Auto,
    On,
    Off,
}

impl RunAhead {
    fn choice(self) -> Option<bool> {
        match self {
            RunAhead::Auto => None,
            RunAhead::On => Some(true),
            RunAhead::Off => Some(false),
        }
    }
}

#[derive(Args)]
struct BenchArgs {
    /// Model folder: the onnx-community layout (config.json, onnx/, ...) or an ONNX Runtime GenAI
    /// package (genai_config.json, ...).
    #[arg(long)]
    model: String,
    /// Prompt lengths for the prefill measurements (time to first token), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    prefill: Vec<usize>,
    /// Context lengths before the decode measurements, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    decode_context: Vec<usize>,
    /// Decode steps measured per decode run.
    #[arg(long, default_value_t = 32)]
    decode_tokens: usize,
    /// Measured runs of each configuration (after one unmeasured warm-up run).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Weight variant (default: q4f16 if the adapter has shader-f16, else q4).
    #[arg(long)]
    dtype: Option<Dtype>,
    /// Adapter to use: a case-insensitive substring of its description.
    #[arg(long)]
    adapter: Option<String>,
    /// Whether each decode step records and submits the next one before reading its id back:
    /// `auto` (where the adapter's submits overlap: not on llvmpipe / lavapipe), `on` or `off`
    /// (to measure what it gains).
    #[arg(long, value_enum, default_value_t = RunAhead::Auto)]
    run_ahead: RunAhead,
    /// Compile the generation's kernels after loading, as the extension does on a GPU
    /// (`GemmaModel::warm_up`), and report its time and pipelines (`warm_up`).
    #[arg(long)]
    warm_up: bool,
    /// Also record the greedy ids of each decode configuration (the first token and
    /// --decode-tokens more, `ids` in its JSON), to check another runtime's tokens against.
    #[arg(long)]
    token_ids: bool,
    /// After the measurements, profile one decode step and a prompt (the first --prefill length)
    /// node by node, waiting for the GPU after every node: dispatches and wall time per kind of
    /// node, slowest first, and the fused groups, on stderr.
    #[arg(long)]
    dispatch_profile: bool,
}

#[derive(Args)]
struct GenerateArgs {
    /// Model folder or HTTP(S) base URL: the onnx-community layout (config.json, onnx/, ...) or an
    /// ONNX Runtime GenAI package (genai_config.json, model.onnx or embedding/ + decoder/).
    #[arg(long)]
    model: String,
    /// The user message.
    #[arg(
        long,
        conflicts_with = "token_ids",
        required_unless_present = "token_ids"
    )]
    prompt: Option<String>,
    /// Raw prompt token ids, comma-separated (no chat template).
    #[arg(long, value_delimiter = ',')]
    token_ids: Option<Vec<u32>>,
    /// A system message.
    #[arg(long, conflicts_with = "token_ids")]
    system: Option<String>,
    /// Turn thinking on (`<|think|>`).
    #[arg(long, conflicts_with = "token_ids")]
    thinking: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Sampling temperature (default: generation_config.json).
    #[arg(long, conflicts_with = "greedy")]
    temperature: Option<f32>,
    /// Top-k (0: off; default: generation_config.json).
    #[arg(long, conflicts_with = "greedy")]
    top_k: Option<u32>,
    /// Top-p (1: off; default: generation_config.json).
    #[arg(long, conflicts_with = "greedy")]
    top_p: Option<f32>,
    /// Random seed (default: from the clock).
    #[arg(long, conflicts_with = "greedy")]
    seed: Option<u64>,
    /// Always pick the most likely token.
    #[arg(long)]
    greedy: bool,
    /// Weight variant of the onnx-community layout (default: q4f16 if the adapter has shader-f16,
    /// else q4); a GenAI package has one.
    #[arg(long)]
    dtype: Option<Dtype>,
    /// One JSON line per token and a final line with counters.
    #[arg(long)]
    json: bool,
    /// Adapter to use: a case-insensitive substring of its description.
    #[arg(long)]
    adapter: Option<String>,
    /// Tools offered to the model: `builtin` (the extension's tools) or a JSON file holding an
    /// array of declarations (`{"name", "description", "parameters"}`). Rendered into the
    /// system turn (with --token-ids only used to constrain the calls).
    #[arg(long)]
    tools: Option<String>,
    /// Sample tool calls under the grammar of the --tools declarations, so that every call is
    /// well formed, names a declared tool and has valid arguments (the default).
    #[arg(long, overrides_with = "no_constrain")]
    constrain: bool,
    /// Let the model write tool calls freely (no constrained decoding).
    #[arg(long, overrides_with = "constrain")]
    no_constrain: bool,
    /// An image (PNG, JPEG or WebP) shown to the model before the --prompt text; repeat for
    /// several. Needs a model with a vision encoder (genai_config.json's model.vision, or
    /// onnx/vision_encoder_*.onnx), loaded on the first image.
    #[arg(long = "image", value_name = "FILE", conflicts_with = "token_ids")]
    images: Vec<std::path::PathBuf>,
    /// Soft tokens each image becomes (its detail and context cost): 70, 140, 280, 560 or 1120.
    #[arg(long, default_value_t = 280)]
    image_tokens: usize,
}

/// The --tools declarations.
fn tools_of(arg: Option<&str>) -> anyhow::Result<Vec<gg_agent::ToolDefinition>> {
    match arg {
        None => Ok(Vec::new()),
        Some("builtin") => Ok(gg_agent::builtin_tools()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--tools {path}: {e}"))?;
            serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "--tools {path}: expected a JSON array of {{\"name\", \"description\", \"parameters\"}}: {e}"
                )
            })
        }
    }
}

/// A result document on stdout, pretty-printed (an error when the reader went away).
fn print_json(doc: &serde_json::Value) -> anyhow::Result<()> {
    writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::to_string_pretty(doc)?
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Generate(args) => pollster::block_on(generate(args)),
        Cmd::Bench(args) => pollster::block_on(bench(args)),
        Cmd::BenchVision(args) => pollster::block_on(bench_vision(args)),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): stop quietly, as a Unix filter does.
        Err(e) if gg_cli::broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            gg_cli::note!("error: {msg}");
            ExitCode::from(1)
        }
    }
}

async fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let repo = ModelRepo::open(&args.model)?;
    let gpu = Rc::new(
        gg_runtime::Gpu::with_tuning(args.adapter.as_deref(), gg_runtime::Tuning::from_env).await?,
    );
    let model = GemmaModel::load(gpu, &repo, &LoadOptions { dtype: args.dtype }).await?;
    let tools = tools_of(args.tools.as_deref())?;
    let inputs = args
        .images
        .iter()
        .map(|path| {
            std::fs::read(path)
                .map(|bytes| gg_llm::ImageInput { bytes })
                .map_err(|e| anyhow::anyhow!("--image {}: {e}", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let images = if inputs.is_empty() {
        Vec::new()
    } else {
        model.prepare_images(&inputs, args.image_tokens)?
    };
    let prompt = match (&args.token_ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let mut messages = Vec::new();
            if let Some(s) = &args.system {
                messages.push(gg_gemma::ChatMessage::system(s.clone()));
            }
            let mut user = gg_gemma::ChatMessage::user(text.clone());
            if !images.is_empty() {
                // the images first, then the text (as Gemma's examples write them)
                let mut parts = vec![gg_gemma::ContentPart::Image; images.len()];
                parts.push(gg_gemma::ContentPart::Text { text: text.clone() });
                user.content = Some(gg_gemma::Content::Parts(parts));
            }
            messages.push(user);
            let decls = gg_gemma::agent::tools_from_agent(&tools);
            model.prompt_ids_with_images(&messages, &decls, args.thinking, &images)?
        }
        (None, None) => anyhow::bail!("give --prompt or --token-ids"),
    };
    let features = if images.is_empty() {
        Vec::new()
    } else {
        let encoder =
            gg_llm::VisionEncoder::load(model.gpu.clone(), &repo, &model.config, model.dtype)
                .await?;
        model.encode_images(&images, &encoder).await?
    };
    if let Some(&bad) = prompt
        .iter()
        .find(|&&id| id as usize >= model.tokenizer.vocab_size())
    {
        anyhow::bail!(
            "token id {bad} is outside the vocabulary ({} ids)",
            model.tokenizer.vocab_size()
        );
    }
    let defaults = model.config.sampling;
    let sampling = if args.greedy {
        Sampling::Greedy
    } else {
        let temperature = args.temperature.unwrap_or(defaults.temperature);
        if temperature <= 0.0 {
            Sampling::Greedy
        } else {
            Sampling::Sample {
                temperature,
                top_k: args.top_k.unwrap_or(defaults.top_k),
                top_p: args.top_p.unwrap_or(defaults.top_p),
                seed: args.seed.unwrap_or_else(gg_llm::stream::fresh_seed),
            }
        }
    };
    let mut stream = gg_llm::TextStream::with_image_features(
        &model,
        &prompt,
        TextOptions {
            max_new_tokens: args.max_new_tokens,
            sampling,
            cancel: None,
            stop_ids: Vec::new(),
            constraint: if args.no_constrain || tools.is_empty() {
                None
            } else {
                let values = tools
                    .iter()
                    .map(serde_json::to_value)
                    .collect::<Result<Vec<_>, _>>()?;
                match model.call_matcher(&values) {
                    Ok(matcher) => Some(gg_llm::CallConstraint::new(
                        matcher,
                        model.tokenizer.special().tool_call_start.id,
                    )),
                    Err(e) => {
                        gg_cli::note!("warning: tool calls are not constrained: {e}");
                        None
                    }
                }
            },
        },
        features,
    )?;
    let mut out = std::io::stdout().lock();
    while let Some(tok) = stream.next().await? {
        if args.json {
            let line = serde_json::json!({"id": tok.id, "text": tok.text});
            writeln!(out, "{line}")?;
        } else {
            write!(out, "{}", tok.text)?;
            out.flush()?;
        }
    }
    let rest = stream.finish()?;
    let stats = stream.stats();
    if args.json {
        if !rest.is_empty() {
            writeln!(out, "{}", serde_json::json!({"id": null, "text": rest}))?;
        }
        let stop = match stream.stop_reason() {
            Some(gg_llm::StopReason::EndId(id)) => format!("end_id:{id}"),
            Some(gg_llm::StopReason::MaxNewTokens) => "max_new_tokens".into(),
            Some(gg_llm::StopReason::Cancelled) => "cancelled".into(),
            None => "running".into(),
        };
        let line = serde_json::json!({
            "prefill_tokens": stats.prefill_tokens,
            "decode_tokens": stats.decode_tokens,
            "prefill_tok_s": round(stats.prefill_tok_s()),
            "decode_tok_s": round(stats.decode_tok_s()),
            "dispatches_per_token": round(stats.dispatches_per_token()),
            "call_tokens": stats.call_tokens,
            "image_soft_tokens": images.iter().map(|i| i.soft_tokens).collect::<Vec<_>>(),
            "bytes_read_back_per_token": round(stats.bytes_read_back_per_token()),
            "dtype": model.variant(),
            "adapter": model.gpu.adapter,
            "stop": stop,
        });
        writeln!(out, "{line}")?;
    } else {
        writeln!(out, "{rest}")?;
    }
    Ok(())
}

/// GPU memory held by the device's allocator (bytes allocated, bytes reserved), where the
/// backend reports it (Vulkan, D3D12).
fn gpu_memory(gpu: &gg_runtime::Gpu) -> Option<(u64, u64)> {
    gpu.device
        .generate_allocator_report()
        .map(|r| (r.total_allocated_bytes, r.total_reserved_bytes))
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    use gg_llm::bench;
    use serde_json::{Value, json};
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    anyhow::ensure!(args.decode_tokens > 0, "--decode-tokens must be at least 1");
    let gpu = Rc::new(
        gg_runtime::Gpu::with_tuning(args.adapter.as_deref(), gg_runtime::Tuning::from_env).await?,
    );
    let repo = ModelRepo::open(&args.model)?;
    let t0 = std::time::Instant::now();
    // where the load's time goes: each stage from its start to the next one's
    let mut stages: Vec<(String, f64)> = Vec::new();
    let model = GemmaModel::load_with_progress(
        gpu,
        &repo,
        &LoadOptions { dtype: args.dtype },
        &mut |stage| {
            let name = match stage {
                LoadStage::TextFiles => "text files".to_string(),
                LoadStage::Session(path) => path,
                LoadStage::Ready => "ready".to_string(),
            };
            stages.push((name, t0.elapsed().as_secs_f64()));
        },
    )
    .await?;
    let load_s = t0.elapsed().as_secs_f64();
    let load_stages: Vec<Value> = stages
        .iter()
        .zip(stages.iter().skip(1).map(|(_, t)| *t).chain([load_s]))
        .map(|((name, start), end)| json!({"stage": name, "s": end - start}))
        .collect();
    let warm_up = if args.warm_up {
        let before = model.gpu.counters.snapshot();
        let t = std::time::Instant::now();
        model.warm_up().await?;
        let s = t.elapsed().as_secs_f64();
        let pipelines =
            model.gpu.counters.snapshot().pipelines_compiled - before.pipelines_compiled;
        gg_cli::note!("gemma-gem bench: warm-up: {pipelines} pipelines compiled in {s:.2} s");
        json!({"s": s, "pipelines_compiled": pipelines})
    } else {
        Value::Null
    };
    let after_load = gpu_memory(&model.gpu);
    let mut peak = after_load;
    let note_memory = |peak: &mut Option<(u64, u64)>| {
        if let (Some(p), Some(now)) = (peak.as_mut(), gpu_memory(&model.gpu)) {
            p.0 = p.0.max(now.0);
            p.1 = p.1.max(now.1);
        }
    };
    let progress = |what: &str| gg_cli::note!("gemma-gem bench: {what}");
    let too_long = |positions: usize| {
        model
            .context_limit()
            .filter(|&limit| positions > limit)
            .map(|limit| format!("needs {positions} positions; the model's context is {limit}"))
    };

    let mut prefill = Vec::new();
    for &n in &args.prefill {
        if let Some(why) = too_long(n + 1) {
            prefill.push(json!({"tokens": n, "skipped": why}));
            continue;
        }
        progress(&format!("prefill {n} tokens: warm-up"));
        bench::prefill(&model, n).await?;
        let mut runs = Vec::new();
        for r in 0..args.runs {
            let run = bench::prefill(&model, n).await?;
            progress(&format!(
                "prefill {n} tokens, run {}: {:.3} s ({:.1} tok/s)",
                r + 1,
                run.ttft_s,
                run.tok_s()
            ));
            note_memory(&mut peak);
            runs.push(json!({"ttft_s": run.ttft_s, "tok_s": run.tok_s()}));
        }
        prefill.push(json!({"tokens": n, "runs": runs}));
    }

    let mut decode = Vec::new();
    let mut warm = false;
    for &c in &args.decode_context {
        if let Some(why) = too_long(c + args.decode_tokens + 1) {
            decode.push(json!({"context": c, "tokens": args.decode_tokens, "skipped": why}));
            continue;
        }
        if !warm {
            progress("decode: warm-up");
            bench::decode(&model, 8.min(c.max(1)), 2, args.run_ahead.choice()).await?;
            warm = true;
        }
        let mut runs = Vec::new();
        for r in 0..args.runs {
            let run = bench::decode(&model, c, args.decode_tokens, args.run_ahead.choice()).await?;
            progress(&format!(
                "decode {} tokens after {c}, run {}: {:.1} tok/s, {:.1} dispatches/token, {:.2} ms recording/token",
                run.tokens,
                r + 1,
                run.tok_s(),
                run.dispatches_per_token,
                run.record_ms_per_token
            ));
            note_memory(&mut peak);
            runs.push(json!({
                "decode_s": run.decode_s,
                "tok_s": run.tok_s(),
                "dispatches_per_token": run.dispatches_per_token,
                "submits_per_token": run.submits_per_token,
                "bytes_read_back_per_token": run.bytes_read_back_per_token,
                "buffers_created_per_token": run.buffers_created_per_token,
                "bytes_uploaded_per_token": run.bytes_uploaded_per_token,
                "bind_groups_created_per_token": run.bind_groups_created_per_token,
                "record_ms_per_token": run.record_ms_per_token,
            }));
        }
        let mut entry = json!({"context": c, "tokens": args.decode_tokens, "runs": runs});
        if args.token_ids {
            entry["ids"] = json!(bench::greedy_ids(&model, c, args.decode_tokens).await?);
        }
        decode.push(entry);
    }
    let mut call = Vec::new();
    if let Some(&c) = args.decode_context.first() {
        if let Some(why) = too_long(c + args.decode_tokens + 2) {
            call.push(json!({"context": c, "tokens": args.decode_tokens, "skipped": why}));
        } else {
            // Builds the matcher's vocabulary and grammar once, and compiles the masked sampler.
            progress("decode in a tool call: warm-up");
            bench::decode_in_call(&model, 8.min(c.max(1)), 2, args.run_ahead.choice()).await?;
            for r in 0..args.runs {
                let run =
                    bench::decode_in_call(&model, c, args.decode_tokens, args.run_ahead.choice())
                        .await?;
                progress(&format!(
                    "decode in a tool call after {c}, run {}: {} tokens inside at {:.1} tok/s ({:.3} ms mask/token), {} outside at {:.1} tok/s",
                    r + 1,
                    run.call_tokens,
                    run.call_tok_s(),
                    run.mask_ms_per_token,
                    run.free_tokens,
                    run.free_tok_s()
                ));
                call.push(json!({
                    "context": run.context,
                    "call_tokens": run.call_tokens,
                    "call_tok_s": run.call_tok_s(),
                    "free_tokens": run.free_tokens,
                    "free_tok_s": (run.free_tokens > 0).then(|| run.free_tok_s()),
                    "mask_ms_per_token": run.mask_ms_per_token,
                    "bytes_uploaded_per_token": run.bytes_uploaded_per_token,
                }));
            }
        }
    }
    if args.dispatch_profile {
        let (rows, total) = bench::decode_profile(&model, 8).await?;
        print_profile("one decode step", &rows, total);
        let n = args.prefill.first().copied().unwrap_or(16);
        let (rows, total) = bench::prefill_profile(&model, n).await?;
        print_profile(&format!("a prompt of {n} tokens"), &rows, total);
        for f in model.decoder.fused() {
            progress(&format!("  fused: {f}"));
        }
    }
    let memory = |m: Option<(u64, u64)>| match m {
        Some((allocated, reserved)) => {
            json!({"allocated_bytes": allocated, "reserved_bytes": reserved})
        }
        None => Value::Null,
    };
    let doc = json!({
        "model": args.model,
        "adapter": model.gpu.adapter,
        "dtype": model.dtype.name(),
        "load_s": load_s,
        "load_stages": load_stages,
        "warm_up": warm_up,
        "run_ahead": args.run_ahead.choice().unwrap_or(model.gpu.tuning.submits_overlap),
        "gpu_memory_after_load": memory(after_load),
        "gpu_memory_peak": memory(peak),
        "prefill": prefill,
        "decode": decode,
        "decode_in_call": call,
    });
    print_json(&doc)
}

/// `pooling_kernel_size` wherever the image processor's config has it (GenAI packages:
/// `image_processor.json`'s transform attributes; onnx-community: `preprocessor_config.json` or
/// `processor_config.json`).
async fn pooling_of(repo: &ModelRepo) -> anyhow::Result<usize> {
    fn find(v: &serde_json::Value) -> Option<u64> {
        match v {
            serde_json::Value::Object(m) => m
                .get("pooling_kernel_size")
                .and_then(serde_json::Value::as_u64)
                .or_else(|| m.values().find_map(find)),
            serde_json::Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    for file in [
        "image_processor.json",
        "preprocessor_config.json",
        "processor_config.json",
    ] {
        if let Some(bytes) = repo.read_optional(file).await
            && let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && let Some(k) = find(&doc)
        {
            return Ok(usize::try_from(k)?);
        }
    }
    anyhow::bail!(
        "{}: no pooling_kernel_size in image_processor.json, preprocessor_config.json or processor_config.json",
        repo.name()
    )
}

async fn bench_vision(args: BenchVisionArgs) -> anyhow::Result<()> {
    use gg_llm::{VisionEncoder, bench, config::ModelConfig};
    use serde_json::json;
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    anyhow::ensure!(args.soft_tokens > 0, "--soft-tokens must be at least 1");
    let gpu = Rc::new(
        gg_runtime::Gpu::with_tuning(args.adapter.as_deref(), gg_runtime::Tuning::from_env).await?,
    );
    let repo = ModelRepo::open(&args.model)?;
    let config = match repo.read_optional("genai_config.json").await {
        Some(g) => ModelConfig::parse_genai(&g, None, None)?,
        None => ModelConfig::parse(&repo.read("config.json").await?, None)?,
    };
    let dtype = args
        .dtype
        .unwrap_or_else(|| Dtype::for_adapter(gpu.has_shader_f16));
    let pool = pooling_of(&repo).await?;
    let t0 = std::time::Instant::now();
    let encoder = VisionEncoder::load(gpu.clone(), &repo, &config, dtype).await?;
    let load_s = t0.elapsed().as_secs_f64();
    let n = args.soft_tokens;
    gg_cli::note!("gemma-gem bench-vision: {n} soft tokens: warm-up");
    bench::vision_encode(&encoder, n, pool).await?;
    let mut runs = Vec::new();
    for r in 0..args.runs {
        let run = bench::vision_encode(&encoder, n, pool).await?;
        gg_cli::note!(
            "gemma-gem bench-vision: {n} soft tokens ({} patch slots), run {}: {:.1} ms, {} dispatches, {} submits",
            run.slots,
            r + 1,
            run.encode_s * 1e3,
            run.dispatches,
            run.submits
        );
        runs.push(run);
    }
    if args.dispatch_profile {
        encoder.session().set_profiling(true);
        bench::vision_encode(&encoder, n, pool).await?;
        let mut rows = encoder.session().profile();
        encoder.session().set_profiling(false);
        rows.sort_by_key(|r| std::cmp::Reverse(r.1.micros));
        for (kind, p) in rows.iter().filter(|(_, p)| p.dispatches > 0) {
            gg_cli::note!(
                "  {kind:<48} {:>4} dispatches {:>9.1} ms",
                p.dispatches,
                p.micros as f64 / 1e3
            );
        }
        for f in encoder.session().fused() {
            gg_cli::note!("  fused: {f}");
        }
    }
    let mut ms: Vec<f64> = runs.iter().map(|r| r.encode_s * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let doc = json!({
        "model": args.model,
        "adapter": gpu.adapter,
        "soft_tokens": n,
        "slots": runs[0].slots,
        "pooling": pool,
        "patch_values": encoder.layout().patch_values,
        "load_s": load_s,
        "encode_ms_median": ms[ms.len() / 2],
        "encode_ms_min": ms[0],
        "encode_ms_max": ms[ms.len() - 1],
        "dispatches": runs[0].dispatches,
        "submits": runs[0].submits,
        "runs_ms": runs.iter().map(|r| r.encode_s * 1e3).collect::<Vec<_>>(),
    });
    print_json(&doc)
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Prints a `--dispatch-profile` table: dispatches and wall time per kind of node, slowest first.
fn print_profile(what: &str, rows: &[(String, gg_runtime::OpProfile)], total: u64) {
    let ms: u64 = rows.iter().map(|(_, p)| p.micros).sum();
    gg_cli::note!(
        "gemma-gem bench: dispatches of {what}: {total} ({:.1} ms with a wait after every node)",
        ms as f64 / 1e3
    );
    let mut rows: Vec<_> = rows.iter().filter(|(_, p)| p.dispatches > 0).collect();
    rows.sort_by_key(|(_, p)| std::cmp::Reverse(p.micros));
    for (kind, p) in rows {
        gg_cli::note!(
            "gemma-gem bench:   {:>5} dispatches  {:>4} nodes  {:>9.1} ms  {kind}",
            p.dispatches,
            p.runs,
            p.micros as f64 / 1e3
        );
    }
}
