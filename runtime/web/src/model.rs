//! The Gemma 4 model of the host (the offscreen document, or the widget's worker): one at a time,
//! loaded on the first request, kept across turns (and the extension's tabs), reloaded when the
//! repository (source or size setting) changes or after the GPU device was lost.
//!
//! Loading: WebGPU checks (with actionable messages), the file list — from `config.json` for the
//! onnx-community layout, in the variant the adapter supports (q4f16 with `shader-f16`, else q4),
//! or from `genai_config.json` and the graphs it names for an ONNX Runtime GenAI package (what
//! mobius writes: a single `model.onnx`, or `embedding/` + `decoder/`) — every missing file
//! downloaded into Cache Storage with progress reported to the host's sink ([`crate::cache`],
//! [`set_status_sink`]), then the sessions streamed from the cache into GPU memory
//! ([`gg_llm::GemmaModel`]).

use crate::cache::{CacheFetch, DownloadEvent, ModelCache, out_of_space, request_persistence};
use crate::download::{LoadError, Tracker};
use crate::log;
use futures::FutureExt;
use futures::future::{LocalBoxFuture, Shared};
use futures::lock::Mutex;
use futures::stream::StreamExt;
use gg_agent::{ChatMessage, ChunkStream, GenerateOptions, ModelBackend, ToolDefinition};
use gg_llm::config::{Package, external_data_files};
use gg_llm::{
    Dtype, GemmaBackend, GemmaModel, ImageEncoder, LoadOptions, LoadStage, ModelConfig, ModelRepo,
    VisionEncoder,
};
use gg_messages::{ModelErrorKind, ModelReport, ModelState};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The smallest storage-buffer binding the runtime works with (WebGPU's default limit; larger
/// weights are split into parts of the adapter's real limit).
const MIN_BINDING_BYTES: u64 = 128 << 20;

/// Files the repository may lack.
const OPTIONAL_FILES: &[&str] = &["generation_config.json", "tokenizer_config.json"];

/// Files an ONNX Runtime GenAI package may lack (its chat template may sit in
/// `tokenizer_config.json`; `config.json` only narrows the context limit).
const GENAI_OPTIONAL_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

/// A loaded model, shared by every conversation.
pub struct Loaded {
    repo: String,
    /// The adapter, as WebGPU describes it (`google swiftshader`).
    adapter: String,
    /// Files without a published hash (checked by size only).
    unverified: Vec<String>,
    backend: Rc<QueuedBackend>,
}

type LoadFuture = Shared<LocalBoxFuture<'static, Result<Rc<Loaded>, LoadError>>>;

enum Slot {
    Empty,
    Loading { repo: String, load: LoadFuture },
    Ready(Rc<Loaded>),
}

thread_local! {
    static SLOT: RefCell<Slot> = const { RefCell::new(Slot::Empty) };
    static STATUS: RefCell<Option<ModelReport>> = const { RefCell::new(None) };
    static SINK: RefCell<Option<StatusSink>> = const { RefCell::new(None) };
    static SEQ: Cell<u64> = const { Cell::new(0) };
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    /// Repositories whose stored files are being deleted (no load starts for them meanwhile).
    static CLEARING: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Whether `repo` is a repository address the cache can hold.
fn check_repo(repo: &str) -> Result<(), LoadError> {
    if repo.starts_with("http://") || repo.starts_with("https://") {
        Ok(())
    } else {
        Err(LoadError::new(
            ModelErrorKind::LoadFailed,
            format!(
                "The model source {repo:?} is not an http:// or https:// address. Set the model source in the settings to a model repository in the Hugging Face onnx-community layout or an ONNX Runtime GenAI package."
            ),
        ))
    }
}

/// What Cache Storage holds of `repo`.
pub async fn stored(repo: &str) -> Result<gg_messages::StoredModel, LoadError> {
    check_repo(repo)?;
    ModelCache::open(repo).await?.stored().await
}

/// Deletes the stored files of `repo`. Refused while it downloads or loads; a loaded model stays
/// loaded (its weights are on the GPU), the next load downloads the files again.
pub async fn clear_stored(repo: &str) -> Result<gg_messages::StoredModel, LoadError> {
    check_repo(repo)?;
    let repo = repo.trim_end_matches('/');
    let busy =
        SLOT.with(|slot| matches!(&*slot.borrow(), Slot::Loading { repo: r, .. } if r == repo));
    if busy {
        return Err(LoadError::new(
            ModelErrorKind::LoadFailed,
            "The model is being downloaded or loaded; clear its files once it is ready.".to_owned(),
        ));
    }
    if CLEARING.with(|c| c.borrow().iter().any(|r| r == repo)) {
        return Err(LoadError::new(
            ModelErrorKind::LoadFailed,
            "The model's files are already being deleted.".to_owned(),
        ));
    }
    CLEARING.with(|c| c.borrow_mut().push(repo.to_owned()));
    let result = async {
        let cache = ModelCache::open(repo).await?;
        cache.clear().await?;
        cache.stored().await
    }
    .await;
    CLEARING.with(|c| c.borrow_mut().retain(|r| r != repo));
    if result.is_ok() {
        log::info(&format!("deleted the stored files of {repo}"));
    }
    result
}

fn epoch() -> u64 {
    EPOCH.with(|e| {
        if e.get() == 0 {
            e.set((js_sys::Math::random() * 9.0e15) as u64 + 1);
        }
        e.get()
    })
}

/// Where the host sends model reports ([`set_status_sink`]).
type StatusSink = Rc<dyn Fn(ModelReport)>;

/// Installs what the host does with each model report: the offscreen document broadcasts it to
/// every extension context, the widget's worker posts it to the page. Before a sink is installed
/// reports are only remembered ([`current_status`]).
pub fn set_status_sink(sink: impl Fn(ModelReport) + 'static) {
    SINK.with(|s| *s.borrow_mut() = Some(Rc::new(sink)));
}

/// Tells the host where the model stands (its UI shows it) and remembers it for
/// [`current_status`].
pub fn report(model_size: &str, source: &str, state: ModelState) {
    let seq = SEQ.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let report = ModelReport {
        seq,
        epoch: epoch(),
        model_size: model_size.to_owned(),
        source: source.to_owned(),
        state,
    };
    STATUS.with(|s| *s.borrow_mut() = Some(report.clone()));
    // Called outside the borrow: a sink may read the status.
    if let Some(sink) = SINK.with(|s| s.borrow().clone()) {
        sink(report);
    }
}

/// The latest report (`NotLoaded` before any).
pub fn current_status() -> ModelReport {
    STATUS.with(|s| s.borrow().clone()).unwrap_or(ModelReport {
        seq: 0,
        epoch: epoch(),
        model_size: String::new(),
        source: String::new(),
        state: ModelState::NotLoaded,
    })
}

/// The model of `repo`, loaded if needed (a load in progress for it is joined, not repeated).
pub async fn backend(repo: &str, model_size: &str) -> Result<Rc<dyn ModelBackend>, LoadError> {
    check_repo(repo)?;
    if CLEARING.with(|c| c.borrow().iter().any(|r| r == repo)) {
        return Err(LoadError::new(
            ModelErrorKind::LoadFailed,
            "The model's files are being deleted (settings, Downloaded models); send the message again in a moment.".to_owned(),
        ));
    }
    loop {
        let pending = SLOT.with(|slot| {
            let mut slot = slot.borrow_mut();
            match &*slot {
                Slot::Ready(l) if l.repo == repo && !l.backend.lost() => {
                    Ok(l.backend.clone() as Rc<dyn ModelBackend>)
                }
                Slot::Ready(l) => {
                    if l.backend.lost() {
                        log::info("the GPU device was lost; loading the model again");
                    } else {
                        log::info(&format!(
                            "model source changed to {repo}; unloading {}",
                            l.repo
                        ));
                    }
                    // Dropped before the next load starts, so its GPU memory is released first.
                    *slot = Slot::Empty;
                    Err(None)
                }
                Slot::Loading { repo: r, load } => Err(Some((load.clone(), r.clone()))),
                Slot::Empty => {
                    let load = load(repo.to_owned(), model_size.to_owned())
                        .boxed_local()
                        .shared();
                    *slot = Slot::Loading {
                        repo: repo.to_owned(),
                        load: load.clone(),
                    };
                    Err(Some((load, repo.to_owned())))
                }
            }
        });
        match pending {
            Ok(backend) => return Ok(backend),
            // A load of this or another repository runs: wait for it; if it was another one,
            // look again.
            Err(Some((load, loading))) => {
                let result = load.await;
                if loading == repo {
                    return result.map(|l| l.backend.clone() as Rc<dyn ModelBackend>);
                }
            }
            Err(None) => {}
        }
    }
}

/// Loads the model of `repo` and puts it in the slot (or empties the slot on failure).
async fn load(repo: String, model_size: String) -> Result<Rc<Loaded>, LoadError> {
    let result = load_inner(&repo, &model_size).await;
    SLOT.with(|slot| {
        let mut slot = slot.borrow_mut();
        if matches!(&*slot, Slot::Loading { repo: r, .. } if *r == repo) {
            *slot = match &result {
                Ok(l) => Slot::Ready(l.clone()),
                Err(_) => Slot::Empty,
            };
        }
    });
    match &result {
        Ok(l) => report(
            &model_size,
            &repo,
            ModelState::Ready {
                dtype: l.backend.inner.model().variant(),
                adapter: l.adapter.clone(),
                unverified: l.unverified.clone(),
            },
        ),
        Err(e) => {
            log::error(&format!("loading the model from {repo} failed: {e}"));
            report(&model_size, &repo, ModelState::NotLoaded);
        }
    }
    result
}

async fn load_inner(repo: &str, model_size: &str) -> Result<Rc<Loaded>, LoadError> {
    let stage = |s: &str| {
        report(
            model_size,
            repo,
            ModelState::Initializing {
                stage: s.to_owned(),
            },
        )
    };
    stage("checking WebGPU");
    let (gpu, adapter) = open_gpu().await?;
    let lost = Arc::new(AtomicBool::new(false));
    {
        let lost = lost.clone();
        let (size, source) = (model_size.to_owned(), repo.to_owned());
        gpu.device.set_device_lost_callback(move |reason, message| {
            if reason == wgpu::DeviceLostReason::Destroyed {
                return;
            }
            lost.store(true, Ordering::SeqCst);
            let (size, source) = (size.clone(), source.clone());
            wasm_bindgen_futures::spawn_local(async move {
                device_lost(&size, &source, &message);
            });
        });
    }
    let dtype = Dtype::for_adapter(gpu.has_shader_f16);
    log::info(&format!(
        "model {repo}: {} weights on {adapter}",
        dtype.name(),
    ));

    let cache = ModelCache::open(repo).await?;
    if !request_persistence().await {
        log::info(
            "the browser did not grant persistent storage; the model cache may be evicted when disk space runs low",
        );
    }
    download_all(&cache, repo, model_size, dtype).await?;

    stage("loading the model into GPU memory");
    let fetch = Rc::new(CacheFetch {
        cache: cache.clone(),
    });
    let model_repo = ModelRepo::new(fetch, repo);
    let model = GemmaModel::load_with_progress(
        Rc::new(gpu),
        &model_repo,
        &LoadOptions { dtype: Some(dtype) },
        &mut |s| match s {
            LoadStage::TextFiles => stage("reading the tokenizer and chat template"),
            LoadStage::Session(file) => stage(&format!("loading {file} into GPU memory")),
            LoadStage::Ready => {}
        },
    )
    .await
    .map_err(|e| {
        let message = e.to_string();
        let kind = if message.to_lowercase().contains("out of memory") {
            ModelErrorKind::OutOfSpace
        } else {
            ModelErrorKind::LoadFailed
        };
        LoadError::new(
            kind,
            format!("Loading the model from {repo} failed: {message}"),
        )
    })?;
    // On a GPU the kernels are compiled now rather than in the first answers (recorded, never
    // run). Software adapters compile slowly (SwiftShader: 14 s for the E2B-shaped model's 58
    // pipelines) and their answers take minutes anyway: there each kernel is compiled when
    // first used, and only those.
    if !model.gpu.tuning.software {
        stage("compiling the GPU kernels");
        model.warm_up().await.map_err(|e| {
            LoadError::new(
                ModelErrorKind::LoadFailed,
                format!("Preparing the model's GPU kernels failed: {e}"),
            )
        })?;
    }
    let unverified = cache.unverified();
    if !unverified.is_empty() {
        log::warn(&format!(
            "{repo} publishes no hash for {}: checked by size only",
            unverified.join(", ")
        ));
    }
    let model = Rc::new(model);
    let mut inner = GemmaBackend::new(model.clone());
    // A model with image tokens, a processor config and a vision encoder in its files sees
    // images; the encoder is downloaded and loaded on the first one.
    if model.image_tokens.is_some()
        && model.image_config.is_some()
        && model.config.vision_file(model.dtype).is_some()
    {
        inner = inner.with_image_encoder(Rc::new(LazyVision {
            repo: repo.to_owned(),
            model_size: model_size.to_owned(),
            cache: cache.clone(),
            gpu: model.gpu.clone(),
            config: model.config.clone(),
            dtype: model.dtype,
            variant: model.variant(),
            adapter: adapter.clone(),
            encoder: Mutex::new(None),
        }));
    }
    Ok(Rc::new(Loaded {
        repo: repo.to_owned(),
        adapter,
        unverified,
        backend: Rc::new(QueuedBackend {
            inner,
            turn: Mutex::new(()),
            lost,
        }),
    }))
}

/// The vision encoder of the loaded model: its files are part of the model's file list but are
/// downloaded (with progress, into the same cache) and loaded into GPU memory only when the first
/// image reaches the model, so text-only use pays nothing. Kept for later images.
struct LazyVision {
    repo: String,
    model_size: String,
    cache: Rc<ModelCache>,
    gpu: Rc<gg_runtime::Gpu>,
    config: ModelConfig,
    dtype: Dtype,
    /// The loaded model's variant and adapter, for the ready report after the encoder's load.
    variant: String,
    adapter: String,
    encoder: Mutex<Option<Rc<VisionEncoder>>>,
}

impl LazyVision {
    /// The encoder, downloaded and loaded on first use (one load even if images queue).
    async fn encoder(&self) -> gg_llm::Result<Rc<VisionEncoder>> {
        let mut slot = self.encoder.lock().await;
        if let Some(e) = &*slot {
            return Ok(e.clone());
        }
        let loaded = self.load().await;
        // whatever happened, the UI shows the text model's state again
        report(
            &self.model_size,
            &self.repo,
            ModelState::Ready {
                dtype: self.variant.clone(),
                adapter: self.adapter.clone(),
                unverified: self.cache.unverified(),
            },
        );
        let e = Rc::new(loaded?);
        *slot = Some(e.clone());
        Ok(e)
    }

    async fn load(&self) -> gg_llm::Result<VisionEncoder> {
        let failed = |e: LoadError| {
            gg_llm::LlmError::Model(format!(
                "the vision encoder (to see images) could not be downloaded: {e}"
            ))
        };
        let mut paths = self.config.vision_files(self.dtype);
        if let Package::Genai { .. } = self.config.package {
            // a GenAI package names the encoder's external data inside its graph
            let graph = paths
                .first()
                .cloned()
                .ok_or_else(|| gg_llm::LlmError::Model("the model has no vision encoder".into()))?;
            let mut meta = self.cache.meta(&graph).await;
            self.cache
                .download(&graph, &mut meta, false, &mut |_| {})
                .await
                .map_err(failed)?;
            let bytes = ModelRepo::new(
                Rc::new(CacheFetch {
                    cache: self.cache.clone(),
                }),
                &self.repo,
            )
            .read(&graph)
            .await?;
            paths.extend(external_data_files(&graph, &bytes)?);
        }
        log::info(&format!(
            "the first image: loading the vision encoder ({})",
            paths.join(", ")
        ));
        download_files(&self.cache, &self.repo, &self.model_size, paths, &|_| false)
            .await
            .map_err(failed)?;
        report(
            &self.model_size,
            &self.repo,
            ModelState::Initializing {
                stage: "loading the vision encoder into GPU memory".to_owned(),
            },
        );
        let repo = ModelRepo::new(
            Rc::new(CacheFetch {
                cache: self.cache.clone(),
            }),
            &self.repo,
        );
        VisionEncoder::load(self.gpu.clone(), &repo, &self.config, self.dtype).await
    }
}

impl ImageEncoder for LazyVision {
    fn encode<'a>(
        &'a self,
        image: &'a gg_llm::image::PreparedImage,
    ) -> futures::future::LocalBoxFuture<'a, gg_llm::Result<gg_runtime::Value>> {
        Box::pin(async move {
            let encoder = self.encoder().await?;
            ImageEncoder::encode(encoder.as_ref(), image).await
        })
    }
}

