//! `gemma-gem-onnx`: inspect and run ONNX graphs on the GPU.
//!
//! Exit codes: 0 success; 1 error (one-line message on stderr); 2 usage; 3 `inspect` found
//! unsupported nodes.
use clap::{Parser, Subcommand};
use gg_runtime::model::{Graph, InitData};
use gg_runtime::ops::Registry;
use gg_runtime::{Gpu, HostTensor, Session, npy};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

#[derive(Parser)]
#[command(
    name = "gemma-gem-onnx",
    about = "Inspect and run ONNX graphs on the GPU",
    version
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the GPU adapters wgpu can see.
    Adapters,
    /// Inputs/outputs, op histogram, external data files, the calls of model-local functions
    /// inlined at load, and unsupported nodes (exit 3 if any).
    Inspect {
        /// The .onnx file.
        model: PathBuf,
    },
    /// Run the model on the GPU and write one .npy per graph output.
    Run {
        /// The .onnx file (external data next to it).
        model: PathBuf,
        /// NAME=FILE.npy, once per graph input.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Output folder (created if needed).
        #[arg(long)]
        out: PathBuf,
        /// Adapter to use: a case-insensitive substring of its description (see `adapters`).
        #[arg(long)]
        adapter: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Adapters => {
            let mut o = std::io::stdout().lock();
            gg_runtime::gpu::list_adapters()
                .iter()
                .try_for_each(|info| writeln!(o, "{info}"))
                .map(|()| ExitCode::SUCCESS)
                .map_err(anyhow::Error::from)
        }
        Cmd::Inspect { model } => inspect(&model),
        Cmd::Run {
            model,
            inputs,
            out,
            adapter,
        } => run(&model, &inputs, &out, adapter.as_deref()),
    };
    match res {
        Ok(code) => code,
        // The reader went away (`| head`): stop quietly, as a Unix filter does.
        Err(e) if gg_cli::broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            gg_cli::note!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dims(v: &gg_runtime::model::ValueInfo) -> String {
    match &v.dims {
        Some(d) => format!(
            "[{}]",
            d.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "(no shape)".into(),
    }
}

fn dtype_name(t: i32) -> String {
    gg_runtime::DType::from_onnx(t).map_or_else(|_| format!("type{t}"), |d| d.name().to_string())
}

fn read_graph(model: &Path) -> anyhow::Result<Graph> {
    let bytes = std::fs::read(model).map_err(|e| anyhow::anyhow!("{}: {e}", model.display()))?;
    Ok(Graph::decode(&bytes, &model.display().to_string())?)
}

fn inspect(model: &Path) -> anyhow::Result<ExitCode> {
    let g = read_graph(model)?;
    let mut o = std::io::stdout().lock();
    writeln!(o, "model: {}", model.display())?;
    let opsets: Vec<String> = g
        .opsets
        .iter()
        .map(|(d, v)| format!("{} {v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    writeln!(o, "opsets: {}", opsets.join(", "))?;
    writeln!(o, "inputs:")?;
    for i in &g.inputs {
        writeln!(o, "  {} {} {}", i.name, dtype_name(i.elem_type), dims(i))?;
    }
    writeln!(o, "outputs:")?;
    for v in &g.outputs {
        writeln!(o, "  {} {} {}", v.name, dtype_name(v.elem_type), dims(v))?;
    }
    let inline: usize = g
        .initializers
        .iter()
        .filter(|i| matches!(i.data, InitData::Inline(_)))
        .map(|i| i.byte_len())
        .sum();
    writeln!(
        o,
        "initializers: {} ({} bytes inline)",
        g.initializers.len(),
        inline
    )?;
    writeln!(o, "external data:")?;
    for f in g.external_files() {
        let (n, bytes) = g
            .initializers
            .iter()
            .fold((0usize, 0u64), |(n, b), i| match &i.data {
                InitData::External {
                    location, length, ..
                } if *location == f => (n + 1, b + length),
                _ => (n, b),
            });
        writeln!(o, "  {f} ({n} tensors, {bytes} bytes)")?;
    }
    writeln!(o, "ops ({} nodes):", g.nodes.len())?;
    for ((domain, op), n) in g.op_histogram() {
        writeln!(
            o,
            "  {n:6} {op} ({})",
            if domain.is_empty() {
                "ai.onnx"
            } else {
                &domain
            }
        )?;
    }
    if g.inlined.is_empty() {
        writeln!(o, "inlined functions: none")?;
    } else {
        writeln!(o, "inlined functions ({} calls):", g.inlined.len())?;
        for c in &g.inlined {
            let domain = if c.domain.is_empty() {
                "ai.onnx"
            } else {
                &c.domain
            };
            writeln!(o, "  {} -> {domain}:{} ({} nodes)", c.node, c.op, c.nodes)?;
        }
    }
    let bad = Registry::default().check(&g);
    for u in &bad {
        writeln!(o, "unsupported: {u}")?;
    }
    if bad.is_empty() {
        writeln!(o, "all {} nodes supported", g.nodes.len())?;
        Ok(ExitCode::SUCCESS)
    } else {
        for u in &bad {
            gg_cli::note!("  {u}: {}", u.reason);
        }
        Ok(ExitCode::from(3))
    }
}

fn run(
    model: &Path,
    inputs: &[String],
    out: &Path,
    adapter: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let mut feeds = Vec::new();
    for spec in inputs {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--input {spec}: expected NAME=FILE.npy"))?;
        let bytes = std::fs::read(file).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let t: HostTensor = npy::parse(file, &bytes)?;
        feeds.push((name.to_string(), t));
    }
    if !model.exists() {
        anyhow::bail!("{}: no such file", model.display());
    }
    let gpu = Rc::new(pollster::block_on(Gpu::with_tuning(
        adapter,
        gg_runtime::Tuning::from_env,
    ))?);
    gg_cli::note!("adapter: {}", gpu.adapter);
    let session = pollster::block_on(Session::load_file(gpu.clone(), model))?;
    let before = gpu.counters.snapshot();
    let outs = pollster::block_on(session.run_host(feeds))?;
    let after = gpu.counters.snapshot();
    std::fs::create_dir_all(out).map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    let mut o = std::io::stdout().lock();
    for (name, t) in outs {
        let path = out.join(format!("{}.npy", name.replace('/', "_")));
        std::fs::write(&path, npy::to_bytes(&t))
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        writeln!(
            o,
            "{name} {} {:?} -> {}",
            t.dtype.name(),
            t.shape,
            path.display()
        )?;
    }
    gg_cli::note!(
        "run: {} dispatches, {} submits, {} bytes read back, {} buffers created",
        after.dispatches - before.dispatches,
        after.submits - before.submits,
        after.bytes_read_back - before.bytes_read_back,
        after.buffers_created - before.buffers_created
    );
    Ok(ExitCode::SUCCESS)
}
