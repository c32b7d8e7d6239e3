//! `gemma-gem-onnx`: inspect and run ONNX graphs on the GPU.
use clap::Parser;

#[derive(Parser)]
#[command(name = "gemma-gem-onnx", about = "Inspect and run ONNX graphs on the GPU", version)]
enum Cli {
    /// List the GPU adapters wgpu can see.
    Adapters,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse() {
        Cli::Adapters => {
            for info in gg_runtime::gpu::list_adapters() {
                println!("{info}");
            }
        }
    }
    Ok(())
}
