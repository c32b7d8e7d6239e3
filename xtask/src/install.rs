//! Idempotent installation of everything the build and the tests need. Each step checks first and
//! does nothing when the tool is already there; when it cannot install, it says what and how.

use crate::util::{cache_dir, exec, is_root_user, output, root, which};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args, Default)]
pub struct InstallArgs {
    /// Only what `cargo xtask build` needs (no browser, no Python).
    #[arg(long)]
    pub build_only: bool,
}

/// Paths of installed tools.
pub struct Tools {
    /// Directory holding `wasm-bindgen` and `wasm-bindgen-test-runner` at the locked version.
    pub wasm_bindgen_dir: PathBuf,
    /// `wasm2js` from the npm `binaryen` package (Debian's binaryen is too old for our output).
    pub wasm2js: PathBuf,
    /// `wasm-opt` (Debian `binaryen`), when available and new enough (see [`MIN_WASM_OPT`]).
    pub wasm_opt: Option<PathBuf>,
    /// The npm `terser` package's command (a Node script): minifies the widget's page-side
    /// JavaScript in release builds.
    pub terser: PathBuf,
}

impl Tools {
    pub fn wasm_bindgen(&self) -> PathBuf {
        self.wasm_bindgen_dir.join("wasm-bindgen")
    }
    pub fn test_runner(&self) -> PathBuf {
        self.wasm_bindgen_dir.join("wasm-bindgen-test-runner")
    }
}

pub const RUST_TARGETS: &[&str] = &["wasm32-unknown-unknown", "wasm32v1-none"];
pub const BROWSER_PACKAGES: &[&str] = &[
    "chromium",
    "chromium-driver",
    "mesa-vulkan-drivers",
    "libvulkan1",
];
pub const BUILD_PACKAGES: &[&str] = &["binaryen"];

pub fn run(args: &InstallArgs) -> Result<Tools> {
    if args.build_only {
        install_build()
    } else {
        install_all()
    }
}

/// What `build` needs.
pub fn install_build() -> Result<Tools> {
    ensure_rust_targets()?;
    ensure_debian(BUILD_PACKAGES)
        .unwrap_or_else(|e| eprintln!("xtask: note: {e:#} (wasm-opt is optional)"));
    let wasm_bindgen_dir = ensure_wasm_bindgen()?;
    ensure_npm(&root().join("xtask/js"))?;
    let wasm2js = root().join("xtask/js/node_modules/binaryen/bin/wasm2js");
    if !wasm2js.is_file() {
        bail!(
            "{} is missing after `npm ci` in xtask/js; delete xtask/js/node_modules and try again",
            wasm2js.display()
        );
    }
    let terser = root().join("xtask/js/node_modules/terser/bin/terser");
    if !terser.is_file() {
        bail!(
            "{} is missing after `npm ci` in xtask/js; delete xtask/js/node_modules and try again",
            terser.display()
        );
    }
    Ok(Tools {
        wasm_bindgen_dir,
        wasm2js,
        terser,
        wasm_opt: which("wasm-opt").filter(|p| usable_wasm_opt(p)),
    })
}

/// The oldest system `wasm-opt` we use. Debian bookworm's binaryen 108 turns wasm-bindgen's
/// `externref` table into a function table (the module then fails at start-up with "function-typed
/// object must be null") and cannot parse `table.fill`; older ones give way to npm's binaryen.
pub const MIN_WASM_OPT: u32 = 117;

fn usable_wasm_opt(path: &Path) -> bool {
    let out = Command::new(path).arg("--version").output();
    let version = out
        .ok()
        .and_then(|o| parse_wasm_opt_version(&String::from_utf8_lossy(&o.stdout)));
    match version {
        Some(v) if v >= MIN_WASM_OPT => true,
        other => {
            eprintln!(
                "xtask: note: {} is binaryen {} (< {MIN_WASM_OPT}); using npm's binaryen instead",
                path.display(),
                other.map_or("of unknown version".into(), |v| v.to_string())
            );
            false
        }
    }
}

/// `wasm-opt version 108 (version_108)` → 108.
fn parse_wasm_opt_version(text: &str) -> Option<u32> {
    let rest = text.trim().strip_prefix("wasm-opt version ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What `test` needs: the build tools, the browser, software Vulkan, npm test packages, Python.
pub fn install_all() -> Result<Tools> {
    ensure_debian(BROWSER_PACKAGES)?;
    let tools = install_build()?;
    ensure_npm(&root().join("tests"))?;
    ensure_python_venv()?;
    Ok(tools)
}

fn ensure_rust_targets() -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))
        .context("rustup is needed to add the wasm targets (install it from https://rustup.rs)")?;
    let missing: Vec<&str> = RUST_TARGETS
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if !missing.is_empty() {
        exec(
            Command::new("rustup")
                .args(["target", "add"])
                .args(&missing),
        )
        .with_context(|| {
            format!(
                "could not add Rust targets {missing:?}; run `rustup target add {}`",
                missing.join(" ")
            )
        })?;
    }
    Ok(())
}

/// The exact `wasm-bindgen` version in `Cargo.lock`.
pub fn locked_wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"wasm-bindgen\""
            && let Some(v) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_owned());
        }
    }
    bail!("Cargo.lock has no wasm-bindgen package; run `cargo generate-lockfile`")
}

fn bindgen_version_of(bin: &Path) -> Option<String> {
    output(Command::new(bin).arg("--version"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).map(str::to_owned))
}

