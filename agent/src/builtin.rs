//! The built-in page tools: their declarations for the model and typed, validated arguments
//! for the executors.
//!
//! [`builtin_tools`] gives the eight [`ToolDefinition`]s. [`BuiltinCall::parse`] checks a model's
//! call against them, forgiving the small slips a 2B model makes (`"offset": "200"`, `"ref": "12"`,
//! `null` for an optional argument) but rejecting unknown arguments and wrong types with a message
//! the model can act on. The agent loop hands executors the normalized call
//! ([`BuiltinCall::to_call`]), so they can parse it again with [`BuiltinCall::parse`] and rely on
//! it.
//!
//! ```
//! use gg_agent::{BuiltinCall, ElementTarget, ToolCall};
//! use serde_json::json;
//!
//! let call = ToolCall::from_value("type_text", json!({"ref": "e7", "text": "hello", "submit": "true"}));
//! match BuiltinCall::parse(&call) {
//!     Some(Ok(BuiltinCall::TypeText(args))) => {
//!         assert_eq!(args.target, ElementTarget::Ref("e7".into()));
//!         assert!(args.submit);
//!     }
//!     other => panic!("unexpected {other:?}"),
//! }
//! // Not a built-in tool:
//! assert!(BuiltinCall::parse(&ToolCall::from_value("weather", json!({}))).is_none());
//! ```

use serde_json::{Map, Value, json};

use crate::message::ToolCall;
use crate::tool::{ElementTarget, ToolDefinition, ToolError};

/// The built-in tools (their names are shared with the content script: [`gg_vocab::Tool`]).
pub use gg_vocab::Tool as BuiltinTool;

/// The default number of characters `read_page_content` returns per page of text.
pub const DEFAULT_MAX_CHARS: u64 = 4000;

const REF_DESCRIPTION: &str =
    "The element's ref from snapshot_page, like e12. Give ref or selector, not both.";
const SELECTOR_DESCRIPTION: &str =
    "A CSS selector for the element, used when there is no ref. Give ref or selector, not both.";

/// The names of a built-in tool's parameters, as declared in [`definition`].
pub fn parameter_names(tool: BuiltinTool) -> &'static [&'static str] {
    match tool {
        BuiltinTool::ReadPageContent => &["selector", "format", "mode", "offset", "max_chars"],
        BuiltinTool::SnapshotPage => &["max_tokens"],
        BuiltinTool::ClickElement => &["ref", "selector"],
        BuiltinTool::TypeText => &["ref", "selector", "text", "submit", "clear"],
        BuiltinTool::ScrollPage => &["direction", "amount", "ref"],
        BuiltinTool::GetPageTitle | BuiltinTool::TakeScreenshot => &[],
        BuiltinTool::RunJavascript => &["code"],
    }
}

