//! Where the model's files come from: a model repository in the Hugging Face layout
//! (`config.json`, `tokenizer.json`, ..., `onnx/{session}{suffix}.onnx` + external data chunks),
//! read through the runtime's [`DataSource`] abstraction (named byte streams read front to back in
//! bounded chunks).
//!
//! Natively: a local directory ([`gg_runtime::source::DirSource`]) or an HTTP(S) base URL
//! ([`HttpSource`], e.g. `https://huggingface.co/{repo}/resolve/{revision}`). In the browser the
//! extension implements [`DataSource`] over `fetch` response body streams backed by Cache Storage
//! and hands it to [`ModelRepo::new`]; nothing else here is platform-specific.

use crate::error::{LlmError, Result};
use futures::future::LocalBoxFuture;
use gg_runtime::source::{ByteStream, DataSource};
use std::rc::Rc;

/// A model repository in the Hugging Face layout.
#[derive(Clone)]
pub struct ModelRepo {
    source: Rc<dyn DataSource>,
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
    /// A repository read through `source`; paths are relative to the repository root
    /// (`config.json`, `onnx/decoder_model_merged_q4.onnx_data_1`). `name` is used in messages.
    pub fn new(source: Rc<dyn DataSource>, name: impl Into<String>) -> Self {
        Self {
            source,
            name: name.into(),
        }
    }

    /// A local directory or an `http://` / `https://` base URL (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(spec: &str) -> Result<Self> {
        if spec.starts_with("http://") || spec.starts_with("https://") {
            Ok(Self::new(Rc::new(HttpSource::new(spec)), spec))
        } else {
            let dir = std::path::Path::new(spec);
            if !dir.join("config.json").is_file() {
                return Err(LlmError::Model(format!(
                    "{spec}: not a model folder (no config.json)"
                )));
            }
            Ok(Self::new(
                Rc::new(gg_runtime::source::DirSource::new(dir)),
                spec,
            ))
        }
    }

    /// What this repository is called in messages (its folder or URL).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying source (repository-relative paths).
    pub fn source(&self) -> Rc<dyn DataSource> {
        self.source.clone()
    }

    /// Reads a whole (small) file.
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        gg_runtime::source::read_all(self.source.as_ref(), path)
            .await
            .map_err(|e| LlmError::File {
                path: format!("{}/{path}", self.name.trim_end_matches('/')),
                message: e.to_string(),
            })
    }

    /// Reads a file if it exists; other errors are errors too (a missing optional file is `None`).
    pub async fn read_optional(&self, path: &str) -> Option<Vec<u8>> {
        self.read(path).await.ok()
    }

    /// A view of the folder `dir` (e.g. `onnx`): the runtime loads `x.onnx` through it and finds the
    /// external data `x.onnx_data*` next to it.
    pub fn subdir(&self, dir: &str) -> SubdirSource {
        SubdirSource {
            inner: self.source.clone(),
            prefix: format!("{}/", dir.trim_end_matches('/')),
        }
    }
}

/// A folder of another [`DataSource`].
#[derive(Clone)]
pub struct SubdirSource {
    inner: Rc<dyn DataSource>,
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
            let s = self.inner.open(&path).await?;
            // Re-box with the shorter lifetime (the path string lives only in this future).
            Ok(Box::new(Owned(s)) as Box<dyn ByteStream + 'a>)
        })
    }
}

struct Owned<'a>(Box<dyn ByteStream + 'a>);

impl ByteStream for Owned<'_> {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, gg_runtime::Result<Option<Vec<u8>>>> {
        self.0.next_chunk()
    }
}

/// Files under an HTTP(S) base URL, fetched with `GET` and streamed (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
pub struct HttpSource {
    base: String,
    agent: ureq::Agent,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl HttpSource {
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
            chunk: gg_runtime::source::CHUNK_BYTES,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }
}

#[cfg(not(target_arch = "wasm32"))]
struct HttpStream {
    reader: Box<dyn std::io::Read>,
    url: String,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteStream for HttpStream {
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
        let url = self.url.clone();
        Box::pin(async move {
            res.map_err(|source| gg_runtime::Error::Io { path: url, source })?;
            Ok((filled > 0).then_some(buf))
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl DataSource for HttpSource {
    fn open<'a>(
        &'a self,
        location: &'a str,
    ) -> LocalBoxFuture<'a, gg_runtime::Result<Box<dyn ByteStream + 'a>>> {
        let url = self.url(location);
        let res = self.agent.get(&url).call();
        Box::pin(async move {
            let io = |m: String| gg_runtime::Error::Io {
                path: url.clone(),
                source: std::io::Error::other(m),
            };
            let resp = res.map_err(|e| io(e.to_string()))?;
            let status = resp.status();
            if status.as_u16() == 404 {
                return Err(gg_runtime::Error::Io {
                    path: url.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "HTTP 404"),
                });
            }
            if !status.is_success() {
                return Err(io(format!("HTTP {status}")));
            }
            let reader = resp.into_body().into_reader();
            Ok(Box::new(HttpStream {
                reader: Box::new(reader),
                url: url.clone(),
                chunk: self.chunk,
            }) as Box<dyn ByteStream + 'a>)
        })
    }
}
