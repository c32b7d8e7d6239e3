//! Prompts with images against ONNX Runtime's full chain (`reference/ort.image.json`, written by
//! `tools/fixtures/gen_image_merge_refs.py`): the conversation rendered by the model's chat
//! template, each image preprocessed (70 soft tokens at the fixtures' patch 4), its placeholder
//! expanded, and ONNX Runtime's vision-encoder features fed with the prompt; 8 greedy tokens
//! equal ONNX Runtime's embedding-with-features → decoder. Both merge layouts: the mobius split
//! packages' embedding graph takes `image_features` (int4 GQA and fp32 Attention), and the
//! onnx-community layout (`gemma4-tiny`, `embed_tokens` with `input_ids` only) gets the features
//! written into `inputs_embeds` on the GPU with the pad id at the image tokens. One image and
//! two images in one prompt.
//!
//! GPU: whatever wgpu picks (in CI `WGPU_BACKEND=vulkan` = Mesa lavapipe).

use futures::future::LocalBoxFuture;
use gg_llm::image::{ImageConfig, PreparedImage};
use gg_llm::{GemmaModel, Generator, ImageEncoder, ImageInput, LoadOptions, ModelRepo, Sampling};
use gg_runtime::{Gpu, HostTensor, Value};
use serde_json::Value as Json;
use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;

