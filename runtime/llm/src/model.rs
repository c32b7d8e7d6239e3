//! The Gemma 4 text model: its sessions (`embed_tokens` + `decoder_model_merged` in the
//! onnx-community layout; a single `model.onnx`, or `embedding/` + `decoder/`, in an ONNX
//! Runtime GenAI package), the tokenizer and chat template, and which inputs each graph takes
//! (the KV-cache pairs and their dtypes included), read from the graphs themselves.

use crate::config::{DECODER, Dtype, EMBED, ModelConfig, Package, external_chunk_names};
use crate::error::{LlmError, Result};
use crate::image::ImageConfig;
use crate::source::ModelRepo;
use gg_gemma::{ChatTemplate, GemmaTokenizer, ImageTokens};
use gg_runtime::model::{Dim, Graph, ValueInfo};
use gg_runtime::{DType, Gpu, Session};
use std::rc::Rc;

/// Loading options.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Weight variant of the onnx-community layout; `None`: q4f16 when the adapter has
    /// `shader-f16`, otherwise q4. An ONNX Runtime GenAI package has one variant and ignores it.
    pub dtype: Option<Dtype>,
}

/// Progress of a load, for the UI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadStage {
    /// Reading the text files (config, tokenizer, template).
    TextFiles,
    /// Loading a session (`embed_tokens_q4.onnx`, a GenAI package's `decoder/model.onnx` ...),
    /// weights streamed to the GPU.
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
    /// Whether the decoder takes `inputs_embeds` (from the embedding graph).
    pub inputs_embeds: bool,
    /// Whether the decoder takes `input_ids` (a single-graph package; mobius' split decoder
    /// also takes them when its per-layer tables live in the decoder).
    pub input_ids: bool,
    /// Whether the decoder takes `per_layer_inputs`.
    pub per_layer_inputs: bool,
    /// Whether the decoder takes `num_logits_to_keep` (without it the logits have a row per
    /// new token and the sampler reads the last one on the GPU).
    pub num_logits_to_keep: bool,
    /// Whether the decoder takes `position_ids` (GroupQueryAttention graphs may derive the
    /// positions from the mask instead).
    pub position_ids: bool,
    /// The fewest rows of a table the decoder indexes by position (a rotary GroupQueryAttention's
    /// `cos_cache`, a `Gather` of `position_ids`): positions past it cannot be computed (mobius
    /// writes tables of the checkpoint's `max_position_embeddings` rows and may state a longer
    /// `context_length`). None when the graph has no such table.
    pub rotary_positions: Option<usize>,
}

fn fixed(d: &Dim) -> Option<usize> {
    match d {
        Dim::Fixed(v) => usize::try_from(*v).ok(),
        _ => None,
    }
}

impl DecoderLayout {
    /// Reads the layout from the decoder graph: which of the inputs the session feeds it takes
    /// (an input it cannot feed is an error naming it), and every `past_key_values.*` input with
    /// its `present.*` output, KV heads, head dim and dtype from the declared shapes.
    pub fn from_graph(g: &Graph) -> Result<Self> {
        let has = |name: &str| g.inputs.iter().any(|i| i.name == name);
        if !has("attention_mask") {
            return Err(LlmError::Model(format!(
                "decoder has no input attention_mask; inputs: {}",
                names(&g.inputs)
            )));
        }
        if !has("inputs_embeds") && !has("input_ids") {
            return Err(LlmError::Model(format!(
                "decoder takes neither inputs_embeds nor input_ids; inputs: {}",
                names(&g.inputs)
            )));
        }
        const FED: &[&str] = &[
            "inputs_embeds",
            "input_ids",
            "per_layer_inputs",
            "attention_mask",
            "position_ids",
            "num_logits_to_keep",
        ];
        if let Some(other) = g
            .inputs
            .iter()
            .find(|i| !FED.contains(&i.name.as_str()) && !i.name.starts_with("past_key_values."))
        {
            return Err(LlmError::Model(format!(
                "decoder input {} is not one the Gemma session feeds ({}, past_key_values.*); a static-cache or other export is not supported",
                other.name,
                FED.join(", ")
            )));
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
            inputs_embeds: has("inputs_embeds"),
            input_ids: has("input_ids"),
            per_layer_inputs: has("per_layer_inputs"),
            num_logits_to_keep: has("num_logits_to_keep"),
            position_ids: has("position_ids"),
            rotary_positions: rotary_positions(g),
        })
    }
}

