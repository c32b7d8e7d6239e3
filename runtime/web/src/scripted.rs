//! The scripted model of development builds (`modelSource` = `script:URL`): the URL returns
//! `{"turns": ["<raw model output>", ...]}` and each generation replays the next entry, in small
//! chunks, through the same Gemma 4 output parser the real model's text goes through — so the whole
//! agent path (tool calls in Gemma 4's own syntax included) is testable without a model. Absent
//! from release builds (feature `scripted-model`).
//!
//! With `"tokenizer": "<base URL of a model's text files>"` in the script, each prompt is also
//! rendered and tokenized exactly as the real backend does (that model's chat template and
//! tokenizer, `gg_gemma`), and [`CONTROL_TOKENS`] in a turn is replaced by how often each added
//! token occurs in the prompt's ids (`[|turn]x3 [turn|]x2 ...`, brackets for angle brackets so the
//! output parser reads it as text): the end-to-end tests check on token ids that page text never
//! becomes a control token.
//!
//! With `"model": "<base URL of a model package>"`, each generation whose turn names one of
//! [`IMAGE_TOKENS`], [`FEATURE_ROWS`] or [`IMAGE_BUDGET`] first loads that real model exactly as a
//! turn does and prepares the prompt it would be given ([`crate::model::probe_prompt`]: the
//! conversation's images preprocessed at the turn's budget, the vision encoder downloaded and
//! loaded on the first image and run on WebGPU, the placeholders expanded), then reports what the
//! model received: the prompt's `<|image|>` soft-token ids and the features' rows. Only the
//! model's output text is scripted; nothing is generated.

use futures::stream::{self, StreamExt};
use gg_agent::{
    BackendError, ChatMessage, ChunkStream, FinishReason, GenerateOptions, ModelBackend,
    StreamChunk, ToolDefinition,
};
use gg_gemma::{EndMarker, OutputEvent, OutputParser};
use js_sys::{Function, Promise, Reflect};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// Bytes per streamed chunk (small, so markers are split across chunks as real tokens may be).
const CHUNK: usize = 5;
/// Pause between chunks, so the UI sees a stream and cancellation can land mid-answer.
const CHUNK_DELAY_MS: u32 = 15;

/// Replaced by the added-token counts of the prompt (scripts with a `tokenizer`).
pub const CONTROL_TOKENS: &str = "{{prompt_control_tokens}}";

/// Replaced by how many of the prompt's ids are the model's `<|image|>` soft token (scripts
/// with a `model`).
pub const IMAGE_TOKENS: &str = "{{prompt_image_tokens}}";
/// Replaced by the rows of the images' encoded features: their sum, then each image's in prompt
/// order (`127 (64+63)`; `0 ()` without images).
pub const FEATURE_ROWS: &str = "{{image_feature_rows}}";
/// Replaced by the turn's soft-token budget per image ([`GenerateOptions::image_tokens`]).
pub const IMAGE_BUDGET: &str = "{{image_budget}}";

/// The model size the probed model is reported under (only a label for scripted models).
const PROBE_MODEL_SIZE: &str = "E2B";

/// Why a model script (or its tokenizer) could not be used (shown in the chat).
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("could not load the model script {url}: {source}")]
    Load {
        url: String,
        source: Box<ScriptError>,
    },
    #[error("model script {url} is not {{\"turns\": [...]}}: {source}")]
    NotAScript {
        url: String,
        source: serde_json::Error,
    },
    #[error("could not load the model script's tokenizer from {base}: {source}")]
    Tokenizer {
        base: String,
        source: Box<ScriptError>,
    },
    /// The model's text files (tokenizer, template) or the prompt (its error's text).
    #[error("{0}")]
    Text(String),
    #[error("{0}: not text")]
    NotText(String),
    #[error("{0}: not found")]
    NotFound(String),
    #[error("HTTP {0}")]
    Http(f64),
    /// A failed JavaScript call (`fetch`, reading the body).
    #[error("{0}")]
    Js(String),
}