/// `wasm-bindgen-cli` at exactly the locked version, cached in `~/.cache/gemma-gem`.
fn ensure_wasm_bindgen() -> Result<PathBuf> {
    let version = locked_wasm_bindgen_version()?;
    let cached = cache_dir().join(format!("wasm-bindgen-{version}"));
    let cached_bin = cached.join("bin");
    if bindgen_version_of(&cached_bin.join("wasm-bindgen")).as_deref() == Some(version.as_str())
        && cached_bin.join("wasm-bindgen-test-runner").is_file()
    {
        return Ok(cached_bin);
    }
    if let Some(on_path) = which("wasm-bindgen")
        && bindgen_version_of(&on_path).as_deref() == Some(version.as_str())
        && let Some(dir) = on_path
            .parent()
            .filter(|d| d.join("wasm-bindgen-test-runner").is_file())
    {
        return Ok(dir.to_path_buf());
    }
    eprintln!(
        "xtask: installing wasm-bindgen-cli {version} into {} (takes several minutes, once)",
        cached.display()
    );
    exec(crate::util::cargo()
        .args(["install", "wasm-bindgen-cli", "--version", &version, "--root"])
        .arg(&cached))
    .with_context(|| format!("could not install wasm-bindgen-cli {version}; try `cargo install wasm-bindgen-cli --version {version}`"))?;
    Ok(cached_bin)
}

fn dpkg_installed(pkg: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .map(|s| s.contains("install ok installed"))
        .unwrap_or(false)
}

/// Installs Debian packages that are missing (as root, or with passwordless sudo).
pub fn ensure_debian(pkgs: &[&str]) -> Result<()> {
    if which("dpkg-query").is_none() {
        bail!(
            "not a Debian-like system: install {} with your package manager",
            pkgs.join(" ")
        );
    }
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let how = format!("sudo apt-get install -y {}", missing.join(" "));
    let mut prefix: Vec<&str> = Vec::new();
    if !is_root_user() {
        if which("sudo").is_none() || output(Command::new("sudo").args(["-n", "true"])).is_err() {
            bail!(
                "missing Debian packages {missing:?} and no root rights to install them; run `{how}`"
            );
        }
        prefix.push("sudo");
        prefix.push("-n");
    }
    let apt = |args: &[&str]| {
        let mut all: Vec<&str> = prefix.clone();
        all.push("apt-get");
        all.extend_from_slice(args);
        let mut c = Command::new(all[0]);
        c.args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    exec(&mut apt(&["update", "-q"]))
        .with_context(|| format!("apt-get update failed; run `{how}` by hand"))?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend_from_slice(&missing);
    exec(&mut apt(&args))
        .with_context(|| format!("installing {missing:?} failed; run `{how}` by hand"))
}

/// `npm ci` in `dir` when its `node_modules` is missing or older than `package-lock.json`.
pub fn ensure_npm(dir: &Path) -> Result<()> {
    let lock = dir.join("package-lock.json");
    let stamp = dir.join("node_modules/.package-lock.json");
    let fresh = match (
        std::fs::metadata(&lock).and_then(|m| m.modified()),
        std::fs::metadata(&stamp).and_then(|m| m.modified()),
    ) {
        (Ok(l), Ok(s)) => s >= l,
        _ => false,
    };
    if fresh {
        return Ok(());
    }
    if which("npm").is_none() {
        bail!(
            "npm is needed for {} (install Node.js 20+: `apt-get install -y nodejs npm`)",
            dir.display()
        );
    }
    exec(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir),
    )
    .with_context(|| format!("`npm ci` failed in {}", dir.display()))
}

/// The Python that runs the repo's fixture and reference tools: `GEMMA_GEM_PYTHON` when set (a
/// Python with numpy, onnx and onnxruntime, e.g. on the lent GPU machine: bench/device.sh), else
/// the repo's [`ensure_python_venv`].
pub fn tools_python() -> Result<PathBuf> {
    match std::env::var_os("GEMMA_GEM_PYTHON") {
        Some(p) => Ok(PathBuf::from(p)),
        None => ensure_python_venv(),
    }
}

/// The Python virtual environment with ONNX, ONNX Runtime and the other reference tools
/// (`tools/requirements.txt`), at `.venv/` in the repository.
pub fn ensure_python_venv() -> Result<PathBuf> {
    let venv = root().join(".venv");
    let python = venv.join("bin/python");
    let req = root().join("tools/requirements.txt");
    let wanted = std::fs::read_to_string(&req).context("reading tools/requirements.txt")?;
    let stamp = venv.join(".requirements.txt");
    if python.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str())
    {
        return Ok(python);
    }
    if !python.is_file() {
        let py = which("python3").context("python3 is needed for the reference numerics (apt-get install -y python3 python3-venv)")?;
        exec(Command::new(py).args(["-m", "venv"]).arg(&venv))
            .context("creating .venv (apt-get install -y python3-venv)")?;
    }
    exec(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&req),
    )
    .context("pip install -r tools/requirements.txt failed")?;
    std::fs::write(&stamp, wanted).context("writing the venv stamp")?;
    Ok(python)
}

#[cfg(test)]
mod version_tests {
    use super::parse_wasm_opt_version;

    #[test]
    fn wasm_opt_versions() {
        assert_eq!(
            parse_wasm_opt_version("wasm-opt version 108 (version_108)\n"),
            Some(108)
        );
        assert_eq!(
            parse_wasm_opt_version("wasm-opt version 132 (version_132)"),
            Some(132)
        );
        assert_eq!(
            parse_wasm_opt_version("wasm-opt version 117-beta"),
            Some(117)
        );
        assert_eq!(parse_wasm_opt_version("something else"), None);
    }
}
