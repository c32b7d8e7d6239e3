//! The vocabulary as the matcher sees it: what each token id writes ([`VocabEntry`]) and a byte
//! trie of every text token, so that tokens sharing a prefix are checked against the automaton
//! once for the shared part.

use crate::GemmaTokenizer;

/// What one token id writes, for the matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VocabEntry {
    /// Decoded text bytes: a piece with `▁` turned into a space, or the one byte of a
    /// byte-fallback piece `<0xHH>`.
    Bytes(Vec<u8>),
    /// The string delimiter `<|"|>`.
    Delim,
    /// `<tool_call|>`.
    CallEnd,
    /// Any other special or added token (and pieces decoding to nothing): never allowed in a call.
    Refused,
}

impl VocabEntry {
    /// The entries of a tokenizer's whole vocabulary, by id.
    ///
    /// Assumes Gemma 4's decoder (`▁` -> space, byte fallback, fuse), under which the text of a
    /// token sequence is the concatenation of the tokens' texts; added tokens are atomic.
    pub fn from_tokenizer(tokenizer: &GemmaTokenizer) -> Vec<VocabEntry> {
        let special = tokenizer.special();
        let (delim, end) = (special.string_delim.id, special.tool_call_end.id);
        let added = tokenizer.added_token_ids();
        (0..tokenizer.vocab_size() as u32)
            .map(|id| {
                if id == delim {
                    VocabEntry::Delim
                } else if id == end {
                    VocabEntry::CallEnd
                } else if added.contains(&id) {
                    VocabEntry::Refused
                } else if let Some(b) = tokenizer.fallback_byte(id) {
                    VocabEntry::Bytes(vec![b])
                } else {
                    match tokenizer.piece(id) {
                        Some(p) if !p.is_empty() => {
                            VocabEntry::Bytes(p.replace('\u{2581}', " ").into_bytes())
                        }
                        _ => VocabEntry::Refused,
                    }
                }
            })
            .collect()
    }
}

/// A node of the byte trie. The tokens of the subtree are `order[lo..hi]`, those ending at the
/// node `order[lo..lo + ending]` (the order is the lexicographic order of the tokens' bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub byte: u8,
    pub first_child: u32,
    pub children: u32,
    pub lo: u32,
    pub ending: u32,
    pub hi: u32,
}

/// Byte trie of the text tokens; node 0 is the root (the empty prefix).
#[derive(Debug, Clone)]
pub(crate) struct Trie {
    pub nodes: Vec<Node>,
    /// Token ids in lexicographic order of their bytes.
    pub order: Vec<u32>,
}

impl Trie {
    pub(crate) fn build(entries: &[VocabEntry]) -> Trie {
        let mut texts: Vec<(&[u8], u32)> = entries
            .iter()
            .enumerate()
            .filter_map(|(id, e)| match e {
                VocabEntry::Bytes(b) if !b.is_empty() => Some((b.as_slice(), id as u32)),
                _ => None,
            })
            .collect();
        texts.sort_unstable();
        let order: Vec<u32> = texts.iter().map(|&(_, id)| id).collect();
        let mut nodes = vec![Node {
            byte: 0,
            first_child: 0,
            children: 0,
            lo: 0,
            ending: 0,
            hi: texts.len() as u32,
        }];
        // Breadth-first: the children of a node are allocated together, so they are contiguous.
        let mut queue = std::collections::VecDeque::from([(0usize, 0usize)]);
        while let Some((n, depth)) = queue.pop_front() {
            let (lo, hi) = (nodes[n].lo as usize, nodes[n].hi as usize);
            let mut i = lo;
            while i < hi && texts[i].0.len() == depth {
                i += 1;
            }
            nodes[n].ending = (i - lo) as u32;
            nodes[n].first_child = nodes.len() as u32;
            while i < hi {
                let b = texts[i].0[depth];
                let start = i;
                while i < hi && texts[i].0[depth] == b {
                    i += 1;
                }
                queue.push_back((nodes.len(), depth + 1));
                nodes.push(Node {
                    byte: b,
                    first_child: 0,
                    children: 0,
                    lo: start as u32,
                    ending: 0,
                    hi: i as u32,
                });
            }
            nodes[n].children = nodes.len() as u32 - nodes[n].first_child;
        }
        Trie { nodes, order }
    }

    /// The children of a node.
    #[inline]
    pub(crate) fn children(&self, n: u32) -> std::ops::Range<u32> {
        let node = &self.nodes[n as usize];
        node.first_child..node.first_child + node.children
    }

    /// Ids of the tokens ending at a node.
    #[inline]
    pub(crate) fn ending(&self, n: u32) -> &[u32] {
        let node = &self.nodes[n as usize];
        &self.order[node.lo as usize..(node.lo + node.ending) as usize]
    }

    /// Ids of the tokens of a node's subtree.
    #[inline]
    pub(crate) fn subtree(&self, n: u32) -> &[u32] {
        let node = &self.nodes[n as usize];
        &self.order[node.lo as usize..node.hi as usize]
    }
}
