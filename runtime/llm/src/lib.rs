//! Gemma 4 text generation on gg-runtime.
//!
//! - [`ModelRepo`]: the model's files in the Hugging Face layout, from a local folder, an HTTP
//!   base URL (native) or any [`gg_runtime::source::DataSource`] (the extension's Cache Storage).
//! - [`GemmaModel::load`]: reads the config, tokenizer and chat template, picks the variant
//!   ([`Dtype`]: q4f16 with `shader-f16`, else q4) and streams both sessions' weights to the GPU.
//! - [`Generator`]: `embed_tokens` → `decoder_model_merged` per step, the KV cache kept on the GPU
//!   (`present.*` fed back as `past_key_values.*`), the next token sampled on the GPU
//!   ([`Sampling`]), only its id read back.
//! - [`TextStream`]: text per token with end ids, `max_new_tokens` and cancellation.
//! - [`image`](mod@image): image bytes → the vision encoder's patches and positions, exactly as
//!   transformers' Gemma 4 image processor.
//! - [`images`](mod@images): prompts with images: [`ImageInput`]s preprocessed, encoded by an
//!   [`ImageEncoder`], their placeholders expanded, the features merged into the embeddings
//!   ([`merge`](mod@merge): by the embedding graph's `image_features` input, or on the GPU).
//! - [`constrain`]: tool calls sampled under the grammar of the declared tools
//!   ([`CallConstraint`], the mask applied by the sampling kernel).
//! - [`bench`](mod@bench): the prefill and decode measurements of `gemma-gem bench` and the browser bench.
//! - [`GemmaBackend`]: the agent's `ModelBackend` (and a tokenizer-exact `TokenCounter`); with
//!   [`GemmaBackend::with_image_encoder`] it feeds the conversation's images.
//!   [`GemmaBackend::prepare`] is the start of a generation on its own (the prompt ids with the
//!   images' soft tokens, and the encoded features: a [`PreparedPrompt`]).
//! - [`VisionEncoder`]: Gemma 4's vision encoder, loaded on the first image; patches and
//!   positions in, soft-token features out, kept on the GPU (it implements [`ImageEncoder`]).
//!
//! ```no_run
//! # async fn demo(gpu: std::rc::Rc<gg_runtime::Gpu>, fetch: std::rc::Rc<dyn gg_llm::source::Fetch>) -> gg_llm::Result<()> {
//! use gg_llm::{GemmaModel, LoadOptions, ModelRepo, Sampling, TextOptions};
//! let repo = ModelRepo::new(fetch, "gemma-4-E2B-it-ONNX");
//! let model = GemmaModel::load(gpu, &repo, &LoadOptions::default()).await?;
//! let prompt = model.prompt_ids(&[gg_gemma::ChatMessage::user("Hi")], &[], false)?;
//! let mut text = model.stream(&prompt, TextOptions { max_new_tokens: 64, sampling: Sampling::Greedy, cancel: None, stop_ids: vec![], constraint: None })?;
//! while let Some(token) = text.next().await? {
//!     print!("{}", token.text);
//! }
//! print!("{}", text.finish()?);
//! # Ok(()) }
//! ```

pub mod backend;
pub mod bench;
pub mod config;
pub mod constrain;
pub mod error;
pub mod generate;
pub mod image;
pub mod images;
pub mod last_row;
pub mod merge;
pub mod model;
pub mod sampler;
pub mod source;
pub mod stream;
mod synthetic;
pub mod vision;

pub use backend::{GemmaBackend, PreparedPrompt};
pub use config::{Dtype, ModelConfig};
pub use constrain::CallConstraint;
pub use error::{LlmError, Result};
pub use generate::{GenerationStats, Generator, StopReason};
pub use images::{ImageEncoder, ImageInput};
pub use model::{GemmaModel, LoadOptions, LoadStage};
pub use sampler::Sampling;
pub use source::ModelRepo;
pub use stream::{TextOptions, TextStream, Token};
pub use vision::{VisionEncoder, VisionLayout};