/// [`DecoderLayout::rotary_positions`] of `g`: the rows of every position-indexed table, the
/// `cos_cache` of a rotary GroupQueryAttention (indexed by the positions it derives) and the data
/// of a `Gather` indexed by the `position_ids` input (the standard-Attention exports' rotary
/// tables), when they are initializers.
fn rotary_positions(g: &Graph) -> Option<usize> {
    let rows = |name: &String| {
        g.initializers
            .iter()
            .find(|i| &i.name == name)?
            .shape
            .first()
            .copied()
    };
    g.nodes
        .iter()
        .filter_map(|n| match n.op_type.as_str() {
            "GroupQueryAttention"
                if n.attributes
                    .iter()
                    .any(|a| a.name() == "do_rotary" && a.i() != 0) =>
            {
                rows(n.inputs.get(7)?)
            }
            "Gather" if n.inputs.get(1).is_some_and(|i| i == "position_ids") => {
                rows(n.inputs.first()?)
            }
            _ => None,
        })
        .min()
}

/// The embedding graph's input for image features (mobius split packages).
pub const IMAGE_FEATURES: &str = "image_features";

/// An optional input of the embedding graph fed empty: a split package's `image_features` /
/// `audio_features` `[0, hidden]` (text only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmptyInput {
    /// Input name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, 0 on the first axis.
    pub shape: Vec<usize>,
}

/// Reads the embedding graph's inputs: `input_ids`, plus multimodal feature inputs
/// (`*_features`, `[tokens, fixed dims...]`) fed empty. Anything else is an error naming it.
pub fn embedding_extra_inputs(g: &Graph) -> Result<Vec<EmptyInput>> {
    if !g.inputs.iter().any(|i| i.name == "input_ids") {
        return Err(LlmError::Model(format!(
            "the embedding graph has no input input_ids; inputs: {}",
            names(&g.inputs)
        )));
    }
    let mut out = Vec::new();
    for i in g.inputs.iter().filter(|i| i.name != "input_ids") {
        let dims = i.dims.as_deref().unwrap_or(&[]);
        let rest: Option<Vec<usize>> = dims.iter().skip(1).map(fixed).collect();
        match rest {
            Some(rest) if i.name.ends_with("_features") && !dims.is_empty() => {
                let mut shape = vec![0];
                shape.extend(rest);
                out.push(EmptyInput {
                    name: i.name.clone(),
                    dtype: i.dtype()?,
                    shape,
                });
            }
            _ => {
                return Err(LlmError::Model(format!(
                    "the embedding graph's input {} is not one the Gemma session can feed (input_ids, and *_features [tokens, fixed dims] fed empty)",
                    i.name
                )));
            }
        }
    }
    Ok(out)
}