/// The GPU went away: drop the model (it reloads with the next message) and tell the host.
fn device_lost(model_size: &str, source: &str, message: &str) {
    log::error(&format!("the GPU device was lost: {message}"));
    SLOT.with(|slot| {
        let mut slot = slot.borrow_mut();
        if matches!(&*slot, Slot::Ready(l) if l.backend.lost()) {
            *slot = Slot::Empty;
        }
    });
    report(
        model_size,
        source,
        ModelState::Failed {
            tab_id: None,
            kind: ModelErrorKind::DeviceLost,
            message: format!(
                "The GPU stopped working for the model ({message}). It loads again with your next message; if this repeats, close other GPU-heavy tabs or restart the browser."
            ),
        },
    );
}

/// A WebGPU device with the adapter's limits, after checking that it can hold the model, and
/// the adapter's description.
async fn open_gpu() -> Result<(gg_runtime::Gpu, String), LoadError> {
    let unavailable = |m: String| LoadError::new(ModelErrorKind::WebgpuUnavailable, m);
    let probe = crate::webgpu::probe_webgpu().await;
    if let Some(error) = probe.error {
        return Err(unavailable(error));
    }
    let gpu = gg_runtime::Gpu::with_tuning(None, |a| Ok(gg_runtime::Tuning::for_adapter(a)))
        .await
        .map_err(|e| {
        unavailable(format!(
            "Could not open the GPU for the model ({e}). Check chrome://gpu: WebGPU must be hardware accelerated."
        ))
    })?;
    let binding = gpu.limits.max_storage_buffer_binding_size;
    let buffer = gpu.limits.max_buffer_size;
    if binding.min(buffer) < MIN_BINDING_BYTES {
        return Err(unavailable(format!(
            "This GPU ({}) allows only {} MiB per storage buffer (binding {} MiB, buffer {} MiB); the model needs at least {} MiB. Try another browser or GPU.",
            gpu.adapter,
            binding.min(buffer) >> 20,
            binding >> 20,
            buffer >> 20,
            MIN_BINDING_BYTES >> 20
        )));
    }
    let adapter = probe
        .adapter
        .map(|a| format!("{} {} {}", a.vendor, a.architecture, a.device))
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| gpu.adapter.clone());
    Ok((gpu, adapter))
}

