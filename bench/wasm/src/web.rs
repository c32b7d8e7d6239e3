//! wasm-bindgen exports and a `fetch` implementation of [`gg_llm::source::Fetch`] that streams
//! response bodies (bounded chunks; a model file is never held whole in wasm memory).

use futures::future::LocalBoxFuture;
use gg_llm::config::ModelConfig;
use gg_llm::image::ImageConfig;
use gg_llm::source::Fetch;
use gg_llm::{Dtype, GemmaModel, Generator, LoadOptions, ModelRepo, Sampling, VisionEncoder};
use gg_runtime::source::ByteStream;
use js_sys::{Promise, Reflect, Uint8Array};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, future_to_promise};

/// Chunks handed to the loader are gathered up to this size (network reads are often 64 KiB).
const CHUNK: usize = 4 << 20;

fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsError::new(&e.to_string()).into()
}

fn io_err(path: &str, message: String) -> gg_runtime::Error {
    gg_runtime::Error::Io {
        path: path.to_string(),
        source: std::io::Error::other(message),
    }
}

fn describe(v: &JsValue) -> String {
    v.as_string()
        .or_else(|| {
            v.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{v:?}"))
}

/// Repository files fetched from `base` (an URL ending in `/`).
struct HttpFetch {
    base: String,
}

struct BodyStream {
    url: String,
    reader: web_sys::ReadableStreamDefaultReader,
    done: bool,
}

impl ByteStream for BodyStream {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, gg_runtime::Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            while !self.done && out.len() < CHUNK {
                let res = JsFuture::from(self.reader.read())
                    .await
                    .map_err(|e| io_err(&self.url, describe(&e)))?;
                let done = Reflect::get(&res, &"done".into())
                    .ok()
                    .and_then(|d| d.as_bool())
                    .unwrap_or(true);
                if done {
                    self.done = true;
                    break;
                }
                let value = Reflect::get(&res, &"value".into())
                    .map_err(|e| io_err(&self.url, describe(&e)))?;
                let bytes: Uint8Array = value.unchecked_into();
                let start = out.len();
                out.resize(start + bytes.length() as usize, 0);
                bytes.copy_to(&mut out[start..]);
            }
            Ok((!out.is_empty()).then_some(out))
        })
    }
}

impl Fetch for HttpFetch {
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>> {
        let url = format!("{}{path}", self.base);
        Box::pin(async move {
            let io = |what: &str, e: &JsValue| io_err(&url, format!("{what}: {}", describe(e)));
            let window = web_sys::window()
                .ok_or_else(|| io_err(&url, "the bench page must run in a window".into()))?;
            let resp = JsFuture::from(window.fetch_with_str(&url))
                .await
                .map_err(|e| io("fetch failed", &e))?;
            let resp: web_sys::Response = resp.unchecked_into();
            if !resp.ok() {
                return Err(io_err(&url, format!("HTTP {}", resp.status())));
            }
            let body = resp
                .body()
                .ok_or_else(|| io_err(&url, "empty body".into()))?;
            let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().unchecked_into();
            Ok(Box::new(BodyStream {
                url,
                reader,
                done: false,
            }) as Box<dyn ByteStream>)
        })
    }
}

/// The repository under `base_url`, with a trailing `/`.
fn http_repo(base_url: String) -> ModelRepo {
    let base = if base_url.ends_with('/') {
        base_url
    } else {
        format!("{base_url}/")
    };
    ModelRepo::new(Rc::new(HttpFetch { base: base.clone() }), base)
}

/// A loaded model. It lives as long as the page (leaked at load: the bench opens a fresh page
/// per run), so that a [`BenchGeneration`] can hold a generator borrowing it across awaits.
#[wasm_bindgen]
pub struct BenchModel {
    model: &'static GemmaModel,
}

