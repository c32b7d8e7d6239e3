//! Rendering the model's own `chat_template.jinja` with minijinja, byte-identical to Python
//! jinja2 as used by transformers' `apply_chat_template`.
//!
//! transformers compiles templates in a jinja2 `ImmutableSandboxedEnvironment` with
//! `trim_blocks=True`, `lstrip_blocks=True` and the `loopcontrols` extension, adds the globals
//! `raise_exception` and `strftime_now`, replaces `tojson` with `json.dumps(ensure_ascii=False)`, and
//! renders with `messages`, `tools`, `documents`, `add_generation_prompt`, the tokenizer's special
//! tokens (`bos_token`, ...) and extra keyword arguments such as `enable_thinking`. This module sets
//! up minijinja the same way and closes the gaps between the two engines that chat templates hit:
//! Python string/dict methods (`.split`, `.get`, ... via minijinja-contrib's pycompat), and Python's
//! `str()` of values when printed (`None`, `True`, `1e-05`, `['a']`), which minijinja writes
//! differently by default.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Serde, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::Serialize;

use crate::chat::{ChatMessage, ToolDeclaration};
use crate::error::Result;

const TEMPLATE_NAME: &str = "chat_template";

/// The special-token texts a chat template reads as variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateTokens {
    /// `bos_token`, e.g. `<bos>`.
    pub bos_token: String,
    /// `eos_token`, e.g. `<eos>`.
    pub eos_token: String,
    /// `pad_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pad_token: Option<String>,
    /// `unk_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unk_token: Option<String>,
}

/// Options of one prompt rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptOptions {
    /// End the prompt with the opening of a model turn (`<|turn>model\n`), as for generation.
    pub add_generation_prompt: bool,
    /// Switch Gemma's thinking on (`<|think|>` at the top of the system turn).
    pub enable_thinking: bool,
}

impl Default for PromptOptions {
    fn default() -> Self {
        Self {
            add_generation_prompt: true,
            enable_thinking: false,
        }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl ChatTemplate {
    /// Compiles a chat template (the text of `chat_template.jinja`).
    pub fn new(source: impl Into<String>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.into())?;
        Ok(Self { env })
    }

    /// Renders a conversation: the typed entry point.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDeclaration],
        options: PromptOptions,
        tokens: &TemplateTokens,
    ) -> Result<String> {
        #[derive(Serialize)]
        struct Ctx<'a> {
            messages: &'a [ChatMessage],
            tools: Option<&'a [ToolDeclaration]>,
            documents: Option<()>,
            add_generation_prompt: bool,
            enable_thinking: bool,
            #[serde(flatten)]
            tokens: &'a TemplateTokens,
        }
        let ctx = Ctx {
            messages,
            // transformers passes `tools=None` when there are none.
            tools: (!tools.is_empty()).then_some(tools),
            documents: None,
            add_generation_prompt: options.add_generation_prompt,
            enable_thinking: options.enable_thinking,
            tokens,
        };
        self.render_context(Value::from(Serde(&ctx)))
    }

    /// Renders with an arbitrary context (every variable the template reads), for callers that
    /// need fields the typed messages do not model (content parts, legacy `tool_responses`).
    pub fn render_context(&self, context: Value) -> Result<String> {
        let template = self.env.get_template(TEMPLATE_NAME)?;
        Ok(template.render(context)?)
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Writes a value the way Python's `str()` does, as jinja2 prints it.
fn python_formatter(
    out: &mut minijinja::Output<'_>,
    _state: &mut State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Undefined => return Ok(()),
        ValueKind::String => {
            return out
                .write_str(value.as_str().unwrap_or_default())
                .map_err(fmt_error);
        }
        _ => python_str(value),
    };
    out.write_str(&text).map_err(fmt_error)
}

fn fmt_error(_: std::fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "formatter write failed")
}

/// Python's `str(value)`.
pub(crate) fn python_str(value: &Value) -> String {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => s.to_owned(),
        _ => python_repr(value),
    }
}

/// Python's `repr(value)` for the value kinds templates handle.
pub(crate) fn python_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => match f64_only(value) {
            Some(f) => out.push_str(&python_float(f)),
            None => {
                let _ = write!(out, "{value}");
            }
        },
        ValueKind::String => out.push_str(&python_str_repr(value.as_str().unwrap_or_default())),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(iter) = value.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(iter) = value.try_iter() {
                for (i, key) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &key);
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or_default();
                    write_repr(out, &item);
                }
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// The value as f64 when it is a float (not an integer).
fn f64_only(value: &Value) -> Option<f64> {
    if value.is_integer() {
        return None;
    }
    f64::try_from(value.clone()).ok()
}

