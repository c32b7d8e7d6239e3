//! The token-level matcher: the allowed-token mask of a [`CallState`] and advancing by token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use thiserror::Error;

use super::automaton::{CallState, Frame, Lex, Num, StrLex};
use super::grammar::{Symbol, ToolGrammar, build_guard};
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

/// The vocabulary side of the matcher, independent of the tools: what each token writes, the
/// byte trie, the string masks and the number segments. Building it walks the whole vocabulary
/// (about 110 ms for 262,144 tokens natively), so build it once per tokenizer and share it
/// ([`TokenMatcher::with_vocab`]) between the grammars of different tool lists.
#[derive(Debug)]
pub struct MatcherVocab {
    entries: Vec<VocabEntry>,
    trie: Trie,
    delims: Vec<u32>,
    ends: Vec<u32>,
    /// The string lexer's marker guard ([`ToolGrammar`]'s: the same fixed marker texts).
    guard: Vec<[u8; 256]>,
    /// Text tokens allowed at the start of a string (and whenever the string lexer is at a
    /// character boundary with no marker prefix pending) — most of the vocabulary.
    base_string: Bitset,
    /// Text-token masks of the other string-lexer states, computed on first use.
    string_cache: Mutex<HashMap<StrLex, Bitset>>,
    /// Number segments by (trie node, number state, `number` rather than `integer`).
    number_cache: Mutex<HashMap<(u32, Num, bool), Arc<NumberSegment>>>,
}

/// Computes allowed-token masks for a [`ToolGrammar`] over a vocabulary ([`MatcherVocab`],
/// shared). See the [module documentation](crate::constrain).
#[derive(Debug, Clone)]
pub struct TokenMatcher {
    grammar: ToolGrammar,
    vocab: Arc<MatcherVocab>,
}

/// The part of the trie below a node that stays inside a number: the tokens that end inside it
/// (context-independent: allowed whenever the number is) and the nodes where a complete number
/// may be followed by something else (where the call's state decides).
#[derive(Debug, Default)]
struct NumberSegment {
    inside: Vec<u32>,
    exits: Vec<(u32, Num)>,
}

impl MatcherVocab {
    /// The vocabulary of a tokenizer.
    pub fn new(tokenizer: &GemmaTokenizer) -> Self {
        Self::from_entries(VocabEntry::from_tokenizer(tokenizer))
    }

    /// A vocabulary given entry by entry (index = token id).
    pub fn from_entries(entries: Vec<VocabEntry>) -> Self {
        let trie = Trie::build(&entries);
        let ids = |want: &VocabEntry| -> Vec<u32> {
            (0..entries.len() as u32)
                .filter(|&i| &entries[i as usize] == want)
                .collect()
        };
        let delims = ids(&VocabEntry::Delim);
        let ends = ids(&VocabEntry::CallEnd);
        let guard = build_guard();
        let mut base_string = Bitset::empty(entries.len());
        walk_string(&trie, &guard, 0, StrLex::START, &mut base_string);
        let vocab = Self {
            entries,
            trie,
            delims,
            ends,
            guard,
            base_string,
            string_cache: Mutex::new(HashMap::new()),
            number_cache: Mutex::new(HashMap::new()),
        };
        // The number segments of tokens that start a number (the others come up mid-number).
        for c in vocab.trie.children(0) {
            let byte = vocab.trie.nodes[c as usize].byte;
            let num = match byte {
                b'-' => Num::Minus,
                b'0' => Num::Zero,
                b'1'..=b'9' => Num::Int(1),
                _ => continue,
            };
            if vocab.trie.nodes[c as usize].children > 0 {
                for real in [false, true] {
                    vocab.number_segment(c, num, real);
                }
            }
        }
        vocab
    }

    /// Vocabulary size.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl TokenMatcher {
    /// A matcher over a tokenizer's vocabulary (builds the [`MatcherVocab`]).
    pub fn new(tokenizer: &GemmaTokenizer, grammar: &ToolGrammar) -> Self {
        Self::with_vocab(Arc::new(MatcherVocab::new(tokenizer)), grammar)
    }

    /// A matcher over a vocabulary given entry by entry (index = token id).
    pub fn from_vocab(entries: Vec<VocabEntry>, grammar: &ToolGrammar) -> Self {
        Self::with_vocab(Arc::new(MatcherVocab::from_entries(entries)), grammar)
    }

    /// A matcher over a vocabulary built before (cheap: the grammar is cloned, the vocabulary
    /// and its caches shared).
    pub fn with_vocab(vocab: Arc<MatcherVocab>, grammar: &ToolGrammar) -> Self {
        Self {
            grammar: grammar.clone(),
            vocab,
        }
    }

    /// The shared vocabulary.
    pub fn vocab(&self) -> &Arc<MatcherVocab> {
        &self.vocab
    }

    /// The grammar.
    pub fn grammar(&self) -> &ToolGrammar {
        &self.grammar
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab.entries.len()
    }

    /// The state right after `<|tool_call>`.
    pub fn start(&self) -> CallState {
        self.grammar.start()
    }

