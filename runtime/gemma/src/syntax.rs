//! Gemma 4's argument syntax, both ways.
//!
//! The chat template writes tool-call arguments, tool responses and declarations in a JSON-like
//! syntax that is not JSON: strings are delimited by the special token `<|"|>` and are not escaped,
//! keys of call arguments are bare, objects are written in case-insensitive key order (jinja2's
//! `dictsort`), and scalars are printed with Python's `str()` (`None`, `0.5`, `1e-05`).
//!
//! [`format_argument`], [`render_tool_call`] and [`render_tool_response`] produce exactly what the
//! template's `format_argument` macro, tool-call loop and `format_tool_response_block` macro produce
//! (checked against the golden files). [`parse_tool_call`] reads what the model wrote back into
//! `serde_json` values, accepting the small deviations that are unambiguous (JSON `"..."` strings,
//! quoted keys, whitespace between items, a trailing comma, `True`/`False`/`null`) and reporting
//! everything else as a [`ToolCallError`].

use serde_json::{Map, Number, Value};
use thiserror::Error;

use crate::special::text::{
    STRING_DELIM, TOOL_CALL_END, TOOL_CALL_START, TOOL_RESPONSE_END, TOOL_RESPONSE_START,
};
use crate::template::python_float;

/// Objects and arrays nested deeper than this are rejected.
pub const MAX_DEPTH: usize = 64;

/// How much of a malformed call is kept in [`ToolCallError::raw`].
pub const MAX_RAW: usize = 2048;

/// The ways a tool call can be malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ToolCallErrorKind {
    /// The call does not start with `call:`.
    #[error("expected `call:` after <|tool_call>, found {found}")]
    MissingCallKeyword {
        /// What was there instead.
        found: String,
    },
    /// No valid tool name after `call:`.
    #[error("expected a tool name after `call:`, found {found}")]
    InvalidName {
        /// What was there instead.
        found: String,
    },
    /// The tool name is not followed by `{`.
    #[error("expected `{{` with the arguments of `{name}`, found {found}")]
    MissingArguments {
        /// The tool name.
        name: String,
        /// What was there instead.
        found: String,
    },
    /// An object key was expected.
    #[error("expected an argument name, found {found}")]
    ExpectedKey {
        /// What was there instead.
        found: String,
    },
    /// A key is not followed by `:`.
    #[error("expected `:` after argument name `{key}`, found {found}")]
    ExpectedColon {
        /// The key.
        key: String,
        /// What was there instead.
        found: String,
    },
    /// A value was expected (a `<|"|>` string, number, true/false, object or array).
    #[error("expected a value, found {found}")]
    ExpectedValue {
        /// What was there instead.
        found: String,
    },
    /// After an item, neither `,` nor the closing bracket.
    #[error("expected `,` or `{close}`, found {found}")]
    ExpectedCommaOrClose {
        /// The bracket that would close the object or array.
        close: char,
        /// What was there instead.
        found: String,
    },
    /// The call ends while an object or array is still open.
    #[error("unbalanced brackets: the call ends before `{close}`")]
    Unclosed {
        /// The bracket that is missing.
        close: char,
    },
    /// A string opened with `<|"|>` (or `"`) is never closed.
    #[error("unterminated string: opened with {delimiter} and never closed")]
    UnterminatedString {
        /// The opening delimiter.
        delimiter: String,
    },
    /// Something that starts like a number but is not one.
    #[error("invalid number `{text}`")]
    InvalidNumber {
        /// The text.
        text: String,
    },
    /// The same key twice in one object.
    #[error("duplicate argument `{key}`")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// Text after the closing `}` of the arguments.
    #[error("unexpected text after the arguments: {junk}")]
    TrailingJunk {
        /// The text.
        junk: String,
    },
    /// The call is not closed with `<tool_call|>`.
    #[error("the call is not closed with <tool_call|>; found {}", found.as_deref().unwrap_or("the end of the output"))]
    MissingCallEnd {
        /// The marker that came instead, or `None` at the end of the output.
        found: Option<String>,
    },
    /// `<tool_call|>` without a preceding `<|tool_call>`.
    #[error("<tool_call|> without a matching <|tool_call>")]
    StrayCallEnd,
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("arguments nested deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// A call longer than the parser's limit.
    #[error("tool call longer than {limit} bytes")]
    TooLong {
        /// The limit.
        limit: usize,
    },
}