/// Python's `repr(float)`: shortest round-trip digits, positional for exponents in [-4, 16),
/// otherwise scientific with a signed two-digit exponent (`1e+16`, `1.5e-05`).
pub(crate) fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let mut s = format!("{f}");
        if !s.contains('.') {
            s.push_str(".0");
        }
        s
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; escapes backslash, the
/// quote, `\n`, `\r`, `\t` and other non-printable characters.
fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if python_unprintable(c) => {
                let n = c as u32;
                if n <= 0xff {
                    let _ = write!(out, "\\x{n:02x}");
                } else if n <= 0xffff {
                    let _ = write!(out, "\\u{n:04x}");
                } else {
                    let _ = write!(out, "\\U{n:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Characters Python's `str.isprintable()` rejects, for the ranges that occur in practice (control
/// characters, non-breaking and special spaces, format characters, line/paragraph separators).
fn python_unprintable(c: char) -> bool {
    matches!(c as u32,
        0x00..=0x1f | 0x7f..=0xa0 | 0xad | 0x1680 | 0x2000..=0x200f | 0x2028..=0x202f
        | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000 | 0xfeff | 0xfff9..=0xfffb
        | 0xd800..=0xdfff | 0xe000..=0xf8ff)
}

/// transformers' `tojson`: `json.dumps(value, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(usize::try_from(v.clone()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                )
            })?)),
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(s) if !s.is_none() => {
            let a = s
                .get_item_by_index(0)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned));
            let b = s
                .get_item_by_index(1)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned));
            match (a, b) {
                (Some(a), Some(b)) => (a, b),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ));
                }
            }
        }
        // Python: (', ', ': ') without indent, (',', ': ') with indent.
        _ => (
            if indent.is_some() { "," } else { ", " }.to_owned(),
            ": ".to_owned(),
        ),
    };
    let opts = JsonOpts {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    write_json(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

struct JsonOpts {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

fn write_json(out: &mut String, value: &Value, opts: &JsonOpts, depth: usize) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &opts.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => match f64_only(value) {
            Some(f) if f.is_nan() => out.push_str("NaN"),
            Some(f) if f.is_infinite() => {
                out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" })
            }
            Some(f) => out.push_str(&python_float(f)),
            None => {
                let _ = write!(out, "{value}");
            }
        },
        ValueKind::String => {
            write_json_str(out, value.as_str().unwrap_or_default(), opts.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            out.push('[');
            if !items.is_empty() {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&opts.item_sep);
                    }
                    newline(out, depth + 1);
                    write_json(out, item, opts, depth + 1)?;
                }
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if opts.sort_keys {
                keys.sort();
            }
            out.push('{');
            if !keys.is_empty() {
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&opts.item_sep);
                    }
                    newline(out, depth + 1);
                    let key_text = match key.as_str() {
                        Some(s) => s.to_owned(),
                        None => python_str(key),
                    };
                    write_json_str(out, &key_text, opts.ensure_ascii);
                    out.push_str(&opts.key_sep);
                    write_json(out, &value.get_item(key)?, opts, depth + 1)?;
                }
                newline(out, depth);
            }
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a {} value", value.kind()),
            ));
        }
    }
    Ok(())
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: Value) -> String {
        match ChatTemplate::new(src).and_then(|t| t.render_context(ctx)) {
            Ok(s) => s,
            Err(e) => panic!("render failed: {e}"),
        }
    }

    #[test]
    fn python_float_repr() {
        let cases = [
            (0.5, "0.5"),
            (3.0, "3.0"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
            (1e-100, "1e-100"),
            (2.5e300, "2.5e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float(f), want, "repr({f:?})");
        }
    }

    #[test]
    fn prints_values_like_python_str() {
        let ctx = Value::from(Serde(serde_json::json!({
            "n": null, "t": true, "f": false, "x": 2.0, "i": 7,
            "l": ["a", 1, null, "it's"], "m": {"k": "v"}
        })));
        assert_eq!(
            render(
                "{{ n }}|{{ t }}|{{ f }}|{{ x }}|{{ i }}|{{ l }}|{{ m }}|{{ missing }}",
                ctx
            ),
            "None|True|False|2.0|7|['a', 1, None, \"it's\"]|{'k': 'v'}|"
        );
    }

    #[test]
    fn trim_and_lstrip_blocks_like_transformers() {
        let src = "{% for x in xs %}\n    {{ x }}\n{% endfor %}\n";
        let ctx = Value::from(Serde(serde_json::json!({"xs": [1, 2]})));
        // jinja2 with trim_blocks + lstrip_blocks: "    1\n    2\n"
        assert_eq!(render(src, ctx), "    1\n    2\n");
    }

    #[test]
    fn python_methods_and_raise_exception() {
        let ctx = Value::from(Serde(serde_json::json!({"m": {"a": 1}, "s": "x<c|>y"})));
        assert_eq!(
            render(
                "{{ m.get('a') }}{{ m.get('b') }}{{ s.split('<c|>')[1] }}",
                ctx
            ),
            "1Noney"
        );
        let err = ChatTemplate::new("{{ raise_exception('bad role') }}")
            .and_then(|t| t.render_context(Value::UNDEFINED));
        assert!(
            matches!(err, Err(crate::TextError::Template(ref m)) if m.contains("bad role")),
            "{err:?}"
        );
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let ctx = Value::from(Serde(
            serde_json::json!({"v": {"b": [1, 2.5, null, true], "a": "é\"\n"}}),
        ));
        // json.dumps({"a": "é\"\n", "b": [1, 2.5, None, True]}, ensure_ascii=False)
        assert_eq!(
            render("{{ v | tojson }}", ctx.clone()),
            "{\"a\": \"é\\\"\\n\", \"b\": [1, 2.5, null, true]}"
        );
        assert_eq!(
            render("{{ v | tojson(indent=2) }}", ctx),
            "{\n  \"a\": \"é\\\"\\n\",\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}"
        );
    }
}
