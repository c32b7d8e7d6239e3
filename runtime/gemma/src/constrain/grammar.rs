//! The grammar of the calls a set of tool declarations allows: schemas compiled into an arena of
//! value and object schemas plus literal tries (tool names, parameter names, enum values, words).

use serde_json::Value;
use thiserror::Error;

use crate::special::text::{
    EOS, STRING_DELIM, TOOL_CALL_END, TOOL_CALL_START, TOOL_RESPONSE_START, TURN_END, TURN_START,
};
use crate::syntax::format_argument;

/// Most declared parameters one object may have (they are tracked in a 64-bit set).
pub const MAX_PROPERTIES: usize = 64;

/// Deepest schema nesting accepted (the parser refuses values nested deeper than
/// [`crate::syntax::MAX_DEPTH`]).
const MAX_SCHEMA_DEPTH: usize = 32;

/// A declaration the grammar cannot express.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("tool declaration {tool:?}: {message}")]
pub struct GrammarError {
    /// The tool name (empty when the declaration has none).
    pub tool: String,
    /// What is wrong, with the JSON path of the schema part.
    pub message: String,
}

/// One symbol of a call: a byte of text or one of the two special tokens a call may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Symbol {
    /// A byte of decoded text.
    Byte(u8),
    /// The string delimiter `<|"|>` (the special token).
    Delim,
    /// `<tool_call|>`, which closes the call.
    End,
}

/// A trie over symbols holding a set of literals (e.g. every `NAME{` of the tools, or every
/// `key:` of an object). Node 0 is the root. Each node knows which literals lie below it, so a
/// literal can be excluded (a parameter already given) exactly.
#[derive(Debug, Clone, Default)]
pub(crate) struct LiteralSet {
    nodes: Vec<LitNode>,
}

#[derive(Debug, Clone, Default)]
struct LitNode {
    children: Vec<(Symbol, u32)>,
    /// The literal ending here.
    leaf: Option<u32>,
    /// Bit i: literal i ends at or below this node (literals beyond 63 share bit 63; only key sets
    /// use exclusion and they have at most [`MAX_PROPERTIES`] literals).
    below: u64,
}

impl LiteralSet {
    fn new() -> Self {
        Self {
            nodes: vec![LitNode::default()],
        }
    }

    fn insert(&mut self, symbols: &[Symbol], index: u32) {
        let bit = 1u64 << index.min(63);
        let mut node = 0usize;
        self.nodes[0].below |= bit;
        for &s in symbols {
            let next = match self.nodes[node].children.iter().find(|(c, _)| *c == s) {
                Some(&(_, n)) => n as usize,
                None => {
                    let n = self.nodes.len();
                    self.nodes.push(LitNode::default());
                    self.nodes[node].children.push((s, n as u32));
                    n
                }
            };
            node = next;
            self.nodes[node].below |= bit;
        }
        self.nodes[node].leaf = Some(index);
    }

    /// The child of `node` along `symbol`, if some literal not in `excluded` continues there.
    pub(crate) fn child(&self, node: u32, symbol: Symbol, excluded: u64) -> Option<u32> {
        let &(_, n) = self.nodes[node as usize]
            .children
            .iter()
            .find(|(c, _)| *c == symbol)?;
        (self.nodes[n as usize].below & !excluded != 0).then_some(n)
    }

    /// The literal ending at `node`, unless excluded.
    pub(crate) fn leaf(&self, node: u32, excluded: u64) -> Option<u32> {
        self.nodes[node as usize]
            .leaf
            .filter(|&i| (1u64 << i.min(63)) & excluded == 0)
    }

    /// Whether `node` has children (a literal may continue past it).
    pub(crate) fn has_children(&self, node: u32) -> bool {
        !self.nodes[node as usize].children.is_empty()
    }

    /// Whether any literal not in `excluded` remains.
    pub(crate) fn any(&self, excluded: u64) -> bool {
        self.nodes[0].below & !excluded != 0
    }
}