/// A malformed tool call: what is wrong, where, and the text the model wrote.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed tool call ({kind}) at byte {offset} of {raw:?}")]
pub struct ToolCallError {
    /// What is wrong.
    pub kind: ToolCallErrorKind,
    /// Byte offset in the call body (the text after `<|tool_call>`) where it was detected.
    pub offset: usize,
    /// The call as the model wrote it, markers included (at most [`MAX_RAW`] bytes).
    pub raw: String,
}

impl ToolCallError {
    pub(crate) fn new(kind: ToolCallErrorKind, offset: usize, raw: String) -> Self {
        Self {
            kind,
            offset,
            raw: truncate(raw, MAX_RAW),
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Rendering

/// Keys in jinja2 `dictsort` order: case-insensitive, ties in the map's own order.
fn dictsort(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by_cached_key(|(k, _)| k.to_lowercase());
    items
}

/// Python's `str()` of a JSON number.
fn number_text(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        python_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// The template's `format_argument(value, escape_keys)` macro.
pub fn format_argument(value: &Value, escape_keys: bool) -> String {
    let mut out = String::new();
    write_argument(&mut out, value, escape_keys);
    out
}

fn write_argument(out: &mut String, value: &Value, escape_keys: bool) {
    match value {
        Value::String(s) => {
            out.push_str(STRING_DELIM);
            out.push_str(s);
            out.push_str(STRING_DELIM);
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in dictsort(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if escape_keys {
                    out.push_str(STRING_DELIM);
                    out.push_str(k);
                    out.push_str(STRING_DELIM);
                } else {
                    out.push_str(k);
                }
                out.push(':');
                write_argument(out, v, escape_keys);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_argument(out, v, escape_keys);
            }
            out.push(']');
        }
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::Null => out.push_str("None"),
    }
}

/// A tool call as the template renders an assistant message's `tool_calls` entry:
/// `<|tool_call>call:NAME{key:value,...}<tool_call|>`.
pub fn render_tool_call(name: &str, arguments: &Map<String, Value>) -> String {
    let mut out = String::new();
    out.push_str(TOOL_CALL_START);
    out.push_str("call:");
    out.push_str(name);
    out.push('{');
    for (i, (k, v)) in dictsort(arguments).into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push(':');
        write_argument(&mut out, v, false);
    }
    out.push('}');
    out.push_str(TOOL_CALL_END);
    out
}

/// A tool result as the template's `format_tool_response_block` renders it: an object becomes
/// `response:NAME{key:value,...}`, anything else `response:NAME{value:...}`, between
/// `<|tool_response>` and `<tool_response|>`.
pub fn render_tool_response(name: &str, response: &Value) -> String {
    let mut out = String::new();
    out.push_str(TOOL_RESPONSE_START);
    out.push_str("response:");
    out.push_str(name);
    out.push('{');
    match response {
        Value::Object(map) => {
            for (i, (k, v)) in dictsort(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(k);
                out.push(':');
                write_argument(&mut out, v, false);
            }
        }
        other => {
            out.push_str("value:");
            write_argument(&mut out, other, false);
        }
    }
    out.push('}');
    out.push_str(TOOL_RESPONSE_END);
    out
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// A successfully parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub arguments: Map<String, Value>,
}

type PResult<T> = Result<T, (ToolCallErrorKind, usize)>;

struct Parser<'a> {
    s: &'a str,
    pos: usize,
    depth: usize,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '$'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$')
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// A short description of what is at the cursor, for error messages.
    fn found(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() {
            return "the end of the call".into();
        }
        if rest.starts_with(STRING_DELIM) {
            return format!("`{STRING_DELIM}`");
        }
        let snippet: String = rest.chars().take(16).collect();
        format!("`{snippet}`")
    }

    fn name(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let mut chars = rest.char_indices();
        match chars.next() {
            Some((_, c)) if is_name_start(c) => {}
            _ => return None,
        }
        let end = chars
            .find(|(_, c)| !is_name_char(*c))
            .map_or(rest.len(), |(i, _)| i);
        self.pos += end;
        Some(&rest[..end])
    }

    fn value(&mut self) -> PResult<Value> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        if rest.starts_with(STRING_DELIM) {
            return self.delimited_string().map(Value::String);
        }
        match self.peek() {
            None => Err((
                ToolCallErrorKind::ExpectedValue {
                    found: self.found(),
                },
                start,
            )),
            Some('"') => self.json_string().map(Value::String),
            Some('{') => self.object().map(Value::Object),
            Some('[') => self.array(),
            Some(c) if c == '-' || c == '+' || c.is_ascii_digit() => self.number(),
            Some(c) if is_name_start(c) => {
                let word = self.name().unwrap_or_default();
                match word {
                    "true" | "True" => Ok(Value::Bool(true)),
                    "false" | "False" => Ok(Value::Bool(false)),
                    "null" | "None" | "none" => Ok(Value::Null),
                    _ => Err((
                        ToolCallErrorKind::ExpectedValue {
                            found: format!("`{word}`"),
                        },
                        start,
                    )),
                }
            }
            Some(_) => Err((
                ToolCallErrorKind::ExpectedValue {
                    found: self.found(),
                },
                start,
            )),
        }
    }

    fn delimited_string(&mut self) -> PResult<String> {
        let start = self.pos;
        let body_start = self.pos + STRING_DELIM.len();
        match self.s[body_start..].find(STRING_DELIM) {
            Some(len) => {
                self.pos = body_start + len + STRING_DELIM.len();
                Ok(self.s[body_start..body_start + len].to_owned())
            }
            None => Err((
                ToolCallErrorKind::UnterminatedString {
                    delimiter: STRING_DELIM.into(),
                },
                start,
            )),
        }
    }

    fn json_string(&mut self) -> PResult<String> {
        let start = self.pos;
        let bytes = self.s.as_bytes();
        let mut i = start + 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => {
                    let text = &self.s[start..=i];
                    self.pos = i + 1;
                    return serde_json::from_str::<String>(text).map_err(|_| {
                        (
                            ToolCallErrorKind::ExpectedValue {
                                found: format!("invalid string {text}"),
                            },
                            start,
                        )
                    });
                }
                _ => i += 1,
            }
        }
        Err((
            ToolCallErrorKind::UnterminatedString {
                delimiter: "\"".into(),
            },
            start,
        ))
    }

    fn number(&mut self) -> PResult<Value> {
        let start = self.pos;
        let rest = self.rest();
        let end = rest
            .find(|c: char| {
                c.is_whitespace() || matches!(c, ',' | '}' | ']' | ':' | '<' | '{' | '[' | '"')
            })
            .unwrap_or(rest.len());
        let text = &rest[..end];
        self.pos += end;
        let invalid = || {
            (
                ToolCallErrorKind::InvalidNumber {
                    text: text.to_owned(),
                },
                start,
            )
        };
        let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
        let shape_ok = {
            let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
                Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
                None => (unsigned, None),
            };
            let (int, frac) = match mantissa.split_once('.') {
                Some((a, b)) => (a, Some(b)),
                None => (mantissa, None),
            };
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            digits(int)
                && frac.is_none_or(digits)
                && exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)))
        };
        if !shape_ok {
            return Err(invalid());
        }
        let integral = !unsigned.contains(['.', 'e', 'E']);
        let text_for_parse = text.strip_prefix('+').unwrap_or(text);
        if integral {
            if let Ok(i) = text_for_parse.parse::<i64>() {
                return Ok(Value::Number(i.into()));
            }
            if let Ok(u) = text_for_parse.parse::<u64>() {
                return Ok(Value::Number(u.into()));
            }
        }
        text_for_parse
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(invalid)
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err((ToolCallErrorKind::TooDeep { limit: MAX_DEPTH }, self.pos));
        }
        Ok(())
    }

    fn key(&mut self) -> PResult<String> {
        let start = self.pos;
        if self.rest().starts_with(STRING_DELIM) {
            return self.delimited_string();
        }
        if self.peek() == Some('"') {
            return self.json_string();
        }
        match self.name() {
            Some(name) => Ok(name.to_owned()),
            None if self.rest().is_empty() => {
                Err((ToolCallErrorKind::Unclosed { close: '}' }, start))
            }
            None => Err((
                ToolCallErrorKind::ExpectedKey {
                    found: self.found(),
                },
                start,
            )),
        }
    }

    /// `{` key `:` value (`,` key `:` value)* `,`? `}` — the cursor is on `{`.
    fn object(&mut self) -> PResult<Map<String, Value>> {
        self.enter()?;
        self.pos += 1;
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some('}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(map);
        }
        loop {
            self.skip_ws();
            let key_pos = self.pos;
            let key = self.key()?;
            self.skip_ws();
            if self.peek() != Some(':') {
                if self.rest().is_empty() {
                    return Err((ToolCallErrorKind::Unclosed { close: '}' }, self.pos));
                }
                return Err((
                    ToolCallErrorKind::ExpectedColon {
                        key,
                        found: self.found(),
                    },
                    self.pos,
                ));
            }
            self.pos += 1;
            let value = self.value()?;
            if map.insert(key.clone(), value).is_some() {
                return Err((ToolCallErrorKind::DuplicateKey { key }, key_pos));
            }
            self.skip_ws();
            match self.peek() {
                Some(',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some('}') {
                        self.pos += 1;
                        break;
                    }
                }
                Some('}') => {
                    self.pos += 1;
                    break;
                }
                None => return Err((ToolCallErrorKind::Unclosed { close: '}' }, self.pos)),
                Some(_) => {
                    return Err((
                        ToolCallErrorKind::ExpectedCommaOrClose {
                            close: '}',
                            found: self.found(),
                        },
                        self.pos,
                    ));
                }
            }
        }
        self.depth -= 1;
        Ok(map)
    }

    /// `[` value (`,` value)* `,`? `]` — the cursor is on `[`.
    fn array(&mut self) -> PResult<Value> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            if self.rest().is_empty() {
                return Err((ToolCallErrorKind::Unclosed { close: ']' }, self.pos));
            }
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(']') {
                        self.pos += 1;
                        break;
                    }
                }
                Some(']') => {
                    self.pos += 1;
                    break;
                }
                None => return Err((ToolCallErrorKind::Unclosed { close: ']' }, self.pos)),
                Some(_) => {
                    return Err((
                        ToolCallErrorKind::ExpectedCommaOrClose {
                            close: ']',
                            found: self.found(),
                        },
                        self.pos,
                    ));
                }
            }
        }
        self.depth -= 1;
        Ok(Value::Array(items))
    }

    fn call(&mut self) -> PResult<ParsedToolCall> {
        self.skip_ws();
        if !self.rest().starts_with("call:") {
            return Err((
                ToolCallErrorKind::MissingCallKeyword {
                    found: self.found(),
                },
                self.pos,
            ));
        }
        self.pos += "call:".len();
        self.skip_ws();
        let name_pos = self.pos;
        let Some(name) = self.name() else {
            return Err((
                ToolCallErrorKind::InvalidName {
                    found: self.found(),
                },
                name_pos,
            ));
        };
        self.skip_ws();
        if self.peek() != Some('{') {
            return Err((
                ToolCallErrorKind::MissingArguments {
                    name: name.to_owned(),
                    found: self.found(),
                },
                self.pos,
            ));
        }
        let arguments = self.object()?;
        self.skip_ws();
        if !self.rest().is_empty() {
            let junk: String = self.rest().chars().take(64).collect();
            return Err((ToolCallErrorKind::TrailingJunk { junk }, self.pos));
        }
        Ok(ParsedToolCall {
            name: name.to_owned(),
            arguments,
        })
    }
}

