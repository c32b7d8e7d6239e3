//! A small static HTTP/1.1 server for the demo site and the fixture models (Hugging Face
//! layout), with `Range` support so model downloads can resume.
//!
//! One thread per connection, persistent connections (keep-alive) as browsers use them, requests
//! parsed with `httparse`. It replaced tiny_http 0.12, whose connection pool could leave a new
//! connection queued behind the browser's open keep-alive connections until one of them closed
//! (Chromium closes idle ones after 5 minutes): the bench's transformers.js page, which fetches
//! seven files at once, waited ~300 s for two of them, and `curl --parallel` reproduced it in
//! one run of ten (`parallel_keep_alive` below is that case).

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
        server.port
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
    /// The port it listens on (the one asked for, or the system's choice for 0).
    pub port: u16,
    accept: std::thread::JoinHandle<()>,
}

impl Running {
    pub fn join(self) {
        let _ = self.accept.join();
    }
}

/// Starts serving on 127.0.0.1:`port`, a thread per connection.
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

/// A connection idle this long (no new request) is closed.
const IDLE: Duration = Duration::from_secs(60);
/// The longest request head (request line and headers) read.
const MAX_HEAD: usize = 64 * 1024;

/// [`start`], with [`ISOLATION_HEADERS`] on every response when `isolated`.
pub fn start_with(port: u16, mounts: Vec<Mount>, isolated: bool) -> Result<Running> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .with_context(|| format!("cannot listen on 127.0.0.1:{port} (in use? pass --port)"))?;
    let port = listener.local_addr()?.port();
    let mounts = Arc::new(mounts);
    let accept = std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mounts = Arc::clone(&mounts);
            std::thread::spawn(move || {
                if let Err(e) = connection(stream, &mounts, isolated)
                    && !matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::ConnectionAborted
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::UnexpectedEof
                    )
                {
                    eprintln!("xtask: serve: {e}");
                }
            });
        }
    });
    Ok(Running { port, accept })
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

/// What one request asks for.
struct Asked {
    method: String,
    path: String,
    range: Option<String>,
    keep_alive: bool,
    /// The request body's length (Content-Length; bodies with a Transfer-Encoding are refused).
    body: u64,
}

/// Serves the requests of one connection until the client closes it, asks to, stays idle for
/// [`IDLE`], or sends something that is not HTTP/1.x.
fn connection(stream: TcpStream, mounts: &[Mount], isolated: bool) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IDLE))?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut head = Vec::new();
        loop {
            let n = (&mut reader)
                .take((MAX_HEAD + 1 - head.len()) as u64)
                .read_until(b'\n', &mut head)?;
            if n == 0 {
                if head.len() > MAX_HEAD {
                    return simple(&mut out, 431, "Request Header Fields Too Large", isolated);
                }
                return Ok(()); // closed (between requests, or mid-head)
            }
            if head == b"\r\n" || head == b"\n" {
                head.clear(); // a blank line before a request is allowed
                continue;
            }
            if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
                break;
            }
        }
        let asked = match parse_head(&head) {
            Ok(a) => a,
            Err(why) => return simple(&mut out, 400, why, isolated),
        };
        // A request body (none is expected) is read and dropped.
        if asked.body > 0 {
            std::io::copy(&mut (&mut reader).take(asked.body), &mut std::io::sink())?;
        }
        respond(&mut out, &asked, mounts, isolated)?;
        if !asked.keep_alive {
            return Ok(());
        }
    }
}

fn parse_head(head: &[u8]) -> Result<Asked, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 96];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete request head"),
        Err(_) => return Err("malformed request"),
    }
    let value = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::to_owned)
    };
    let connection = value("Connection").unwrap_or_default().to_ascii_lowercase();
    let keep_alive = match req.version {
        Some(1) => !connection.contains("close"),
        _ => connection.contains("keep-alive"),
    };
    if value("Transfer-Encoding").is_some() {
        return Err("request bodies with a Transfer-Encoding are not accepted");
    }
    let body = match value("Content-Length") {
        None => 0,
        Some(v) => v.trim().parse().map_err(|_| "bad Content-Length")?,
    };
    Ok(Asked {
        method: req.method.unwrap_or("").to_owned(),
        path: req.path.unwrap_or("/").to_owned(),
        range: value("Range"),
        keep_alive,
        body,
    })
}

