//! Where model bytes come from: local files natively, `fetch`/Cache Storage streams in the browser
//! (the browser implementation lives with the session code; it only has to implement [`DataSource`]).
//!
//! External data is read as a *stream* of bounded chunks, in increasing offset order, so that a
//! multi-gigabyte weight file is never held whole in memory.

use crate::error::{Error, Result};
use futures::future::LocalBoxFuture;

/// Default chunk size for streamed reads (8 MiB).
pub const CHUNK_BYTES: usize = 8 << 20;

/// A sequential stream of byte chunks (a file, an HTTP body, a cache entry).
pub trait ByteStream {
    /// Next chunk (at most a few MiB), or `None` at the end of the stream.
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, Result<Option<Vec<u8>>>>;
}

/// Opens named byte streams: the model file itself and its external data files (`location`).
pub trait DataSource {
    /// Opens `location` (relative to the model, e.g. `model_q4.onnx_data`) from its beginning.
    fn open<'a>(
        &'a self,
        location: &'a str,
    ) -> LocalBoxFuture<'a, Result<Box<dyn ByteStream + 'a>>>;
}

/// Reads a whole stream into memory (for the small `.onnx` graph file only).
pub async fn read_all(source: &dyn DataSource, location: &str) -> Result<Vec<u8>> {
    let mut s = source.open(location).await?;
    let mut out = Vec::new();
    while let Some(c) = s.next_chunk().await? {
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// In-memory files (tests, small models, data already downloaded).
#[derive(Debug, Default, Clone)]
pub struct MemorySource {
    files: Vec<(String, std::rc::Rc<Vec<u8>>)>,
    chunk: usize,
}

impl MemorySource {
    /// An empty source with the default chunk size.
    pub fn new() -> Self {
        Self {
            files: Vec::new(),
            chunk: CHUNK_BYTES,
        }
    }

    /// Sets the chunk size (tests use tiny chunks to exercise chunk boundaries).
    pub fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk.max(1);
        self
    }

    /// Adds a file.
    pub fn insert(&mut self, location: impl Into<String>, bytes: Vec<u8>) {
        self.files.push((location.into(), std::rc::Rc::new(bytes)));
    }
}

struct MemStream {
    data: std::rc::Rc<Vec<u8>>,
    pos: usize,
    chunk: usize,
}

impl ByteStream for MemStream {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, Result<Option<Vec<u8>>>> {
        let end = (self.pos + self.chunk).min(self.data.len());
        let out = (self.pos < end).then(|| self.data[self.pos..end].to_vec());
        self.pos = end;
        Box::pin(async move { Ok(out) })
    }
}

impl DataSource for MemorySource {
    fn open<'a>(
        &'a self,
        location: &'a str,
    ) -> LocalBoxFuture<'a, Result<Box<dyn ByteStream + 'a>>> {
        Box::pin(async move {
            let (_, data) = self
                .files
                .iter()
                .find(|(n, _)| n == location)
                .ok_or_else(|| Error::Io {
                    path: location.to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not in memory source",
                    ),
                })?;
            Ok(Box::new(MemStream {
                data: data.clone(),
                pos: 0,
                chunk: self.chunk,
            }) as Box<dyn ByteStream>)
        })
    }
}

/// Files in a local directory (native only).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Clone)]
pub struct DirSource {
    dir: std::path::PathBuf,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl DirSource {
    /// Files relative to `dir`.
    pub fn new(dir: impl Into<std::path::PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            chunk: CHUNK_BYTES,
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
struct FileStream {
    file: std::fs::File,
    path: String,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteStream for FileStream {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, Result<Option<Vec<u8>>>> {
        use std::io::Read;
        // read_to_end fills the reserved capacity without zeroing it first, and retries
        // interrupted reads
        let mut buf = Vec::with_capacity(self.chunk);
        let res = (&mut self.file)
            .take(self.chunk as u64)
            .read_to_end(&mut buf)
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            });
        Box::pin(async move {
            res?;
            Ok((!buf.is_empty()).then_some(buf))
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl DataSource for DirSource {
    fn open<'a>(
        &'a self,
        location: &'a str,
    ) -> LocalBoxFuture<'a, Result<Box<dyn ByteStream + 'a>>> {
        Box::pin(async move {
            if std::path::Path::new(location)
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(Error::Invalid(format!(
                    "external data location {location} escapes the model folder"
                )));
            }
            let path = self.dir.join(location);
            let p = path.display().to_string();
            let file = std::fs::File::open(&path).map_err(|source| Error::Io {
                path: p.clone(),
                source,
            })?;
            Ok(Box::new(FileStream {
                file,
                path: p,
                chunk: self.chunk,
            }) as Box<dyn ByteStream>)
        })
    }
}