/// Downloads every file of the model variant that the cache lacks, reporting progress.
async fn download_all(
    cache: &Rc<ModelCache>,
    repo: &str,
    model_size: &str,
    dtype: Dtype,
) -> Result<(), LoadError> {
    // genai_config.json (an ONNX Runtime GenAI package) or config.json (onnx-community) first:
    // they name the files.
    let reader = ModelRepo::new(
        Rc::new(CacheFetch {
            cache: cache.clone(),
        }),
        repo,
    );
    let read = async |path: &str| {
        reader
            .read(path)
            .await
            .map_err(|e| LoadError::new(ModelErrorKind::LoadFailed, e.to_string()))
    };
    let mut genai_meta = cache.meta("genai_config.json").await;
    if !genai_meta.missing {
        cache
            .download("genai_config.json", &mut genai_meta, true, &mut |_| {})
            .await?;
    }
    let config = if genai_meta.complete {
        let mut config_meta = cache.meta("config.json").await;
        if !config_meta.missing {
            cache
                .download("config.json", &mut config_meta, true, &mut |_| {})
                .await?;
        }
        let config_bytes = if config_meta.complete {
            Some(read("config.json").await?)
        } else {
            None
        };
        ModelConfig::parse_genai(
            &read("genai_config.json").await?,
            config_bytes.as_deref(),
            None,
        )
        .map_err(|e| {
            LoadError::new(
                ModelErrorKind::LoadFailed,
                format!("{}: {e}", cache.url("genai_config.json")),
            )
        })?
    } else {
        let mut config_meta = cache.meta("config.json").await;
        cache
            .download("config.json", &mut config_meta, false, &mut |_| {})
            .await?;
        ModelConfig::parse(&read("config.json").await?, None).map_err(|e| {
            LoadError::new(
                ModelErrorKind::LoadFailed,
                format!("{}: {e}", cache.url("config.json")),
            )
        })?
    };
    let genai = matches!(config.package, Package::Genai { .. });
    let mut paths = config.files(dtype);
    if genai {
        // A GenAI package names its external data only inside each graph: fetch the graphs
        // (small next to their data) and read the names from them.
        for graph in config.graph_files(dtype) {
            let mut meta = cache.meta(&graph).await;
            cache
                .download(&graph, &mut meta, false, &mut |_| {})
                .await?;
            let bytes = read(&graph).await?;
            let external = external_data_files(&graph, &bytes).map_err(|e| {
                LoadError::new(
                    ModelErrorKind::LoadFailed,
                    format!("{}: {e}", cache.url(&graph)),
                )
            })?;
            paths.extend(external);
        }
    }
    let optional_files = if genai {
        GENAI_OPTIONAL_FILES
    } else {
        OPTIONAL_FILES
    };
    // the image processor's config (small) is read at load; the vision encoder itself is
    // downloaded on the first image ([`LazyVision`])
    let image_configs = config.image_config_files();
    paths.extend(image_configs.iter().cloned());
    let optional =
        |path: &str| optional_files.contains(&path) || image_configs.iter().any(|f| f == path);
    download_files(cache, repo, model_size, paths, &optional).await
}