/// Loads the model whose files are under `base_url` (`config.json`, `onnx/...`) with weight
/// variant `dtype` (`q4` or `q4f16`; empty: by the adapter).
#[wasm_bindgen]
pub async fn load(base_url: String, dtype: String) -> Result<BenchModel, JsValue> {
    let dtype = match dtype.as_str() {
        "" => None,
        d => Some(d.parse::<Dtype>().map_err(js_err)?),
    };
    let gpu = gg_runtime::Gpu::with_tuning(None, |a| Ok(gg_runtime::Tuning::for_adapter(a)));
    let gpu = Rc::new(gpu.await.map_err(js_err)?);
    let repo = http_repo(base_url);
    let model = GemmaModel::load(gpu, &repo, &LoadOptions { dtype })
        .await
        .map_err(js_err)?;
    Ok(BenchModel {
        model: Box::leak(Box::new(model)),
    })
}

#[wasm_bindgen]
impl BenchModel {
    /// The adapter description.
    pub fn adapter(&self) -> String {
        self.model.gpu.adapter.clone()
    }

    /// The weight variant in use (`q4` / `q4f16`).
    pub fn dtype(&self) -> String {
        self.model.dtype.name().into()
    }

    /// Vocabulary size the prompts are drawn from.
    pub fn vocab(&self) -> usize {
        gg_llm::bench::vocab_of(self.model)
    }

    /// Decode inside a constrained tool call (`gg_llm::bench::decode_in_call`): the synthetic
    /// prompt of `context` tokens and `<|tool_call>`, then `tokens` greedy steps under the
    /// grammar of the agent's built-in tools (the mask computed on the host, uploaded, applied by
    /// the sampling kernel) until the model closes the call, unconstrained after. Resolves to
    /// JSON: `context` (with `<|tool_call>`), `call_tokens`, `call_s`, `call_tok_s`,
    /// `free_tokens`, `free_s`, `free_tok_s` (null when the call did not close),
    /// `mask_ms_per_token`, `bytes_uploaded_per_token`. Its times are the generator's own
    /// counters, which read `performance.now()` in wasm (the page's clock).
    pub fn decode_in_call(&self, context: usize, tokens: usize) -> Promise {
        let model = self.model;
        future_to_promise(async move {
            let r = gg_llm::bench::decode_in_call(model, context, tokens, None)
                .await
                .map_err(js_err)?;
            Ok(JsValue::from(
                serde_json::json!({
                    "context": r.context,
                    "call_tokens": r.call_tokens,
                    "call_s": r.call_s,
                    "call_tok_s": r.call_tok_s(),
                    "free_tokens": r.free_tokens,
                    "free_s": r.free_s,
                    "free_tok_s": (r.free_tokens > 0).then(|| r.free_tok_s()),
                    "mask_ms_per_token": r.mask_ms_per_token,
                    "bytes_uploaded_per_token": r.bytes_uploaded_per_token,
                })
                .to_string(),
            ))
        })
    }

    /// Starts a greedy generation on the prompt `ids`; the bench page times its steps with
    /// `performance.now()` around the returned promises, as it does onnxruntime-web's.
    pub fn generation(&self, ids: Vec<u32>) -> Result<BenchGeneration, JsValue> {
        let g = Generator::new(self.model, &ids, Sampling::Greedy).map_err(js_err)?;
        Ok(BenchGeneration {
            generator: Rc::new(RefCell::new(Some(g))),
            mark: std::cell::Cell::new(None),
        })
    }
}

/// One greedy generation driven step by step from JS.
#[wasm_bindgen]
pub struct BenchGeneration {
    /// Taken out while a step runs (steps are awaited one at a time).
    generator: Rc<RefCell<Option<Generator<'static>>>>,
    /// The statistics when the decode clock started ([`BenchGeneration::mark`]).
    mark: std::cell::Cell<Option<gg_llm::GenerationStats>>,
}