/// Which kinds of value a schema admits.
#[derive(Debug, Clone, Default)]
pub(crate) struct ValueSchema {
    pub string: bool,
    pub integer: bool,
    pub number: bool,
    /// Words: `true`/`false` (boolean) and `None` (null), as a literal set.
    pub words: Option<u32>,
    /// Object schema index.
    pub object: Option<u32>,
    /// Item schema index of arrays.
    pub array: Option<u32>,
    /// When set, the value must be one of these literals (and nothing else).
    pub enumeration: Option<u32>,
}

/// An object: either declared properties or free-form keys.
#[derive(Debug, Clone)]
pub(crate) enum ObjectSchema {
    /// Declared properties: keys from `keys` (a literal set of `name:`), each once.
    Closed {
        keys: u32,
        /// Value schema of each property, by literal index.
        values: Vec<u32>,
        required: u64,
    },
    /// Any bare key, each once, values of this schema.
    Free { values: u32 },
}

/// The texts that end a call region in [`crate::OutputParser`] (plus the delimiter's own text):
/// none may appear as text inside a string.
pub(crate) const FORBIDDEN_IN_STRINGS: &[&str] = &[
    STRING_DELIM,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TURN_END,
    TOOL_RESPONSE_START,
    EOS,
    TURN_START,
];

/// The grammar of the tool calls allowed by a set of declarations. See the [module
/// documentation](crate::constrain).
#[derive(Debug, Clone)]
pub struct ToolGrammar {
    pub(crate) values: Vec<ValueSchema>,
    pub(crate) objects: Vec<ObjectSchema>,
    pub(crate) literals: Vec<LiteralSet>,
    /// `call:NAME{` for every tool.
    pub(crate) calls: u32,
    /// The argument object of each tool, by literal index of `calls`.
    pub(crate) tool_objects: Vec<u32>,
    pub(crate) tool_names: Vec<String>,
    /// Guard over string contents: an Aho-Corasick style automaton over
    /// [`FORBIDDEN_IN_STRINGS`]; `guard[state][byte]` is the next state or [`GUARD_FAIL`].
    pub(crate) guard: Vec<[u8; 256]>,
}

/// [`ToolGrammar::guard`] value: a forbidden text was completed.
pub(crate) const GUARD_FAIL: u8 = u8::MAX;

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

pub(crate) fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'$')
}

/// A bare name as [`crate::syntax::parse_tool_call`] reads one.
fn is_bare_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && is_name_start(b[0]) && b.iter().all(|&c| is_name_char(c))
}

/// Text -> symbols: the delimiter's text becomes [`Symbol::Delim`].
fn symbols(text: &str) -> Vec<Symbol> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(STRING_DELIM) {
            out.push(Symbol::Delim);
            rest = r;
        } else {
            out.push(Symbol::Byte(rest.as_bytes()[0]));
            rest = &rest[1..];
        }
    }
    out
}

pub(crate) fn build_guard() -> Vec<[u8; 256]> {
    // States are the distinct proper prefixes of the forbidden texts ("" is state 0).
    let mut prefixes: Vec<&str> = vec![""];
    for m in FORBIDDEN_IN_STRINGS {
        for i in 1..m.len() {
            if !prefixes.contains(&&m[..i]) {
                prefixes.push(&m[..i]);
            }
        }
    }
    assert!(prefixes.len() < GUARD_FAIL as usize);
    prefixes
        .iter()
        .map(|p| {
            let mut row = [0u8; 256];
            for (b, slot) in row.iter_mut().enumerate() {
                let mut text = p.as_bytes().to_vec();
                text.push(b as u8);
                if FORBIDDEN_IN_STRINGS
                    .iter()
                    .any(|m| text.ends_with(m.as_bytes()))
                {
                    *slot = GUARD_FAIL;
                    continue;
                }
                // Longest suffix of `text` that is a known prefix.
                *slot = (0..=text.len())
                    .find_map(|start| {
                        let suffix = &text[start..];
                        prefixes
                            .iter()
                            .position(|q| q.as_bytes() == suffix)
                            .map(|i| i as u8)
                    })
                    .unwrap_or(0);
            }
            row
        })
        .collect()
}

