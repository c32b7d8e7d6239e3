//! Model files through the browser's `fetch` into Cache Storage, and back out as byte streams.
//!
//! Each file of a repository is stored as numbered parts (at most [`PART_BYTES`] each) plus a
//! small JSON entry ([`FileMeta`]) that lists the part lengths, the file's size and the server's
//! validator. A download reads the response body as a stream and writes a part whenever
//! [`PART_BYTES`] have arrived — and whatever arrived before an interruption — so an interrupted
//! download resumes with `Range: bytes=N-` from the stored bytes. Files are only served once
//! complete and their size verified; serving reads one part at a time, so no multi-gigabyte file
//! is ever held in memory.
//!
//! When the repository publishes a file's hash (the Hugging Face listing, every page of it: the
//! LFS oid, a SHA-256, of LFS files and the git blob SHA-1 of files kept in git, see
//! [`crate::download::tree_api_url`] and [`crate::download::Expected`]), the file is hashed as
//! it streams in (a resumed download
//! first hashes its stored parts, one at a time) and checked when it completes: a mismatch
//! deletes the file from the cache and fails with a clear message. Files without a published
//! hash are checked by size only, and [`ModelCache::unverified`] names them.

use crate::download::{
    Expected, FileHasher, FileMeta, LoadError, PART_BYTES, hash_mismatch, human_bytes, next_page,
    parse_content_range, parse_tree, tree_api_url,
};
use crate::log;
use crate::scope::Scope;
use futures::future::LocalBoxFuture;
use gg_messages::ModelErrorKind;
use gg_runtime::source::ByteStream;
use js_sys::{Promise, Reflect, Uint8Array};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Cache, Headers, ReadableStreamDefaultReader, ReadableStreamReadResult, Request, RequestCache,
    RequestInit, Response, StorageEstimate,
};

/// The Cache Storage cache holding model files.
pub const CACHE_NAME: &str = "gemma-gem-models-v1";
/// Keys of cache entries are synthetic URLs under this prefix (never fetched).
const KEY_PREFIX: &str = "https://gemma-gem.cache/v1/";

/// What happened during a download, for progress reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownloadEvent {
    /// The server said how large the file is.
    Total(u64),
    /// The stored bytes could not be used (the file changed on the server, or the server ignored
    /// the range): the file starts again from 0.
    Restart,
    /// New bytes arrived.
    Bytes(u64),
}

/// The message of a JS exception (`name: message`), or its debug form.
pub fn js_message(e: &JsValue) -> String {
    let get = |k: &str| {
        Reflect::get(e, &JsValue::from_str(k))
            .ok()
            .and_then(|v| v.as_string())
    };
    match (get("name"), get("message")) {
        (Some(n), Some(m)) if !m.is_empty() => format!("{n}: {m}"),
        (_, Some(m)) => m,
        _ => e.as_string().unwrap_or_else(|| format!("{e:?}")),
    }
}

fn is_quota_error(e: &JsValue) -> bool {
    Reflect::get(e, &JsValue::from_str("name"))
        .ok()
        .and_then(|v| v.as_string())
        .is_some_and(|n| n == "QuotaExceededError")
}

async fn wait(p: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(p).await
}

fn scope() -> Result<Scope, LoadError> {
    Scope::current().ok_or_else(|| {
        LoadError::new(
            ModelErrorKind::LoadFailed,
            "this context is neither a window nor a worker (fetch and Cache Storage are unavailable)",
        )
    })
}

/// Free space according to `navigator.storage.estimate()`: `(usage, quota)`.
pub async fn storage_estimate() -> Option<(u64, u64)> {
    let storage = scope().ok()?.storage();
    let est: StorageEstimate = wait(storage.estimate().ok()?).await.ok()?.unchecked_into();
    Some((est.get_usage()? as u64, est.get_quota()? as u64))
}

