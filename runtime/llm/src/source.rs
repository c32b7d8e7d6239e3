//! Where the model's files come from: a model repository in the Hugging Face layout
//! (`config.json`, `tokenizer.json`, ..., `onnx/{session}{suffix}.onnx` + external data chunks),
//! read through the runtime's [`DataSource`] abstraction (named byte streams read front to back in
//! bounded chunks).
//!
//! The platform part is [`Fetch`]: natively a local directory ([`DirFetch`]) or an HTTP(S) base URL
//! ([`HttpFetch`], e.g. `https://huggingface.co/{repo}/resolve/{revision}`). In the browser the
//! extension implements [`Fetch`] over `fetch` response body streams backed by Cache Storage and
//! hands it to [`ModelRepo::new`]; nothing else here is platform-specific.

use crate::error::{LlmError, Result};
use futures::future::LocalBoxFuture;
use gg_runtime::source::{ByteStream, DataSource};
use std::rc::Rc;

/// Opens repository files as byte streams that own their resources (a file handle, an HTTP body,
/// a JS `ReadableStream` reader): the platform-specific part of model loading. The extension
/// implements it over `fetch` + Cache Storage; [`DirFetch`] and [`HttpFetch`] are the native ones.
pub trait Fetch {
    /// Opens `path` (repository-relative, `/`-separated, e.g. `onnx/embed_tokens_q4.onnx_data_1`)
    /// from its beginning. A missing file is an error whose message names it.
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>>;
}

/// A model repository in the Hugging Face layout.
#[derive(Clone)]
pub struct ModelRepo {
    fetch: Rc<dyn Fetch>,
    name: String,
}

impl std::fmt::Debug for ModelRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRepo")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ModelRepo {
    /// A repository read through `fetch`; `name` (a folder, a URL, a model id) is used in messages.
    pub fn new(fetch: Rc<dyn Fetch>, name: impl Into<String>) -> Self {
        Self {
            fetch,
            name: name.into(),
        }
    }

    /// A local directory or an `http://` / `https://` base URL (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(spec: &str) -> Result<Self> {
        if spec.starts_with("http://") || spec.starts_with("https://") {
            Ok(Self::new(Rc::new(HttpFetch::new(spec)), spec))
        } else {
            let dir = std::path::Path::new(spec);
            if !dir.join("config.json").is_file() && !dir.join("genai_config.json").is_file() {
                return Err(LlmError::Model(format!(
                    "{spec}: not a model folder (neither config.json, the onnx-community layout, nor genai_config.json, an ONNX Runtime GenAI package)"
                )));
            }
            Ok(Self::new(Rc::new(DirFetch::new(dir)), spec))
        }
    }

    /// What this repository is called in messages (its folder or URL).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying fetcher.
    pub fn fetch(&self) -> Rc<dyn Fetch> {
        self.fetch.clone()
    }

    /// Reads a whole (small) file.
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        let err = |e: gg_runtime::Error| LlmError::File {
            path: format!("{}/{path}", self.name.trim_end_matches('/')),
            message: e.to_string(),
        };
        let mut s = self.fetch.open(path).await.map_err(err)?;
        let mut out = Vec::new();
        while let Some(c) = s.next_chunk().await.map_err(err)? {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    /// Reads an optional file (`None` when it cannot be read).
    pub async fn read_optional(&self, path: &str) -> Option<Vec<u8>> {
        self.read(path).await.ok()
    }

    /// A view of the folder `dir` (e.g. `onnx`; `""`: the repository's top folder) as the
    /// runtime's [`DataSource`]: the runtime loads `x.onnx` through it and finds the external
    /// data `x.onnx_data*` next to it.
    pub fn subdir(&self, dir: &str) -> SubdirSource {
        let dir = dir.trim_matches('/');
        SubdirSource {
            fetch: self.fetch.clone(),
            prefix: if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            },
        }
    }
}

/// A folder of a repository, as the runtime's [`DataSource`].
#[derive(Clone)]
pub struct SubdirSource {
    fetch: Rc<dyn Fetch>,
    prefix: String,
}

impl DataSource for SubdirSource {
    fn open<'a>(
        &'a self,
        location: &'a str,
    ) -> LocalBoxFuture<'a, gg_runtime::Result<Box<dyn ByteStream + 'a>>> {
        Box::pin(async move {
            if location.split('/').any(|c| c == "..") || location.starts_with('/') {
                return Err(gg_runtime::Error::Invalid(format!(
                    "location {location} escapes the model folder"
                )));
            }
            let path = format!("{}{location}", self.prefix);
            let s: Box<dyn ByteStream + 'a> = self.fetch.open(&path).await?;
            Ok(s)
        })
    }
}

/// Reads a `std::io::Read` in chunks (native files and HTTP bodies).
#[cfg(not(target_arch = "wasm32"))]
struct ReadStream {
    reader: Box<dyn std::io::Read>,
    path: String,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteStream for ReadStream {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, gg_runtime::Result<Option<Vec<u8>>>> {
        let mut buf = vec![0u8; self.chunk];
        let mut filled = 0;
        let res = loop {
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        buf.truncate(filled);
        let path = self.path.clone();
        Box::pin(async move {
            res.map_err(|source| gg_runtime::Error::Io { path, source })?;
            Ok((filled > 0).then_some(buf))
        })
    }
}

/// Files of a local folder (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
pub struct DirFetch {
    dir: std::path::PathBuf,
}

#[cfg(not(target_arch = "wasm32"))]
impl DirFetch {
    /// Files relative to `dir`.
    pub fn new(dir: impl Into<std::path::PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Fetch for DirFetch {
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>> {
        let full = self.dir.join(path);
        let res = if path.split('/').any(|c| c == "..") {
            Err(gg_runtime::Error::Invalid(format!(
                "{path} escapes the model folder"
            )))
        } else {
            std::fs::File::open(&full).map_err(|source| gg_runtime::Error::Io {
                path: full.display().to_string(),
                source,
            })
        };
        let shown = full.display().to_string();
        Box::pin(async move {
            let file = res?;
            Ok(Box::new(ReadStream {
                reader: Box::new(file),
                path: shown,
                chunk: gg_runtime::source::CHUNK_BYTES,
            }) as Box<dyn ByteStream>)
        })
    }
}

/// Files under an HTTP(S) base URL, fetched with `GET` and streamed (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
pub struct HttpFetch {
    base: String,
    agent: ureq::Agent,
}

#[cfg(not(target_arch = "wasm32"))]
impl HttpFetch {
    /// Files relative to `base` (`{base}/{path}`).
    pub fn new(base: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(std::time::Duration::from_secs(30)))
            .build()
            .new_agent();
        Self {
            base: base.trim_end_matches('/').to_string(),
            agent,
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Fetch for HttpFetch {
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>> {
        let url = format!("{}/{}", self.base, path.trim_start_matches('/'));
        let res = self.agent.get(&url).call();
        Box::pin(async move {
            let resp = res.map_err(|e| gg_runtime::Error::Io {
                path: url.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            let status = resp.status();
            if !status.is_success() {
                let kind = if status.as_u16() == 404 {
                    std::io::ErrorKind::NotFound
                } else {
                    std::io::ErrorKind::Other
                };
                return Err(gg_runtime::Error::Io {
                    path: url,
                    source: std::io::Error::new(kind, format!("HTTP {status}")),
                });
            }
            Ok(Box::new(ReadStream {
                reader: Box::new(resp.into_body().into_reader()),
                path: url,
                chunk: gg_runtime::source::CHUNK_BYTES,
            }) as Box<dyn ByteStream>)
        })
    }
}