/// Parses the body of a tool call — the complete text between `<|tool_call>` and `<tool_call|>`,
/// e.g. `call:get_weather{city:<|"|>Paris<|"|>}`. `raw` is what error reports quote (normally the
/// body with its markers).
pub fn parse_tool_call(
    body: &str,
    raw: impl FnOnce() -> String,
) -> Result<ParsedToolCall, ToolCallError> {
    let mut p = Parser {
        s: body,
        pos: 0,
        depth: 0,
    };
    p.call()
        .map_err(|(kind, offset)| ToolCallError::new(kind, offset, raw()))
}

/// The tool name of a call body once `call:NAME{` has been seen (for "calling NAME..." feedback
/// while the arguments stream in); `None` while the name is incomplete or malformed.
pub fn peek_call_name(body: &str) -> Option<&str> {
    let mut p = Parser {
        s: body,
        pos: 0,
        depth: 0,
    };
    p.skip_ws();
    p.s[p.pos..].starts_with("call:").then_some(())?;
    p.pos += "call:".len();
    p.skip_ws();
    let name = p.name()?;
    p.skip_ws();
    (p.peek() == Some('{')).then_some(name)
}

/// Parses one value in Gemma's syntax (e.g. `{a:<|"|>x<|"|>,n:[1,2.5,true]}`); the whole text must
/// be the value.
pub fn parse_value(text: &str) -> Result<Value, ToolCallError> {
    let mut p = Parser {
        s: text,
        pos: 0,
        depth: 0,
    };
    let result = p.value().and_then(|v| {
        p.skip_ws();
        if p.rest().is_empty() {
            Ok(v)
        } else {
            let junk: String = p.rest().chars().take(64).collect();
            Err((ToolCallErrorKind::TrailingJunk { junk }, p.pos))
        }
    });
    result.map_err(|(kind, offset)| ToolCallError::new(kind, offset, text.to_owned()))
}
