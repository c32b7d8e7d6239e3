//! `cargo xtask` — the project's build, run and test driver.
//!
//! - `cargo xtask build [--release]` writes the extension to `dist/chrome-mv3-dev/` (or
//!   `dist/chrome-mv3/`), the demo site to `dist/demo-site/` and the embeddable widget to
//!   `dist/widget-dev/` (or `dist/widget/`).
//! - `cargo xtask start [--port N] [--no-browser]` builds (dev), serves the demo site and the
//!   fixture models, and launches Chromium with the extension when it is installed.
//! - `cargo xtask test [--large]` installs what is missing, then runs every check and test.
//! - `cargo xtask bench [--native] [--browser] [--model tiny|e2b-bench|all] [--runs N] [--out DIR]`
//!   measures our runtime natively and against onnxruntime-web in headless Chromium (bench/README.md).

mod bench;
mod build;
mod install;
mod serve;
mod start;
mod test;
mod util;
mod widget;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Build, run and test Gemma Gem", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the extension (dist/chrome-mv3-dev, or dist/chrome-mv3 with --release), the demo site (dist/demo-site) and the widget (dist/widget-dev or dist/widget).
    Build(build::BuildArgs),
    /// Build (dev), serve the demo site and fixture models, and open Chromium with the extension.
    Start(start::StartArgs),
    /// Install what is missing, then run formatting, clippy, native, wasm and end-to-end tests.
    Test(test::TestArgs),
    /// Install the tools the build and the tests need (also done by `build`, `start` and `test`).
    Install(install::InstallArgs),
    /// Serve a directory over HTTP (with Range support), as `start` does, without building.
    Serve(serve::ServeArgs),
    /// Benchmark: native prefill/decode speed and work per token, and ours vs onnxruntime-web in
    /// headless Chromium; results under bench/results/ (see bench/README.md).
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => build::run(&args).map(|_| ()),
        Command::Start(args) => start::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Install(args) => install::run(&args).map(|_| ()),
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => bench::run(&args),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}