/// Downloads each of `paths` that the cache lacks (an `optional` one may be absent), checking
/// the quota first and broadcasting progress.
async fn download_files(
    cache: &Rc<ModelCache>,
    repo: &str,
    model_size: &str,
    paths: Vec<String>,
    optional_file: &dyn Fn(&str) -> bool,
) -> Result<(), LoadError> {
    let mut files = Vec::new();
    let mut tracker = Tracker::default();
    for path in paths {
        let mut meta = cache.meta(&path).await;
        let optional = optional_file(&path);
        if !meta.complete && !meta.missing && meta.size.is_none() {
            match cache.probe(&path).await {
                Ok(size) => meta.size = size,
                Err(_) if optional => {}
                Err(e) => return Err(e),
            }
        }
        if !meta.missing {
            tracker.add_file(&path, meta.stored(), meta.size);
        }
        files.push((path, meta, optional));
    }
    let remaining: u64 = files
        .iter()
        .filter(|(_, m, _)| !m.complete && !m.missing)
        .map(|(_, m, _)| m.size.unwrap_or(0).saturating_sub(m.stored()))
        .sum();
    if remaining == 0 && files.iter().all(|(_, m, _)| m.complete || m.missing) {
        log::debug("every model file is in the cache");
        return Ok(());
    }
    if let Some((usage, quota)) = crate::cache::storage_estimate().await {
        let free = quota.saturating_sub(usage);
        if free < remaining {
            return Err(out_of_space(remaining - free, "the remaining model files").await);
        }
    }
    let now = || js_sys::Date::now();
    let send = |tracker: &Tracker| {
        report(
            model_size,
            repo,
            ModelState::Downloading(tracker.snapshot(now())),
        )
    };
    tracker.report_due(now());
    send(&tracker);
    for (path, meta, optional) in &mut files {
        if meta.complete || meta.missing {
            continue;
        }
        let result = cache
            .download(path, meta, *optional, &mut |ev| {
                match ev {
                    DownloadEvent::Total(t) => tracker.set_total(path, t),
                    DownloadEvent::Restart => tracker.restart(path),
                    DownloadEvent::Bytes(n) => tracker.received(path, n, now()),
                }
                if tracker.report_due(now()) {
                    send(&tracker);
                }
            })
            .await;
        // The last numbers of a file always go out (also when it failed part-way).
        send(&tracker);
        result?;
    }
    Ok(())
}

