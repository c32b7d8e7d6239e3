//! The token-level matcher: the allowed-token mask of a [`CallState`] and advancing by token.

use std::collections::HashMap;
use std::sync::Mutex;

use thiserror::Error;

use super::automaton::{CallState, Frame, Lex, StrLex};
use super::grammar::{Symbol, ToolGrammar};
use super::vocab::{Trie, VocabEntry};
use crate::GemmaTokenizer;

/// A set of token ids: bit `i % 32` of word `i / 32` is token `i` (32 KiB for 262,144 tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitset {
    words: Vec<u32>,
    len: usize,
}

impl Bitset {
    /// No token.
    pub fn empty(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(32)],
            len,
        }
    }

    /// Every token.
    pub fn full(len: usize) -> Self {
        let mut s = Self {
            words: vec![u32::MAX; len.div_ceil(32)],
            len,
        };
        if !len.is_multiple_of(32)
            && let Some(last) = s.words.last_mut()
        {
            *last = (1u32 << (len % 32)) - 1;
        }
        s
    }

    /// Number of token ids covered (the vocabulary size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether token `i` is in the set.
    #[inline]
    pub fn contains(&self, i: u32) -> bool {
        let i = i as usize;
        i < self.len && self.words[i / 32] & (1 << (i % 32)) != 0
    }

    /// Adds token `i`.
    #[inline]
    pub fn insert(&mut self, i: u32) {
        self.words[i as usize / 32] |= 1 << (i % 32);
    }

    /// Removes token `i`.
    #[inline]
    pub fn remove(&mut self, i: u32) {
        self.words[i as usize / 32] &= !(1 << (i % 32));
    }

    /// How many tokens are in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The words (bit `i % 32` of word `i / 32` is token `i`), e.g. to upload as a mask.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The ids in the set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            (0..32)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| (w * 32 + b) as u32)
        })
    }
}

/// A token the grammar does not allow here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("token {token} is not allowed here")]
pub struct Refused {
    /// The token id.
    pub token: u32,
}

/// Computes allowed-token masks for a [`ToolGrammar`] over a vocabulary. See the [module
/// documentation](crate::constrain).
#[derive(Debug)]
pub struct TokenMatcher {
    grammar: ToolGrammar,
    entries: Vec<VocabEntry>,
    trie: Trie,
    delims: Vec<u32>,
    ends: Vec<u32>,
    /// Text tokens allowed at the start of a string (and whenever the string lexer is at a
    /// character boundary with no marker prefix pending) — most of the vocabulary.
    base_string: Bitset,
    /// Text-token masks of the other string-lexer states, computed on first use.
    string_cache: Mutex<HashMap<StrLex, Bitset>>,
}

impl TokenMatcher {
    /// A matcher over a tokenizer's vocabulary.
    pub fn new(tokenizer: &GemmaTokenizer, grammar: &ToolGrammar) -> Self {
        Self::from_vocab(VocabEntry::from_tokenizer(tokenizer), grammar)
    }

    /// A matcher over a vocabulary given entry by entry (index = token id).
    pub fn from_vocab(entries: Vec<VocabEntry>, grammar: &ToolGrammar) -> Self {
        let trie = Trie::build(&entries);
        let ids = |want: &VocabEntry| -> Vec<u32> {
            (0..entries.len() as u32)
                .filter(|&i| &entries[i as usize] == want)
                .collect()
        };
        let delims = ids(&VocabEntry::Delim);
        let ends = ids(&VocabEntry::CallEnd);
        let mut base_string = Bitset::empty(entries.len());
        walk_string(&trie, &grammar.guard, 0, StrLex::START, &mut base_string);
        Self {
            grammar: grammar.clone(),
            entries,
            trie,
            delims,
            ends,
            base_string,
            string_cache: Mutex::new(HashMap::new()),
        }
    }

    /// The grammar.
    pub fn grammar(&self) -> &ToolGrammar {
        &self.grammar
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.entries.len()
    }

    /// The state right after `<|tool_call>`.
    pub fn start(&self) -> CallState {
        self.grammar.start()
    }

    /// The tokens allowed next. After the call's `<tool_call|>`
    /// ([`CallState::is_closed`]) nothing is constrained: every token.
    pub fn allowed(&self, state: &CallState) -> Bitset {
        if state.is_closed() {
            return Bitset::full(self.entries.len());
        }
        if let Some(lex) = state.in_string() {
            let mut mask = if lex == StrLex::START {
                self.base_string.clone()
            } else {
                let mut cache = self
                    .string_cache
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                cache
                    .entry(lex)
                    .or_insert_with(|| self.string_mask(lex))
                    .clone()
            };
            if lex.utf8 == 0 {
                for &d in &self.delims {
                    mask.insert(d);
                }
            }
            return mask;
        }
        let mut mask = Bitset::empty(self.entries.len());
        self.walk_structural(state, &mut mask);
        for (ids, symbol) in [(&self.delims, Symbol::Delim), (&self.ends, Symbol::End)] {
            if !ids.is_empty() && self.grammar.step(&mut state.clone(), symbol) {
                for &t in ids {
                    mask.insert(t);
                }
            }
        }
        mask
    }

