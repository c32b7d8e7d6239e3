//! The model's configuration files: `config.json` (text config, transformers.js external-data
//! chunk counts), `generation_config.json` (sampling defaults) and, for an ONNX Runtime GenAI
//! package (what mobius writes), `genai_config.json` (the graphs' file names, the context
//! length, search defaults). Names, ids and sizes are read from the files, never hard-coded.
//!
//! Two layouts ([`Package`]):
//! - onnx-community (transformers.js): `config.json`, `onnx/embed_tokens{_q4,_q4f16}.onnx` and
//!   `onnx/decoder_model_merged{_q4,_q4f16}.onnx` with external data chunks
//!   `x.onnx_data`, `x.onnx_data_1`, ...;
//! - ONNX Runtime GenAI: `genai_config.json` naming `model.decoder.filename` (a single
//!   `model.onnx` taking `input_ids`) and optionally `model.embedding.filename` (the split
//!   `embedding/` + `decoder/` package) and `model.vision.filename` (the vision encoder); one
//!   variant, external data named inside each graph.
//!
//! The vision encoder ([`ModelConfig::vision_file`]) is not among the text model's files: it is
//! loaded, and downloaded, on the first image only ([`ModelConfig::vision_files`]).

use crate::error::{LlmError, Result};
use serde_json::Value;

/// Weight variant of the onnx-community export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 4-bit weights, fp32 activations (`_q4`): works on every adapter.
    Q4,
    /// 4-bit weights, fp16 activations and KV cache (`_q4f16`): half the cache memory.
    Q4F16,
}

impl Dtype {
    /// File-name suffix (`_q4`, `_q4f16`).
    pub fn suffix(self) -> &'static str {
        match self {
            Dtype::Q4 => "_q4",
            Dtype::Q4F16 => "_q4f16",
        }
    }

    /// Name as written on the command line (`q4`, `q4f16`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Q4 => "q4",
            Dtype::Q4F16 => "q4f16",
        }
    }

    /// The default for an adapter: q4f16 with `shader-f16`, otherwise q4.
    pub fn for_adapter(has_shader_f16: bool) -> Self {
        if has_shader_f16 {
            Dtype::Q4F16
        } else {
            Dtype::Q4
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = LlmError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "q4" => Ok(Dtype::Q4),
            "q4f16" => Ok(Dtype::Q4F16),
            other => Err(LlmError::Model(format!(
                "unknown dtype {other:?} (expected q4 or q4f16)"
            ))),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The two sessions of the text model.
pub const EMBED: &str = "embed_tokens";
/// The decoder session.
pub const DECODER: &str = "decoder_model_merged";
/// The vision encoder session (onnx-community layout: `onnx/vision_encoder{suffix}.onnx`).
pub const VISION: &str = "vision_encoder";

/// How a repository lays out the text model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Package {
    /// The onnx-community (transformers.js) layout: `onnx/{session}{suffix}.onnx`, a variant per
    /// [`Dtype`].
    OnnxCommunity,
    /// An ONNX Runtime GenAI package (`genai_config.json`): one variant.
    Genai {
        /// `model.decoder.filename`, repository-relative (`model.onnx`, `decoder/model.onnx`).
        decoder: String,
        /// `model.embedding.filename` of a split package (`embedding/model.onnx`).
        embedding: Option<String>,
        /// `model.vision.filename`: the vision encoder (`vision_encoder/model.onnx`), if any.
        vision: Option<String>,
        /// `model.vision.config_filename`: the image processor's config
        /// (`image_processor.json`), if any.
        vision_config: Option<String>,
        /// `model.type` (`gemma4_text`, `gemma4`).
        model_type: String,
    },
}

/// What the runtime needs from `config.json` and `generation_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The layout.
    pub package: Package,
    /// `text_config.max_position_embeddings` (the context limit), if given.
    pub max_positions: Option<usize>,
    /// `text_config.vocab_size`, if given.
    pub vocab_size: Option<usize>,
    /// `transformers.js_config.use_external_data_format`: per `.onnx` file name, how many external
    /// data chunks it has (`x.onnx_data`, `x.onnx_data_1`, ...). Empty: no information.
    pub external_chunks: Vec<(String, usize)>,
    /// Global chunk count when the config gives `true` or a number instead of a map.
    pub external_default: Option<usize>,
    /// Sampling defaults from `generation_config.json`.
    pub sampling: SamplingDefaults,
}

