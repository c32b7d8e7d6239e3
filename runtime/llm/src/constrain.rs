//! Constrained decoding of tool calls during generation: once the model has written
//! `<|tool_call>`, every token until the call's `<tool_call|>` is sampled under the mask of
//! [`gg_gemma::constrain::TokenMatcher`] (the grammar of calls of the declared tools), applied on
//! the GPU by the sampling kernel ([`crate::sampler::Mask`]). Outside calls nothing is
//! constrained and nothing is uploaded.
//!
//! The matcher's vocabulary ([`MatcherVocab`], about 110 ms to build for 262,144 tokens) is
//! built once per loaded model, on the first constrained generation; the grammar once per
//! distinct tool list ([`GemmaModel::call_matcher`] keeps the last few).
//!
//! How it meets run-ahead (see [`crate::generate`]): the mask of step N+1 depends on token N,
//! which the host does not know while it records step N+1 ahead. Outside a call the step runs
//! ahead unmasked with its logits kept; if token N turns out to open a call, that step's logits
//! are sampled again under the mask (one more dispatch and read-back, once per call), with the
//! same random word, so the token is the one a generation without run-ahead picks. Inside a call
//! no step runs ahead.

use crate::error::{LlmError, Result};
use crate::model::GemmaModel;
use gg_gemma::constrain::{Bitset, CallState, GrammarError, MatcherVocab, ToolGrammar};
use std::cell::{OnceCell, RefCell};
use std::sync::Arc;

pub use gg_gemma::constrain::TokenMatcher;

/// Tool lists whose matchers a model keeps ([`GemmaModel::call_matcher`]).
const GRAMMARS_KEPT: usize = 4;

/// The per-model cache: the vocabulary once, a matcher per recent tool list.
#[derive(Debug, Default)]
pub struct ConstrainCache {
    vocab: OnceCell<Arc<MatcherVocab>>,
    /// (the tool list as JSON, its matcher), most recent last.
    grammars: RefCell<Vec<(String, Arc<TokenMatcher>)>>,
}

impl GemmaModel {
    /// The matcher for calls of `tools` (declarations as JSON: the agent's `ToolDefinition`s
    /// or the template's form, see [`ToolGrammar::from_declarations`]) over this model's
    /// vocabulary. The vocabulary is built on the first call and kept; the grammar of each
    /// distinct tool list is kept for the last few lists.
    pub fn call_matcher(
        &self,
        tools: &[serde_json::Value],
    ) -> std::result::Result<Arc<TokenMatcher>, GrammarError> {
        let key = serde_json::Value::Array(tools.to_vec()).to_string();
        if let Some(found) = self
            .constrain
            .grammars
            .borrow()
            .iter()
            .find(|(k, _)| *k == key)
        {
            return Ok(found.1.clone());
        }
        let grammar = ToolGrammar::from_declarations(tools)?;
        let vocab = self
            .constrain
            .vocab
            .get_or_init(|| Arc::new(MatcherVocab::new(&self.tokenizer)))
            .clone();
        let matcher = Arc::new(TokenMatcher::with_vocab(vocab, &grammar));
        let mut kept = self.constrain.grammars.borrow_mut();
        if kept.len() >= GRAMMARS_KEPT {
            kept.remove(0);
        }
        kept.push((key, matcher.clone()));
        Ok(matcher)
    }

    /// A [`CallConstraint`] for calls of `tools`, or `None` (with a logged warning) when the
    /// declarations cannot be compiled into a grammar: generation then goes on unconstrained
    /// (the output parser still reports malformed calls).
    pub fn call_constraint(&self, tools: &[serde_json::Value]) -> Option<CallConstraint> {
        if tools.is_empty() {
            return None;
        }
        match self.call_matcher(tools) {
            Ok(matcher) => Some(CallConstraint::new(
                matcher,
                self.tokenizer.special().tool_call_start.id,
            )),
            Err(e) => {
                log::warn!("tool calls are not constrained: {e}");
                None
            }
        }
    }
}

/// The constraint of one generation: which call (if any) the model is writing.
#[derive(Debug, Clone)]
pub struct CallConstraint {
    matcher: Arc<TokenMatcher>,
    /// `<|tool_call>`'s id.
    start: u32,
    /// Inside a call: its state; `None` outside calls.
    state: Option<CallState>,
}

impl CallConstraint {
    /// A constraint over `matcher`, calls opened by the token `start` (`<|tool_call>`, read
    /// from the tokenizer).
    pub fn new(matcher: Arc<TokenMatcher>, start: u32) -> Self {
        Self {
            matcher,
            start,
            state: None,
        }
    }

    /// The matcher.
    pub fn matcher(&self) -> &Arc<TokenMatcher> {
        &self.matcher
    }

    /// Whether the next token is constrained (a call is open).
    pub fn inside(&self) -> bool {
        self.state.is_some()
    }

    /// Follows the prompt's tokens: a prompt that ends inside an open call (e.g. a call
    /// pre-filled up to `<|tool_call>`) starts constrained. A prompt whose open call the grammar
    /// already refuses starts unconstrained (nothing valid can follow it).
    pub fn follow_prompt(&mut self, prompt: &[u32]) {
        self.state = None;
        let Some(open) = prompt.iter().rposition(|&t| t == self.start) else {
            return;
        };
        let mut state = self.matcher.start();
        for &t in &prompt[open + 1..] {
            if self.matcher.advance(&mut state, t).is_err() {
                return;
            }
            if state.is_closed() {
                return;
            }
        }
        self.state = Some(state);
    }

    /// The tokens allowed next, or `None` outside a call.
    pub fn mask(&self) -> Option<Bitset> {
        self.state.as_ref().map(|s| self.matcher.allowed(s))
    }

    /// Takes the token sampled: `<|tool_call>` opens a call, a token inside one advances it
    /// (the call's `<tool_call|>` closes it). A token the grammar refuses inside a call is an
    /// error (the mask allowed it: a bug), not a malformed call passed on.
    pub fn accept(&mut self, token: u32) -> Result<()> {
        match &mut self.state {
            None => {
                if token == self.start {
                    self.state = Some(self.matcher.start());
                }
            }
            Some(state) => {
                self.matcher.advance(state, token).map_err(|e| {
                    LlmError::Constraint(format!(
                        "the sampler picked a token the tool-call grammar refuses: {e}"
                    ))
                })?;
                if state.is_closed() {
                    self.state = None;
                }
            }
        }
        Ok(())
    }
}
