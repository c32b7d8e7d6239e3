//! `gemma-gem generate`: Gemma 4 text generation on the GPU from a model folder or URL in the
//! onnx-community Hugging Face layout.
//!
//! Text streams to stdout; `--json` prints one line per generated token (`{"id":..,"text":..}`)
//! and a last line with the counters. Errors exit with status 1 and a one-line message.
use clap::{Args, Parser, Subcommand};
use gg_llm::{Dtype, GemmaModel, LoadOptions, ModelRepo, Sampling, TextOptions};
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
}

#[derive(Args)]
struct GenerateArgs {
    /// Model folder or HTTP(S) base URL (Hugging Face layout: config.json, onnx/, ...).
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
    /// Weight variant (default: q4f16 if the adapter has shader-f16, else q4).
    #[arg(long)]
    dtype: Option<Dtype>,
    /// One JSON line per token and a final line with counters.
    #[arg(long)]
    json: bool,
    /// Adapter to use: a case-insensitive substring of its description.
    #[arg(long)]
    adapter: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Generate(args) => pollster::block_on(generate(args)),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::from(1)
        }
    }
}

async fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    let gpu = Rc::new(gg_runtime::Gpu::new(args.adapter.as_deref()).await?);
    let repo = ModelRepo::open(&args.model)?;
    let model = GemmaModel::load(gpu, &repo, &LoadOptions { dtype: args.dtype }).await?;
    let prompt = match (&args.token_ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => {
            let mut messages = Vec::new();
            if let Some(s) = &args.system {
                messages.push(gg_gemma::ChatMessage::system(s.clone()));
            }
            messages.push(gg_gemma::ChatMessage::user(text.clone()));
            model.prompt_ids(&messages, &[], args.thinking)?
        }
        (None, None) => anyhow::bail!("give --prompt or --token-ids"),
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
    let mut stream = model.stream(
        &prompt,
        TextOptions {
            max_new_tokens: args.max_new_tokens,
            sampling,
            cancel: None,
            stop_ids: Vec::new(),
        },
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
            "bytes_read_back_per_token": round(stats.bytes_read_back_per_token()),
            "dtype": model.dtype.name(),
            "adapter": model.gpu.adapter,
            "stop": stop,
        });
        writeln!(out, "{line}")?;
    } else {
        writeln!(out, "{rest}")?;
    }
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
