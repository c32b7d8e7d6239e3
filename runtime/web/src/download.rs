//! The platform-independent half of the model download: what the cache holds of each file
//! ([`FileMeta`]), HTTP `Content-Range` parsing, each file's hash from the repository's own
//! metadata ([`tree_api_url`], [`parse_tree`], [`next_page`], [`Expected`], [`FileHasher`]):
//! the SHA-256 of LFS files, the git blob SHA-1 of files kept in git; and download progress with
//! throughput, ETA and throttling ([`Tracker`]). The browser half (fetch, Cache Storage) is
//! [`crate::cache`].

use gg_messages::{DownloadProgress, FileProgress, ModelErrorKind};
use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Why a model could not be loaded, phrased for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LoadError {
    pub kind: ModelErrorKind,
    pub message: String,
}

impl LoadError {
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Bytes per cache part. A download is stored as numbered parts of at most this size (the last
/// part of an interrupted download is shorter), so resuming needs no copy of the whole file and
/// reading back never holds more than one part.
pub const PART_BYTES: usize = 8 << 20;

/// What the cache holds of one file (stored as JSON next to its parts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Size of the whole file, once a server has said (`Content-Length` / `Content-Range`).
    pub size: Option<u64>,
    /// Byte length of each stored part, in order.
    pub parts: Vec<u64>,
    /// Every byte is stored and the size was verified.
    pub complete: bool,
    /// The server's `ETag` (or `Last-Modified`) of the first response: a resumed download whose
    /// validator differs starts over instead of mixing two versions of the file.
    pub validator: Option<String>,
    /// The server answered 404 (optional files such as `generation_config.json`).
    #[serde(default)]
    pub missing: bool,
    /// The SHA-256 (lowercase hex) of the complete file, recorded once it was verified against
    /// the repository's hash of it ([`Expected`]: the LFS SHA-256, or the git blob SHA-1 of a
    /// file kept in git); `None` when the repository published none (then only its size was
    /// checked).
    #[serde(default)]
    pub sha256: Option<String>,
}

impl FileMeta {
    /// Bytes stored so far.
    pub fn stored(&self) -> u64 {
        self.parts.iter().sum()
    }

    /// Forgets everything stored (the parts themselves are overwritten or left unreachable).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// A parsed `Content-Range: bytes START-END/TOTAL` header (`TOTAL` may be `*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentRange {
    pub start: u64,
    /// Inclusive.
    pub end: u64,
    pub total: Option<u64>,
}

/// A `Content-Range` header that is not `bytes START-END/TOTAL` (or `/*`) with a range inside.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Content-Range header {0:?}")]
pub struct BadContentRange(pub String);

/// Parses a `Content-Range` header of a 206 answer.
pub fn parse_content_range(header: &str) -> Result<ContentRange, BadContentRange> {
    let bad = || BadContentRange(header.to_owned());
    let rest = header.trim().strip_prefix("bytes ").ok_or_else(bad)?;
    let (range, total) = rest.split_once('/').ok_or_else(bad)?;
    let (start, end) = range.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    let (start, end) = (num(start)?, num(end)?);
    let total = match total.trim() {
        "*" => None,
        t => Some(num(t)?),
    };
    if end < start || total.is_some_and(|t| end >= t) {
        return Err(bad());
    }
    Ok(ContentRange { start, end, total })
}

/// The Hugging Face API listing of a repository's files, for a model source in the Hugging Face
/// layout (`https://HOST/ORG/REPO/resolve/REVISION`, also on a mirror of the Hub):
/// `https://HOST/api/models/ORG/REPO/tree/REVISION?recursive=true`. Each LFS file's entry
/// carries `lfs.oid`, the SHA-256 of its content; a file kept in git has its git blob `oid`.
/// Long listings come in pages ([`next_page`]). `None` for other sources (no published hashes).
pub fn tree_api_url(base: &str) -> Option<String> {
    let base = base.trim().trim_end_matches('/');
    let (scheme, rest) = base.split_once("://")?;
    if scheme != "https" && scheme != "http" {
        return None;
    }
    let mut parts = rest.split('/');
    let host = parts.next().filter(|h| !h.is_empty())?;
    let segments: Vec<&str> = parts.collect();
    let [org, repo, "resolve", revision] = segments[..] else {
        return None;
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    if !plain(org) || !plain(repo) || !plain(revision) {
        return None;
    }
    Some(format!(
        "{scheme}://{host}/api/models/{org}/{repo}/tree/{revision}?recursive=true"
    ))
}

/// The hash a repository publishes for one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// `lfs.oid`: the SHA-256 (lowercase hex) of an LFS file's content.
    Sha256(String),
    /// `oid` of a file kept in git: the SHA-1 (lowercase hex) of `blob {size}\0` + its content.
    GitBlob { sha1: String, size: u64 },
}

impl Expected {
    /// The hash as the repository states it (lowercase hex).
    pub fn hex(&self) -> &str {
        match self {
            Expected::Sha256(h) | Expected::GitBlob { sha1: h, .. } => h,
        }
    }