/// Loads one graph of the repository (`path` repository-relative) into a session, its weights
/// streamed from the files next to it; in the onnx-community layout the external data it reads
/// must be the chunks `config.json` lists for it. `decoder`: the text decoder, whose logits are
/// cut to the last position where it has no `num_logits_to_keep`
/// ([`crate::last_row::keep_last_logits_row`]).
pub(crate) async fn load_session(
    gpu: &Rc<Gpu>,
    repo: &ModelRepo,
    config: &ModelConfig,
    path: &str,
    decoder: bool,
) -> Result<Session> {
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    let source = repo.subdir(dir);
    let bytes = gg_runtime::source::read_all(&source, file)
        .await
        .map_err(|e| LlmError::File {
            path: format!("{}/{path}", repo.name().trim_end_matches('/')),
            message: e.to_string(),
        })?;
    let mut graph = Graph::decode(&bytes, file)?;
    drop(bytes);
    if decoder {
        crate::last_row::keep_last_logits_row(&mut graph);
    }
    if let Some(n) = config.chunks_of(file) {
        let listed: Vec<String> = external_chunk_names(file, n).collect();
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
    Ok(Session::from_graph(gpu.clone(), graph, &source).await?)
}

pub(crate) fn names(v: &[ValueInfo]) -> String {
    v.iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A loaded Gemma 4 text model.
pub struct GemmaModel {
    /// The GPU.
    pub gpu: Rc<Gpu>,
    /// Weight variant in use (a GenAI package: [`Dtype::Q4`] for fp32 activations,
    /// [`Dtype::Q4F16`] for fp16 ones; [`GemmaModel::variant`] names it).
    pub dtype: Dtype,
    /// Configuration.
    pub config: ModelConfig,
    /// Tokenizer (with the special tokens and end ids).
    pub tokenizer: GemmaTokenizer,
    /// Chat template.
    pub template: ChatTemplate,
    /// `embed_tokens` (or a split package's `embedding`); `None` for a single-graph package
    /// whose decoder takes `input_ids`.
    pub embed: Option<Session>,
    /// The embedding graph's feature inputs, fed empty.
    pub embed_empty: Vec<EmptyInput>,
    /// `decoder_model_merged` (or the package's decoder / `model.onnx`).
    pub decoder: Session,
    /// Decoder inputs and the cache layout.
    pub layout: DecoderLayout,
    /// The image tokens (`None`: the tokenizer has none, the model takes no images).
    pub image_tokens: Option<ImageTokens>,
    /// The image preprocessing numbers, where the model declares a vision encoder: from the file
    /// `genai_config.json` names (`model.vision.config_filename`, mobius: `image_processor.json`),
    /// or, when `config.json` has a `vision_config` object, `preprocessor_config.json` (else
    /// `processor_config.json`); `None` otherwise or when the file is unusable.
    pub image_config: Option<ImageConfig>,
    /// The pad id: fed to an embedding graph without a feature input at the image tokens (the
    /// per-layer inputs are the pad's there).
    pub pad_id: Option<u32>,
    /// Constrained decoding's vocabulary and grammars ([`GemmaModel::call_matcher`]).
    pub(crate) constrain: crate::constrain::ConstrainCache,
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
        let genai = repo.read_optional("genai_config.json").await;
        let generation = repo.read_optional("generation_config.json").await;
        // where the image preprocessing numbers are, if the model declares a vision encoder
        let json = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
        let image_files: Vec<String>;
        let config = match &genai {
            Some(g) => {
                image_files = json(g)
                    .and_then(|v| {
                        v.pointer("/model/vision/config_filename")?
                            .as_str()
                            .map(str::to_owned)
                    })
                    .into_iter()
                    .collect();
                let cfg = repo.read_optional("config.json").await;
                ModelConfig::parse_genai(g, cfg.as_deref(), generation.as_deref())?
            }
            None => {
                let config_bytes = repo.read("config.json").await.map_err(|e| match e {
                    LlmError::File { path, message } => LlmError::File {
                        path,
                        message: format!(
                            "{message} (neither genai_config.json nor config.json: not a model repository in the onnx-community or ONNX Runtime GenAI layout)"
                        ),
                    },
                    other => other,
                })?;
                image_files = if json(&config_bytes)
                    .is_some_and(|v| v.get("vision_config").is_some_and(|c| c.is_object()))
                {
                    vec![
                        "preprocessor_config.json".into(),
                        "processor_config.json".into(),
                    ]
                } else {
                    Vec::new()
                };
                ModelConfig::parse(&config_bytes, generation.as_deref())?
            }
        };
        let tokenizer_json = repo.read("tokenizer.json").await?;
        let tokenizer_config = repo.read_optional("tokenizer_config.json").await;
        let tokenizer = GemmaTokenizer::from_bytes(
            &tokenizer_json,
            generation.as_deref(),
            tokenizer_config.as_deref(),
        )?;
        drop(tokenizer_json);
        let image_tokens = ImageTokens::from_tokenizer(&tokenizer).ok();
        let pad_id = tokenizer.special().pad.as_ref().map(|p| p.id);
        // A text-only user never needs these: an unreadable file leaves the model without
        // images (prepare_images says so) rather than failing the load.
        let mut image_config = None;
        for file in &image_files {
            if let Some(bytes) = repo.read_optional(file).await {
                match ImageConfig::parse(&bytes) {
                    Ok(c) => image_config = Some(c),
                    Err(e) => log::warn!("{file}: {e}; the model will take no images"),
                }
                break;
            }
        }
        let template_src = match repo.read("chat_template.jinja").await {
            Ok(t) => String::from_utf8(t)
                .map_err(|_| LlmError::Model("chat_template.jinja is not UTF-8".into()))?,
            // GenAI packages may carry the template in tokenizer_config.json only.
            Err(e) => tokenizer_config
                .as_deref()
                .and_then(|c| serde_json::from_slice::<serde_json::Value>(c).ok())
                .and_then(|c| c.get("chat_template")?.as_str().map(str::to_owned))
                .ok_or(e)?,
        };
        let template = ChatTemplate::new(template_src)?;
        let genai_package = matches!(config.package, Package::Genai { .. });
        let dtype = options
            .dtype
            .filter(|_| !genai_package)
            .unwrap_or_else(|| Dtype::for_adapter(gpu.has_shader_f16));
        let mut load = async |path: &str, decoder: bool| -> Result<Session> {
            // a GenAI package's graphs are all model.onnx: name them by their path
            let file = path.rsplit_once('/').map_or(path, |(_, f)| f);
            progress(LoadStage::Session(if genai_package {
                path.to_string()
            } else {
                file.to_string()
            }));
            load_session(&gpu, repo, &config, path, decoder).await
        };
        let (embed, decoder) = match &config.package {
            Package::OnnxCommunity => {
                let embed = load(
                    &format!("onnx/{}", ModelConfig::onnx_file(EMBED, dtype)),
                    false,
                )
                .await?;
                let decoder = load(
                    &format!("onnx/{}", ModelConfig::onnx_file(DECODER, dtype)),
                    true,
                )
                .await?;
                (Some(embed), decoder)
            }
            Package::Genai {
                decoder, embedding, ..
            } => {
                let embed = match embedding {
                    Some(e) => Some(load(e, false).await?),
                    None => None,
                };
                (embed, load(decoder, true).await?)
            }
        };
        let layout = DecoderLayout::from_graph(&decoder.graph)?;
        // The context ends where the rotary tables do, if before the configured limit.
        let mut config = config;
        if let Some(rows) = layout.rotary_positions {
            config.max_positions = Some(config.max_positions.map_or(rows, |m| m.min(rows)));
        }
        let embed_empty = match &embed {
            Some(e) => embedding_extra_inputs(&e.graph)?,
            None => Vec::new(),
        };
        let embed_outputs: Vec<&str> = embed
            .iter()
            .flat_map(|e| e.graph.outputs.iter().map(|o| o.name.as_str()))
            .collect();
        for (takes, name) in [
            (layout.inputs_embeds, "inputs_embeds"),
            (layout.per_layer_inputs, "per_layer_inputs"),
        ] {
            if takes && !embed_outputs.contains(&name) {
                return Err(LlmError::Model(match &embed {
                    Some(_) => format!(
                        "the decoder takes {name}, which the embedding graph does not produce (outputs: {})",
                        embed_outputs.join(", ")
                    ),
                    None => format!(
                        "the decoder takes {name} but genai_config.json names no embedding graph (model.embedding.filename)"
                    ),
                }));
            }
        }
        // The activation dtype of a package: what the decoder's logits are.
        let dtype = if genai_package {
            match decoder.graph.outputs.iter().find(|o| o.name == "logits") {
                Some(o) if o.dtype()? == DType::F16 => Dtype::Q4F16,
                _ => Dtype::Q4,
            }
        } else {
            dtype
        };
        progress(LoadStage::Ready);
        Ok(Self {
            gpu,
            dtype,
            config,
            tokenizer,
            template,
            embed,
            embed_empty,
            decoder,
            layout,
            image_tokens,
            image_config,
            pad_id,
            constrain: Default::default(),
        })
    }

    /// Whether the embedding graph takes the image features itself (a mobius split package's
    /// `image_features` input); otherwise they are written into `inputs_embeds`
    /// ([`crate::merge`]).
    pub fn embedding_takes_images(&self) -> bool {
        self.embed_empty.iter().any(|e| e.name == IMAGE_FEATURES)
    }

    /// The variant as shown to users: `q4` / `q4f16` in the onnx-community layout; for an ONNX
    /// Runtime GenAI package `genai f32` / `genai f16` (its activation dtype).
    pub fn variant(&self) -> String {
        match self.config.package {
            Package::OnnxCommunity => self.dtype.name().to_string(),
            Package::Genai { .. } => match self.dtype {
                Dtype::Q4 => "genai f32".into(),
                Dtype::Q4F16 => "genai f16".into(),
            },
        }
    }

    /// The context limit: the smallest of what the configuration states (`max_position_embeddings`,
    /// a GenAI package's `context_length` and `search.max_length`) and the rows of the decoder's
    /// rotary tables ([`DecoderLayout::rotary_positions`]); None when nothing bounds it.
    pub fn context_limit(&self) -> Option<usize> {
        self.config.max_positions
    }
}