/// The shared model, one generation at a time: requests from several conversations (the extension's tabs) queue here.
struct QueuedBackend {
    inner: GemmaBackend,
    turn: Mutex<()>,
    lost: Arc<AtomicBool>,
}

impl QueuedBackend {
    fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl ModelBackend for QueuedBackend {
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        options: &'a GenerateOptions,
    ) -> ChunkStream<'a> {
        futures::stream::once(async move {
            let guard = self.turn.lock().await;
            self.inner
                .generate(messages, tools, options)
                .map(move |chunk| {
                    let _held = &guard;
                    chunk
                })
        })
        .flatten()
        .boxed_local()
    }

    fn token_counter(&self) -> Option<&dyn gg_agent::TokenCounter> {
        Some(&self.inner)
    }
}

/// The context limit (tokens) of the loaded model of `repo`, if its config states it.
pub fn context_limit(repo: &str) -> Option<usize> {
    SLOT.with(|s| match &*s.borrow() {
        Slot::Ready(l) if l.repo == repo => l.backend.inner.model().context_limit(),
        _ => None,
    })
}

/// Why [`dev_greedy`] produced nothing.
#[cfg(feature = "dev-probe")]
#[derive(Debug, thiserror::Error)]
pub enum DevGreedyError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("the model of {0} is not loaded")]
    NotLoaded(String),
    /// The runtime failed while generating (its error's text).
    #[error("{0}")]
    Generation(String),
}