    /// What the hash is, for messages.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Expected::Sha256(_) => "SHA-256",
            Expected::GitBlob { .. } => "git blob SHA-1",
        }
    }
}

/// The hash of each file of a [`tree_api_url`] listing page, by repository path: `lfs.oid` for
/// LFS files, the git blob `oid` (with its `size`) for files kept in git. Directories and
/// malformed entries have none. For an LFS file the git `oid` is that of its pointer, never
/// its content, so it is not used.
pub fn parse_tree(listing: &serde_json::Value) -> Result<HashMap<String, Expected>, NotAListing> {
    let entries = listing.as_array().ok_or(NotAListing)?;
    let hex = |v: Option<&serde_json::Value>, len: usize| {
        let h = v?.as_str()?.trim().to_ascii_lowercase();
        (h.len() == len && h.chars().all(|c| c.is_ascii_hexdigit())).then_some(h)
    };
    let mut out = HashMap::new();
    for entry in entries {
        let Some(path) = entry.get("path").and_then(|p| p.as_str()) else {
            continue;
        };
        if entry.get("type").and_then(|t| t.as_str()) != Some("file") {
            continue;
        }
        let expected = match entry.get("lfs") {
            Some(lfs) => hex(lfs.get("oid"), 64).map(Expected::Sha256),
            None => match (
                hex(entry.get("oid"), 40),
                entry.get("size").and_then(|s| s.as_u64()),
            ) {
                (Some(sha1), Some(size)) => Some(Expected::GitBlob { sha1, size }),
                _ => None,
            },
        };
        if let Some(expected) = expected {
            out.insert(path.trim_start_matches('/').to_owned(), expected);
        }
    }
    Ok(out)
}

/// A repository's file listing that is not a JSON array (an error object, another API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the repository's file listing is not a JSON array")]
pub struct NotAListing;