impl BenchGeneration {
    fn step(&self, ahead: bool) -> Promise {
        let cell = self.generator.clone();
        future_to_promise(async move {
            let mut g = cell
                .borrow_mut()
                .take()
                .ok_or_else(|| js_err("a step of this generation is already running"))?;
            let r = if ahead {
                g.next_token().await
            } else {
                g.last_token().await
            };
            *cell.borrow_mut() = Some(g);
            Ok(JsValue::from(r.map_err(js_err)?))
        })
    }
}

#[wasm_bindgen]
impl BenchGeneration {
    /// The first token id (the prompt's step). Nothing runs ahead of it, so when it resolves no
    /// step of this generation is in flight: the decode clock starts from an idle queue.
    pub fn first(&self) -> Promise {
        self.step(false)
    }

    /// The next token id: with `last` false the step after it runs ahead where the adapter's
    /// submits overlap (as a text stream decodes); with `last` true nothing is left in flight.
    pub fn next(&self, last: bool) -> Promise {
        self.step(!last)
    }

    /// Marks where the decode clock starts: [`BenchGeneration::counters`] then counts the decode
    /// steps after this call only (the bench page's untimed step comes before it).
    pub fn mark(&self) -> Result<(), JsValue> {
        let cell = self.generator.borrow();
        let g = cell
            .as_ref()
            .ok_or_else(|| js_err("a step of this generation is running"))?;
        self.mark.set(Some(g.stats()));
        Ok(())
    }

    /// The work counters per decoded token (JSON) since [`BenchGeneration::mark`], else since
    /// the prompt: dispatches, submits, bytes read back and uploaded, buffers and bind groups
    /// created, host recording milliseconds.
    pub fn counters(&self) -> Result<String, JsValue> {
        let cell = self.generator.borrow();
        let g = cell
            .as_ref()
            .ok_or_else(|| js_err("a step of this generation is running"))?;
        let s = g.stats();
        let m = self.mark.get().unwrap_or_default();
        let tokens = s.decode_tokens - m.decode_tokens;
        let per = |v: u64, from: u64| (v - from) as f64 / tokens.max(1) as f64;
        Ok(serde_json::json!({
            "decode_tokens": tokens,
            "dispatches_per_token": per(s.decode_dispatches, m.decode_dispatches),
            "submits_per_token": per(s.decode_submits, m.decode_submits),
            "bytes_read_back_per_token": per(s.decode_bytes_read_back, m.decode_bytes_read_back),
            "buffers_created_per_token": per(s.decode_buffers_created, m.decode_buffers_created),
            "bytes_uploaded_per_token": per(s.decode_bytes_uploaded, m.decode_bytes_uploaded),
            "bind_groups_created_per_token": per(s.decode_bind_groups_created, m.decode_bind_groups_created),
            "record_ms_per_token": if tokens == 0 { 0.0 } else { (s.decode_record_s - m.decode_record_s) * 1000.0 / tokens as f64 },
        })
        .to_string())
    }
}

/// A loaded vision encoder (leaked like [`BenchModel`]: the page lives for one measurement).
#[wasm_bindgen]
pub struct BenchVision {
    encoder: &'static VisionEncoder,
    /// The pooling window's side (`pooling_kernel_size` of the image processor's config).
    pool: usize,
}

