//! Gemma 4's vision encoder in the browser: the mobius fixtures' encoders loaded through
//! `VisionEncoder::load` (the same `ModelRepo` / `Fetch` path the extension uses) on headless
//! Chromium's WebGPU (SwiftShader), on the cases of `reference/vision.json` (square, wide, tall,
//! small, padded; `tools/fixtures/vision_reference.py`), against ONNX Runtime's features with the
//! same tolerance as natively (`tests/vision.rs`: 1e-4 abs + 1e-4 rel, all f32), and against
//! transformers' vision tower on the same weights within 1e-4 abs
//! (`reference/vision.<case>.transformers_features.npy`, `tools/fixtures/vision_transformers.py`).
//!
//! Run by `cargo xtask test` (stage "wasm tests"; `runtime/llm/webdriver.json` turns WebGPU on).
#![cfg(target_arch = "wasm32")]

use futures::future::LocalBoxFuture;
use gg_llm::config::ModelConfig;
use gg_llm::{Dtype, ModelRepo, VisionEncoder};
use gg_runtime::source::ByteStream;
use gg_runtime::{Gpu, HostTensor};
use serde_json::Value;
use std::rc::Rc;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! file {
    ($fixture:literal, $path:expr) => {
        (
            $path,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/fixtures/models/",
                $fixture,
                "/",
                $path
            )) as &[u8],
        )
    };
}

/// One reference case's three arrays.
macro_rules! case {
    ($fixture:literal, $case:literal) => {
        [
            file!(
                $fixture,
                concat!("reference/vision.", $case, ".pixel_values.npy")
            ),
            file!(
                $fixture,
                concat!("reference/vision.", $case, ".pixel_position_ids.npy")
            ),
            file!(
                $fixture,
                concat!("reference/vision.", $case, ".image_features.npy")
            ),
            file!(
                $fixture,
                concat!("reference/vision.", $case, ".transformers_features.npy")
            ),
        ]
    };
}

/// A package's vision encoder, its genai_config.json and its reference cases.
macro_rules! package {
    ($name:literal) => {
        (
            $name,
            &[
                file!($name, "genai_config.json"),
                file!($name, "vision_encoder/model.onnx"),
                file!($name, "vision_encoder/model.onnx.data"),
                file!($name, "reference/vision.json"),
                case!($name, "square")[0],
                case!($name, "square")[1],
                case!($name, "square")[2],
                case!($name, "square")[3],
                case!($name, "wide")[0],
                case!($name, "wide")[1],
                case!($name, "wide")[2],
                case!($name, "wide")[3],
                case!($name, "tall")[0],
                case!($name, "tall")[1],
                case!($name, "tall")[2],
                case!($name, "tall")[3],
                case!($name, "small")[0],
                case!($name, "small")[1],
                case!($name, "small")[2],
                case!($name, "small")[3],
                case!($name, "padded")[0],
                case!($name, "padded")[1],
                case!($name, "padded")[2],
                case!($name, "padded")[3],
            ] as &[(&str, &[u8])],
        )
    };
}

type Package = (&'static str, &'static [(&'static str, &'static [u8])]);

#[rustfmt::skip]
const PACKAGES: &[Package] = &[
    package!("mobius-tiny-gqa-int4-split"),
    package!("mobius-tiny-attn-fp32-split"),
];

/// A model repository held in memory, read in small chunks like a network body.
struct MemoryFetch(&'static [(&'static str, &'static [u8])]);

struct Chunks {
    data: &'static [u8],
    pos: usize,
}

impl ByteStream for Chunks {
    fn next_chunk(&mut self) -> LocalBoxFuture<'_, gg_runtime::Result<Option<Vec<u8>>>> {
        let end = (self.pos + 64 * 1024).min(self.data.len());
        let out = (self.pos < end).then(|| self.data[self.pos..end].to_vec());
        self.pos = end;
        Box::pin(async move { Ok(out) })
    }
}