const FIXTURES: &[&str] = &[
    "mobius-tiny-gqa-int4-split",
    "mobius-tiny-attn-fp32-split",
    "gemma4-tiny",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn load(gpu: &Rc<Gpu>, name: &str) -> GemmaModel {
    let dir = root().join("models").join(name);
    let repo = ModelRepo::open(dir.to_str().expect("utf-8 path")).expect("repo");
    let mut model = pollster::block_on(GemmaModel::load(
        gpu.clone(),
        &repo,
        &LoadOptions {
            dtype: Some(gg_llm::Dtype::Q4),
        },
    ))
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    if model.image_config.is_none() {
        // the onnx-community-layout fixture has no vision encoder nor processor config: it takes
        // the features of the mobius package with the same weights, preprocessed likewise
        let cfg =
            std::fs::read(root().join("models/mobius-tiny-gqa-int4-split/image_processor.json"))
                .expect("image fixture");
        model.image_config = Some(ImageConfig::parse(&cfg).expect("image fixture"));
    }
    model
}

/// ONNX Runtime's features, handed out image by image.
struct OrtFeatures {
    rows: Vec<Vec<f32>>,
    hidden: usize,
    next: Cell<usize>,
    /// The soft tokens of each image asked for.
    asked: std::cell::RefCell<Vec<usize>>,
}

impl ImageEncoder for OrtFeatures {
    fn encode<'a>(&'a self, image: &'a PreparedImage) -> LocalBoxFuture<'a, gg_llm::Result<Value>> {
        let i = self.next.get();
        self.next.set(i + 1);
        self.asked.borrow_mut().push(image.soft_tokens);
        let rows = &self.rows[i];
        assert_eq!(rows.len(), image.soft_tokens * self.hidden, "image {i}");
        let t = HostTensor::from_f32(vec![image.soft_tokens, self.hidden], rows);
        Box::pin(async move { Ok(Value::Host(t)) })
    }
}

fn messages(case: &Json) -> Vec<gg_gemma::ChatMessage> {
    let dir = root().join("images");
    let mut images = case["images"].as_array().expect("image fixture").iter();
    let parts = case["messages"][0]["content"]
        .as_array()
        .expect("image fixture")
        .iter()
        .map(|p| match p["type"].as_str().expect("image fixture") {
            "text" => gg_agent::Part::Text {
                text: p["text"].as_str().expect("image fixture").into(),
            },
            _ => {
                let f = images
                    .next()
                    .expect("image fixture")
                    .as_str()
                    .expect("image fixture");
                gg_agent::Part::Image(gg_agent::ImagePart::png(
                    std::fs::read(dir.join(f)).expect("image fixture"),
                ))
            }
        })
        .collect();
    let mut m = gg_agent::ChatMessage::user("");
    m.parts = parts;
    gg_gemma::agent::messages_from_agent(&[m], true)
}

fn image_inputs(case: &Json) -> Vec<ImageInput> {
    case["images"]
        .as_array()
        .expect("image fixture")
        .iter()
        .map(|f| ImageInput {
            bytes: std::fs::read(
                root()
                    .join("images")
                    .join(f.as_str().expect("image fixture")),
            )
            .expect("image fixture"),
        })
        .collect()
}

fn ids(v: &Json) -> Vec<u32> {
    serde_json::from_value(v.clone()).expect("ids")
}

/// `n` greedy tokens after `prompt` with the image `features` fed at its image tokens.
fn greedy_with_features(
    model: &GemmaModel,
    prompt: &[u32],
    features: Vec<Value>,
    n: usize,
) -> Vec<u32> {
    let mut g = Generator::new(model, prompt, Sampling::Greedy)
        .expect("image fixture")
        .with_image_features(features)
        .expect("image fixture");
    (0..n)
        .map(|_| pollster::block_on(g.next_token()).expect("image fixture"))
        .collect()
}

#[test]
fn greedy_with_images_equals_onnx_runtime() {
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    for name in FIXTURES {
        let model = load(&gpu, name);
        let dir = root().join("models").join(name).join("reference");
        let reference: Json = serde_json::from_slice(
            &std::fs::read(dir.join("ort.image.json")).expect("image fixture"),
        )
        .expect("image fixture");
        let budget = reference["image_tokens"].as_u64().expect("image fixture") as usize;
        for case in reference["cases"].as_array().expect("image fixture") {
            let cname = case["name"].as_str().expect("image fixture");
            let counts: Vec<usize> =
                serde_json::from_value(case["soft_tokens"].clone()).expect("image fixture");
            let prepared = model
                .prepare_images(&image_inputs(case), budget)
                .expect("image fixture");
            assert_eq!(
                prepared.iter().map(|p| p.soft_tokens).collect::<Vec<_>>(),
                counts,
                "{name} {cname}: soft tokens"
            );
            let msgs = messages(case);
            let prompt = model
                .prompt_ids_with_images(&msgs, &[], false, &prepared)
                .expect("image fixture");
            assert_eq!(
                prompt,
                ids(&case["input_ids"]),
                "{name} {cname}: prompt ids"
            );
            let file = case["features"].as_str().expect("image fixture");
            let all = gg_runtime::npy::parse(
                file,
                &std::fs::read(dir.join(file)).expect("image fixture"),
            )
            .expect("image fixture");
            let hidden = all.shape[1];
            let flat = all.to_f32();
            let mut rows = Vec::new();
            let mut at = 0;
            for n in &counts {
                rows.push(flat[at * hidden..(at + n) * hidden].to_vec());
                at += n;
            }
            let encoder = OrtFeatures {
                rows,
                hidden,
                next: Cell::new(0),
                asked: Default::default(),
            };
            let features = pollster::block_on(model.encode_images(&prepared, &encoder))
                .expect("image fixture");
            let want = ids(&case["greedy_tokens"]);
            let got = greedy_with_features(&model, &prompt, features, want.len());
            assert_eq!(got, want, "{name} {cname}: greedy tokens");
            eprintln!(
                "{name} {cname}: {} prompt ids ({counts:?} soft tokens), {} greedy tokens equal ONNX Runtime's",
                prompt.len(),
                got.len()
            );
            // the same through the stream entry (preprocess, expand, encode, generate)
            encoder.next.set(0);
            let mut stream = pollster::block_on(model.stream_with_images(
                &msgs,
                &[],
                false,
                &image_inputs(case),
                &[],
                budget,
                &encoder,
                gg_llm::TextOptions {
                    max_new_tokens: want.len(),
                    sampling: Sampling::Greedy,
                    cancel: None,
                    stop_ids: vec![],
                    constraint: None,
                },
            ))
            .expect("image fixture");
            let mut streamed = Vec::new();
            while let Some(t) = pollster::block_on(stream.next()).expect("image fixture") {
                streamed.push(t.id);
            }
            let n = streamed.len();
            assert_eq!(streamed, want[..n], "{name} {cname}: streamed tokens");
        }
    }
}

#[test]
fn feature_rows_must_match_the_image_tokens() {
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    for name in ["mobius-tiny-gqa-int4-split", "gemma4-tiny"] {
        let model = load(&gpu, name);
        let t = model.image_tokens.expect("image tokens");
        let prompt = [2, t.begin, t.image, t.image, t.image, t.end, 105];
        let features = |rows: usize| {
            vec![Value::Host(HostTensor::from_f32(
                vec![rows, 64],
                &vec![0.5; rows * 64],
            ))]
        };
        let e = Generator::new(&model, &prompt, Sampling::Greedy)
            .expect("image fixture")
            .with_image_features(features(2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3 image tokens") && e.contains("2 rows"),
            "{name}: {e}"
        );
        assert!(
            Generator::new(&model, &prompt, Sampling::Greedy)
                .expect("image fixture")
                .with_image_features(features(3))
                .is_ok()
        );
        let one = std::fs::read(root().join("images/square_120.png")).expect("image fixture");
        let prepared = model
            .prepare_images(&[ImageInput { bytes: one }], 70)
            .expect("image fixture");
        let e = model
            .prompt_ids_with_images(
                &[gg_gemma::ChatMessage::user("no image here")],
                &[],
                false,
                &prepared,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("0 image placeholder(s)"), "{name}: {e}");
        let e = model
            .prepare_images(
                &[ImageInput {
                    bytes: vec![1, 2, 3],
                }],
                70,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("image 1: the image is not a PNG"), "{name}: {e}");
        let e = model.prepare_images(&[], 100).unwrap_err().to_string();
        assert!(e.contains("70, 140, 280, 560, 1120"), "{name}: {e}");
    }
}

/// The two-image case of the int4 split fixture: the model, the budget, each image's soft
/// tokens, ONNX Runtime's features (`[rows, hidden]`, both images' rows in order) and the images.
struct TwoImages {
    model: Rc<GemmaModel>,
    budget: u32,
    counts: Vec<usize>,
    hidden: usize,
    flat: Vec<f32>,
    images: Vec<ImageInput>,
}

fn two_images() -> TwoImages {
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    let name = "mobius-tiny-gqa-int4-split";
    let model = Rc::new(load(&gpu, name));
    let dir = root().join("models").join(name).join("reference");
    let reference: Json =
        serde_json::from_slice(&std::fs::read(dir.join("ort.image.json")).expect("image fixture"))
            .expect("image fixture");
    let case = &reference["cases"][1];
    let counts: Vec<usize> =
        serde_json::from_value(case["soft_tokens"].clone()).expect("image fixture");
    let file = case["features"].as_str().expect("image fixture");
    let all = gg_runtime::npy::parse(file, &std::fs::read(dir.join(file)).expect("image fixture"))
        .expect("image fixture");
    TwoImages {
        model,
        budget: reference["image_tokens"].as_u64().expect("image fixture") as u32,
        counts,
        hidden: all.shape[1],
        flat: all.to_f32(),
        images: image_inputs(case),
    }
}

/// The agent backend with an encoder: the conversation's images (agent messages) are
/// preprocessed at the options' budget, encoded in order and generation ends normally; without
/// an encoder they are dropped.
#[test]
fn backend_feeds_the_conversation_images() {
    use futures::StreamExt;
    use gg_agent::{GenerateOptions, ModelBackend, StreamChunk};
    let TwoImages {
        model,
        budget,
        counts,
        hidden,
        flat,
        images,
    } = two_images();
    let encoder = Rc::new(OrtFeatures {
        rows: vec![
            flat[..counts[0] * hidden].to_vec(),
            flat[counts[0] * hidden..].to_vec(),
        ],
        hidden,
        next: Cell::new(0),
        asked: Default::default(),
    });
    let mut m = gg_agent::ChatMessage::user("");
    m.parts = vec![
        gg_agent::Part::Text {
            text: "Compare".into(),
        },
        gg_agent::Part::Image(gg_agent::ImagePart::png(images[0].bytes.clone())),
        gg_agent::Part::Text { text: "and".into() },
        gg_agent::Part::Image(gg_agent::ImagePart::png(images[1].bytes.clone())),
    ];
    let conversation = [m];
    let options = GenerateOptions {
        temperature: 0.0,
        max_new_tokens: 4,
        image_tokens: budget,
        ..GenerateOptions::default()
    };
    for with_encoder in [true, false] {
        let mut backend = gg_llm::GemmaBackend::new(model.clone());
        if with_encoder {
            backend = backend.with_image_encoder(encoder.clone());
        }
        let chunks: Vec<_> =
            pollster::block_on(backend.generate(&conversation, &[], &options).collect());
        assert!(
            chunks.iter().all(|c| c.is_ok()),
            "{with_encoder}: {:?}",
            chunks.iter().find(|c| c.is_err())
        );
        assert!(
            matches!(chunks.last(), Some(Ok(StreamChunk::Done { .. }))),
            "{with_encoder}: {chunks:?}"
        );
    }
    assert_eq!(*encoder.asked.borrow(), counts, "images encoded in order");
}

/// A screenshot a tool returned reaches the model right after its tool response (the template
/// has no place for it), inside the model's turn, in prompt order with the user's images.
#[test]
fn backend_places_a_screenshot_after_its_tool_response() {
    use futures::StreamExt;
    use gg_agent::{GenerateOptions, ModelBackend, StreamChunk};
    let TwoImages {
        model,
        budget,
        counts,
        hidden,
        flat,
        images,
    } = two_images();
    // the user's image is images[1]; the screenshot the tool returns is images[0]
    let conversation = [
        gg_agent::ChatMessage::user_with_images(
            "What is on this page?",
            vec![gg_agent::ImagePart::png(images[1].bytes.clone())],
        ),
        gg_agent::ChatMessage::model_with_calls(
            "",
            vec![gg_agent::ToolCall::from_value(
                "take_screenshot",
                serde_json::json!({}),
            )],
        ),
        gg_agent::ChatMessage::tool(
            "take_screenshot",
            serde_json::json!({"width": 64, "height": 48, "format": "png"}),
            vec![gg_agent::ImagePart::png(images[0].bytes.clone())],
        ),
    ];
    let image_tokens = budget as usize;

    // the prompt: the screenshot's tokens follow the <tool_response|> and end the prompt
    let found = gg_gemma::agent::conversation_images(&conversation);
    assert_eq!(found.tool_images, [1]);
    let inputs: Vec<ImageInput> = found
        .images
        .iter()
        .map(|i| ImageInput {
            bytes: i.data.clone(),
        })
        .collect();
    let prepared = model
        .prepare_images(&inputs, image_tokens)
        .expect("preprocess");
    let ids = model
        .prompt_ids_with_tool_images(
            &gg_gemma::agent::messages_from_agent(&conversation, true),
            &[],
            false,
            &prepared,
            &found.tool_images,
        )
        .expect("prompt");
    let tokens = model.image_tokens.expect("image tokens");
    let end = model.tokenizer.special().tool_response_end.id;
    let at = ids.iter().position(|&i| i == end).expect("a tool response");
    let n = counts[0];
    assert_eq!(ids[at + 1], tokens.begin);
    assert!(ids[at + 2..at + 2 + n].iter().all(|&i| i == tokens.image));
    assert_eq!(ids[at + 2 + n], tokens.end);
    assert_eq!(ids.len(), at + 3 + n, "the screenshot ends the prompt");
    assert_eq!(
        ids.iter().filter(|&&i| i == tokens.image).count(),
        counts[0] + counts[1]
    );

    // the backend encodes the user's image, then the screenshot
    let encoder = Rc::new(OrtFeatures {
        rows: vec![
            flat[counts[0] * hidden..].to_vec(),
            flat[..counts[0] * hidden].to_vec(),
        ],
        hidden,
        next: Cell::new(0),
        asked: Default::default(),
    });
    let backend = gg_llm::GemmaBackend::new(model.clone()).with_image_encoder(encoder.clone());
    let options = GenerateOptions {
        temperature: 0.0,
        max_new_tokens: 4,
        image_tokens: image_tokens as u32,
        ..GenerateOptions::default()
    };
    let chunks: Vec<_> =
        pollster::block_on(backend.generate(&conversation, &[], &options).collect());
    assert!(chunks.iter().all(|c| c.is_ok()), "{chunks:?}");
    assert!(
        matches!(chunks.last(), Some(Ok(StreamChunk::Done { .. }))),
        "{chunks:?}"
    );
    assert_eq!(*encoder.asked.borrow(), [counts[1], counts[0]]);
}

/// The whole chain on our runtime: transformers-exact preprocessing, our vision encoder
/// (`VisionEncoder`, loaded from the package like the backend loads it), the merge and the
/// decoder: the greedy tokens equal ONNX Runtime's full chain (its encoder's features →
/// embedding → decoder) for one and two images, and the features agree within 1e-4.
#[test]
fn greedy_with_our_vision_encoder_equals_onnx_runtime() {
    use gg_llm::VisionEncoder;
    let gpu = Rc::new(pollster::block_on(Gpu::new(None)).expect("a GPU adapter"));
    for name in ["mobius-tiny-gqa-int4-split", "mobius-tiny-attn-fp32-split"] {
        let model = load(&gpu, name);
        let dir = root().join("models").join(name);
        let repo = ModelRepo::open(dir.to_str().expect("utf-8 path")).expect("repo");
        let encoder = pollster::block_on(VisionEncoder::load(
            gpu.clone(),
            &repo,
            &model.config,
            model.dtype,
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let reference: Json = serde_json::from_slice(
            &std::fs::read(dir.join("reference/ort.image.json")).expect("image fixture"),
        )
        .expect("image fixture");
        let budget = reference["image_tokens"].as_u64().expect("image fixture") as usize;
        for case in reference["cases"].as_array().expect("image fixture") {
            let cname = case["name"].as_str().expect("image fixture");
            let prepared = model
                .prepare_images(&image_inputs(case), budget)
                .expect("image fixture");
            let features = pollster::block_on(model.encode_images(&prepared, &encoder))
                .unwrap_or_else(|e| panic!("{name} {cname}: {e}"));
            // features against ONNX Runtime's
            let file = case["features"].as_str().expect("image fixture");
            let want = gg_runtime::npy::parse(
                file,
                &std::fs::read(dir.join("reference").join(file)).expect("image fixture"),
            )
            .expect("image fixture")
            .to_f32();
            let mut got = Vec::new();
            for f in &features {
                let Value::Gpu(t) = f else {
                    panic!("{name} {cname}: features not on the GPU")
                };
                got.extend(pollster::block_on(encoder.read(t)).expect("read").to_f32());
            }
            assert_eq!(got.len(), want.len(), "{name} {cname}: feature count");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                .fold(0f32, f32::max);
            assert!(worst <= 1e-4, "{name} {cname}: features differ by {worst}");
            let prompt = ids(&case["input_ids"]);
            let want = ids(&case["greedy_tokens"]);
            let got = greedy_with_features(&model, &prompt, features, want.len());
            assert_eq!(got, want, "{name} {cname}: greedy tokens");
            eprintln!(
                "{name} {cname}: features within {worst:e} of ONNX Runtime's, {} greedy tokens equal",
                got.len()
            );
        }
    }
}
