//! Small helpers: paths and running commands with clear errors.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the parent of `xtask/`; `GEMMA_GEM_ROOT` overrides it for a prebuilt xtask
/// run from another checkout, as bench/device.sh does).
pub fn root() -> PathBuf {
    if let Some(r) = std::env::var_os("GEMMA_GEM_ROOT") {
        return PathBuf::from(r);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (worktrees sharing one build cache),
/// else `target/` in the repository.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| if p.is_absolute() { p } else { root().join(p) })
        .unwrap_or_else(|| root().join("target"))
}

/// Cache directory shared across clones and runs (tools that take minutes to build).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GEMMA_GEM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/gemma-gem")))
        .unwrap_or_else(|| root().join("target/cache"))
}

/// Prints and runs a command; fails with the command line when it does not exit 0.
pub fn exec(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {}", show(cmd));
    let started = std::time::Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", show(cmd)))?;
    took(started);
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails with stderr when it does not exit 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{}`", show(cmd)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            show(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Prints how long a command took (CI logs show where the time goes).
pub fn took(started: std::time::Instant) {
    let s = started.elapsed().as_secs_f64();
    if s >= 1.0 {
        eprintln!("xtask: took {s:.0} s");
    }
}

pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// `cargo`, as the one running xtask.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// Finds an executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| {
                format!("copying {} to {}", entry.path().display(), target.display())
            })?;
        }
    }
    Ok(())
}

pub fn is_root_user() -> bool {
    output(Command::new("id").arg("-u"))
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
}

/// Clippy inside a build: cargo runs `clippy-driver` in place of rustc for the workspace's own
/// crates (`RUSTC_WORKSPACE_WRAPPER`, exactly how `cargo clippy` drives `cargo check`), so one
/// compilation lints and builds. `cargo xtask test` uses it for the native tests, the wasm tests
/// and the dev extension build instead of separate `cargo clippy` passes, which would type-check
/// every dependency again for each target and feature set.
pub struct Clippy {
    driver: PathBuf,
}

impl Clippy {
    /// `clippy-driver` of the toolchain running xtask (added with rustup when missing).
    pub fn find() -> Result<Self> {
        let driver = || {
            let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
            let beside = cargo.with_file_name("clippy-driver");
            if beside.is_file() {
                return Some(beside);
            }
            let sysroot = output(Command::new("rustc").args(["--print", "sysroot"])).ok()?;
            let in_sysroot = Path::new(sysroot.trim()).join("bin/clippy-driver");
            in_sysroot.is_file().then_some(in_sysroot)
        };
        if let Some(driver) = driver() {
            return Ok(Self { driver });
        }
        exec(Command::new("rustup").args(["component", "add", "clippy"]))
            .context("clippy is needed: run `rustup component add clippy`")?;
        driver()
            .map(|driver| Self { driver })
            .context("clippy-driver not found after `rustup component add clippy`")
    }

    /// Lints every workspace crate that `cmd` (a cargo build or test) compiles, warnings denied.
    pub fn apply(&self, cmd: &mut Command) {
        // `CLIPPY_ARGS`: clippy-driver's extra arguments, each followed by this separator.
        cmd.env("RUSTC_WORKSPACE_WRAPPER", &self.driver).env(
            "CLIPPY_ARGS",
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
        );
    }
}