/// [`OffscreenCommand::DevGreedy`](gg_messages::OffscreenCommand::DevGreedy) (development builds): loads the model of
/// `repo` exactly as a turn does ([`backend`]), then, queued behind any running turn, generates
/// `max_new_tokens` greedy tokens after `input_ids`.
#[cfg(feature = "dev-probe")]
pub async fn dev_greedy(
    repo: &str,
    model_size: &str,
    input_ids: &[u32],
    max_new_tokens: u32,
) -> Result<gg_messages::DevGreedyResult, DevGreedyError> {
    use wasm_bindgen::JsCast;
    backend(repo, model_size).await?;
    let loaded = SLOT
        .with(|s| match &*s.borrow() {
            Slot::Ready(l) if l.repo == repo => Some(l.clone()),
            _ => None,
        })
        .ok_or_else(|| DevGreedyError::NotLoaded(repo.to_owned()))?;
    let _turn = loaded.backend.turn.lock().await;
    let model = loaded.backend.inner.model().clone();
    let mut g = gg_llm::Generator::new(&model, input_ids, gg_llm::Sampling::Greedy)
        .map_err(|e| DevGreedyError::Generation(e.to_string()))?;
    let mut tokens = Vec::new();
    let t0 = js_sys::Date::now();
    let mut prefill_ms = 0.0;
    for i in 0..max_new_tokens {
        tokens.push(
            g.next_token()
                .await
                .map_err(|e| DevGreedyError::Generation(e.to_string()))?,
        );
        if i == 0 {
            prefill_ms = js_sys::Date::now() - t0;
        }
    }
    let decode_ms = js_sys::Date::now() - t0 - prefill_ms;
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    // read as a number: a full 4 GiB memory does not fit `ArrayBuffer::byte_length`'s u32
    let wasm_memory_bytes = js_sys::Reflect::get(&memory.buffer(), &"byteLength".into())
        .ok()
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0) as u64;
    log::info(&format!(
        "dev greedy: {} tokens after {} ids (prefill {prefill_ms:.0} ms, decode {decode_ms:.0} ms), wasm memory {} MiB",
        tokens.len(),
        input_ids.len(),
        wasm_memory_bytes >> 20
    ));
    Ok(gg_messages::DevGreedyResult {
        tokens,
        prefill_ms,
        decode_ms,
        wasm_memory_bytes,
        gpu_bytes_uploaded: model.gpu.counters.bytes_uploaded.get(),
        dtype: model.variant(),
    })
}