/// Sampling defaults from `generation_config.json` (Gemma 4: 1.0 / 64 / 0.95).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingDefaults {
    /// Temperature.
    pub temperature: f32,
    /// Top-k (0: off).
    pub top_k: u32,
    /// Top-p (1.0: off).
    pub top_p: f32,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        }
    }
}

impl ModelConfig {
    /// Parses `config.json` and the optional `generation_config.json`.
    pub fn parse(config: &[u8], generation: Option<&[u8]>) -> Result<Self> {
        let bad = |file: &str, e: serde_json::Error| LlmError::Model(format!("{file}: {e}"));
        let root: Value = serde_json::from_slice(config).map_err(|e| bad("config.json", e))?;
        let text = root.get("text_config").unwrap_or(&root);
        let num = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
        };
        let mut external_chunks = Vec::new();
        let mut external_default = None;
        if let Some(ext) = root
            .get("transformers.js_config")
            .and_then(|c| c.get("use_external_data_format"))
        {
            match ext {
                Value::Object(map) => {
                    for (k, v) in map {
                        let n = match v {
                            Value::Bool(true) => 1,
                            Value::Bool(false) => 0,
                            Value::Number(n) => n
                                .as_u64()
                                .and_then(|n| usize::try_from(n).ok())
                                .ok_or_else(|| {
                                    LlmError::Model(format!(
                                        "config.json: use_external_data_format[{k}] = {n} is not a count"
                                    ))
                                })?,
                            other => {
                                return Err(LlmError::Model(format!(
                                    "config.json: use_external_data_format[{k}] = {other} is not a count"
                                )));
                            }
                        };
                        external_chunks.push((k.clone(), n));
                    }
                }
                Value::Bool(b) => external_default = Some(usize::from(*b)),
                Value::Number(n) => {
                    external_default = n.as_u64().and_then(|n| usize::try_from(n).ok());
                }
                _ => {}
            }
        }
        let mut sampling = SamplingDefaults::default();
        if let Some(g) = generation {
            let g: Value =
                serde_json::from_slice(g).map_err(|e| bad("generation_config.json", e))?;
            if let Some(t) = g.get("temperature").and_then(Value::as_f64) {
                sampling.temperature = t as f32;
            }
            if let Some(k) = g.get("top_k").and_then(Value::as_u64) {
                sampling.top_k = u32::try_from(k).unwrap_or(u32::MAX);
            }
            if let Some(p) = g.get("top_p").and_then(Value::as_f64) {
                sampling.top_p = p as f32;
            }
        }
        Ok(Self {
            package: Package::OnnxCommunity,
            max_positions: num(text, "max_position_embeddings"),
            vocab_size: num(text, "vocab_size"),
            external_chunks,
            external_default,
            sampling,
        })
    }

    /// Parses an ONNX Runtime GenAI package's `genai_config.json`, with the optional
    /// `config.json` (its `max_position_embeddings` also bounds the context) and
    /// `generation_config.json` (sampling defaults; without it, `search`'s temperature, top_k and
    /// top_p are used). The context limit is the smallest of `model.context_length`,
    /// `search.max_length` and `max_position_embeddings`.
    pub fn parse_genai(
        genai: &[u8],
        config: Option<&[u8]>,
        generation: Option<&[u8]>,
    ) -> Result<Self> {
        const FILE: &str = "genai_config.json";
        let bad = |m: String| LlmError::Model(format!("{FILE}: {m}"));
        let root: Value = serde_json::from_slice(genai).map_err(|e| bad(e.to_string()))?;
        let model = root
            .get("model")
            .ok_or_else(|| bad("no \"model\" section".into()))?;
        let file_of = |section: &str| -> Result<Option<String>> {
            let Some(s) = model.get(section) else {
                return Ok(None);
            };
            let f = s
                .get("filename")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("model.{section} has no filename")))?;
            let f = f.trim_start_matches("./");
            if f.is_empty() || f.starts_with('/') || f.split('/').any(|c| c == "..") {
                return Err(bad(format!(
                    "model.{section}.filename {f:?} is not a path inside the package"
                )));
            }
            Ok(Some(f.to_string()))
        };
        let decoder = file_of("decoder")?
            .ok_or_else(|| bad("no model.decoder section (the text decoder's graph)".into()))?;
        let embedding = file_of("embedding")?;
        let vision = file_of("vision")?;
        // the image processor's config sits next to genai_config.json
        let vision_config = match model.pointer("/vision/config_filename") {
            None => None,
            Some(v) => {
                let f = v
                    .as_str()
                    .ok_or_else(|| bad("model.vision.config_filename is not a string".into()))?
                    .trim_start_matches("./");
                if f.is_empty() || f.starts_with('/') || f.split('/').any(|c| c == "..") {
                    return Err(bad(format!(
                        "model.vision.config_filename {f:?} is not a path inside the package"
                    )));
                }
                Some(f.to_string())
            }
        };
        let num = |v: Option<&Value>| {
            v.and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0)
        };
        let search = root.get("search");
        let mut base = match config {
            Some(c) => Self::parse(c, generation)?,
            None => Self::parse(b"{}", generation)?,
        };
        if generation.is_none()
            && let Some(s) = search
        {
            if let Some(t) = s.get("temperature").and_then(Value::as_f64) {
                base.sampling.temperature = t as f32;
            }
            if let Some(k) = s.get("top_k").and_then(Value::as_u64) {
                base.sampling.top_k = u32::try_from(k).unwrap_or(u32::MAX);
            }
            if let Some(p) = s.get("top_p").and_then(Value::as_f64) {
                base.sampling.top_p = p as f32;
            }
        }
        let limits = [
            num(model.get("context_length")),
            num(search.and_then(|s| s.get("max_length"))),
            base.max_positions,
        ];
        base.max_positions = limits.into_iter().flatten().min();
        base.vocab_size = num(model.get("vocab_size")).or(base.vocab_size);
        base.external_chunks.clear();
        base.external_default = None;
        base.package = Package::Genai {
            decoder,
            embedding,
            vision,
            vision_config,
            model_type: model
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        };
        Ok(base)
    }

    /// The `.onnx` file of a session (`decoder_model_merged_q4.onnx`).
    pub fn onnx_file(session: &str, dtype: Dtype) -> String {
        format!("{session}{}.onnx", dtype.suffix())
    }

    /// Number of external data chunks of an `.onnx` file, per the config (`None`: not stated).
    pub fn chunks_of(&self, onnx_file: &str) -> Option<usize> {
        self.external_chunks
            .iter()
            .find(|(k, _)| k == onnx_file)
            .map(|(_, n)| *n)
            .or(self.external_default)
    }

    /// The graphs of the text model in this variant, repository-relative, in load order
    /// (embedding first).
    pub fn graph_files(&self, dtype: Dtype) -> Vec<String> {
        match &self.package {
            Package::OnnxCommunity => [EMBED, DECODER]
                .iter()
                .map(|s| format!("onnx/{}", Self::onnx_file(s, dtype)))
                .collect(),
            Package::Genai {
                decoder, embedding, ..
            } => embedding.iter().chain([decoder]).cloned().collect(),
        }
    }

    /// The vision encoder's graph, repository-relative: `model.vision.filename` of a GenAI
    /// package (`None` when it names none), `onnx/vision_encoder{suffix}.onnx` in the
    /// onnx-community layout (whether the repository has it shows when it is read).
    pub fn vision_file(&self, dtype: Dtype) -> Option<String> {
        match &self.package {
            Package::OnnxCommunity => Some(format!("onnx/{}", Self::onnx_file(VISION, dtype))),
            Package::Genai { vision, .. } => vision.clone(),
        }
    }

    /// The files of the vision encoder that the configuration names, repository-relative: its
    /// graph and, in the onnx-community layout, its external data chunks (a GenAI package names
    /// its external data inside the graph: add [`external_data_files`] of the downloaded graph).
    /// Empty when the model has no vision encoder.
    pub fn vision_files(&self, dtype: Dtype) -> Vec<String> {
        let Some(graph) = self.vision_file(dtype) else {
            return Vec::new();
        };
        let mut out = vec![graph.clone()];
        if let Package::OnnxCommunity = self.package {
            let onnx = Self::onnx_file(VISION, dtype);
            let n = self.chunks_of(&onnx).unwrap_or(0);
            out.extend(external_chunk_names(&onnx, n).map(|c| format!("onnx/{c}")));
        }
        out
    }

    /// The image processor's config files the model may have, repository-relative (small; read
    /// at load, so they go with the text files): `model.vision.config_filename` of a GenAI
    /// package; `preprocessor_config.json` and `processor_config.json` in the onnx-community
    /// layout (either may be absent). Empty for a GenAI package without a vision encoder.
    pub fn image_config_files(&self) -> Vec<String> {
        match &self.package {
            Package::OnnxCommunity => vec![
                "preprocessor_config.json".into(),
                "processor_config.json".into(),
            ],
            Package::Genai {
                vision,
                vision_config,
                ..
            } => vision
                .as_ref()
                .and(vision_config.clone())
                .into_iter()
                .collect(),
        }
    }

    /// Every file of the text model in this variant that the configuration names,
    /// repository-relative: the config and text files, then each graph's `.onnx` file and, in the
    /// onnx-community layout, its external data chunks (`x.onnx_data`, `x.onnx_data_1`, ...). A
    /// GenAI package names its external data only inside each graph: add
    /// [`external_data_files`] of each downloaded graph. This is what a cache has to hold.
    pub fn files(&self, dtype: Dtype) -> Vec<String> {
        if let Package::Genai { .. } = self.package {
            let mut out: Vec<String> = GENAI_TEXT_FILES.iter().map(|s| (*s).to_string()).collect();
            out.extend(self.graph_files(dtype));
            return out;
        }
        let mut out: Vec<String> = TEXT_FILES.iter().map(|s| (*s).to_string()).collect();
        for session in [EMBED, DECODER] {
            let onnx = Self::onnx_file(session, dtype);
            let n = self.chunks_of(&onnx).unwrap_or(0);
            out.push(format!("onnx/{onnx}"));
            out.extend(external_chunk_names(&onnx, n).map(|c| format!("onnx/{c}")));
        }
        out
    }
}