    /// Advances over one token; on refusal `state` is unchanged. After the call's
    /// `<tool_call|>` every token is accepted (nothing is constrained).
    pub fn advance(&self, state: &mut CallState, token: u32) -> Result<(), Refused> {
        if state.is_closed() {
            return Ok(());
        }
        let refused = Refused { token };
        let symbol = match self.entries.get(token as usize) {
            Some(VocabEntry::Bytes(bytes)) if !bytes.is_empty() => {
                return self.grammar.advance_text(state, bytes).map_err(|_| refused);
            }
            Some(VocabEntry::Delim) => Symbol::Delim,
            Some(VocabEntry::CallEnd) => Symbol::End,
            Some(VocabEntry::Refused | VocabEntry::Bytes(_)) | None => return Err(refused),
        };
        let mut next = state.clone();
        if self.grammar.step(&mut next, symbol) {
            *state = next;
            Ok(())
        } else {
            Err(refused)
        }
    }

    /// Marks the text tokens the automaton accepts from `state` (outside strings). Only a few
    /// bytes are allowed at each point (a key's next letter, a digit, a bracket), so the walk
    /// prunes at once. One state is stepped down the trie and restored on the way back (a step
    /// changes the lexical position and at most the innermost frame: one push, pop or update), so
    /// no node costs an allocation.
    fn walk_structural(&self, state: &CallState, mask: &mut Bitset) {
        struct Saved {
            lex: Lex,
            len: usize,
            top: Option<Frame>,
        }
        fn restore(st: &mut CallState, saved: Saved) {
            st.lex = saved.lex;
            st.stack.truncate(saved.len);
            if let Some(top) = saved.top {
                if st.stack.len() < saved.len {
                    st.stack.push(top);
                } else {
                    st.stack[saved.len - 1] = top;
                }
            }
        }
        let mut st = state.clone();
        // (node, next child to try, the state to restore when leaving the node)
        let mut path: Vec<(u32, u32, Option<Saved>)> = vec![(0, self.trie.children(0).start, None)];
        while let Some((n, next, _)) = path.last_mut() {
            if *next == self.trie.children(*n).end {
                if let Some((_, _, Some(saved))) = path.pop() {
                    restore(&mut st, saved);
                }
                continue;
            }
            let c = *next;
            *next += 1;
            let saved = Saved {
                lex: st.lex.clone(),
                len: st.stack.len(),
                top: st.stack.last().cloned(),
            };
            let node = &self.trie.nodes[c as usize];
            if self.grammar.step(&mut st, Symbol::Byte(node.byte)) {
                for &t in self.trie.ending(c) {
                    mask.insert(t);
                }
                if node.children > 0 {
                    path.push((c, node.first_child, Some(saved)));
                    continue;
                }
            }
            restore(&mut st, saved);
        }
    }

    /// The text-token mask of a string-lexer state other than the start: the start's mask,
    /// corrected where walking from `lex` differs from walking from the start. The two walks
    /// meet again within a few bytes (as soon as the UTF-8 and marker-guard states agree), and
    /// the subtrees below a meeting point are the same in both, so few nodes are visited.
    fn string_mask(&self, lex: StrLex) -> Bitset {
        let guard = &self.grammar.guard;
        let mut mask = self.base_string.clone();
        let mut stack = vec![(0u32, Some(lex), Some(StrLex::START))];
        while let Some((n, a, b)) = stack.pop() {
            for c in self.trie.children(n) {
                let byte = self.trie.nodes[c as usize].byte;
                let a2 = a.and_then(|s| s.step(guard, byte));
                let b2 = b.and_then(|s| s.step(guard, byte));
                match (a2, b2) {
                    (None, None) => {}
                    (Some(x), Some(y)) if x == y => {}
                    (None, Some(_)) => {
                        for &t in self.trie.subtree(c) {
                            mask.remove(t);
                        }
                    }
                    (Some(x), None) => walk_string(&self.trie, guard, c, x, &mut mask),
                    (Some(_), Some(_)) => stack.push((c, a2, b2)),
                }
            }
        }
        mask
    }
}

/// Marks the tokens of `node`'s children subtrees (and `node`'s own, when `node` is not the
/// root) that the string lexer accepts from `lex` (the state at `node`).
fn walk_string(trie: &Trie, guard: &[[u8; 256]], node: u32, lex: StrLex, mask: &mut Bitset) {
    if node != 0 {
        for &t in trie.ending(node) {
            mask.insert(t);
        }
    }
    let mut stack = vec![(node, lex)];
    while let Some((n, s)) = stack.pop() {
        for c in trie.children(n) {
            let nc = &trie.nodes[c as usize];
            if let Some(next) = s.step(guard, nc.byte) {
                for &t in trie.ending(c) {
                    mask.insert(t);
                }
                if nc.children > 0 {
                    stack.push((c, next));
                }
            }
        }
    }
}