    /// The tokens allowed next. After the call's `<tool_call|>`
    /// ([`CallState::is_closed`]) nothing is constrained: every token.
    pub fn allowed(&self, state: &CallState) -> Bitset {
        if state.is_closed() {
            return Bitset::full(self.vocab.entries.len());
        }
        if let Some(lex) = state.in_string() {
            let mut mask = if lex == StrLex::START {
                self.vocab.base_string.clone()
            } else {
                let mut cache = self
                    .vocab
                    .string_cache
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                cache
                    .entry(lex)
                    .or_insert_with(|| self.vocab.string_mask(lex))
                    .clone()
            };
            if lex.utf8 == 0 {
                for &d in &self.vocab.delims {
                    mask.insert(d);
                }
            }
            return mask;
        }
        let mut mask = Bitset::empty(self.vocab.entries.len());
        self.walk_structural(state, &mut mask);
        for (ids, symbol) in [
            (&self.vocab.delims, Symbol::Delim),
            (&self.vocab.ends, Symbol::End),
        ] {
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
        let symbol = match self.vocab.entries.get(token as usize) {
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
    /// no node costs an allocation. Inside a number only the number's lexer state matters until
    /// the number ends, so that part of the walk is a cached [`NumberSegment`]; the walk goes on
    /// with the call's state only where a token leaves the number (`1,` or `5}`).
    fn walk_structural(&self, state: &CallState, mask: &mut Bitset) {
        #[derive(Clone)]
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
        struct Entry {
            node: u32,
            next: u32,
            /// The state to restore when leaving the node.
            saved: Option<Saved>,
            /// The lexical state to set on entering (the exits of a number segment).
            enter: Option<Lex>,
            /// Skip children that continue this number (the segment covered them).
            skip_number: Option<(Num, bool)>,
        }
        let mut st = state.clone();
        let mut path = vec![Entry {
            node: 0,
            next: self.vocab.trie.children(0).start,
            saved: None,
            enter: None,
            skip_number: None,
        }];
        while let Some(entry) = path.last_mut() {
            if let Some(lex) = entry.enter.take() {
                st.lex = lex;
            }
            if entry.next == self.vocab.trie.children(entry.node).end {
                if let Some(Entry {
                    saved: Some(saved), ..
                }) = path.pop()
                {
                    restore(&mut st, saved);
                }
                continue;
            }
            let c = entry.next;
            entry.next += 1;
            let node = &self.vocab.trie.nodes[c as usize];
            if let Some((num, real)) = entry.skip_number
                && num.step(node.byte, real).is_some()
            {
                continue;
            }
            let saved = Saved {
                lex: st.lex.clone(),
                len: st.stack.len(),
                top: st.stack.last().cloned(),
            };
            if self.grammar.step(&mut st, Symbol::Byte(node.byte)) {
                for &t in self.vocab.trie.ending(c) {
                    mask.insert(t);
                }
                if node.children > 0 {
                    if let Lex::Number { num, real } = st.lex {
                        let segment = self.vocab.number_segment(c, num, real);
                        for &t in &segment.inside {
                            mask.insert(t);
                        }
                        restore(&mut st, saved.clone());
                        for &(e, exit_num) in &segment.exits {
                            path.push(Entry {
                                node: e,
                                next: self.vocab.trie.children(e).start,
                                saved: Some(saved.clone()),
                                enter: Some(Lex::Number {
                                    num: exit_num,
                                    real,
                                }),
                                skip_number: Some((exit_num, real)),
                            });
                        }
                        continue;
                    }
                    path.push(Entry {
                        node: c,
                        next: node.first_child,
                        saved: Some(saved),
                        enter: None,
                        skip_number: None,
                    });
                    continue;
                }
            }
            restore(&mut st, saved);
        }
    }
}

impl MatcherVocab {
    /// The number segment below `node` reached in number state `num` (cached).
    fn number_segment(&self, node: u32, num: Num, real: bool) -> Arc<NumberSegment> {
        let mut cache = self
            .number_cache
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        cache
            .entry((node, num, real))
            .or_insert_with(|| {
                let mut segment = NumberSegment::default();
                let mut stack = vec![(node, num)];
                while let Some((n, k)) = stack.pop() {
                    let mut leaves = false;
                    for c in self.trie.children(n) {
                        let child = &self.trie.nodes[c as usize];
                        match k.step(child.byte, real) {
                            Some(k2) => {
                                segment.inside.extend_from_slice(self.trie.ending(c));
                                if child.children > 0 {
                                    stack.push((c, k2));
                                }
                            }
                            None => leaves = true,
                        }
                    }
                    if leaves && k.complete() {
                        segment.exits.push((n, k));
                    }
                }
                Arc::new(segment)
            })
            .clone()
    }

    /// The text-token mask of a string-lexer state other than the start: the start's mask,
    /// corrected where walking from `lex` differs from walking from the start. The two walks
    /// meet again within a few bytes (as soon as the UTF-8 and marker-guard states agree), and
    /// the subtrees below a meeting point are the same in both, so few nodes are visited.
    ///
    /// In the middle of a UTF-8 character only continuation bytes may come, so a plain walk from
    /// an empty mask is cheaper there (it prunes at the root).
    fn string_mask(&self, lex: StrLex) -> Bitset {
        let guard = &self.guard;
        if lex.utf8 != 0 {
            let mut mask = Bitset::empty(self.entries.len());
            walk_string(&self.trie, guard, 0, lex, &mut mask);
            return mask;
        }
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