/// The small text files of the repository.
pub const TEXT_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

/// The small text files of a GenAI package (all but `genai_config.json` and `tokenizer.json`
/// may be absent: the chat template may sit in `tokenizer_config.json`).
pub const GENAI_TEXT_FILES: &[&str] = &[
    "genai_config.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

/// The external data files a graph reads (`onnx_path` repository-relative, `bytes` its
/// `.onnx` file), repository-relative: they sit next to the graph.
pub fn external_data_files(onnx_path: &str, bytes: &[u8]) -> Result<Vec<String>> {
    let graph = gg_runtime::model::Graph::decode(bytes, onnx_path)?;
    let dir = onnx_path.rsplit_once('/').map(|(d, _)| d);
    let mut out = Vec::new();
    for location in graph.external_files() {
        if location.starts_with('/') || location.split('/').any(|c| c == "..") {
            return Err(LlmError::Model(format!(
                "{onnx_path}: external data {location} escapes the model folder"
            )));
        }
        out.push(match dir {
            Some(d) => format!("{d}/{location}"),
            None => location,
        });
    }
    Ok(out)
}

/// `x.onnx_data`, `x.onnx_data_1`, ... (`n` names).
pub fn external_chunk_names(onnx_file: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    (0..n).map(move |i| {
        if i == 0 {
            format!("{onnx_file}_data")
        } else {
            format!("{onnx_file}_data_{i}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_counts_and_file_list() {
        let cfg = br#"{"text_config": {"max_position_embeddings": 1024, "vocab_size": 1024},
            "transformers.js_config": {"use_external_data_format":
                {"embed_tokens_q4.onnx": 3, "decoder_model_merged_q4.onnx": 1}}}"#;
        let gen_cfg = br#"{"temperature": 0.7, "top_k": 40, "top_p": 0.9}"#;
        let c = ModelConfig::parse(cfg, Some(gen_cfg)).expect("parses");
        assert_eq!(c.max_positions, Some(1024));
        assert_eq!(c.chunks_of("embed_tokens_q4.onnx"), Some(3));
        assert_eq!(c.chunks_of("embed_tokens_q4f16.onnx"), None);
        assert_eq!(c.sampling.top_k, 40);
        assert!((c.sampling.temperature - 0.7).abs() < 1e-6);
        let files = c.files(Dtype::Q4);
        assert!(files.contains(&"onnx/embed_tokens_q4.onnx_data_2".to_string()));
        assert!(!files.contains(&"onnx/embed_tokens_q4.onnx_data_3".to_string()));
        assert!(files.contains(&"onnx/decoder_model_merged_q4.onnx_data".to_string()));
        assert!(!files.contains(&"onnx/decoder_model_merged_q4.onnx_data_1".to_string()));
        assert!(!files.iter().any(|f| f.contains("vision")));
        let with_vision = ModelConfig::parse(
            br#"{"transformers.js_config": {"use_external_data_format":
                {"vision_encoder_q4f16.onnx": 2}}}"#,
            None,
        )
        .expect("parses");
        assert_eq!(
            with_vision.vision_files(Dtype::Q4F16),
            [
                "onnx/vision_encoder_q4f16.onnx",
                "onnx/vision_encoder_q4f16.onnx_data",
                "onnx/vision_encoder_q4f16.onnx_data_1"
            ]
        );
        assert_eq!(
            with_vision.vision_files(Dtype::Q4),
            ["onnx/vision_encoder_q4.onnx"]
        );
        let global = ModelConfig::parse(
            br#"{"transformers.js_config": {"use_external_data_format": true}}"#,
            None,
        )
        .expect("parses");
        assert_eq!(global.chunks_of("anything.onnx"), Some(1));
        assert!(ModelConfig::parse(b"{", None).is_err());
        assert!(
            ModelConfig::parse(
                br#"{"transformers.js_config": {"use_external_data_format": {"a.onnx": "x"}}}"#,
                None
            )
            .is_err()
        );
    }

    #[test]
    fn genai_packages() {
        let single =
            br#"{"model": {"type": "gemma4_text", "vocab_size": 1024, "context_length": 4096,
            "decoder": {"filename": "model.onnx"}},
            "search": {"max_length": 2048, "temperature": 0.5, "top_k": 1, "top_p": 1.0}}"#;
        let c = ModelConfig::parse_genai(single, None, None).expect("parses");
        assert_eq!(
            c.package,
            Package::Genai {
                decoder: "model.onnx".into(),
                embedding: None,
                vision: None,
                vision_config: None,
                model_type: "gemma4_text".into()
            }
        );
        assert_eq!(c.vision_file(Dtype::Q4), None);
        assert!(c.vision_files(Dtype::Q4).is_empty());
        assert_eq!(c.max_positions, Some(2048));
        assert_eq!(c.vocab_size, Some(1024));
        assert_eq!(c.sampling.top_k, 1);
        assert!((c.sampling.temperature - 0.5).abs() < 1e-6);
        assert_eq!(c.graph_files(Dtype::Q4F16), ["model.onnx"]);
        let files = c.files(Dtype::Q4);
        assert!(files.contains(&"genai_config.json".to_string()));
        assert!(files.contains(&"model.onnx".to_string()));
        // generation_config.json wins over search; config.json narrows the context
        let split = br#"{"model": {"context_length": 4096,
            "embedding": {"filename": "embedding/model.onnx"},
            "vision": {"filename": "vision_encoder/model.onnx",
                       "config_filename": "image_processor.json"},
            "decoder": {"filename": "./decoder/model.onnx"}}}"#;
        let c = ModelConfig::parse_genai(
            split,
            Some(br#"{"text_config": {"max_position_embeddings": 1024}}"#),
            Some(br#"{"top_k": 64}"#),
        )
        .expect("parses");
        assert_eq!(c.max_positions, Some(1024));
        assert_eq!(c.sampling.top_k, 64);
        assert_eq!(
            c.graph_files(Dtype::Q4),
            ["embedding/model.onnx", "decoder/model.onnx"]
        );
        // The vision encoder is not a text file: listed on its own.
        assert_eq!(
            c.vision_file(Dtype::Q4).as_deref(),
            Some("vision_encoder/model.onnx")
        );
        assert_eq!(c.vision_files(Dtype::Q4), ["vision_encoder/model.onnx"]);
        assert!(!c.files(Dtype::Q4).iter().any(|f| f.contains("vision")));
        assert_eq!(c.image_config_files(), ["image_processor.json"]);
        let no_vision = ModelConfig::parse_genai(
            br#"{"model": {"decoder": {"filename": "model.onnx"},
                "vision": {"filename": "v.onnx", "config_filename": "../p.json"}}}"#,
            None,
            None,
        );
        assert!(no_vision.is_err(), "a config path outside the package");
        for bad in [
            &br#"{"model": {}}"#[..],
            br#"{"search": {}}"#,
            br#"{"model": {"decoder": {}}}"#,
            br#"{"model": {"decoder": {"filename": "../x.onnx"}}}"#,
            br#"{"model": {"decoder": {"filename": "/x.onnx"}}}"#,
            b"[",
        ] {
            assert!(ModelConfig::parse_genai(bad, None, None).is_err());
        }
        let e = ModelConfig::parse_genai(br#"{"model": {}}"#, None, None)
            .expect_err("no decoder")
            .to_string();
        assert!(e.contains("model.decoder"), "{e}");
    }
}