pub struct ScriptedBackend {
    turns: Vec<String>,
    next: Cell<usize>,
    text: Option<gg_gemma::GemmaText>,
    /// The real model whose prompts are probed (absolute base URL).
    model: Option<String>,
}

thread_local! {
    static SCRIPTS: RefCell<HashMap<String, Rc<ScriptedBackend>>> = RefCell::new(HashMap::new());
}

#[derive(serde::Deserialize)]
struct Script {
    turns: Vec<String>,
    #[serde(default)]
    tokenizer: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

impl ScriptedBackend {
    /// The script at `url`, fetched once; later turns of any conversation continue where the
    /// previous generation stopped.
    pub async fn for_url(url: &str) -> Result<Rc<Self>, ScriptError> {
        if let Some(found) = SCRIPTS.with(|s| s.borrow().get(url).cloned()) {
            return Ok(found);
        }
        let json = fetch_json(url).await.map_err(|e| ScriptError::Load {
            url: url.to_owned(),
            source: Box::new(e),
        })?;
        let script: Script =
            serde_json::from_value(json).map_err(|source| ScriptError::NotAScript {
                url: url.to_owned(),
                source,
            })?;
        let text =
            match &script.tokenizer {
                None => None,
                Some(base) => Some(load_text(&resolve(url, base)).await.map_err(|e| {
                    ScriptError::Tokenizer {
                        base: base.clone(),
                        source: Box::new(e),
                    }
                })?),
            };
        let backend = Rc::new(Self {
            turns: script.turns,
            next: Cell::new(0),
            text,
            model: script
                .model
                .as_deref()
                .map(|m| resolve(url, m).trim_end_matches('/').to_owned()),
        });
        SCRIPTS.with(|s| s.borrow_mut().insert(url.to_owned(), backend.clone()));
        Ok(backend)
    }
}

/// `path` (absolute, or `/...` on the script's own origin) as an absolute URL.
fn resolve(script_url: &str, path: &str) -> String {
    if !path.starts_with('/') {
        return path.to_owned();
    }
    let origin_end = script_url
        .find("://")
        .and_then(|i| script_url[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(script_url.len());
    format!("{}{path}", &script_url[..origin_end])
}

/// A model's text files (tokenizer, configs, chat template) under `base`.
async fn load_text(base: &str) -> Result<gg_gemma::GemmaText, ScriptError> {
    let base = base.trim_end_matches('/');
    let tokenizer = fetch_text(&format!("{base}/tokenizer.json")).await?;
    let config = fetch_text(&format!("{base}/tokenizer_config.json"))
        .await
        .ok();
    let generation = fetch_text(&format!("{base}/generation_config.json"))
        .await
        .ok();
    let template = fetch_text(&format!("{base}/chat_template.jinja"))
        .await
        .ok();
    gg_gemma::GemmaText::from_files(gg_gemma::TextFiles {
        tokenizer_json: tokenizer.as_bytes(),
        tokenizer_config: config.as_deref().map(str::as_bytes),
        generation_config: generation.as_deref().map(str::as_bytes),
        chat_template: template.as_deref(),
    })
    .map_err(|e| ScriptError::Text(e.to_string()))
}

/// How often each added token occurs in the prompt the real backend would give the model.
fn control_tokens(
    text: &gg_gemma::GemmaText,
    messages: &[ChatMessage],
    tools: &[ToolDefinition],
    options: &GenerateOptions,
) -> Result<String, ScriptError> {
    let prompt = text
        .prompt(
            &gg_gemma::agent::messages_from_agent(messages, false),
            &gg_gemma::agent::tools_from_agent(tools),
            gg_gemma::PromptOptions {
                add_generation_prompt: true,
                enable_thinking: options.thinking,
            },
        )
        .map_err(|e| ScriptError::Text(e.to_string()))?;
    let added = text.tokenizer().added_token_ids();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for id in prompt.ids.iter().filter(|id| added.contains(id)) {
        let piece = text.tokenizer().piece(*id).unwrap_or_default();
        *counts
            .entry(piece.replace('<', "[").replace('>', "]"))
            .or_default() += 1;
    }
    Ok(counts
        .iter()
        .map(|(piece, n)| format!("{piece}x{n}"))
        .collect::<Vec<_>>()
        .join(" "))
}

async fn fetch_text(url: &str) -> Result<String, ScriptError> {
    match fetch_body(url, "text").await? {
        Ok(text) => text
            .as_string()
            .ok_or_else(|| ScriptError::NotText(url.to_owned())),
        Err(_) => Err(ScriptError::NotFound(url.to_owned())),
    }
}

async fn fetch_json(url: &str) -> Result<serde_json::Value, ScriptError> {
    match fetch_body(url, "json").await? {
        Ok(value) => gg_chrome::from_js(&value).map_err(ScriptError::Js),
        Err(status) => Err(ScriptError::Http(status)),
    }
}

/// `fetch(url)`, then `response[method]()` awaited (`"text"` or `"json"`). The inner `Err` is
/// the HTTP status of a response that is not ok; the outer one a failed call.
async fn fetch_body(url: &str, method: &str) -> Result<Result<JsValue, f64>, ScriptError> {
    let js = |e: JsValue| ScriptError::Js(format!("{e:?}"));
    let global = js_sys::global();
    let fetch: Function = Reflect::get(&global, &"fetch".into())
        .and_then(|f| f.dyn_into())
        .map_err(js)?;
    let promise: Promise = fetch
        .call1(&global, &url.into())
        .and_then(|p| p.dyn_into())
        .map_err(js)?;
    let response = JsFuture::from(promise).await.map_err(js)?;
    let ok = Reflect::get(&response, &"ok".into())
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if !ok {
        let status = Reflect::get(&response, &"status".into())
            .ok()
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        return Ok(Err(status));
    }
    let body_fn: Function = Reflect::get(&response, &method.into())
        .and_then(|f| f.dyn_into())
        .map_err(js)?;
    let promise: Promise = body_fn
        .call0(&response)
        .and_then(|p| p.dyn_into())
        .map_err(js)?;
    JsFuture::from(promise).await.map(Ok).map_err(js)
}

/// Splits `text` into pieces of about [`CHUNK`] bytes on character boundaries.
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        current.push(c);
        if current.len() >= CHUNK {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The agent's view of what the parser found (the same mapping as the real model's backend);
/// an end marker ends the scripted turn. `None` for events the agent does not need.
fn to_chunk(event: OutputEvent) -> Option<StreamChunk> {
    match event {
        OutputEvent::End(EndMarker::ToolResponse) => Some(StreamChunk::Done {
            reason: FinishReason::ToolCall,
        }),
        OutputEvent::End(_) => Some(StreamChunk::Done {
            reason: FinishReason::EndOfTurn,
        }),
        other => gg_gemma::agent::stream_chunk(other),
    }
}

impl ModelBackend for ScriptedBackend {
    fn generate<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        tools: &'a [ToolDefinition],
        options: &'a GenerateOptions,
    ) -> ChunkStream<'a> {
        let index = self.next.get();
        let Some(mut text) = self.turns.get(index).cloned() else {
            let message = format!(
                "the model script has no turn {} (it has {})",
                index + 1,
                self.turns.len()
            );
            return stream::once(async move { Err(BackendError::Failed { message }) })
                .boxed_local();
        };
        self.next.set(index + 1);
        if text.contains(CONTROL_TOKENS) {
            let counts = match &self.text {
                Some(model_text) => control_tokens(model_text, messages, tools, options)
                    .unwrap_or_else(|e| format!("(the prompt could not be tokenized: {e})")),
                None => "(this script names no tokenizer)".to_owned(),
            };
            text = text.replace(CONTROL_TOKENS, &counts);
        }
        let probed = [IMAGE_TOKENS, FEATURE_ROWS, IMAGE_BUDGET]
            .iter()
            .any(|p| text.contains(p));
        let model = self.model.clone();
        let start = async move {
            if !probed {
                return Ok(text);
            }
            let repo = model.ok_or_else(|| BackendError::Failed {
                message: "this model script names no \"model\" to probe images with".to_owned(),
            })?;
            let probe =
                crate::model::probe_prompt(&repo, PROBE_MODEL_SIZE, messages, tools, options)
                    .await
                    .map_err(|e| BackendError::Failed {
                        message: format!("the scripted model's probe of {repo} failed: {e}"),
                    })?;
            let rows: Vec<String> = probe.feature_rows.iter().map(usize::to_string).collect();
            let sum: usize = probe.feature_rows.iter().sum();
            Ok(text
                .replace(IMAGE_TOKENS, &probe.image_tokens.to_string())
                .replace(FEATURE_ROWS, &format!("{sum} ({})", rows.join("+")))
                .replace(IMAGE_BUDGET, &options.image_tokens.to_string()))
        };
        stream::once(start)
            .flat_map(|started| match started {
                Ok(text) => Self::replay(text),
                Err(e) => stream::iter([Err(e)]).boxed_local(),
            })
            .boxed_local()
    }

    /// With a `tokenizer` in the script, the agent counts as the real backend does.
    fn token_counter(&self) -> Option<&dyn gg_agent::TokenCounter> {
        self.text.as_ref().map(|t| t as &dyn gg_agent::TokenCounter)
    }
}

impl ScriptedBackend {
    /// `text` streamed in small chunks through the Gemma 4 output parser.
    fn replay(text: String) -> ChunkStream<'static> {
        let mut parser = OutputParser::new();
        let mut done = false;
        let mut pieces = pieces(&text).into_iter();
        stream::unfold((), move |()| {
            let next: Option<Vec<StreamChunk>> = if done {
                None
            } else if let Some(piece) = pieces.next() {
                Some(
                    parser
                        .push(&piece)
                        .into_iter()
                        .filter_map(to_chunk)
                        .collect(),
                )
            } else {
                let mut tail: Vec<StreamChunk> =
                    parser.finish().into_iter().filter_map(to_chunk).collect();
                if !tail.iter().any(|c| matches!(c, StreamChunk::Done { .. })) {
                    tail.push(StreamChunk::Done {
                        reason: FinishReason::EndOfTurn,
                    });
                }
                Some(tail)
            };
            if let Some(chunks) = &next {
                // Nothing follows the end of the turn.
                done = done || chunks.iter().any(|c| matches!(c, StreamChunk::Done { .. }));
            }
            async move {
                gloo_timers::future::TimeoutFuture::new(CHUNK_DELAY_MS).await;
                next.map(|chunks| (stream::iter(chunks.into_iter().map(Ok)), ()))
            }
        })
        .flatten()
        .scan(false, |ended, chunk| {
            // Stop after the first Done, even if the parser reported more.
            let out = if *ended { None } else { Some(chunk) };
            if let Some(Ok(StreamChunk::Done { .. })) = &out {
                *ended = true;
            }
            futures::future::ready(out.map(Some))
        })
        .filter_map(futures::future::ready)
        .boxed_local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_paths_resolve_on_the_script_origin() {
        assert_eq!(
            resolve("http://127.0.0.1:9/scripts/a.json?run=x", "/models/m"),
            "http://127.0.0.1:9/models/m"
        );
        assert_eq!(resolve("http://h/s.json", "http://o/m"), "http://o/m");
    }

    #[test]
    fn pieces_keep_characters_whole() {
        let p = pieces("héllo wörld 日本");
        assert_eq!(p.concat(), "héllo wörld 日本");
        assert!(p.iter().all(|s| !s.is_empty()));
    }
}