struct Builder<'a> {
    tool: &'a str,
    g: ToolGrammar,
}

impl Builder<'_> {
    fn err(&self, path: &str, message: impl std::fmt::Display) -> GrammarError {
        GrammarError {
            tool: self.tool.to_owned(),
            message: format!("{path}: {message}"),
        }
    }

    fn literal_set(&mut self, set: LiteralSet) -> u32 {
        self.g.literals.push(set);
        (self.g.literals.len() - 1) as u32
    }

    fn value(&mut self, schema: &Value, path: &str, depth: usize) -> Result<u32, GrammarError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(self.err(path, "schema nested too deeply"));
        }
        let Value::Object(map) = schema else {
            if schema == &Value::Bool(true) {
                return Ok(ANY);
            }
            return Err(self.err(path, "a schema must be an object"));
        };
        for key in map.keys() {
            match key.as_str() {
                "type"
                | "properties"
                | "required"
                | "enum"
                | "const"
                | "items"
                | "additionalProperties"
                | "description"
                | "title"
                | "default"
                | "examples"
                | "nullable"
                | "format"
                | "minimum"
                | "maximum"
                | "exclusiveMinimum"
                | "exclusiveMaximum"
                | "multipleOf"
                | "minLength"
                | "maxLength"
                | "minItems"
                | "maxItems"
                | "$schema"
                | "$comment"
                | "deprecated" => {}
                other => return Err(self.err(path, format!("`{other}` is not supported"))),
            }
        }
        let mut types: Vec<String> = match map.get("type") {
            None => Vec::new(),
            Some(Value::String(t)) => vec![t.to_lowercase()],
            Some(Value::Array(ts)) => ts
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(str::to_lowercase)
                        .ok_or_else(|| self.err(path, "`type` entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(self.err(path, "`type` must be a string or a list")),
        };
        if map.get("nullable") == Some(&Value::Bool(true)) {
            types.push("null".into());
        }
        let enumeration = match (map.get("enum"), map.get("const")) {
            (Some(_), Some(_)) => return Err(self.err(path, "both `enum` and `const`")),
            (Some(Value::Array(items)), None) => Some(items.clone()),
            (Some(_), None) => return Err(self.err(path, "`enum` must be a list")),
            (None, Some(c)) => Some(vec![c.clone()]),
            (None, None) => None,
        };
        if let Some(items) = enumeration {
            if items.is_empty() {
                return Err(self.err(path, "empty `enum`"));
            }
            let mut set = LiteralSet::new();
            let mut seen = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let kind = match item {
                    Value::String(s) => {
                        if FORBIDDEN_IN_STRINGS.iter().any(|m| s.contains(m)) {
                            return Err(self.err(path, "an enum string contains a marker"));
                        }
                        "string"
                    }
                    Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
                    Value::Number(_) => "number",
                    Value::Bool(_) => "boolean",
                    Value::Null => "null",
                    _ => return Err(self.err(path, "only scalar `enum` values are supported")),
                };
                let type_ok = types.is_empty()
                    || types
                        .iter()
                        .any(|t| t == kind || (t == "number" && kind == "integer"));
                if !type_ok {
                    return Err(self.err(path, format!("enum value {item} is not of its `type`")));
                }
                let text = format_argument(item, false);
                if seen.contains(&text) {
                    continue;
                }
                set.insert(&symbols(&text), i as u32);
                seen.push(text);
            }
            let set = self.literal_set(set);
            return Ok(self.push_value(ValueSchema {
                enumeration: Some(set),
                ..Default::default()
            }));
        }
        if types.is_empty() {
            types = if map.contains_key("properties") {
                vec!["object".into()]
            } else if map.contains_key("items") {
                vec!["array".into()]
            } else {
                return Ok(ANY);
            };
        }
        let mut v = ValueSchema::default();
        let (mut boolean, mut null) = (false, false);
        for t in &types {
            match t.as_str() {
                "string" => v.string = true,
                "integer" => v.integer = true,
                "number" => v.number = true,
                "boolean" => boolean = true,
                "null" => null = true,
                "object" => v.object = Some(self.object(map, path, depth)?),
                "array" => {
                    v.array = Some(match map.get("items") {
                        None => ANY,
                        Some(items) => self.value(items, &format!("{path}.items"), depth + 1)?,
                    })
                }
                other => return Err(self.err(path, format!("unknown type `{other}`"))),
            }
        }
        v.words = self.words(boolean, null);
        Ok(self.push_value(v))
    }

    fn words(&mut self, boolean: bool, null: bool) -> Option<u32> {
        if !boolean && !null {
            return None;
        }
        let mut set = LiteralSet::new();
        if boolean {
            set.insert(&symbols("true"), 0);
            set.insert(&symbols("false"), 1);
        }
        if null {
            set.insert(&symbols("None"), 2);
        }
        Some(self.literal_set(set))
    }

    fn push_value(&mut self, v: ValueSchema) -> u32 {
        self.g.values.push(v);
        (self.g.values.len() - 1) as u32
    }

    fn object(
        &mut self,
        map: &serde_json::Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<u32, GrammarError> {
        let props = match map.get("properties") {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err(self.err(path, "`properties` must be an object")),
        };
        let required: Vec<&str> = match map.get("required") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| self.err(path, "`required` entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(self.err(path, "`required` must be a list")),
        };
        let additional = map.get("additionalProperties");
        let schema = match props {
            Some(props) if !props.is_empty() || additional != Some(&Value::Bool(true)) => {
                if matches!(additional, Some(a) if a != &Value::Bool(false)) {
                    return Err(self.err(
                        path,
                        "`additionalProperties` together with `properties` is not supported",
                    ));
                }
                if props.len() > MAX_PROPERTIES {
                    return Err(self.err(
                        path,
                        format!("more than {MAX_PROPERTIES} properties are not supported"),
                    ));
                }
                let mut keys = LiteralSet::new();
                let mut values = Vec::new();
                let mut names = Vec::new();
                for (i, (name, sub)) in props.iter().enumerate() {
                    let key_text = if is_bare_name(name) {
                        format!("{name}:")
                    } else if FORBIDDEN_IN_STRINGS.iter().any(|m| name.contains(m))
                        || name.is_empty()
                    {
                        return Err(self.err(path, format!("property name {name:?} is unusable")));
                    } else {
                        format!("{STRING_DELIM}{name}{STRING_DELIM}:")
                    };
                    keys.insert(&symbols(&key_text), i as u32);
                    values.push(self.value(sub, &format!("{path}.{name}"), depth + 1)?);
                    names.push(name.clone());
                }
                let mut required_bits = 0u64;
                for r in required {
                    let Some(i) = names.iter().position(|n| n == r) else {
                        return Err(self.err(path, format!("required `{r}` is not a property")));
                    };
                    required_bits |= 1 << i;
                }
                let keys = self.literal_set(keys);
                ObjectSchema::Closed {
                    keys,
                    values,
                    required: required_bits,
                }
            }
            _ => {
                if !required.is_empty() {
                    return Err(self.err(path, "`required` without `properties`"));
                }
                let values = match additional {
                    None | Some(Value::Bool(true)) => ANY,
                    Some(Value::Bool(false)) => {
                        return Ok(self.empty_object());
                    }
                    Some(schema) => {
                        self.value(schema, &format!("{path}.additionalProperties"), depth + 1)?
                    }
                };
                ObjectSchema::Free { values }
            }
        };
        self.g.objects.push(schema);
        Ok((self.g.objects.len() - 1) as u32)
    }

    fn empty_object(&mut self) -> u32 {
        let keys = self.literal_set(LiteralSet::new());
        self.g.objects.push(ObjectSchema::Closed {
            keys,
            values: Vec::new(),
            required: 0,
        });
        (self.g.objects.len() - 1) as u32
    }
}