/// The declaration of a built-in tool shown to the model.
pub fn definition(tool: BuiltinTool) -> ToolDefinition {
    let (description, parameters) = match tool {
        BuiltinTool::ReadPageContent => (
            "Read the text (or HTML) of the page or of one element, a page at a time. The \
                 result says how many characters are left; call again with a larger offset to \
                 read on. Hidden text is left out. mode main reads only the main content (the \
                 article), without navigation, headers and footers.",
            json!({
                "type": "object",
                "properties": {
                    "selector": {"type": "string", "description": "CSS selector of the element to read; the whole page if omitted."},
                    "format": {"type": "string", "enum": ["text", "html"], "description": "text for readable text, html for markup."},
                    "mode": {"type": "string", "enum": ["all", "main"], "description": "all for the whole page (default), main for its main content only (<main>, or the largest <article>). Ignored with a selector."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Character offset to start at (default 0)."},
                    "max_chars": {"type": "integer", "minimum": 1, "description": "Most characters to return (default 4000)."}
                },
                "required": ["format"]
            }),
        ),
        BuiltinTool::SnapshotPage => (
            "List the page's landmarks, headings and interactive elements (links, buttons, \
                 fields), each with a ref like e12, its role, name, state and value. Use the refs \
                 with click_element, type_text and scroll_page.",
            json!({
                "type": "object",
                "properties": {
                    "max_tokens": {"type": "integer", "minimum": 1, "description": "Size budget of the outline in tokens."}
                },
                "required": []
            }),
        ),
        BuiltinTool::ClickElement => (
            "Click an element (scrolls it into view first).",
            json!({
                "type": "object",
                "properties": {
                    "ref": {"type": "string", "description": REF_DESCRIPTION},
                    "selector": {"type": "string", "description": SELECTOR_DESCRIPTION}
                },
                "required": []
            }),
        ),
        BuiltinTool::TypeText => (
            "Type text into a field, text area or editable element.",
            json!({
                "type": "object",
                "properties": {
                    "ref": {"type": "string", "description": REF_DESCRIPTION},
                    "selector": {"type": "string", "description": SELECTOR_DESCRIPTION},
                    "text": {"type": "string", "description": "The text to type."},
                    "submit": {"type": "boolean", "description": "Submit the form (press Enter) after typing (default false)."},
                    "clear": {"type": "boolean", "description": "Replace the current content instead of adding to it (default true)."}
                },
                "required": ["text"]
            }),
        ),
        BuiltinTool::ScrollPage => (
            "Scroll the page in a direction, or scroll an element into view by its ref.",
            json!({
                "type": "object",
                "properties": {
                    "direction": {"type": "string", "enum": ["up", "down", "left", "right"], "description": "Where to scroll."},
                    "amount": {"type": "integer", "minimum": 1, "description": "Pixels to scroll (default: about one screen)."},
                    "ref": {"type": "string", "description": "Instead of a direction: the ref of an element to scroll into view."}
                },
                "required": []
            }),
        ),
        BuiltinTool::GetPageTitle => (
            "Get the page's title and address.",
            json!({"type": "object", "properties": {}, "required": []}),
        ),
        BuiltinTool::TakeScreenshot => (
            "Take a screenshot of the visible part of the page.",
            json!({"type": "object", "properties": {}, "required": []}),
        ),
        BuiltinTool::RunJavascript => (
            "Run JavaScript in the page and get its result as JSON. The user is asked first.",
            json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "JavaScript to run; the value of the last expression (or a returned promise's value) is the result."}
                },
                "required": ["code"]
            }),
        ),
    };
    ToolDefinition {
        name: tool.name().to_owned(),
        description: description.to_owned(),
        parameters,
    }
}

/// The declarations of all built-in tools, in [`BuiltinTool::ALL`] order.
pub fn builtin_tools() -> Vec<ToolDefinition> {
    BuiltinTool::ALL.into_iter().map(definition).collect()
}

/// Text or HTML, for `read_page_content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Readable text.
    Text,
    /// Markup.
    Html,
}

/// What of the page `read_page_content` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// The whole page (or the selected element).
    All,
    /// The page's main content only: `<main>` / `role=main`, else its largest `<article>`,
    /// else the whole page. The content script ignores it when a selector is given.
    Main,
}

/// A scroll direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrollDirection {
    /// Towards the top.
    Up,
    /// Towards the bottom.
    Down,
    /// Towards the left edge.
    Left,
    /// Towards the right edge.
    Right,
}

/// Arguments of `read_page_content`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPageContentArgs {
    /// The element to read; the whole page if `None`.
    pub selector: Option<String>,
    /// Text or HTML (`text` when the model leaves it out).
    pub format: ContentFormat,
    /// The whole page or its main content (`all` when the model leaves it out).
    pub mode: ReadMode,
    /// Start offset in characters.
    pub offset: u64,
    /// Page size in characters.
    pub max_chars: u64,
}

/// Arguments of `type_text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeTextArgs {
    /// The field.
    pub target: ElementTarget,
    /// What to type.
    pub text: String,
    /// Submit the form afterwards.
    pub submit: bool,
    /// Replace the current content (default `true`).
    pub clear: bool,
}

/// Arguments of `scroll_page`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrollArgs {
    /// Scroll the page by `amount` pixels (`None`: about one screen).
    By {
        /// Where.
        direction: ScrollDirection,
        /// How far, in pixels.
        amount: Option<u64>,
    },
    /// Scroll an element into view.
    ToElement {
        /// The element.
        target: ElementTarget,
    },
}