/// Loads the vision encoder of the model under `base_url` (an ONNX Runtime GenAI package with
/// `genai_config.json`, else the onnx-community layout's `config.json`), with the weight variant
/// the adapter picks, and its pooling from the image processor's config.
#[wasm_bindgen]
pub async fn load_vision(base_url: String) -> Result<BenchVision, JsValue> {
    let gpu = gg_runtime::Gpu::with_tuning(None, |a| Ok(gg_runtime::Tuning::for_adapter(a)));
    let gpu = Rc::new(gpu.await.map_err(js_err)?);
    let repo = http_repo(base_url);
    let config = match repo.read_optional("genai_config.json").await {
        Some(g) => ModelConfig::parse_genai(&g, None, None).map_err(js_err)?,
        None => ModelConfig::parse(&repo.read("config.json").await.map_err(js_err)?, None)
            .map_err(js_err)?,
    };
    let mut image = None;
    for file in config.image_config_files() {
        if let Some(bytes) = repo.read_optional(&file).await {
            image = Some(ImageConfig::parse(&bytes).map_err(js_err)?);
            break;
        }
    }
    let image = image.ok_or_else(|| {
        js_err(format!(
            "{}: no image processor config (looked for {:?})",
            repo.name(),
            config.image_config_files()
        ))
    })?;
    let dtype = Dtype::for_adapter(gpu.has_shader_f16);
    let encoder = VisionEncoder::load(gpu, &repo, &config, dtype)
        .await
        .map_err(js_err)?;
    Ok(BenchVision {
        encoder: Box::leak(Box::new(encoder)),
        pool: image.pooling_kernel_size,
    })
}

/// The host patches of a synthetic image (`gg_llm::bench::synthetic_image`), made before the
/// clock starts.
#[wasm_bindgen]
pub struct BenchImage {
    pixels: Rc<Vec<f32>>,
    positions: Rc<Vec<i64>>,
    slots: usize,
    soft_tokens: usize,
}

#[wasm_bindgen]
impl BenchImage {
    /// Patch slots (every one a real patch: `soft_tokens · pool²`).
    pub fn slots(&self) -> usize {
        self.slots
    }
}

#[wasm_bindgen]
impl BenchVision {
    /// The adapter description.
    pub fn adapter(&self) -> String {
        self.encoder.session().gpu.adapter.clone()
    }

    /// Values per patch (3 · patch²).
    pub fn patch_values(&self) -> usize {
        self.encoder.layout().patch_values
    }

    /// The pooling window's side.
    pub fn pooling(&self) -> usize {
        self.pool
    }

    /// A synthetic image of `soft_tokens` soft tokens (the pooled grid as square as the count
    /// allows: 280 -> 20 × 14 cells).
    pub fn image(&self, soft_tokens: usize) -> Result<BenchImage, JsValue> {
        if soft_tokens == 0 {
            return Err(js_err("an image needs at least one soft token"));
        }
        let (pixels, positions, slots) =
            gg_llm::bench::synthetic_image(soft_tokens, self.patch_values(), self.pool);
        Ok(BenchImage {
            pixels: Rc::new(pixels),
            positions: Rc::new(positions),
            slots,
            soft_tokens,
        })
    }

    /// Encodes `image` and downloads the features: the promise resolves once they are on the
    /// host (so the GPU has finished), to JSON: `rows`, `hidden`, `dispatches`, `submits`. The
    /// bench page times it with `performance.now()` around the call. Fails when the encoder gives
    /// another row count than the image's soft tokens.
    pub fn encode(&self, image: &BenchImage) -> Promise {
        let encoder = self.encoder;
        let (pixels, positions) = (image.pixels.clone(), image.positions.clone());
        let (slots, soft_tokens) = (image.slots, image.soft_tokens);
        future_to_promise(async move {
            let gpu = &encoder.session().gpu;
            let before = gpu.counters.snapshot();
            let features = encoder
                .encode(&pixels, &positions, slots)
                .await
                .map_err(js_err)?;
            let host = encoder.read(&features).await.map_err(js_err)?;
            let after = gpu.counters.snapshot();
            if host.shape.first() != Some(&soft_tokens) {
                return Err(js_err(format!(
                    "the vision encoder gave {:?} features for an image of {soft_tokens} soft tokens",
                    host.shape
                )));
            }
            Ok(JsValue::from(
                serde_json::json!({
                    "rows": host.shape[0],
                    "hidden": host.shape.get(1),
                    "dispatches": after.dispatches - before.dispatches,
                    "submits": after.submits - before.submits,
                })
                .to_string(),
            ))
        })
    }
}
