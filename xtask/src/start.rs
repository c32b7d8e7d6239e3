//! `cargo xtask start`: build (dev), serve, and open Chromium with the extension loaded.

use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args)]
pub struct StartArgs {
    /// Port for the demo site and the fixture models.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Do not launch a browser, only build and serve.
    #[arg(long)]
    pub no_browser: bool,
}

const BROWSERS: &[&str] = &[
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
];

fn find_browser() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GEMMA_GEM_BROWSER") {
        return Some(PathBuf::from(p));
    }
    BROWSERS.iter().find_map(|b| crate::util::which(b))
}

pub fn run(args: &StartArgs) -> Result<()> {
    let built = crate::build::run(&crate::build::BuildArgs { release: false })?;
    let server = crate::serve::start(
        args.port,
        crate::serve::default_mounts(built.demo_site.clone()),
    )?;
    let url = format!("http://127.0.0.1:{}/", args.port);
    eprintln!("xtask: demo site:   {url}");
    eprintln!("xtask: playground:  {url}playground.html");
    eprintln!(
        "xtask: embed it:    {url}embed.html (widget files: {})",
        built.widget.display()
    );
    eprintln!("xtask: models:      {url}models/");
    let ext = built.extension.display().to_string();
    let has_display = cfg!(not(target_os = "linux"))
        || std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some();
    match find_browser() {
        Some(browser) if !args.no_browser && has_display => {
            let profile = crate::util::target_dir().join("chromium-profile");
            eprintln!(
                "xtask: launching {} with the extension from {ext}",
                browser.display()
            );
            let status = Command::new(&browser)
                .arg(format!("--user-data-dir={}", profile.display()))
                .arg(format!("--load-extension={ext}"))
                .arg(format!("--disable-extensions-except={ext}"))
                .arg("--disable-features=DisableLoadExtensionCommandLineSwitch")
                .arg("--enable-unsafe-webgpu")
                .arg("--no-first-run")
                .arg(&url)
                .spawn();
            if let Err(e) = status {
                eprintln!("xtask: could not launch {}: {e}", browser.display());
                print_manual_steps(&ext, &url);
            }
        }
        Some(_) if !args.no_browser => {
            eprintln!(
                "xtask: Chromium is installed but there is no display (DISPLAY/WAYLAND_DISPLAY unset)."
            );
            print_manual_steps(&ext, &url);
        }
        _ => print_manual_steps(&ext, &url),
    }
    eprintln!("xtask: serving until Ctrl-C");
    server.join();
    Ok(())
}

fn print_manual_steps(ext: &str, url: &str) {
    eprintln!(
        "\nTo load the extension by hand:\n  1. Open chrome://extensions in Chrome or Chromium.\n  2. Turn on \"Developer mode\" (top right).\n  3. Click \"Load unpacked\" and choose {ext}\n  4. Open {url} (or any http/https page) and click the gem button at the bottom right.\n"
    );
}
