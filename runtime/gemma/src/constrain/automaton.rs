//! The symbol-level automaton: a [`CallState`] (a stack of open objects/arrays and the lexical
//! position inside the innermost one) advanced one [`Symbol`] at a time by
//! [`ToolGrammar::step`].

use super::grammar::{GUARD_FAIL, ObjectSchema, Symbol, ToolGrammar, is_name_char};

/// The lexical state inside strings: the UTF-8 decoder state and the marker guard state. Inside a
/// string only these matter (no byte can leave a string: only the `<|"|>` token closes it), which
/// is what makes string masks context-independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StrLex {
    /// 0: at a character boundary; otherwise which continuation bytes are expected.
    pub utf8: u8,
    /// State of the marker guard ([`ToolGrammar::guard`]).
    pub guard: u8,
}

impl StrLex {
    pub(crate) const START: StrLex = StrLex { utf8: 0, guard: 0 };

    /// The state after one content byte, or `None` when the byte is refused (invalid UTF-8, or it
    /// completes a marker's text).
    #[inline]
    pub(crate) fn step(self, guard: &[[u8; 256]], b: u8) -> Option<StrLex> {
        let utf8 = utf8_step(self.utf8, b)?;
        let g = guard[self.guard as usize][b as usize];
        (g != GUARD_FAIL).then_some(StrLex { utf8, guard: g })
    }
}

/// UTF-8 decoder (well-formed sequences only, RFC 3629).
#[inline]
fn utf8_step(state: u8, b: u8) -> Option<u8> {
    let next = match (state, b) {
        (0, 0x00..=0x7F) => 0,
        (0, 0xC2..=0xDF) => 1,
        (0, 0xE0) => 2,
        (0, 0xE1..=0xEC | 0xEE..=0xEF) => 3,
        (0, 0xED) => 4,
        (0, 0xF0) => 5,
        (0, 0xF1..=0xF3) => 6,
        (0, 0xF4) => 7,
        (1, 0x80..=0xBF) => 0,
        (2, 0xA0..=0xBF) | (3, 0x80..=0xBF) | (4, 0x80..=0x9F) => 1,
        (5, 0x90..=0xBF) | (6, 0x80..=0xBF) | (7, 0x80..=0x8F) => 3,
        _ => return None,
    };
    Some(next)
}

/// Most digits of an integer (or of a number's integer part): every such integer fits an `i64`,
/// so the parser reads it back as an integer.
pub const MAX_INT_DIGITS: u8 = 18;
/// Most digits of a number's fraction.
pub const MAX_FRAC_DIGITS: u8 = 18;
/// Most digits of a number's exponent (so the value stays a finite `f64`).
pub const MAX_EXP_DIGITS: u8 = 2;

/// Numbers: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` (fraction and exponent only for
/// `number`), with at most [`MAX_INT_DIGITS`], [`MAX_FRAC_DIGITS`] and [`MAX_EXP_DIGITS`] digits.
/// The counts are the digits read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Num {
    Minus,
    Zero,
    Int(u8),
    Dot,
    Frac(u8),
    Exp,
    ExpSign,
    ExpDigits(u8),
}

impl Num {
    pub(crate) fn complete(self) -> bool {
        matches!(
            self,
            Num::Zero | Num::Int(_) | Num::Frac(_) | Num::ExpDigits(_)
        )
    }

    pub(crate) fn step(self, b: u8, real: bool) -> Option<Num> {
        let digit = b.is_ascii_digit();
        Some(match (self, b) {
            (Num::Minus, b'0') => Num::Zero,
            (Num::Minus, _) if digit => Num::Int(1),
            (Num::Int(n), _) if digit && n < MAX_INT_DIGITS => Num::Int(n + 1),
            (Num::Zero | Num::Int(_), b'.') if real => Num::Dot,
            (Num::Zero | Num::Int(_) | Num::Frac(_), b'e' | b'E') if real => Num::Exp,
            (Num::Dot, _) if digit => Num::Frac(1),
            (Num::Frac(n), _) if digit && n < MAX_FRAC_DIGITS => Num::Frac(n + 1),
            (Num::Exp, b'+' | b'-') => Num::ExpSign,
            (Num::Exp | Num::ExpSign, _) if digit => Num::ExpDigits(1),
            (Num::ExpDigits(n), _) if digit && n < MAX_EXP_DIGITS => Num::ExpDigits(n + 1),
            _ => return None,
        })
    }
}