/// A validated call of a built-in tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuiltinCall {
    /// `read_page_content`.
    ReadPageContent(ReadPageContentArgs),
    /// `snapshot_page`.
    SnapshotPage {
        /// Size budget in tokens; the executor's default if `None`.
        max_tokens: Option<u64>,
    },
    /// `click_element`.
    ClickElement {
        /// The element.
        target: ElementTarget,
    },
    /// `type_text`.
    TypeText(TypeTextArgs),
    /// `scroll_page`.
    ScrollPage(ScrollArgs),
    /// `get_page_title`.
    GetPageTitle,
    /// `take_screenshot`.
    TakeScreenshot,
    /// `run_javascript`.
    RunJavascript {
        /// The code.
        code: String,
    },
}

/// Reads arguments out of a call's map.
struct Args<'a> {
    tool: &'static str,
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    fn new(tool: BuiltinTool, map: &'a Map<String, Value>) -> Self {
        Self {
            tool: tool.name(),
            map,
        }
    }

    fn error(&self, message: String) -> ToolError {
        ToolError::invalid_arguments(format!("{}: {message}", self.tool))
    }

    /// The raw value; `null` counts as absent.
    fn raw(&self, key: &'static str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn string(&self, key: &'static str) -> Result<Option<String>, ToolError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(Value::Number(number)) => Ok(Some(number.to_string())),
            Some(other) => Err(self.error(format!("`{key}` must be a string, got {other}"))),
        }
    }

    fn non_empty_string(&self, key: &'static str) -> Result<Option<String>, ToolError> {
        match self.string(key)? {
            Some(text) if text.trim().is_empty() => {
                Err(self.error(format!("`{key}` must not be empty")))
            }
            other => Ok(other),
        }
    }

    fn required_string(&self, key: &'static str) -> Result<String, ToolError> {
        self.string(key)?
            .ok_or_else(|| self.error(format!("`{key}` is required")))
    }

    fn integer(&self, key: &'static str, min: u64) -> Result<Option<u64>, ToolError> {
        let Some(value) = self.raw(key) else {
            return Ok(None);
        };
        let parsed = match value {
            Value::Number(number) => number.as_u64().or_else(|| {
                number
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                    .map(|f| f as u64)
            }),
            Value::String(text) => text.trim().parse::<u64>().ok(),
            _ => None,
        };
        match parsed {
            Some(n) if n >= min => Ok(Some(n)),
            Some(n) => Err(self.error(format!("`{key}` must be at least {min}, got {n}"))),
            None => Err(self.error(format!(
                "`{key}` must be a whole number of at least {min}, got {value}"
            ))),
        }
    }

    fn boolean(&self, key: &'static str) -> Result<Option<bool>, ToolError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(text)) if text.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(text)) if text.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(other) => Err(self.error(format!("`{key}` must be true or false, got {other}"))),
        }
    }

    fn choice<T: Copy>(
        &self,
        key: &'static str,
        options: &[(&'static str, T)],
    ) -> Result<Option<T>, ToolError> {
        let Some(text) = self.string(key)? else {
            return Ok(None);
        };
        let wanted = text.trim();
        options
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .map(|(_, value)| Some(*value))
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
                self.error(format!(
                    "`{key}` must be one of {}, got {text:?}",
                    names.join(", ")
                ))
            })
    }

    /// A snapshot ref: `e12`; a bare number `12` is read as `e12`.
    fn element_ref(&self, key: &'static str) -> Result<Option<String>, ToolError> {
        let Some(text) = self.non_empty_string(key)? else {
            return Ok(None);
        };
        let trimmed = text.trim().trim_start_matches('[').trim_end_matches(']');
        let digits = trimmed
            .strip_prefix('e')
            .or_else(|| trimmed.strip_prefix('E'))
            .unwrap_or(trimmed);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Some(format!("e{digits}")))
        } else {
            Err(self.error(format!(
                "`{key}` must be a ref from snapshot_page like e12, got {text:?}; to name an \
                 element by CSS use `selector`"
            )))
        }
    }

    /// `ref` or `selector`; `ref` wins when both are given.
    fn target(&self) -> Result<ElementTarget, ToolError> {
        let element_ref = self.element_ref("ref")?;
        let selector = self.non_empty_string("selector")?;
        match (element_ref, selector) {
            (Some(r), _) => Ok(ElementTarget::Ref(r)),
            (None, Some(s)) => Ok(ElementTarget::Selector(s)),
            (None, None) => Err(self.error(
                "give the element as `ref` (from snapshot_page, like e12) or `selector` (CSS)"
                    .to_owned(),
            )),
        }
    }

    /// Fails on arguments the tool does not have.
    fn reject_unknown(&self, known: &[&str]) -> Result<(), ToolError> {
        let mut unknown: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|key| !known.contains(key))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort_unstable();
        let known = if known.is_empty() {
            "it takes no arguments".to_owned()
        } else {
            format!("it takes {}", known.join(", "))
        };
        Err(self.error(format!("unknown argument {}; {known}", unknown.join(", "))))
    }
}