/// The "any value" schema (index 0 of the value arena).
pub(crate) const ANY: u32 = 0;

impl ToolGrammar {
    /// Compiles tool declarations, each either the template form
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`
    /// ([`crate::ToolDeclaration`] as JSON) or the agent's bare form `{"name", "description",
    /// "parameters"}` ([`gg_agent::ToolDefinition`] as JSON). `parameters` is a JSON-schema
    /// object; see the module documentation for what is supported. No declarations is an error
    /// (there would be nothing to call).
    pub fn from_declarations(declarations: &[Value]) -> Result<Self, GrammarError> {
        let empty = ToolGrammar {
            values: Vec::new(),
            objects: Vec::new(),
            literals: Vec::new(),
            calls: 0,
            tool_objects: Vec::new(),
            tool_names: Vec::new(),
            guard: build_guard(),
        };
        let mut b = Builder { tool: "", g: empty };
        // Index 0: any value; object 0: free object of any values.
        b.g.objects.push(ObjectSchema::Free { values: ANY });
        let words = b.words(true, true);
        b.g.values.push(ValueSchema {
            string: true,
            integer: true,
            number: true,
            words,
            object: Some(0),
            array: Some(ANY),
            enumeration: None,
        });
        if declarations.is_empty() {
            return Err(GrammarError {
                tool: String::new(),
                message: "no tools declared".into(),
            });
        }
        let mut calls = LiteralSet::new();
        for (i, decl) in declarations.iter().enumerate() {
            let function = match decl.get("function") {
                Some(f) if decl.get("name").is_none() => f,
                _ => decl,
            };
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                return Err(GrammarError {
                    tool: String::new(),
                    message: format!("declaration {i} has no `name`"),
                });
            };
            b.tool = name;
            if !is_bare_name(name) {
                return Err(b.err("name", "not a bare name the call syntax can write"));
            }
            if b.g.tool_names.iter().any(|n| n == name) {
                return Err(b.err("name", "declared twice"));
            }
            let object = match function.get("parameters") {
                None | Some(Value::Null) => b.empty_object(),
                Some(params) => {
                    let v = b.value(params, "parameters", 0)?;
                    let schema = &b.g.values[v as usize];
                    match (schema.object, v == ANY) {
                        (Some(o), false)
                            if !schema.string
                                && !schema.integer
                                && !schema.number
                                && schema.words.is_none()
                                && schema.array.is_none() =>
                        {
                            o
                        }
                        (_, true) => 0,
                        _ => return Err(b.err("parameters", "must be an object schema")),
                    }
                }
            };
            calls.insert(&symbols(&format!("call:{name}{{")), i as u32);
            b.g.tool_objects.push(object);
            b.g.tool_names.push(name.to_owned());
        }
        b.g.calls = b.literal_set(calls);
        Ok(b.g)
    }