/// What the loaded model would be given for a conversation ([`probe_prompt`]).
#[cfg(feature = "scripted-model")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptProbe {
    /// How many ids of the prompt are the model's `<|image|>` soft token.
    pub image_tokens: usize,
    /// The row count of each image's encoded features, in prompt order.
    pub feature_rows: Vec<usize>,
}

/// Why [`probe_prompt`] produced nothing.
#[cfg(feature = "scripted-model")]
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("the model of {0} is not loaded")]
    NotLoaded(String),
    #[error("the model of {0} has no image tokens in its tokenizer")]
    NoImageTokens(String),
    /// Preparing the prompt failed (its error's text).
    #[error("{0}")]
    Prepare(String),
}

/// For the scripted model of development builds: loads the model of `repo` exactly as a turn
/// does ([`backend`]), then, queued behind any running turn, prepares the prompt a generation
/// would start from ([`GemmaBackend::prepare`]: the template, the images preprocessed at
/// `options.image_tokens`, the vision encoder — downloaded and loaded on the first image — and
/// the placeholders expanded) and reports the prompt's image tokens and the features' rows.
/// Nothing is generated.
#[cfg(feature = "scripted-model")]
pub async fn probe_prompt(
    repo: &str,
    model_size: &str,
    messages: &[ChatMessage],
    tools: &[ToolDefinition],
    options: &GenerateOptions,
) -> Result<PromptProbe, ProbeError> {
    backend(repo, model_size).await?;
    let loaded = SLOT
        .with(|s| match &*s.borrow() {
            Slot::Ready(l) if l.repo == repo => Some(l.clone()),
            _ => None,
        })
        .ok_or_else(|| ProbeError::NotLoaded(repo.to_owned()))?;
    let _turn = loaded.backend.turn.lock().await;
    let inner = &loaded.backend.inner;
    let soft = inner
        .model()
        .image_tokens
        .ok_or_else(|| ProbeError::NoImageTokens(repo.to_owned()))?
        .image;
    let prepared = inner
        .prepare(messages, tools, options)
        .await
        .map_err(|e| ProbeError::Prepare(e.to_string()))?;
    Ok(PromptProbe {
        image_tokens: prepared.ids.iter().filter(|&&id| id == soft).count(),
        feature_rows: prepared
            .features
            .iter()
            .map(|f| f.shape().first().copied().unwrap_or(0))
            .collect(),
    })
}