impl BuiltinCall {
    /// Validates a call. `None` if `call.name` is not a built-in tool.
    pub fn parse(call: &ToolCall) -> Option<Result<Self, ToolError>> {
        let tool = BuiltinTool::from_name(&call.name)?;
        Some(Self::parse_tool(tool, &call.args))
    }

    fn parse_tool(tool: BuiltinTool, map: &Map<String, Value>) -> Result<Self, ToolError> {
        let args = Args::new(tool, map);
        args.reject_unknown(parameter_names(tool))?;
        let call = match tool {
            BuiltinTool::ReadPageContent => {
                let selector = args.non_empty_string("selector")?;
                let format = args
                    .choice(
                        "format",
                        &[("text", ContentFormat::Text), ("html", ContentFormat::Html)],
                    )?
                    .unwrap_or(ContentFormat::Text);
                let mode = args
                    .choice("mode", &[("all", ReadMode::All), ("main", ReadMode::Main)])?
                    .unwrap_or(ReadMode::All);
                let offset = args.integer("offset", 0)?.unwrap_or(0);
                let max_chars = args.integer("max_chars", 1)?.unwrap_or(DEFAULT_MAX_CHARS);
                Self::ReadPageContent(ReadPageContentArgs {
                    selector,
                    format,
                    mode,
                    offset,
                    max_chars,
                })
            }
            BuiltinTool::SnapshotPage => Self::SnapshotPage {
                max_tokens: args.integer("max_tokens", 1)?,
            },
            BuiltinTool::ClickElement => Self::ClickElement {
                target: args.target()?,
            },
            BuiltinTool::TypeText => {
                let target = args.target()?;
                let text = args.required_string("text")?;
                let submit = args.boolean("submit")?.unwrap_or(false);
                let clear = args.boolean("clear")?.unwrap_or(true);
                Self::TypeText(TypeTextArgs {
                    target,
                    text,
                    submit,
                    clear,
                })
            }
            BuiltinTool::ScrollPage => {
                let element_ref = args.element_ref("ref")?;
                let direction = args.choice(
                    "direction",
                    &[
                        ("up", ScrollDirection::Up),
                        ("down", ScrollDirection::Down),
                        ("left", ScrollDirection::Left),
                        ("right", ScrollDirection::Right),
                    ],
                )?;
                let amount = args.integer("amount", 1)?;
                match (element_ref, direction) {
                    (Some(r), _) => Self::ScrollPage(ScrollArgs::ToElement {
                        target: ElementTarget::Ref(r),
                    }),
                    (None, Some(direction)) => {
                        Self::ScrollPage(ScrollArgs::By { direction, amount })
                    }
                    (None, None) => {
                        return Err(args.error(
                            "give a `direction` (up, down, left, right) or the `ref` of an \
                             element to scroll to"
                                .to_owned(),
                        ));
                    }
                }
            }
            BuiltinTool::GetPageTitle => Self::GetPageTitle,
            BuiltinTool::TakeScreenshot => Self::TakeScreenshot,
            BuiltinTool::RunJavascript => {
                let code = args.required_string("code")?;
                if code.trim().is_empty() {
                    return Err(args.error("`code` must not be empty".to_owned()));
                }
                Self::RunJavascript { code }
            }
        };
        Ok(call)
    }