/// An open container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Frame {
    /// An object with declared properties; `seen` has bit i for each property given.
    Closed { object: u32, seen: u64 },
    /// A free-form object and the keys given so far.
    Free { object: u32, seen: Vec<Box<[u8]>> },
    /// An array of `items`.
    Array { items: u32 },
}

/// Where the automaton is inside the innermost container.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Lex {
    /// Inside literal set `set` at trie `node`; `excluded` are literals not allowed (keys given).
    Literal {
        kind: LitKind,
        set: u32,
        node: u32,
        excluded: u64,
    },
    /// Right after `{`: a key or `}`.
    ObjectOpen,
    /// A free-form key so far (empty: nothing yet).
    FreeKey(Vec<u8>),
    /// A value of schema `schema` (the index of a value schema).
    Value { schema: u32, allow_close: bool },
    /// Inside a `<|"|>` string.
    Str(StrLex),
    /// Inside a number.
    Number { num: Num, real: bool },
    /// After a value: `,` or the closing bracket.
    AfterValue,
    /// After the arguments' closing `}`: only `<tool_call|>`.
    Done,
    /// After `<tool_call|>`.
    Closed,
}

/// How far a call has got: the open containers and the position in the innermost one. Cheap to
/// clone (a short stack); keep a clone to roll back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallState {
    pub(crate) stack: Vec<Frame>,
    pub(crate) lex: Lex,
}

impl CallState {
    /// Whether the call is complete up to its closing `<tool_call|>` (which is then the only
    /// thing allowed).
    pub fn is_complete(&self) -> bool {
        self.lex == Lex::Done
    }

    /// Whether `<tool_call|>` was accepted: the call is over and nothing is constrained any more.
    pub fn is_closed(&self) -> bool {
        self.lex == Lex::Closed
    }