/// The next page of a listing: the `rel="next"` target of the response's `Link` header (RFC
/// 8288, as the Hub paginates long trees), resolved against `current`'s origin when relative.
pub fn next_page(link_header: &str, current: &str) -> Option<String> {
    for link in link_header.split(',') {
        let (target, params) = link.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let next = params.split(';').any(|p| {
            let p = p.trim();
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("rel")
                    && v.trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if !next || target.is_empty() {
            continue;
        }
        if target.starts_with("https://") || target.starts_with("http://") {
            return Some(target.to_owned());
        }
        if target.starts_with('/') && !target.starts_with("//") {
            let (scheme, rest) = current.split_once("://")?;
            let host = rest.split('/').next()?;
            return Some(format!("{scheme}://{host}{target}"));
        }
    }
    None
}

/// A file's hashes over its bytes as they stream in (never the whole file at once): always its
/// SHA-256, and the git blob SHA-1 when that is what the repository publishes.
#[derive(Clone)]
pub struct FileHasher {
    sha256: Sha256,
    git: Option<Sha1>,
}

impl FileHasher {
    /// A hasher for a file the repository describes as `expected`.
    pub fn new(expected: &Expected) -> Self {
        let git = match expected {
            Expected::GitBlob { size, .. } => {
                let mut h = Sha1::new();
                h.update(format!("blob {size}\0").as_bytes());
                Some(h)
            }
            Expected::Sha256(_) => None,
        };
        Self {
            sha256: Sha256::new(),
            git,
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        if let Some(git) = &mut self.git {
            git.update(bytes);
        }
    }

    /// Checks the bytes against `expected`: `Ok(SHA-256)` when they match, `Err(the hash
    /// they have, in `expected`'s kind)` when not (all lowercase hex).
    pub fn verify(self, expected: &Expected) -> Result<String, Mismatch> {
        let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let sha256 = hex(&self.sha256.finalize());
        let actual = match (expected, self.git) {
            (Expected::GitBlob { .. }, Some(git)) => hex(&git.finalize()),
            _ => sha256.clone(),
        };
        if actual == expected.hex() {
            Ok(sha256)
        } else {
            Err(Mismatch { actual })
        }
    }
}

/// Bytes whose hash is not the expected one: `actual` is the hash they have, in the expected
/// hash's kind (lowercase hex).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the bytes hash to {actual}")]
pub struct Mismatch {
    pub actual: String,
}

/// The error for a file whose content does not hash to what the repository says.
pub fn hash_mismatch(url: &str, expected: &Expected, actual: &str) -> LoadError {
    LoadError::new(
        ModelErrorKind::LoadFailed,
        format!(
            "{url} is damaged or was changed on the way: its {} is {actual}, but the repository says {}. The file was deleted from the cache; send the message again to download it again (if this repeats, the server or mirror serves a wrong file).",
            expected.algorithm(),
            expected.hex()
        ),
    )
}

/// Human-readable byte count (`1.5 GB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Minimum time between two progress reports.
pub const REPORT_INTERVAL_MS: f64 = 250.0;

#[derive(Clone, Debug)]
struct FileState {
    path: String,
    loaded: u64,
    total: Option<u64>,
}

/// Download progress of a set of files: bytes, totals, throughput (bytes fetched in this session
/// over the time spent fetching them), ETA, and a throttle for reports (at most one per
/// [`REPORT_INTERVAL_MS`]).
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    files: Vec<FileState>,
    /// When the first byte of this session was received.
    started_ms: Option<f64>,
    /// Bytes received in this session (cached bytes excluded).
    fetched: u64,
    last_report_ms: Option<f64>,
}

impl Tracker {
    /// Registers a file with what the cache holds and its size, if known.
    pub fn add_file(&mut self, path: &str, loaded: u64, total: Option<u64>) {
        self.files.push(FileState {
            path: path.to_owned(),
            loaded,
            total,
        });
    }

    fn file(&mut self, path: &str) -> Option<&mut FileState> {
        self.files.iter_mut().find(|f| f.path == path)
    }

    /// The server said how large a file is.
    pub fn set_total(&mut self, path: &str, total: u64) {
        if let Some(f) = self.file(path) {
            f.total = Some(total);
        }
    }

    /// The cache was found unusable for a file: it starts again from 0.
    pub fn restart(&mut self, path: &str) {
        if let Some(f) = self.file(path) {
            f.loaded = 0;
        }
    }

    /// `n` new bytes of `path` arrived at `now_ms`.
    pub fn received(&mut self, path: &str, n: u64, now_ms: f64) {
        if self.started_ms.is_none() {
            self.started_ms = Some(now_ms);
        }
        self.fetched += n;
        if let Some(f) = self.file(path) {
            f.loaded += n;
        }
    }

    /// Whether a report is due at `now_ms` (and if so, counts it as sent).
    pub fn report_due(&mut self, now_ms: f64) -> bool {
        let due = self
            .last_report_ms
            .is_none_or(|last| now_ms - last >= REPORT_INTERVAL_MS);
        if due {
            self.last_report_ms = Some(now_ms);
        }
        due
    }

    /// Throughput so far, once at least half a second of data has been measured.
    pub fn bytes_per_second(&self, now_ms: f64) -> Option<f64> {
        let elapsed = (now_ms - self.started_ms?) / 1000.0;
        (elapsed >= 0.5 && self.fetched > 0).then(|| self.fetched as f64 / elapsed)
    }

    /// Bytes of every file that are in the cache.
    pub fn loaded(&self) -> u64 {
        self.files.iter().map(|f| f.loaded).sum()
    }

    /// Bytes of every file whose size is known, plus what is loaded of the others.
    pub fn total(&self) -> u64 {
        self.files
            .iter()
            .map(|f| f.total.unwrap_or(f.loaded).max(f.loaded))
            .sum()
    }

    /// The progress report at `now_ms`.
    pub fn snapshot(&self, now_ms: f64) -> DownloadProgress {
        let bps = self.bytes_per_second(now_ms);
        let eta = |left: u64| bps.map(|b| left as f64 / b);
        let (loaded, total) = (self.loaded(), self.total());
        DownloadProgress {
            loaded_bytes: loaded,
            total_bytes: total,
            percent: percent(loaded, total),
            bytes_per_second: bps,
            eta_seconds: eta(total.saturating_sub(loaded)),
            files: self
                .files
                .iter()
                .map(|f| FileProgress {
                    path: f.path.clone(),
                    loaded_bytes: f.loaded,
                    total_bytes: f.total,
                    percent: f.total.map(|t| percent(f.loaded, t)),
                    eta_seconds: match f.total {
                        Some(t) if f.loaded >= t => Some(0.0),
                        Some(t) => eta(t - f.loaded),
                        None => None,
                    },
                })
                .collect(),
        }
    }
}

fn percent(loaded: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        (loaded as f64 * 100.0 / total as f64).clamp(0.0, 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(
            parse_content_range("bytes 346220-692439/692440"),
            Ok(ContentRange {
                start: 346_220,
                end: 692_439,
                total: Some(692_440)
            })
        );
        assert_eq!(
            parse_content_range("bytes 0-9/*").map(|r| r.total),
            Ok(None)
        );
        for bad in [
            "",
            "bytes */100",
            "items 0-9/10",
            "bytes 5-4/10",
            "bytes 0-10/10",
            "bytes a-b/c",
            "bytes 0-9",
        ] {
            assert!(parse_content_range(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn meta_counts_parts_and_round_trips() {
        let mut m = FileMeta {
            size: Some(20),
            parts: vec![8, 8, 3],
            validator: Some("\"abc\"".into()),
            ..FileMeta::default()
        };
        assert_eq!(m.stored(), 19);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<FileMeta>(&json).unwrap(), m);
        m.reset();
        assert_eq!(m, FileMeta::default());
    }

    #[test]
    fn progress_overall_per_file_eta_and_throttle() {
        let mut t = Tracker::default();
        t.add_file("config.json", 100, Some(100));
        t.add_file("onnx/a.onnx_data", 0, Some(1000));
        t.add_file("onnx/b.onnx_data", 0, None);
        assert!(t.report_due(0.0));
        assert!(!t.report_due(100.0), "throttled below 250 ms");
        t.received("onnx/a.onnx_data", 200, 1000.0);
        t.received("onnx/a.onnx_data", 300, 2000.0);
        assert!(t.report_due(2000.0));
        let p = t.snapshot(2000.0);
        assert_eq!(p.loaded_bytes, 600);
        assert_eq!(p.total_bytes, 1100);
        assert!((p.percent - 600.0 * 100.0 / 1100.0).abs() < 1e-9);
        // 500 bytes in 1 s.
        assert_eq!(p.bytes_per_second, Some(500.0));
        assert_eq!(p.eta_seconds, Some(1.0));
        assert_eq!(p.files[0].eta_seconds, Some(0.0));
        assert_eq!(p.files[1].percent, Some(50.0));
        assert_eq!(p.files[1].eta_seconds, Some(1.0));
        assert_eq!(p.files[2].total_bytes, None);
        // The server tells the size of the third file: the total grows.
        t.set_total("onnx/b.onnx_data", 400);
        assert_eq!(t.snapshot(2000.0).total_bytes, 1500);
        t.restart("onnx/a.onnx_data");
        assert_eq!(t.loaded(), 100);
    }

    #[test]
    fn no_rate_before_half_a_second() {
        let mut t = Tracker::default();
        t.add_file("x", 0, Some(10));
        t.received("x", 5, 1000.0);
        assert_eq!(t.bytes_per_second(1200.0), None);
        assert_eq!(t.snapshot(1200.0).eta_seconds, None);
    }

    #[test]
    fn hugging_face_sources_have_a_file_listing() {
        assert_eq!(
            tree_api_url(gg_messages::DEFAULT_MODEL_SOURCE).as_deref(),
            Some(
                "https://huggingface.co/api/models/onnx-community/gemma-4-E2B-it-ONNX/tree/9f4bef82ea6e296bc69f8a2f5939f73af81b07a6?recursive=true"
            )
        );
        assert_eq!(
            tree_api_url("http://127.0.0.1:8080/test-org/tiny/resolve/main/").as_deref(),
            Some("http://127.0.0.1:8080/api/models/test-org/tiny/tree/main?recursive=true")
        );
        for other in [
            "http://127.0.0.1:8080/models/gemma4-tiny-agent",
            "https://mirror.example/a/b/c/d",
            "https://huggingface.co/org/repo/resolve",
            "https://huggingface.co/org/re po/resolve/main",
            "https://huggingface.co/org/repo/resolve/main/extra",
            "script:http://127.0.0.1:1/turns.json",
        ] {
            assert_eq!(tree_api_url(other), None, "{other}");
        }
    }

    #[test]
    fn listing_gives_the_lfs_sha256_or_git_blob_sha1_of_each_file() {
        let sha = "A".repeat(64);
        let listing = serde_json::json!([
            {"type": "file", "path": "config.json", "size": 10, "oid": "0123456789ABCDEF0123456789abcdef01234567"},
            {"type": "directory", "path": "onnx", "size": 0, "oid": "0000000000000000000000000000000000000000"},
            {"type": "file", "path": "onnx/model_q4.onnx_data", "size": 5, "oid": "1111111111111111111111111111111111111111",
             "lfs": {"oid": sha, "size": 5, "pointerSize": 134}},
            {"type": "file", "path": "onnx/bad.onnx", "size": 5, "oid": "2222222222222222222222222222222222222222", "lfs": {"oid": "not-hex"}},
            {"type": "file", "path": "short.txt", "size": 3, "oid": "abc"},
            {"type": "file", "path": "nosize.txt", "oid": "3333333333333333333333333333333333333333"},
        ]);
        let hashes = parse_tree(&listing).unwrap();
        assert_eq!(hashes.len(), 2, "{hashes:?}");
        assert_eq!(
            hashes["onnx/model_q4.onnx_data"],
            Expected::Sha256("a".repeat(64))
        );
        // An LFS file with a malformed lfs.oid does not fall back to its pointer's git oid.
        assert!(!hashes.contains_key("onnx/bad.onnx"));
        assert_eq!(
            hashes["config.json"],
            Expected::GitBlob {
                sha1: "0123456789abcdef0123456789abcdef01234567".into(),
                size: 10
            }
        );
        assert!(parse_tree(&serde_json::json!({"error": "Repository not found"})).is_err());
    }

    #[test]
    fn listing_pages_follow_the_link_header() {
        let here = "https://hf.co/api/models/o/r/tree/main?recursive=true";
        assert_eq!(
            next_page(
                r#"<https://hf.co/api/models/o/r/tree/main?recursive=true&cursor=abc>; rel="next""#,
                here
            )
            .as_deref(),
            Some("https://hf.co/api/models/o/r/tree/main?recursive=true&cursor=abc")
        );
        assert_eq!(
            next_page(
                r#"</api/x?cursor=1>; rel="prev", </api/x?cursor=2>; rel=next"#,
                here
            )
            .as_deref(),
            Some("https://hf.co/api/x?cursor=2")
        );
        assert_eq!(next_page(r#"</api/x?cursor=1>; rel="prev""#, here), None);
        assert_eq!(next_page("", here), None);
        assert_eq!(next_page("garbage", here), None);
        assert_eq!(next_page(r#"<//evil.example/x>; rel="next""#, here), None);
    }

    #[test]
    fn hashing_in_chunks_is_the_hash_of_the_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sha = |d: &[u8]| {
            let mut h = FileHasher::new(&Expected::Sha256(String::new()));
            h.update(d);
            h.verify(&Expected::Sha256(String::new()))
                .unwrap_err()
                .actual
        };
        let whole = sha(&data);
        let mut chunked = FileHasher::new(&Expected::Sha256(whole.clone()));
        for chunk in data.chunks(4093) {
            chunked.update(chunk);
        }
        assert_eq!(chunked.verify(&Expected::Sha256(whole.clone())), Ok(whole));
        // Known answers: SHA-256("abc"), and git's blob id of "hello\n" (`git hash-object`).
        assert_eq!(
            sha(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let blob = Expected::GitBlob {
            sha1: "ce013625030ba8dba906f756967f9e9ca394464a".into(),
            size: 6,
        };
        let mut git = FileHasher::new(&blob);
        git.update(b"hel");
        git.update(b"lo\n");
        assert_eq!(git.verify(&blob), Ok(sha(b"hello\n")));
        let mut changed = FileHasher::new(&blob);
        changed.update(b"hellO\n");
        let actual = changed.verify(&blob).unwrap_err().actual;
        assert_eq!(actual.len(), 40);
        let e = hash_mismatch("http://x/f", &blob, &actual);
        assert!(
            e.message.contains("deleted from the cache"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains(&format!(
                "git blob SHA-1 is {actual}, but the repository says ce01"
            )),
            "{}",
            e.message
        );
        let e = hash_mismatch("http://x/f", &Expected::Sha256("aa".into()), "bb");
        assert!(
            e.message
                .contains("SHA-256 is bb, but the repository says aa"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bytes_are_readable() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_520_000_000), "1.5 GB");
    }
}
