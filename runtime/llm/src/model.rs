//! The Gemma 4 text model: two sessions (`embed_tokens`, `decoder_model_merged`), the tokenizer
//! and chat template, and the KV-cache layout read from the decoder's own inputs.

use crate::config::{DECODER, Dtype, EMBED, ModelConfig, external_chunk_names};
use crate::error::{LlmError, Result};
use crate::source::ModelRepo;
use gg_gemma::{ChatTemplate, GemmaTokenizer};
use gg_runtime::model::{Dim, Graph, ValueInfo};
use gg_runtime::{DType, Gpu, Session};
use std::rc::Rc;

/// Loading options.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Weight variant; `None`: q4f16 when the adapter has `shader-f16`, otherwise q4.
    pub dtype: Option<Dtype>,
}

/// Progress of a load, for the UI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadStage {
    /// Reading the text files (config, tokenizer, template).
    TextFiles,
    /// Loading a session (`embed_tokens_q4.onnx` ...), weights streamed to the GPU.
    Session(String),
    /// Done.
    Ready,
}

/// One past/present pair of the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// Input name (`past_key_values.3.value`).
    pub input: String,
    /// Output name (`present.3.value`).
    pub output: String,
    /// Element type (float32 in q4, float16 in q4f16).
    pub dtype: DType,
    /// KV heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
}

/// The decoder inputs this model uses, from the graph.
#[derive(Debug, Clone)]
pub struct DecoderLayout {
    /// Past/present pairs, in input order.
    pub cache: Vec<CacheEntry>,
    /// Whether the decoder takes `per_layer_inputs`.
    pub per_layer_inputs: bool,
    /// Whether the decoder takes `num_logits_to_keep`.
    pub num_logits_to_keep: bool,
    /// Whether the decoder takes `position_ids`.
    pub position_ids: bool,
}

fn fixed(d: &Dim) -> Option<usize> {
    match d {
        Dim::Fixed(v) => usize::try_from(*v).ok(),
        _ => None,
    }
}

impl DecoderLayout {
    /// Reads the cache layout from the decoder graph: every `past_key_values.*` input with its
    /// `present.*` output, KV heads and head dims from the declared shapes.
    pub fn from_graph(g: &Graph) -> Result<Self> {
        let has = |name: &str| g.inputs.iter().any(|i| i.name == name);
        for need in ["inputs_embeds", "attention_mask"] {
            if !has(need) {
                return Err(LlmError::Model(format!(
                    "decoder has no input {need}; inputs: {}",
                    names(&g.inputs)
                )));
            }
        }
        if !g.outputs.iter().any(|o| o.name == "logits") {
            return Err(LlmError::Model("decoder has no output logits".into()));
        }
        let mut cache = Vec::new();
        for i in &g.inputs {
            let Some(rest) = i.name.strip_prefix("past_key_values.") else {
                continue;
            };
            let output = format!("present.{rest}");
            if !g.outputs.iter().any(|o| o.name == output) {
                return Err(LlmError::Model(format!(
                    "decoder input {} has no matching output {output}",
                    i.name
                )));
            }
            let dims = i.dims.as_deref().unwrap_or(&[]);
            let (kv_heads, head_dim) = match dims {
                [_, h, _, d] => (fixed(h), fixed(d)),
                _ => (None, None),
            };
            let (Some(kv_heads), Some(head_dim)) = (kv_heads, head_dim) else {
                return Err(LlmError::Model(format!(
                    "decoder input {} must be [batch, kv_heads, past, head_dim] with fixed heads and head dim",
                    i.name
                )));
            };
            cache.push(CacheEntry {
                input: i.name.clone(),
                output,
                dtype: i.dtype()?,
                kv_heads,
                head_dim,
            });
        }
        Ok(Self {
            cache,
            per_layer_inputs: has("per_layer_inputs"),
            num_logits_to_keep: has("num_logits_to_keep"),
            position_ids: has("position_ids"),
        })
    }
}