    /// The string-lexer state when inside a free string.
    pub(crate) fn in_string(&self) -> Option<StrLex> {
        match self.lex {
            Lex::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// What a literal is for, which decides what its completion does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LitKind {
    /// `call:NAME{`: opens the tool's argument object.
    Tool,
    /// `key:` of the innermost (closed) object.
    Key,
    /// A whole value (enum value, `true`/`false`/`None`).
    Value,
}

impl ToolGrammar {
    /// The state right after `<|tool_call>`.
    pub fn start(&self) -> CallState {
        CallState {
            stack: Vec::new(),
            lex: Lex::Literal {
                kind: LitKind::Tool,
                set: self.calls,
                node: 0,
                excluded: 0,
            },
        }
    }

    /// Advances over decoded text (no special tokens in it); on refusal `state` is unchanged and
    /// the offset of the refused byte is returned.
    pub fn advance_text(&self, state: &mut CallState, text: &[u8]) -> Result<(), usize> {
        let mut next = state.clone();
        for (i, &b) in text.iter().enumerate() {
            if !self.step(&mut next, Symbol::Byte(b)) {
                return Err(i);
            }
        }
        *state = next;
        Ok(())
    }

    /// Advances over one symbol. Returns `false` (and leaves `state` in an unspecified state) when
    /// the symbol is refused: callers that must keep the state step a clone.
    pub fn step(&self, state: &mut CallState, symbol: Symbol) -> bool {
        // A loop: some states end on a symbol they do not consume (a number or a literal that
        // may continue), which is then read in the state that follows.
        loop {
            match self.step_once(state, symbol) {
                Step::Consumed => {
                    self.settle(state);
                    return true;
                }
                Step::Refused => return false,
                Step::Again => continue,
            }
        }
    }

    /// Completes literals that cannot continue (so equal positions have equal states).
    fn settle(&self, state: &mut CallState) {
        if let Lex::Literal {
            kind,
            set,
            node,
            excluded,
        } = state.lex
        {
            let lits = &self.literals[set as usize];
            if let Some(leaf) = lits.leaf(node, excluded)
                && !lits.has_children(node)
            {
                self.complete_literal(state, kind, leaf);
            }
        }
    }

    fn complete_literal(&self, state: &mut CallState, kind: LitKind, leaf: u32) {
        match kind {
            LitKind::Tool => {
                state.stack.push(Frame::Closed {
                    object: self.tool_objects[leaf as usize],
                    seen: 0,
                });
                state.lex = Lex::ObjectOpen;
            }
            LitKind::Key => {
                let Some(Frame::Closed { object, seen }) = state.stack.last_mut() else {
                    unreachable!("key literals are read inside closed objects")
                };
                let ObjectSchema::Closed { values, .. } = &self.objects[*object as usize] else {
                    unreachable!("closed frames have closed schemas")
                };
                *seen |= 1 << leaf;
                state.lex = Lex::Value {
                    schema: values[leaf as usize],
                    allow_close: false,
                };
            }
            LitKind::Value => state.lex = Lex::AfterValue,
        }
    }

    fn value_start(
        &self,
        state: &mut CallState,
        schema: u32,
        allow_close: bool,
        s: Symbol,
    ) -> Step {
        let v = &self.values[schema as usize];
        if allow_close && s == Symbol::Byte(b']') {
            state.stack.pop();
            self.after_close(state);
            return Step::Consumed;
        }
        if let Some(set) = v.enumeration {
            state.lex = Lex::Literal {
                kind: LitKind::Value,
                set,
                node: 0,
                excluded: 0,
            };
            return Step::Again;
        }
        match s {
            Symbol::Delim if v.string => {
                state.lex = Lex::Str(StrLex::START);
                Step::Consumed
            }
            Symbol::Byte(b'{') if v.object.is_some() => {
                let object = v.object.unwrap_or_default();
                state.stack.push(match &self.objects[object as usize] {
                    ObjectSchema::Closed { .. } => Frame::Closed { object, seen: 0 },
                    ObjectSchema::Free { .. } => Frame::Free {
                        object,
                        seen: Vec::new(),
                    },
                });
                state.lex = Lex::ObjectOpen;
                Step::Consumed
            }
            Symbol::Byte(b'[') if v.array.is_some() => {
                state.stack.push(Frame::Array {
                    items: v.array.unwrap_or_default(),
                });
                state.lex = Lex::Value {
                    schema: v.array.unwrap_or_default(),
                    allow_close: true,
                };
                Step::Consumed
            }
            Symbol::Byte(b) if (v.integer || v.number) && (b == b'-' || b.is_ascii_digit()) => {
                let num = match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int(1),
                };
                state.lex = Lex::Number {
                    num,
                    real: v.number,
                };
                Step::Consumed
            }
            Symbol::Byte(_) if v.words.is_some() => {
                let set = v.words.unwrap_or_default();
                if self.literals[set as usize].child(0, s, 0).is_none() {
                    return Step::Refused;
                }
                state.lex = Lex::Literal {
                    kind: LitKind::Value,
                    set,
                    node: 0,
                    excluded: 0,
                };
                Step::Again
            }
            _ => Step::Refused,
        }
    }

    /// After a container closed: the value it was is complete.
    fn after_close(&self, state: &mut CallState) {
        state.lex = if state.stack.is_empty() {
            Lex::Done
        } else {
            Lex::AfterValue
        };
    }

    fn key_start(&self, state: &mut CallState) -> Step {
        match state.stack.last() {
            Some(Frame::Closed { object, seen }) => {
                let ObjectSchema::Closed { keys, .. } = &self.objects[*object as usize] else {
                    return Step::Refused;
                };
                if !self.literals[*keys as usize].any(*seen) {
                    return Step::Refused;
                }
                state.lex = Lex::Literal {
                    kind: LitKind::Key,
                    set: *keys,
                    node: 0,
                    excluded: *seen,
                };
                Step::Again
            }
            Some(Frame::Free { .. }) => {
                state.lex = Lex::FreeKey(Vec::new());
                Step::Again
            }
            _ => Step::Refused,
        }
    }

    /// Whether the innermost object may close (every required property given).
    fn may_close_object(&self, state: &CallState) -> bool {
        match state.stack.last() {
            Some(Frame::Closed { object, seen }) => match &self.objects[*object as usize] {
                ObjectSchema::Closed { required, .. } => required & !seen == 0,
                ObjectSchema::Free { .. } => true,
            },
            Some(Frame::Free { .. }) => true,
            _ => false,
        }
    }

    fn step_once(&self, state: &mut CallState, s: Symbol) -> Step {
        match &mut state.lex {
            Lex::Literal {
                kind,
                set,
                node,
                excluded,
            } => {
                let (kind, set, node_now, excl) = (*kind, *set, *node, *excluded);
                let lits = &self.literals[set as usize];
                if let Some(n) = lits.child(node_now, s, excl) {
                    *node = n;
                    return Step::Consumed;
                }
                match lits.leaf(node_now, excl) {
                    Some(leaf) => {
                        self.complete_literal(state, kind, leaf);
                        Step::Again
                    }
                    None => Step::Refused,
                }
            }
            Lex::ObjectOpen => match s {
                Symbol::Byte(b'}') if self.may_close_object(state) => {
                    state.stack.pop();
                    self.after_close(state);
                    Step::Consumed
                }
                Symbol::Byte(b'}') => Step::Refused,
                _ => self.key_start(state),
            },
            Lex::FreeKey(key) => match s {
                Symbol::Byte(b)
                    if key.is_empty() && (b.is_ascii_alphabetic() || b == b'_' || b == b'$') =>
                {
                    key.push(b);
                    Step::Consumed
                }
                Symbol::Byte(b) if !key.is_empty() && is_name_char(b) => {
                    key.push(b);
                    Step::Consumed
                }
                Symbol::Byte(b':') if !key.is_empty() => {
                    let key = std::mem::take(key).into_boxed_slice();
                    let Some(Frame::Free { object, seen }) = state.stack.last_mut() else {
                        return Step::Refused;
                    };
                    if seen.contains(&key) {
                        return Step::Refused;
                    }
                    seen.push(key);
                    let ObjectSchema::Free { values } = &self.objects[*object as usize] else {
                        return Step::Refused;
                    };
                    state.lex = Lex::Value {
                        schema: *values,
                        allow_close: false,
                    };
                    Step::Consumed
                }
                _ => Step::Refused,
            },
            Lex::Value {
                schema,
                allow_close,
            } => {
                let (schema, allow_close) = (*schema, *allow_close);
                self.value_start(state, schema, allow_close, s)
            }
            Lex::Str(lex) => match s {
                Symbol::Byte(b) => match lex.step(&self.guard, b) {
                    Some(next) => {
                        *lex = next;
                        Step::Consumed
                    }
                    None => Step::Refused,
                },
                Symbol::Delim if lex.utf8 == 0 => {
                    state.lex = Lex::AfterValue;
                    Step::Consumed
                }
                _ => Step::Refused,
            },
            Lex::Number { num, real } => {
                if let Symbol::Byte(b) = s
                    && let Some(n) = num.step(b, *real)
                {
                    *num = n;
                    return Step::Consumed;
                }
                if num.complete() {
                    state.lex = Lex::AfterValue;
                    Step::Again
                } else {
                    Step::Refused
                }
            }
            Lex::AfterValue => match (s, state.stack.last()) {
                (Symbol::Byte(b','), Some(Frame::Array { items })) => {
                    state.lex = Lex::Value {
                        schema: *items,
                        allow_close: false,
                    };
                    Step::Consumed
                }
                (Symbol::Byte(b']'), Some(Frame::Array { .. })) => {
                    state.stack.pop();
                    self.after_close(state);
                    Step::Consumed
                }
                (Symbol::Byte(b','), Some(Frame::Closed { .. } | Frame::Free { .. })) => {
                    match self.key_start(state) {
                        Step::Refused => Step::Refused,
                        _ => Step::Consumed,
                    }
                }
                (Symbol::Byte(b'}'), Some(Frame::Closed { .. } | Frame::Free { .. }))
                    if self.may_close_object(state) =>
                {
                    state.stack.pop();
                    self.after_close(state);
                    Step::Consumed
                }
                _ => Step::Refused,
            },
            Lex::Done => match s {
                Symbol::End => {
                    state.lex = Lex::Closed;
                    Step::Consumed
                }
                _ => Step::Refused,
            },
            Lex::Closed => Step::Refused,
        }
    }
}

enum Step {
    Consumed,
    Refused,
    Again,
}
