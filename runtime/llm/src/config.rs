//! The model's configuration files: `config.json` (text config, transformers.js external-data
//! chunk counts) and `generation_config.json` (sampling defaults). Names, ids and sizes are read
//! from the files, never hard-coded.

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

/// What the runtime needs from `config.json` and `generation_config.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
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
            max_positions: num(text, "max_position_embeddings"),
            vocab_size: num(text, "vocab_size"),
            external_chunks,
            external_default,
            sampling,
        })
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

    /// Every file of the text model in this variant, repository-relative: the config and text
    /// files, then each session's `.onnx` file and its external data chunks
    /// (`x.onnx_data`, `x.onnx_data_1`, ...). This is what a cache has to hold.
    pub fn files(&self, dtype: Dtype) -> Vec<String> {
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
}