    /// Which tool this calls.
    pub fn tool(&self) -> BuiltinTool {
        match self {
            Self::ReadPageContent(_) => BuiltinTool::ReadPageContent,
            Self::SnapshotPage { .. } => BuiltinTool::SnapshotPage,
            Self::ClickElement { .. } => BuiltinTool::ClickElement,
            Self::TypeText(_) => BuiltinTool::TypeText,
            Self::ScrollPage(_) => BuiltinTool::ScrollPage,
            Self::GetPageTitle => BuiltinTool::GetPageTitle,
            Self::TakeScreenshot => BuiltinTool::TakeScreenshot,
            Self::RunJavascript { .. } => BuiltinTool::RunJavascript,
        }
    }

    /// The element a click or typing acts on (the one the safety gate must look at).
    pub fn acted_on_element(&self) -> Option<&ElementTarget> {
        match self {
            Self::ClickElement { target } | Self::TypeText(TypeTextArgs { target, .. }) => {
                Some(target)
            }
            _ => None,
        }
    }

    /// The normalized call: every argument with its canonical type, defaults filled in.
    pub fn to_call(&self) -> ToolCall {
        fn put_target(map: &mut Map<String, Value>, target: &ElementTarget) {
            match target {
                ElementTarget::Ref(r) => map.insert("ref".to_owned(), json!(r)),
                ElementTarget::Selector(s) => map.insert("selector".to_owned(), json!(s)),
            };
        }
        let mut map = Map::new();
        match self {
            Self::ReadPageContent(args) => {
                if let Some(selector) = &args.selector {
                    map.insert("selector".to_owned(), json!(selector));
                }
                let format = match args.format {
                    ContentFormat::Text => "text",
                    ContentFormat::Html => "html",
                };
                map.insert("format".to_owned(), json!(format));
                let mode = match args.mode {
                    ReadMode::All => "all",
                    ReadMode::Main => "main",
                };
                map.insert("mode".to_owned(), json!(mode));
                map.insert("offset".to_owned(), json!(args.offset));
                map.insert("max_chars".to_owned(), json!(args.max_chars));
            }
            Self::SnapshotPage { max_tokens } => {
                if let Some(max_tokens) = max_tokens {
                    map.insert("max_tokens".to_owned(), json!(max_tokens));
                }
            }
            Self::ClickElement { target } => put_target(&mut map, target),
            Self::TypeText(args) => {
                put_target(&mut map, &args.target);
                map.insert("text".to_owned(), json!(args.text));
                map.insert("submit".to_owned(), json!(args.submit));
                map.insert("clear".to_owned(), json!(args.clear));
            }
            Self::ScrollPage(ScrollArgs::By { direction, amount }) => {
                let direction = match direction {
                    ScrollDirection::Up => "up",
                    ScrollDirection::Down => "down",
                    ScrollDirection::Left => "left",
                    ScrollDirection::Right => "right",
                };
                map.insert("direction".to_owned(), json!(direction));
                if let Some(amount) = amount {
                    map.insert("amount".to_owned(), json!(amount));
                }
            }
            Self::ScrollPage(ScrollArgs::ToElement { target }) => put_target(&mut map, target),
            Self::GetPageTitle | Self::TakeScreenshot => {}
            Self::RunJavascript { code } => {
                map.insert("code".to_owned(), json!(code));
            }
        }
        ToolCall::new(self.tool().name(), map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, args: Value) -> Result<BuiltinCall, ToolError> {
        BuiltinCall::parse(&ToolCall::from_value(name, args)).expect("built-in")
    }

    fn error_message(name: &str, args: Value) -> String {
        match parse(name, args) {
            Err(error) => {
                assert_eq!(error.kind, crate::ToolErrorKind::InvalidArguments);
                error.message
            }
            Ok(call) => panic!("expected an error, got {call:?}"),
        }
    }

    #[test]
    fn definitions_are_json_schema_objects_matching_the_parser() {
        let tools = builtin_tools();
        assert_eq!(tools.len(), 8);
        for (tool, definition) in BuiltinTool::ALL.into_iter().zip(&tools) {
            assert_eq!(BuiltinTool::from_name(&definition.name), Some(tool));
            assert_eq!(
                definition.parameters["type"], "object",
                "{}",
                definition.name
            );
            let properties = definition.parameters["properties"]
                .as_object()
                .expect("properties");
            for required in definition.parameters["required"]
                .as_array()
                .expect("required")
            {
                let required = required.as_str().expect("name");
                assert!(
                    properties.contains_key(required),
                    "{}: {required}",
                    definition.name
                );
            }
            let mut declared: Vec<&str> = properties.keys().map(String::as_str).collect();
            let mut names = super::parameter_names(tool).to_vec();
            declared.sort_unstable();
            names.sort_unstable();
            assert_eq!(declared, names, "{}", definition.name);
            // Every declared property is accepted by the parser (no "unknown argument").
            for key in properties.keys() {
                let result = parse(&definition.name, json!({ key.as_str(): null }));
                if let Err(error) = result {
                    assert!(
                        !error.message.contains("unknown argument"),
                        "{}: {key}: {}",
                        definition.name,
                        error.message
                    );
                }
            }
        }
        let read = &tools[0].parameters;
        assert_eq!(
            read["properties"]["format"]["enum"],
            json!(["text", "html"])
        );
        assert_eq!(read["properties"]["mode"]["enum"], json!(["all", "main"]));
        assert_eq!(read["required"], json!(["format"]));
        assert_eq!(tools[7].parameters["required"], json!(["code"]));
    }

    #[test]
    fn parses_and_normalizes_lenient_arguments() {
        let call = parse(
            "read_page_content",
            json!({"format": "HTML", "offset": "200", "max_chars": 500.0, "selector": null}),
        )
        .unwrap();
        assert_eq!(
            call,
            BuiltinCall::ReadPageContent(ReadPageContentArgs {
                selector: None,
                format: ContentFormat::Html,
                mode: ReadMode::All,
                offset: 200,
                max_chars: 500,
            })
        );
        assert_eq!(
            call.to_call().args,
            json!({"format": "html", "mode": "all", "offset": 200, "max_chars": 500})
                .as_object()
                .cloned()
                .unwrap()
        );
        let click = parse("click_element", json!({"ref": "12"})).unwrap();
        assert_eq!(
            click,
            BuiltinCall::ClickElement {
                target: ElementTarget::Ref("e12".into())
            }
        );
        let scroll = parse("scroll_page", json!({"direction": "down"})).unwrap();
        assert_eq!(
            scroll,
            BuiltinCall::ScrollPage(ScrollArgs::By {
                direction: ScrollDirection::Down,
                amount: None
            })
        );
        let typed = parse("type_text", json!({"selector": "#q", "text": "rust"})).unwrap();
        assert_eq!(
            typed.to_call().args,
            json!({"selector": "#q", "text": "rust", "submit": false, "clear": true})
                .as_object()
                .cloned()
                .unwrap()
        );
        let main = parse(
            "read_page_content",
            json!({"format": "text", "mode": "Main", "selector": "#story"}),
        )
        .unwrap();
        assert_eq!(
            main.to_call().args,
            json!({"selector": "#story", "format": "text", "mode": "main", "offset": 0, "max_chars": 4000})
                .as_object()
                .cloned()
                .unwrap()
        );
        // The normalized call parses to the same thing.
        for call in [call, click, scroll, typed, main] {
            assert_eq!(BuiltinCall::parse(&call.to_call()).unwrap().unwrap(), call);
        }
    }

    #[test]
    fn rejects_what_the_model_must_fix() {
        assert!(error_message("type_text", json!({"ref": "e1"})).contains("`text` is required"));
        assert!(error_message("click_element", json!({})).contains("give the element"));
        assert!(error_message("click_element", json!({"ref": "the button"})).contains("like e12"));
        let unknown = error_message("click_element", json!({"element": "e1"}));
        assert!(unknown.contains("unknown argument element"), "{unknown}");
        assert!(unknown.contains("ref, selector"), "{unknown}");
        assert!(error_message("read_page_content", json!({"offset": -5})).contains("offset"));
        assert!(
            error_message("read_page_content", json!({"format": "pdf"})).contains("text, html")
        );
        assert!(
            error_message("read_page_content", json!({"mode": "article"})).contains("all, main")
        );
        assert!(error_message("scroll_page", json!({"amount": 3})).contains("direction"));
        assert!(error_message("run_javascript", json!({"code": "  "})).contains("empty"));
        assert!(error_message("get_page_title", json!({"x": 1})).contains("no arguments"));
        assert!(
            error_message(
                "type_text",
                json!({"ref": "e1", "text": "a", "submit": "yes"})
            )
            .contains("true or false")
        );
    }
}
