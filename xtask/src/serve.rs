//! A small static HTTP server for the demo site and the fixture models (Hugging Face layout),
//! with `Range` support so model downloads can resume.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tiny_http::{Header, Request, Response, Server, StatusCode};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Port to listen on (127.0.0.1 only).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Directory served at `/` (default: dist/demo-site).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Send COOP/COEP/CORP headers, so that pages are cross-origin isolated (SharedArrayBuffer:
    /// onnxruntime-web's threads). The bench server always sends them.
    #[arg(long)]
    pub cross_origin_isolated: bool,
}

/// A URL prefix and the directory it maps to.
#[derive(Clone)]
pub struct Mount {
    pub prefix: String,
    pub dir: PathBuf,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| crate::util::root().join("dist/demo-site"));
    let server = start_with(args.port, default_mounts(dir), args.cross_origin_isolated)?;
    eprintln!(
        "xtask: serving on http://127.0.0.1:{} (Ctrl-C to stop)",
        args.port
    );
    server.join();
    Ok(())
}

/// `/` → the site, `/models/` → the committed fixture models in the Hugging Face layout.
pub fn default_mounts(site: PathBuf) -> Vec<Mount> {
    vec![
        Mount {
            prefix: "/models/".into(),
            dir: crate::util::root().join("tests/fixtures/models"),
        },
        Mount {
            prefix: "/".into(),
            dir: site,
        },
    ]
}

pub struct Running {
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Starts serving on 127.0.0.1:`port` with a few worker threads.
pub fn start(port: u16, mounts: Vec<Mount>) -> Result<Running> {
    start_with(port, mounts, false)
}

/// The headers that make a page cross-origin isolated (`crossOriginIsolated`: SharedArrayBuffer,
/// so wasm threads), on every response of a server started with `isolated`.
pub const ISOLATION_HEADERS: [(&str, &str); 3] = [
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Embedder-Policy", "require-corp"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
];

/// [`start`], with [`ISOLATION_HEADERS`] on every response when `isolated`.
pub fn start_with(port: u16, mounts: Vec<Mount>, isolated: bool) -> Result<Running> {
    let server = Arc::new(
        Server::http(("127.0.0.1", port))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot listen on 127.0.0.1:{port} (in use? pass --port)"))?,
    );
    let mounts = Arc::new(mounts);
    let threads = (0..4)
        .map(|_| {
            let server = Arc::clone(&server);
            let mounts = Arc::clone(&mounts);
            std::thread::spawn(move || {
                for request in server.incoming_requests() {
                    handle(request, &mounts, isolated);
                }
            })
        })
        .collect();
    Ok(Running { threads })
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "wasm" => "application/wasm",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "jinja" | "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Maps a URL path to a file under one of the mounts, refusing `..` and absolute components.
fn resolve(mounts: &[Mount], url_path: &str) -> Option<PathBuf> {
    let path = url_path.split(['?', '#']).next().unwrap_or("");
    let mount = mounts.iter().find(|m| path.starts_with(&m.prefix))?;
    let rest = &path[mount.prefix.len()..];
    let rel = Path::new(rest);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let mut file = mount.dir.join(rel);
    if file.is_dir() {
        file = file.join("index.html");
    }
    file.is_file().then_some(file)
}

/// Parses `bytes=START-END` / `bytes=START-` / `bytes=-SUFFIX` against a file of `len` bytes.
pub fn parse_range(value: &str, len: u64) -> Option<(u64, u64)> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", suffix) => {
            let n: u64 = suffix.parse().ok()?;
            (len.saturating_sub(n), len.checked_sub(1)?)
        }
        (s, "") => (s.parse().ok()?, len.checked_sub(1)?),
        (s, e) => (
            s.parse().ok()?,
            e.parse::<u64>().ok()?.min(len.checked_sub(1)?),
        ),
    };
    (start <= end && start < len).then_some((start, end))
}

fn handle(request: Request, mounts: &[Mount], isolated: bool) {
    let Some(file_path) = resolve(mounts, request.url()) else {
        let _ = request.respond(Response::from_string("not found").with_status_code(404));
        return;
    };
    let result = (|| -> std::io::Result<()> {
        let mut file = File::open(&file_path)?;
        let len = file.metadata()?.len();
        let range = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Range"))
            .map(|h| h.value.as_str().to_owned());
        let ctype = content_type(&file_path);
        let mut headers: Vec<Header> = [
            header("Content-Type", ctype),
            header("Accept-Ranges", "bytes"),
            header("Cache-Control", "no-cache"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if isolated {
            headers.extend(ISOLATION_HEADERS.iter().filter_map(|(k, v)| header(k, v)));
        }
        match range {
            Some(r) => match parse_range(&r, len) {
                Some((start, end)) => {
                    file.seek(SeekFrom::Start(start))?;
                    let n = end - start + 1;
                    headers.extend(header(
                        "Content-Range",
                        &format!("bytes {start}-{end}/{len}"),
                    ));
                    let body = file.take(n);
                    let response =
                        Response::new(StatusCode(206), headers, body, Some(n as usize), None);
                    request.respond(response)
                }
                None => {
                    headers.extend(header("Content-Range", &format!("bytes */{len}")));
                    request.respond(Response::new(
                        StatusCode(416),
                        headers,
                        std::io::empty(),
                        Some(0),
                        None,
                    ))
                }
            },
            None => request.respond(Response::new(
                StatusCode(200),
                headers,
                file,
                Some(len as usize),
                None,
            )),
        }
    })();
    if let Err(e) = result {
        eprintln!("xtask: serving {}: {e}", file_path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 99)));
        assert_eq!(parse_range("bytes=50-500", 100), Some((50, 99)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=5-1", 100), None);
        assert_eq!(parse_range("bytes=0-1,3-4", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
        assert_eq!(parse_range("bytes=0-", 0), None);
    }

    #[test]
    fn refuses_escapes() {
        let dir = std::env::temp_dir();
        let mounts = vec![Mount {
            prefix: "/".into(),
            dir,
        }];
        assert!(resolve(&mounts, "/../etc/passwd").is_none());
        assert!(resolve(&mounts, "//etc/passwd").is_none());
    }
}