    /// The declared tool names, in declaration order.
    pub fn tool_names(&self) -> &[String] {
        &self.tool_names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_refuses_markers_as_text() {
        let g = build_guard();
        let run = |text: &str| {
            let mut s = 0u8;
            for &b in text.as_bytes() {
                s = g[s as usize][b as usize];
                if s == GUARD_FAIL {
                    return false;
                }
            }
            true
        };
        assert!(run("a < b <| c <tool_call <turn"));
        assert!(!run("x<turn|>"));
        assert!(!run("<<|\"|>"));
        assert!(!run("<tool_call|>"));
        assert!(!run("ab<eos>"));
        assert!(run("<eo s>"));
    }

    #[test]
    fn declarations_it_cannot_express_are_errors() {
        let bad = [
            serde_json::json!([]),
            serde_json::json!([{"name": "a b", "parameters": {}}]),
            serde_json::json!([{"name": "f", "parameters": {"type": "string"}}]),
            serde_json::json!([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"anyOf": []}}}}]),
            serde_json::json!([{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "date"}}}}]),
            serde_json::json!([{"name": "f", "parameters": {"type": "object", "properties": {}, "required": ["x"]}}]),
            serde_json::json!([{"name": "f"}, {"name": "f"}]),
            serde_json::json!([{"name": "f", "parameters": {"properties": {"x": {"enum": [[1]]}}}}]),
        ];
        for decls in bad {
            let decls = decls.as_array().unwrap().clone();
            assert!(
                ToolGrammar::from_declarations(&decls).is_err(),
                "{decls:?} should be refused"
            );
        }
    }
}