/// Asks the browser to keep the model's storage when space runs low
/// (`navigator.storage.persist()`); returns whether it agreed.
pub async fn request_persistence() -> bool {
    let Ok(s) = scope() else { return false };
    let Ok(p) = s.storage().persist() else {
        return false;
    };
    wait(p)
        .await
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// A quota error that says how much space is needed.
pub async fn out_of_space(needed: u64, what: &str) -> LoadError {
    let detail = match storage_estimate().await {
        Some((usage, quota)) => format!(
            "{} are in use of the {} this browser allows, and {} more are needed",
            human_bytes(usage),
            human_bytes(quota),
            human_bytes(needed)
        ),
        None => format!("{} more are needed", human_bytes(needed)),
    };
    LoadError::new(
        ModelErrorKind::OutOfSpace,
        format!(
            "Not enough storage for the model ({what}): {detail}. Free up disk space (or remove other sites' data in Chrome's settings) and send the message again."
        ),
    )
}

/// The model files of one repository (base URL) in Cache Storage.
pub struct ModelCache {
    base: String,
    cache: Cache,
    /// The repository's published hash of each file, once asked for (empty when it publishes
    /// none).
    hashes: RefCell<Option<Rc<HashMap<String, Expected>>>>,
    /// Files served complete without a published hash (checked by size only).
    unverified: RefCell<BTreeSet<String>>,
}

impl ModelCache {
    /// Opens the cache for the repository at `base` (`http(s)://...`, no trailing slash needed).
    pub async fn open(base: &str) -> Result<Rc<Self>, LoadError> {
        let storage = scope()?.caches().map_err(|e| {
            LoadError::new(
                ModelErrorKind::LoadFailed,
                format!("Cache Storage is unavailable: {}", js_message(&e)),
            )
        })?;
        let cache: Cache = wait(storage.open(CACHE_NAME))
            .await
            .map_err(|e| {
                LoadError::new(
                    ModelErrorKind::LoadFailed,
                    format!("could not open Cache Storage: {}", js_message(&e)),
                )
            })?
            .unchecked_into();
        Ok(Rc::new(Self {
            base: base.trim_end_matches('/').to_owned(),
            cache,
            hashes: RefCell::new(None),
            unverified: RefCell::new(BTreeSet::new()),
        }))
    }

    /// The hash the repository publishes for `path` (its listing is fetched once; a source
    /// without one, or a listing that cannot be had, gives none: the file is checked by size).
    pub async fn expected_hash(&self, path: &str) -> Option<Expected> {
        let known = self.hashes.borrow().clone();
        let hashes = match known {
            Some(h) => h,
            None => {
                let h = Rc::new(self.fetch_hashes().await);
                *self.hashes.borrow_mut() = Some(h.clone());
                h
            }
        };
        hashes.get(path.trim_start_matches('/')).cloned()
    }

    /// The repository's listing, every page of it (the Hub pages long trees with `Link`).
    async fn fetch_hashes(&self) -> HashMap<String, Expected> {
        /// More pages than any model repository has (the Hub gives 1000 entries a page).
        const MAX_PAGES: usize = 100;
        let Some(first) = tree_api_url(&self.base) else {
            return HashMap::new();
        };
        let result: Result<HashMap<String, Expected>, String> = async {
            let mut all = HashMap::new();
            let mut url = first.clone();
            for _ in 0..MAX_PAGES {
                let resp: Response = wait(scope().map_err(|e| e.message)?.fetch_with_str(&url))
                    .await
                    .map_err(|e| js_message(&e))?
                    .unchecked_into();
                if !resp.ok() {
                    return Err(format!("{url}: HTTP {}", resp.status()));
                }
                let link = resp.headers().get("link").ok().flatten();
                let text = wait(resp.text().map_err(|e| js_message(&e))?)
                    .await
                    .map_err(|e| js_message(&e))?
                    .as_string()
                    .unwrap_or_default();
                let json: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| format!("{url}: {e}"))?;
                all.extend(parse_tree(&json).map_err(|e| format!("{url}: {e}"))?);
                match link.and_then(|l| next_page(&l, &url)) {
                    Some(next) if next != url => url = next,
                    _ => return Ok(all),
                }
            }
            Err(format!("more than {MAX_PAGES} pages"))
        }
        .await;
        match result {
            Ok(h) => {
                let lfs = h
                    .values()
                    .filter(|e| matches!(e, Expected::Sha256(_)))
                    .count();
                log::info(&format!(
                    "{first}: hashes of {} files published ({lfs} LFS SHA-256, {} git blob SHA-1)",
                    h.len(),
                    h.len() - lfs
                ));
                h
            }
            Err(e) => {
                log::warn(&format!(
                    "could not read the file hashes of {} ({e}); files are checked by size only",
                    self.base
                ));
                HashMap::new()
            }
        }
    }

    /// Files served complete without a published hash (checked by size only), sorted.
    pub fn unverified(&self) -> Vec<String> {
        self.unverified.borrow().iter().cloned().collect()
    }

    /// The download URL of a repository path.
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }

    fn key(&self, path: &str, entry: &str) -> String {
        let url = js_sys::encode_uri_component(&self.url(path));
        format!("{KEY_PREFIX}{entry}?u={url}")
    }

    fn failed(&self, path: &str, what: &str, e: &JsValue) -> LoadError {
        LoadError::new(
            ModelErrorKind::LoadFailed,
            format!("{what} {}: {}", self.url(path), js_message(e)),
        )
    }

    async fn get(&self, key: &str) -> Result<Option<Response>, JsValue> {
        let found = wait(self.cache.match_with_str(key)).await?;
        Ok(found.dyn_into::<Response>().ok())
    }

    async fn put(&self, path: &str, key: &str, bytes: &mut [u8]) -> Result<(), LoadError> {
        let len = bytes.len() as u64;
        let resp = Response::new_with_opt_u8_array(Some(bytes))
            .map_err(|e| self.failed(path, "could not store", &e))?;
        match wait(self.cache.put_with_str(key, &resp)).await {
            Ok(_) => Ok(()),
            Err(e) if is_quota_error(&e) => Err(out_of_space(len, &self.url(path)).await),
            Err(e) => Err(self.failed(path, "could not store", &e)),
        }
    }

    /// What the cache holds of `path` (nothing, if its entry is absent or unreadable).
    pub async fn meta(&self, path: &str) -> FileMeta {
        let Ok(Some(resp)) = self.get(&self.key(path, "meta")).await else {
            return FileMeta::default();
        };
        let Ok(text) = resp.text() else {
            return FileMeta::default();
        };
        wait(text)
            .await
            .ok()
            .and_then(|t| t.as_string())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    async fn save_meta(&self, path: &str, meta: &FileMeta) -> Result<(), LoadError> {
        let mut json = serde_json::to_vec(meta)
            .map_err(|e| LoadError::new(ModelErrorKind::LoadFailed, format!("cache entry: {e}")))?;
        self.put(path, &self.key(path, "meta"), &mut json).await
    }

    /// Deletes a file's stored parts and empties its entry (in memory). A part that cannot be
    /// deleted is unreachable once the entry says so.
    async fn delete_parts(&self, path: &str, meta: &mut FileMeta) {
        for i in 0..meta.parts.len() {
            let _ = wait(
                self.cache
                    .delete_with_str(&self.key(path, &format!("part/{i}"))),
            )
            .await;
        }
        meta.reset();
    }

    /// Deletes a file from the cache: its parts, then its entry.
    async fn remove(&self, path: &str, meta: &mut FileMeta) {
        self.delete_parts(path, meta).await;
        let _ = wait(self.cache.delete_with_str(&self.key(path, "meta"))).await;
    }

    /// The hashes of the stored parts of `path`, read one part at a time.
    async fn hash_stored(
        &self,
        path: &str,
        meta: &FileMeta,
        expected: &Expected,
    ) -> Result<FileHasher, LoadError> {
        let mut hasher = FileHasher::new(expected);
        for (i, &len) in meta.parts.iter().enumerate() {
            let bytes = self.read_part(path, i, len).await.map_err(|e| {
                LoadError::new(
                    ModelErrorKind::LoadFailed,
                    format!("{}: {e}", self.url(path)),
                )
            })?;
            hasher.update(&bytes);
        }
        Ok(hasher)
    }

    /// A file is complete: checks its hash when the repository publishes one (a mismatch
    /// deletes the file), then records it as complete with its SHA-256.
    async fn finish(
        &self,
        path: &str,
        meta: &mut FileMeta,
        hasher: Option<FileHasher>,
        expected: Option<Expected>,
    ) -> Result<(), LoadError> {
        if let (Some(expected), Some(hasher)) = (expected, hasher) {
            let sha256 = match hasher.verify(&expected) {
                Ok(sha256) => sha256,
                Err(mismatch) => {
                    self.remove(path, meta).await;
                    return Err(hash_mismatch(&self.url(path), &expected, &mismatch.actual));
                }
            };
            log::debug(&format!(
                "{}: {} verified",
                self.url(path),
                expected.algorithm()
            ));
            meta.sha256 = Some(sha256);
        } else {
            meta.sha256 = None;
        }
        meta.size = Some(meta.stored());
        meta.complete = true;
        self.save_meta(path, meta).await
    }

    /// Forgets a file's stored parts.
    async fn reset(&self, path: &str, meta: &mut FileMeta) -> Result<(), LoadError> {
        self.delete_parts(path, meta).await;
        self.save_meta(path, meta).await
    }

    async fn fetch(&self, path: &str, method: &str, from: u64) -> Result<Response, LoadError> {
        let url = self.url(path);
        let init = RequestInit::new();
        init.set_method(method);
        init.set_cache(RequestCache::NoStore);
        let headers = Headers::new().map_err(|e| self.failed(path, "could not request", &e))?;
        if from > 0 {
            headers
                .set("Range", &format!("bytes={from}-"))
                .map_err(|e| self.failed(path, "could not request", &e))?;
        }
        init.set_headers_headers(&headers);
        let request = Request::new_with_str_and_init(&url, &init)
            .map_err(|e| self.failed(path, "could not request", &e))?;
        let resp = wait(scope()?.fetch_with_request(&request))
            .await
            .map_err(|e| {
                LoadError::new(
                    ModelErrorKind::DownloadFailed,
                    format!(
                        "Could not download {url}: {}. Check the network connection and the model source in the settings, then send the message again.",
                        js_message(&e)
                    ),
                )
            })?;
        Ok(resp.unchecked_into())
    }

    fn http_error(&self, path: &str, resp: &Response) -> LoadError {
        let url = self.url(path);
        let status = resp.status();
        let hint = match status {
            404 => " Is the model source a model repository in the Hugging Face layout?",
            401 | 403 => " The server refused access to the file.",
            _ => "",
        };
        LoadError::new(
            ModelErrorKind::DownloadFailed,
            format!(
                "Could not download {url}: HTTP {status} {}.{hint}",
                resp.status_text()
            ),
        )
    }

    /// The size of `path` according to a `HEAD` request: `Ok(None)` when the server does not say,
    /// `Err` with `missing` set when it answers 404.
    pub async fn probe(&self, path: &str) -> Result<Option<u64>, LoadError> {
        let resp = self.fetch(path, "HEAD", 0).await?;
        match resp.status() {
            200..=299 => Ok(plain_length(&resp.headers())),
            _ => Err(self.http_error(path, &resp)),
        }
    }

    /// Records that the server does not have an optional file.
    pub async fn mark_missing(&self, path: &str, meta: &mut FileMeta) -> Result<(), LoadError> {
        meta.reset();
        meta.missing = true;
        self.save_meta(path, meta).await
    }

    /// Downloads what the cache lacks of `path`, resuming from the stored bytes; on success `meta`
    /// is complete. `optional` files that the server does not have are recorded as missing.
    pub async fn download(
        &self,
        path: &str,
        meta: &mut FileMeta,
        optional: bool,
        progress: &mut dyn FnMut(DownloadEvent),
    ) -> Result<(), LoadError> {
        let mut restarted = false;
        loop {
            match self.download_once(path, meta, optional, progress).await? {
                Attempt::Done => return Ok(()),
                Attempt::Restart if !restarted => {
                    restarted = true;
                    self.reset(path, meta).await?;
                    progress(DownloadEvent::Restart);
                }
                Attempt::Restart => {
                    return Err(LoadError::new(
                        ModelErrorKind::DownloadFailed,
                        format!(
                            "{} changed on the server while it was being downloaded; try again later",
                            self.url(path)
                        ),
                    ));
                }
            }
        }
    }

    async fn download_once(
        &self,
        path: &str,
        meta: &mut FileMeta,
        optional: bool,
        progress: &mut dyn FnMut(DownloadEvent),
    ) -> Result<Attempt, LoadError> {
        if meta.complete || meta.missing {
            return Ok(Attempt::Done);
        }
        let url = self.url(path);
        let offset = meta.stored();
        let resp = self.fetch(path, "GET", offset).await?;
        let headers = resp.headers();
        let validator = header(&headers, "ETag").or_else(|| header(&headers, "Last-Modified"));
        let total = match resp.status() {
            200 if offset > 0 => {
                log::warn(&format!(
                    "{url}: the server ignored the range request; downloading it again from the start"
                ));
                return Ok(Attempt::Restart);
            }
            200 => plain_length(&headers),
            206 => {
                let range = header(&headers, "Content-Range")
                    .ok_or_else(|| {
                        LoadError::new(
                            ModelErrorKind::DownloadFailed,
                            format!("{url}: a partial answer (206) without Content-Range"),
                        )
                    })
                    .and_then(|h| {
                        parse_content_range(&h).map_err(|e| {
                            LoadError::new(ModelErrorKind::DownloadFailed, format!("{url}: {e}"))
                        })
                    })?;
                if range.start != offset {
                    log::warn(&format!(
                        "{url}: asked for bytes from {offset}, got them from {}; starting over",
                        range.start
                    ));
                    return Ok(Attempt::Restart);
                }
                range.total
            }
            416 if meta.size == Some(offset) => {
                // Everything was stored; only the final bookkeeping was missing.
                let expected = self.expected_hash(path).await;
                let hasher = match &expected {
                    Some(e) => Some(self.hash_stored(path, meta, e).await?),
                    None => None,
                };
                self.finish(path, meta, hasher, expected).await?;
                return Ok(Attempt::Done);
            }
            416 => return Ok(Attempt::Restart),
            404 if optional => {
                self.mark_missing(path, meta).await?;
                return Ok(Attempt::Done);
            }
            _ => return Err(self.http_error(path, &resp)),
        };
        if offset > 0
            && let (Some(old), Some(new)) = (&meta.validator, &validator)
            && old != new
        {
            log::warn(&format!(
                "{url} changed on the server ({old} -> {new}); downloading it again"
            ));
            return Ok(Attempt::Restart);
        }
        if offset > 0
            && let (Some(old), Some(new)) = (meta.size, total)
            && old != new
        {
            return Ok(Attempt::Restart);
        }
        if offset == 0 {
            meta.validator = validator;
        }
        if total.is_some() {
            meta.size = total;
        }
        if let Some(size) = meta.size {
            progress(DownloadEvent::Total(size));
            let needed = size.saturating_sub(offset);
            if let Some((usage, quota)) = storage_estimate().await
                && quota.saturating_sub(usage) < needed
            {
                return Err(out_of_space(needed - quota.saturating_sub(usage), &url).await);
            }
        }
        self.save_meta(path, meta).await?;
        if offset > 0 {
            log::info(&format!("{url}: resuming from byte {offset}"));
        }

        let Some(body) = resp.body() else {
            return Err(LoadError::new(
                ModelErrorKind::DownloadFailed,
                format!("{url}: the answer has no body"),
            ));
        };
        // The file's hash, when the repository publishes one: a resumed download first hashes
        // what is stored (one part at a time), then every byte as it arrives.
        let expected = self.expected_hash(path).await;
        let mut hasher = match &expected {
            Some(e) if offset > 0 => Some(self.hash_stored(path, meta, e).await?),
            Some(e) => Some(FileHasher::new(e)),
            None => None,
        };
        let reader: ReadableStreamDefaultReader = body.get_reader().unchecked_into();
        let mut buf: Vec<u8> = Vec::with_capacity(PART_BYTES);
        let end = loop {
            let chunk = match wait(reader.read()).await {
                Err(e) => break Err(js_message(&e)),
                Ok(v) => {
                    let r: ReadableStreamReadResult = v.unchecked_into();
                    if r.get_done().unwrap_or(false) {
                        break Ok(());
                    }
                    Uint8Array::new(&r.get_value())
                }
            };
            let n = chunk.length() as usize;
            let mut at = 0;
            while at < n {
                let take = (PART_BYTES - buf.len()).min(n - at);
                let start = buf.len();
                buf.resize(start + take, 0);
                chunk
                    .subarray(at as u32, (at + take) as u32)
                    .copy_to(&mut buf[start..]);
                if let Some(h) = hasher.as_mut() {
                    h.update(&buf[start..]);
                }
                at += take;
                if buf.len() == PART_BYTES {
                    self.store_part(path, meta, &mut buf).await?;
                }
            }
            if let Some(size) = meta.size
                && meta.stored() + buf.len() as u64 > size
            {
                let _ = wait(reader.cancel()).await;
                return Err(LoadError::new(
                    ModelErrorKind::DownloadFailed,
                    format!("{url} is larger than the {size} bytes the server announced"),
                ));
            }
            progress(DownloadEvent::Bytes(n as u64));
        };
        // Keep what arrived, also when the connection broke: the next attempt resumes after it.
        self.store_part(path, meta, &mut buf).await?;
        let stored = meta.stored();
        let resume = "send the message again to resume the download from there";
        match (end, meta.size) {
            (Err(e), Some(size)) => Err(LoadError::new(
                ModelErrorKind::DownloadFailed,
                format!(
                    "The download of {url} stopped at byte {stored} of {size} ({e}); {resume}."
                ),
            )),
            (Err(e), None) => Err(LoadError::new(
                ModelErrorKind::DownloadFailed,
                format!("The download of {url} stopped after {stored} bytes ({e}); {resume}."),
            )),
            (Ok(()), Some(size)) if stored != size => Err(LoadError::new(
                ModelErrorKind::DownloadFailed,
                format!(
                    "The download of {url} ended at byte {stored} of {size} (the connection closed early); {resume}."
                ),
            )),
            (Ok(()), _) => {
                self.finish(path, meta, hasher, expected).await?;
                Ok(Attempt::Done)
            }
        }
    }

    /// Stores `buf` as the next part of `path` (nothing when empty) and empties it.
    async fn store_part(
        &self,
        path: &str,
        meta: &mut FileMeta,
        buf: &mut Vec<u8>,
    ) -> Result<(), LoadError> {
        if buf.is_empty() {
            return Ok(());
        }
        let key = self.key(path, &format!("part/{}", meta.parts.len()));
        self.put(path, &key, buf).await?;
        meta.parts.push(buf.len() as u64);
        buf.clear();
        self.save_meta(path, meta).await
    }

    /// Every cache entry of this repository: `(key, entry, path)` with `entry` = `meta` or
    /// `part/N`.
    async fn entries(&self) -> Result<Vec<(String, String, String)>, LoadError> {
        let keys = wait(self.cache.keys()).await.map_err(|e| {
            LoadError::new(
                ModelErrorKind::LoadFailed,
                format!("could not list Cache Storage: {}", js_message(&e)),
            )
        })?;
        let base = format!("{}/", self.base);
        let mut out = Vec::new();
        for key in js_sys::Array::from(&keys).iter() {
            let Ok(request) = key.dyn_into::<Request>() else {
                continue;
            };
            let key = request.url();
            if let Some((entry, url)) = split_key(&key)
                && let Some(path) = url.strip_prefix(&base)
            {
                out.push((key.clone(), entry, path.to_owned()));
            }
        }
        Ok(out)
    }

    /// What the cache holds of this repository.
    pub async fn stored(&self) -> Result<gg_messages::StoredModel, LoadError> {
        let mut stored = gg_messages::StoredModel {
            repository: self.base.clone(),
            stored_bytes: 0,
            total_bytes: 0,
            files: 0,
            complete_files: 0,
        };
        for (_, entry, path) in self.entries().await? {
            if entry != "meta" {
                continue;
            }
            let meta = self.meta(&path).await;
            if meta.missing {
                continue;
            }
            let bytes = meta.stored();
            stored.files += 1;
            stored.complete_files += u32::from(meta.complete);
            stored.stored_bytes += bytes;
            stored.total_bytes += meta.size.unwrap_or(bytes).max(bytes);
        }
        Ok(stored)
    }

    /// Deletes every stored file of this repository; `Err` names the first entry that could not be
    /// deleted (the others are deleted all the same).
    pub async fn clear(&self) -> Result<(), LoadError> {
        let mut first_error = None;
        // Entries first say a file is empty, so a part left behind is never served.
        let mut entries = self.entries().await?;
        entries.sort_by_key(|(_, entry, _)| entry != "meta");
        for (key, _, path) in entries {
            if let Err(e) = wait(self.cache.delete_with_str(&key)).await {
                first_error.get_or_insert_with(|| self.failed(&path, "could not delete", &e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Reads part `i` of `path`, checking its length against the entry.
    async fn read_part(&self, path: &str, i: usize, len: u64) -> Result<Vec<u8>, String> {
        let key = self.key(path, &format!("part/{i}"));
        let resp = self
            .get(&key)
            .await
            .map_err(|e| js_message(&e))?
            .ok_or_else(|| format!("part {i} is missing from the cache"))?;
        let buf = wait(resp.array_buffer().map_err(|e| js_message(&e))?)
            .await
            .map_err(|e| js_message(&e))?;
        let bytes = Uint8Array::new(&buf).to_vec();
        if bytes.len() as u64 != len {
            return Err(format!(
                "part {i} holds {} bytes instead of {len}",
                bytes.len()
            ));
        }
        Ok(bytes)
    }
}

enum Attempt {
    Done,
    Restart,
}

/// `(entry, file URL)` of a cache key made by [`ModelCache::key`].
fn split_key(key: &str) -> Option<(String, String)> {
    let (entry, url) = key.strip_prefix(KEY_PREFIX)?.split_once("?u=")?;
    let url = js_sys::decode_uri_component(url).ok()?.as_string()?;
    Some((entry.to_owned(), url))
}

fn header(h: &Headers, name: &str) -> Option<String> {
    h.get(name).ok().flatten().filter(|v| !v.is_empty())
}

/// `Content-Length`, unless the body is content-encoded (then it counts the encoded bytes, not
/// the bytes the stream yields).
fn plain_length(h: &Headers) -> Option<u64> {
    let encoded =
        header(h, "Content-Encoding").is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
    if encoded {
        return None;
    }
    header(h, "Content-Length").and_then(|v| v.trim().parse().ok())
}

/// A complete cached file, read one part at a time.
struct CacheStream {
    cache: Rc<ModelCache>,
    path: String,
    meta: FileMeta,
    next: usize,
}

impl ByteStream for CacheStream {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, gg_runtime::Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let Some(&len) = self.meta.parts.get(self.next) else {
                return Ok(None);
            };
            match self.cache.read_part(&self.path, self.next, len).await {
                Ok(bytes) => {
                    self.next += 1;
                    Ok(Some(bytes))
                }
                Err(e) => {
                    // Forget the damaged file, so that the next load downloads it again.
                    let mut meta = self.meta.clone();
                    let _ = self.cache.reset(&self.path, &mut meta).await;
                    Err(io_error(
                        &self.cache.url(&self.path),
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "the cached copy is damaged ({e}); it has been dropped and downloads again with the next message"
                        ),
                    ))
                }
            }
        })
    }
}

fn io_error(path: &str, kind: std::io::ErrorKind, message: String) -> gg_runtime::Error {
    gg_runtime::Error::Io {
        path: path.to_owned(),
        source: std::io::Error::new(kind, message),
    }
}

/// The runtime's view of the cache ([`gg_llm::source::Fetch`]): a complete file is served from
/// the cache; anything else is downloaded into it first (resuming), then served.
pub struct CacheFetch {
    pub cache: Rc<ModelCache>,
}

impl gg_llm::source::Fetch for CacheFetch {
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>> {
        let path = path.to_owned();
        Box::pin(async move {
            let mut meta = self.cache.meta(&path).await;
            if !meta.complete && !meta.missing {
                self.cache
                    .download(&path, &mut meta, false, &mut |_| {})
                    .await
                    .map_err(|e| {
                        io_error(&self.cache.url(&path), std::io::ErrorKind::Other, e.message)
                    })?;
            }
            if meta.missing {
                return Err(io_error(
                    &self.cache.url(&path),
                    std::io::ErrorKind::NotFound,
                    "the server does not have this file (HTTP 404)".into(),
                ));
            }
            if meta.sha256.is_none() {
                self.cache.unverified.borrow_mut().insert(path.clone());
            }
            Ok(Box::new(CacheStream {
                cache: self.cache.clone(),
                path,
                meta,
                next: 0,
            }) as Box<dyn ByteStream>)
        })
    }
}