impl gg_llm::source::Fetch for MemoryFetch {
    fn open(&self, path: &str) -> LocalBoxFuture<'_, gg_runtime::Result<Box<dyn ByteStream>>> {
        let found = self.0.iter().find(|(p, _)| *p == path).map(|(_, d)| *d);
        let path = path.to_owned();
        Box::pin(async move {
            match found {
                Some(data) => Ok(Box::new(Chunks { data, pos: 0 }) as Box<dyn ByteStream>),
                None => Err(gg_runtime::Error::Io {
                    path,
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not in the test repository",
                    ),
                }),
            }
        })
    }
}

fn get(files: &[(&str, &'static [u8])], path: &str) -> &'static [u8] {
    files
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, d)| *d)
        .unwrap_or_else(|| panic!("{path} is not embedded"))
}

fn npy(files: &[(&str, &'static [u8])], path: &str) -> HostTensor {
    gg_runtime::npy::parse(path, get(files, path)).expect("npy")
}

/// The largest |got − want|, or the first element outside `atol + rtol·|want|` (or a shape
/// mismatch), `what` naming the reference in the message.
fn within(
    got: &HostTensor,
    want: &HostTensor,
    atol: f64,
    rtol: f64,
    what: &str,
) -> Result<f64, String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, {what} {:?}", got.shape, want.shape));
    }
    let mut worst = 0.0f64;
    for (i, (g, e)) in got.to_f64().iter().zip(want.to_f64()).enumerate() {
        let d = (g - e).abs();
        if d.is_nan() || d > atol + rtol * e.abs() {
            return Err(format!("index {i}: got {g}, {what} {e}"));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}

#[wasm_bindgen_test]
async fn vision_encoders_match_onnx_runtime_on_webgpu() {
    let gpu = Rc::new(Gpu::new(None).await.expect(
        "a WebGPU adapter (headless Chromium needs --enable-unsafe-webgpu, see webdriver.json)",
    ));
    console_log!("adapter: {gpu:?}");
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, files) in PACKAGES {
        let repo = ModelRepo::new(Rc::new(MemoryFetch(files)), *name);
        let config = ModelConfig::parse_genai(get(files, "genai_config.json"), None, None)
            .expect("genai_config.json");
        let enc = VisionEncoder::load(gpu.clone(), &repo, &config, Dtype::Q4)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The layer's attention and its query and key 2-D rotaries run fused on WebGPU too.
        let fused = enc.session().fused();
        let attn = fused.iter().filter(|f| f.contains("=Attention]")).count();
        let rotary = fused.iter().filter(|f| f.contains("=Rotary2D]")).count();
        assert_eq!((attn, rotary), (1, 2), "{name}: fused groups {fused:?}");
        let doc: Value =
            serde_json::from_slice(get(files, "reference/vision.json")).expect("vision.json");
        let (atol, rtol) = (
            doc["atol"].as_f64().expect("atol"),
            doc["rtol"].as_f64().expect("rtol"),
        );
        for case in doc["cases"].as_array().expect("cases") {
            let c = case["name"].as_str().expect("name");
            let slots = case["slots"].as_u64().expect("slots") as usize;
            let pv = npy(files, &format!("reference/vision.{c}.pixel_values.npy"));
            let pos = npy(
                files,
                &format!("reference/vision.{c}.pixel_position_ids.npy"),
            );
            let exp = npy(files, &format!("reference/vision.{c}.image_features.npy"));
            let hf = npy(
                files,
                &format!("reference/vision.{c}.transformers_features.npy"),
            );
            ran += 1;
            let got = match enc.encode(&pv.to_f32(), &pos.to_i64(), slots).await {
                Ok(f) => enc.read(&f).await.expect("read back"),
                Err(e) => {
                    failures.push(format!("{name} {c}: {e}"));
                    continue;
                }
            };
            // transformers' vision tower on the same weights (`tests/vision.rs`,
            // vision_encoders_match_transformers): within 1e-4 absolute.
            match (
                within(&got, &exp, atol, rtol, "expected"),
                within(&got, &hf, 1e-4, 0.0, "transformers"),
            ) {
                (Ok(worst), Ok(worst_hf)) => console_log!(
                    "ok   {name} {c}: {:?}, max |diff| {worst:.2e} vs ONNX Runtime, {worst_hf:.2e} vs transformers",
                    got.shape
                ),
                (Err(e), _) => failures.push(format!("{name} {c}: {e} (atol {atol}, rtol {rtol})")),
                (Ok(_), Err(e)) => {
                    failures.push(format!("{name} {c} vs transformers: {e} (atol 1e-4)"))
                }
            }
        }
    }
    assert!(ran >= 10, "five cases per package");
    assert!(
        failures.is_empty(),
        "{} of {ran} cases differ from ONNX Runtime or transformers on WebGPU:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The float16 package's encoder (`mobius-tiny-webgpu-int4f16-split`: its norms, GEMMs and 2-D
/// rotaries fused in float16) on WebGPU: ONNX Runtime's float16 features within the tolerance of
/// its vision.json (`tests/vision.rs` has the reasoning), on a case with padding and one without.
#[wasm_bindgen_test]
async fn float16_vision_encoder_on_webgpu() {
    const NAME: &str = "mobius-tiny-webgpu-int4f16-split";
    const FILES: &[(&str, &[u8])] = &[
        file!("mobius-tiny-webgpu-int4f16-split", "genai_config.json"),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "vision_encoder/model.onnx"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "vision_encoder/model.onnx.data"
        ),
        file!("mobius-tiny-webgpu-int4f16-split", "reference/vision.json"),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.square.pixel_values.npy"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.square.pixel_position_ids.npy"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.square.image_features.npy"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.padded.pixel_values.npy"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.padded.pixel_position_ids.npy"
        ),
        file!(
            "mobius-tiny-webgpu-int4f16-split",
            "reference/vision.padded.image_features.npy"
        ),
    ];
    let gpu = Rc::new(Gpu::new(None).await.expect("a WebGPU adapter"));
    let repo = ModelRepo::new(Rc::new(MemoryFetch(FILES)), NAME);
    let config =
        ModelConfig::parse_genai(get(FILES, "genai_config.json"), None, None).expect("genai");
    let enc = VisionEncoder::load(gpu, &repo, &config, Dtype::Q4)
        .await
        .unwrap_or_else(|e| panic!("{NAME}: {e}"));
    let fused = enc.session().fused();
    let rotary = fused.iter().filter(|f| f.contains("=Rotary2D]")).count();
    assert_eq!(rotary, 2, "{NAME}: fused groups {fused:?}");
    let doc: Value = serde_json::from_slice(get(FILES, "reference/vision.json")).expect("json");
    let (atol, rtol) = (
        doc["atol"].as_f64().expect("atol"),
        doc["rtol"].as_f64().expect("rtol"),
    );
    for case in doc["cases"].as_array().expect("cases") {
        let c = case["name"].as_str().expect("name");
        if c != "square" && c != "padded" {
            continue;
        }
        let slots = case["slots"].as_u64().expect("slots") as usize;
        let pv = npy(FILES, &format!("reference/vision.{c}.pixel_values.npy"));
        let pos = npy(
            FILES,
            &format!("reference/vision.{c}.pixel_position_ids.npy"),
        );
        let exp = npy(FILES, &format!("reference/vision.{c}.image_features.npy"));
        let f = enc
            .encode(&pv.to_f32(), &pos.to_i64(), slots)
            .await
            .unwrap_or_else(|e| panic!("{NAME} {c}: {e}"));
        let got = enc.read(&f).await.expect("read back");
        let worst = within(&got, &exp, atol, rtol, "expected")
            .unwrap_or_else(|e| panic!("{NAME} {c}: {e} (atol {atol}, rtol {rtol})"));
        console_log!("ok   {NAME} {c}: {:?}, max |diff| {worst:.2e}", got.shape);
    }
}