/// Writes a status line and headers (`extra` after the common ones).
fn write_head(
    out: &mut TcpStream,
    status: u16,
    reason: &str,
    extra: &[(&str, String)],
    length: u64,
    keep_alive: bool,
    isolated: bool,
) -> std::io::Result<()> {
    let mut h = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    if isolated {
        for (k, v) in ISOLATION_HEADERS {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    h.push_str(&format!(
        "Content-Length: {length}\r\nConnection: {}\r\n\r\n",
        if keep_alive { "keep-alive" } else { "close" }
    ));
    out.write_all(h.as_bytes())
}

/// A short text response that closes the connection (malformed requests). The rest of what the
/// client sent is read and dropped before the socket closes: closing with unread input would
/// reset the connection, and the client could lose the response.
fn simple(out: &mut TcpStream, status: u16, text: &str, isolated: bool) -> std::io::Result<()> {
    let extra = [("Content-Type", "text/plain; charset=utf-8".to_string())];
    write_head(
        out,
        status,
        text,
        &extra,
        text.len() as u64,
        false,
        isolated,
    )?;
    out.write_all(text.as_bytes())?;
    out.flush()?;
    out.shutdown(std::net::Shutdown::Write)?;
    out.set_read_timeout(Some(Duration::from_secs(2)))?;
    let _ = std::io::copy(&mut (&*out).take(1 << 20), &mut std::io::sink());
    Ok(())
}

fn respond(
    out: &mut TcpStream,
    asked: &Asked,
    mounts: &[Mount],
    isolated: bool,
) -> std::io::Result<()> {
    let keep = asked.keep_alive;
    let head_only = asked.method == "HEAD";
    if asked.method != "GET" && !head_only {
        let text = "only GET and HEAD are served";
        let extra = [
            ("Allow", "GET, HEAD".to_string()),
            ("Content-Type", "text/plain; charset=utf-8".to_string()),
        ];
        write_head(
            out,
            405,
            "Method Not Allowed",
            &extra,
            text.len() as u64,
            keep,
            isolated,
        )?;
        return out.write_all(text.as_bytes());
    }
    let opened = resolve(mounts, &asked.path).and_then(|p| {
        let file = File::open(&p).ok()?;
        let len = file.metadata().ok()?.len();
        Some((p, file, len))
    });
    let Some((file_path, mut file, len)) = opened else {
        let text = "not found";
        let extra = [("Content-Type", "text/plain; charset=utf-8".to_string())];
        write_head(
            out,
            404,
            "Not Found",
            &extra,
            text.len() as u64,
            keep,
            isolated,
        )?;
        return if head_only {
            Ok(())
        } else {
            out.write_all(text.as_bytes())
        };
    };
    let mut extra = vec![
        ("Content-Type", content_type(&file_path).to_string()),
        ("Accept-Ranges", "bytes".to_string()),
        ("Cache-Control", "no-cache".to_string()),
    ];
    let (status, reason, start, n) = match asked.range.as_deref() {
        None => (200, "OK", 0, len),
        Some(r) => match parse_range(r, len) {
            Some((start, end)) => {
                extra.push(("Content-Range", format!("bytes {start}-{end}/{len}")));
                (206, "Partial Content", start, end - start + 1)
            }
            None => {
                extra.push(("Content-Range", format!("bytes */{len}")));
                write_head(out, 416, "Range Not Satisfiable", &extra, 0, keep, isolated)?;
                return Ok(());
            }
        },
    };
    write_head(out, status, reason, &extra, n, keep, isolated)?;
    if head_only {
        return Ok(());
    }
    file.seek(SeekFrom::Start(start))?;
    let sent = std::io::copy(&mut file.take(n), out)?;
    if sent != n {
        // The file shrank while being served: the client must not take the short body as whole.
        return Err(std::io::Error::other(format!(
            "{} shrank while it was being served",
            file_path.display()
        )));
    }
    Ok(())
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

    /// Sends `request` on `s` and reads one response: status, headers (lower-case names), body.
    fn exchange(s: &mut TcpStream, request: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        s.write_all(request.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte)
                .expect("response head (a hang fails here)");
            head.push(byte[0]);
        }
        let text = String::from_utf8(head).unwrap();
        let mut lines = text.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        let mut body = vec![0; if request.starts_with("HEAD") { 0 } else { len }];
        s.read_exact(&mut body)
            .expect("response body (a hang fails here)");
        (status, headers, body)
    }

    fn fixture(files: &[(&str, usize)]) -> (PathBuf, Running) {
        let dir = std::env::temp_dir().join(format!(
            "gg-serve-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, len) in files {
            let bytes: Vec<u8> = (0..*len).map(|i| (i * 31 % 251) as u8).collect();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let mounts = vec![Mount {
            prefix: "/".into(),
            dir: dir.clone(),
        }];
        (dir, start_with(0, mounts, true).unwrap())
    }

    fn connect(port: u16) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Many keep-alive connections at once, each with several requests, as a browser loading a
    /// model folder makes them: every response comes (tiny_http 0.12 queued some connections
    /// behind open ones; the read timeout turns such a wait into a failure).
    #[test]
    fn parallel_keep_alive() {
        let files = [
            ("a.json", 300),
            ("b.onnx", 200_000),
            ("c.onnx_data", 1_500_000),
            ("d.json", 10),
        ];
        let (dir, server) = fixture(&files);
        let port = server.port;
        for _round in 0..5 {
            let clients: Vec<_> = (0..12)
                .map(|c| {
                    std::thread::spawn(move || {
                        let mut s = connect(port);
                        for i in 0..files.len() {
                            let (name, len) = files[(c + i) % files.len()];
                            let req = format!(
                                "GET /{name} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
                            );
                            let (status, headers, body) = exchange(&mut s, &req);
                            assert_eq!((status, body.len()), (200, len), "{name}");
                            assert!(headers.contains(&("connection".into(), "keep-alive".into())));
                        }
                    })
                })
                .collect();
            for c in clients {
                c.join().unwrap();
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn requests_and_answers() {
        let (dir, server) = fixture(&[("m.bin", 1000), ("page.html", 5)]);
        let mut s = connect(server.port);
        // Range, on the same connection as the requests after it.
        let (st, h, body) = exchange(&mut s, "GET /m.bin HTTP/1.1\r\nRange: bytes=10-19\r\n\r\n");
        assert_eq!(st, 206);
        assert!(
            h.contains(&("content-range".into(), "bytes 10-19/1000".into())),
            "{h:?}"
        );
        assert_eq!(
            body,
            (10..20).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>()
        );
        let (st, h, _) = exchange(&mut s, "GET /m.bin HTTP/1.1\r\nRange: bytes=2000-\r\n\r\n");
        assert_eq!(st, 416);
        assert!(
            h.contains(&("content-range".into(), "bytes */1000".into())),
            "{h:?}"
        );
        let (st, h, body) = exchange(&mut s, "HEAD /page.html HTTP/1.1\r\n\r\n");
        assert_eq!((st, body.len()), (200, 0));
        assert!(h.contains(&("content-length".into(), "5".into())));
        assert!(h.contains(&("content-type".into(), "text/html; charset=utf-8".into())));
        assert!(h.contains(&("cross-origin-embedder-policy".into(), "require-corp".into())));
        let (st, _, _) = exchange(&mut s, "GET /missing HTTP/1.1\r\n\r\n");
        assert_eq!(st, 404);
        let (st, _, _) = exchange(&mut s, "GET /../etc/passwd HTTP/1.1\r\n\r\n");
        assert_eq!(st, 404);
        // A body (none expected) is skipped, and the next request on the connection still works.
        let (st, h, _) = exchange(
            &mut s,
            "POST /m.bin HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        );
        assert_eq!(st, 405);
        assert!(h.contains(&("allow".into(), "GET, HEAD".into())));
        let (st, _, body) = exchange(
            &mut s,
            "GET /page.html HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert_eq!((st, body.len()), (200, 5));
        // Closed as asked.
        assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
        // Not HTTP: a 400, then the connection closes.
        let mut s = connect(server.port);
        let (st, h, _) = exchange(&mut s, "\x01\x02 nonsense\r\n\r\n");
        assert_eq!(st, 400);
        assert!(h.contains(&("connection".into(), "close".into())));
        assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
        // A chunked body is refused (400) and the connection closed.
        let mut s = connect(server.port);
        let (st, _, _) = exchange(
            &mut s,
            "POST /m.bin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        );
        assert_eq!(st, 400);
        assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
        // HTTP/1.0 without keep-alive: one request per connection.
        let mut s = connect(server.port);
        let (st, h, _) = exchange(&mut s, "GET /page.html HTTP/1.0\r\n\r\n");
        assert_eq!(st, 200);
        assert!(h.contains(&("connection".into(), "close".into())));
        std::fs::remove_dir_all(dir).unwrap();
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