fn names(v: &[ValueInfo]) -> String {
    v.iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A loaded Gemma 4 text model.
pub struct GemmaModel {
    /// The GPU.
    pub gpu: Rc<Gpu>,
    /// Weight variant in use.
    pub dtype: Dtype,
    /// Configuration.
    pub config: ModelConfig,
    /// Tokenizer (with the special tokens and end ids).
    pub tokenizer: GemmaTokenizer,
    /// Chat template.
    pub template: ChatTemplate,
    /// `embed_tokens`.
    pub embed: Session,
    /// `decoder_model_merged`.
    pub decoder: Session,
    /// Decoder inputs and the cache layout.
    pub layout: DecoderLayout,
}

impl std::fmt::Debug for GemmaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemmaModel")
            .field("dtype", &self.dtype)
            .field("cache", &self.layout.cache.len())
            .finish_non_exhaustive()
    }
}

impl GemmaModel {
    /// Loads the text model from `repo` onto `gpu`.
    pub async fn load(gpu: Rc<Gpu>, repo: &ModelRepo, options: &LoadOptions) -> Result<Self> {
        Self::load_with_progress(gpu, repo, options, &mut |_| {}).await
    }

    /// Loads the text model, reporting each stage.
    pub async fn load_with_progress(
        gpu: Rc<Gpu>,
        repo: &ModelRepo,
        options: &LoadOptions,
        progress: &mut dyn FnMut(LoadStage),
    ) -> Result<Self> {
        progress(LoadStage::TextFiles);
        let config_bytes = repo.read("config.json").await?;
        let generation = repo.read_optional("generation_config.json").await;
        let config = ModelConfig::parse(&config_bytes, generation.as_deref())?;
        let tokenizer_json = repo.read("tokenizer.json").await?;
        let tokenizer_config = repo.read_optional("tokenizer_config.json").await;
        let tokenizer = GemmaTokenizer::from_bytes(
            &tokenizer_json,
            generation.as_deref(),
            tokenizer_config.as_deref(),
        )?;
        drop(tokenizer_json);
        let template_src = repo.read("chat_template.jinja").await?;
        let template_src = String::from_utf8(template_src)
            .map_err(|_| LlmError::Model("chat_template.jinja is not UTF-8".into()))?;
        let template = ChatTemplate::new(template_src)?;
        let dtype = options
            .dtype
            .unwrap_or_else(|| Dtype::for_adapter(gpu.has_shader_f16));
        let onnx = repo.subdir("onnx");
        let mut load = async |session: &str| -> Result<Session> {
            let file = ModelConfig::onnx_file(session, dtype);
            progress(LoadStage::Session(file.clone()));
            let bytes = gg_runtime::source::read_all(&onnx, &file)
                .await
                .map_err(|e| LlmError::File {
                    path: format!("{}/onnx/{file}", repo.name().trim_end_matches('/')),
                    message: e.to_string(),
                })?;
            let graph = Graph::decode(&bytes, &file)?;
            drop(bytes);
            if let Some(n) = config.chunks_of(&file) {
                let listed: Vec<String> = external_chunk_names(&file, n).collect();
                if let Some(extra) = graph
                    .external_files()
                    .into_iter()
                    .find(|f| !listed.contains(f))
                {
                    return Err(LlmError::Model(format!(
                        "{file} reads external data {extra}, but config.json lists {n} chunk(s)"
                    )));
                }
            }
            Ok(Session::from_graph(gpu.clone(), graph, &onnx).await?)
        };
        let embed = load(EMBED).await?;
        let decoder = load(DECODER).await?;
        let layout = DecoderLayout::from_graph(&decoder.graph)?;
        if !embed.graph.inputs.iter().any(|i| i.name == "input_ids") {
            return Err(LlmError::Model(
                "embed_tokens has no input input_ids".into(),
            ));
        }
        progress(LoadStage::Ready);
        Ok(Self {
            gpu,
            dtype,
            config,
            tokenizer,
            template,
            embed,
            decoder,
            layout,
        })
    }

    /// The context limit (`max_position_embeddings`), if the config states it.
    pub fn context_limit(&self) -> Option<usize> {
        self.config.max_positions
    }
}
