//! The element's attributes: parsed, checked, and turned into the settings of a turn. Pure
//! functions, tested natively.
//!
//! A bad value never stops the widget: the attribute's default (or the nearest allowed value) is
//! used instead and a [`Warning`] names the attribute, the value given and the value used (the
//! element logs it with `console.warn`).

use gg_vocab::{Corner, Tool};

/// Every attribute the element reads (its `observedAttributes`; the loader
/// `gemma-gem-widget.js` lists the same names, checked by a test).
pub const OBSERVED: &[&str] = &[
    "model-source",
    "model-size",
    "thinking",
    "max-iterations",
    "temperature",
    "tools",
    "scope",
    "corner",
    "open",
    "theme",
    "system-prompt",
    "greeting",
    "allow-javascript",
    "image-tokens",
    "constrain-tool-calls",
];

/// Light, dark or following the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ThemeAttr {
    #[default]
    Auto,
    Light,
    Dark,
}

/// The element's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `model-source` as written (resolved against the page's URL by the element); empty: the
    /// pinned Hugging Face repository of `model-size`.
    pub model_source: String,
    /// `"E2B"` or `"E4B"`.
    pub model_size: String,
    pub thinking: bool,
    pub max_iterations: u32,
    pub temperature: f32,
    /// The page tools the model may call, in [`Tool::ALL`] order.
    pub tools: Vec<Tool>,
    /// A CSS selector: every tool is confined to the first element it matches.
    pub scope: Option<String>,
    pub corner: Corner,
    pub open: bool,
    pub theme: ThemeAttr,
    pub system_prompt: Option<String>,
    pub greeting: Option<String>,
    /// `allow-javascript`: the page opts in to `run_javascript`.
    pub allow_javascript: bool,
    pub image_tokens: u32,
    pub constrain_tool_calls: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            model_source: String::new(),
            model_size: "E2B".into(),
            thinking: false,
            max_iterations: 10,
            temperature: 1.0,
            tools: tools_of_level(ToolLevel::Act),
            scope: None,
            corner: Corner::BottomRight,
            open: false,
            theme: ThemeAttr::Auto,
            system_prompt: None,
            greeting: None,
            allow_javascript: false,
            image_tokens: gg_agent::DEFAULT_IMAGE_TOKENS,
            constrain_tool_calls: true,
        }
    }
}

/// A value that could not be used.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    pub attribute: &'static str,
    pub value: String,
    /// What is used instead, and why.
    pub used: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<gemma-gem-widget>: attribute {}=\"{}\" is not valid; using {}",
            self.attribute, self.value, self.used
        )
    }
}

/// The two named levels of `tools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolLevel {
    /// Read the page only.
    Read,
    /// Read and act (click, type, scroll).
    Act,
}

/// The page tools a level allows (`gg_vocab::READ_TOOLS` / `ACT_TOOLS`, the levels the page
/// tools and the gate agree on), in [`Tool::ALL`] order. `run_javascript` is in neither: it needs
/// `allow-javascript`. `take_screenshot` needs the extension (a page cannot capture itself
/// without asking the user to share the tab), so the widget never offers it.
pub fn tools_of_level(level: ToolLevel) -> Vec<Tool> {
    let set: &[Tool] = match level {
        ToolLevel::Read => &gg_vocab::READ_TOOLS,
        ToolLevel::Act => &gg_vocab::ACT_TOOLS,
    };
    Tool::ALL.into_iter().filter(|t| set.contains(t)).collect()
}

/// A boolean attribute: present (`""`, `"true"`, the attribute's own name) is on, `"false"` is
/// off, absent is the default.
fn boolean(
    name: &'static str,
    value: Option<&str>,
    default: bool,
    warnings: &mut Vec<Warning>,
) -> bool {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => default,
        Some(v) if v.is_empty() || v == "true" || v == name => true,
        Some(v) if v == "false" => false,
        Some(_) => {
            warnings.push(Warning {
                attribute: name,
                value: value.unwrap_or_default().to_owned(),
                used: format!("{default} (write \"true\" or \"false\")"),
            });
            default
        }
    }
}

fn number<T>(
    name: &'static str,
    value: Option<&str>,
    default: T,
    (lo, hi): (T, T),
    warnings: &mut Vec<Warning>,
) -> T
where
    T: Number + PartialOrd + Copy + std::fmt::Display,
{
    let Some(raw) = value else { return default };
    match T::read(raw.trim()) {
        Some(v) if v >= lo && v <= hi => v,
        Some(v) => {
            let used = if v < lo { lo } else { hi };
            warnings.push(Warning {
                attribute: name,
                value: raw.to_owned(),
                used: format!("{used} (allowed: {lo} to {hi})"),
            });
            used
        }
        None => {
            warnings.push(Warning {
                attribute: name,
                value: raw.to_owned(),
                used: format!("{default} (not a number)"),
            });
            default
        }
    }
}

/// A number attribute's value.
trait Number: Sized {
    fn read(text: &str) -> Option<Self>;
}

impl Number for u32 {
    fn read(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl Number for f32 {
    /// A plain decimal (`1`, `0.7`, `+.5`, `2.`), not `f32::from_str`: its correctly rounded
    /// parsing (exponents, `inf`, `NaN`) and its 10 KB table of powers of five are more than a
    /// setting with one or two decimals needs, on a main thread whose wasm has a size budget.
    fn read(text: &str) -> Option<Self> {
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = || whole.bytes().chain(fraction.bytes());
        if (whole.is_empty() && fraction.is_empty()) || !digits().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut value = 0f64;
        for b in whole.bytes() {
            value = value * 10.0 + f64::from(b - b'0');
        }
        let mut scale = 1f64;
        for b in fraction.bytes().take(12) {
            scale /= 10.0;
            value += f64::from(b - b'0') * scale;
        }
        let value = value as f32;
        Some(if negative { -value } else { value })
    }
}

fn tool_names(tools: &[Tool]) -> String {
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    format!("\"{}\"", names.join(" "))
}

/// `tools`: `read`, `act`, or tool names (and level words) separated by spaces, commas or `|`.
fn tools(value: Option<&str>, allow_javascript: bool, warnings: &mut Vec<Warning>) -> Vec<Tool> {
    let Some(raw) = value else {
        let mut t = tools_of_level(ToolLevel::Act);
        if allow_javascript {
            t.push(Tool::RunJavascript);
        }
        return t;
    };
    let v = raw.trim().to_ascii_lowercase();
    let mut chosen: Vec<Tool> = match v.as_str() {
        "read" => tools_of_level(ToolLevel::Read),
        "act" | "" => tools_of_level(ToolLevel::Act),
        list => {
            let mut chosen = Vec::new();
            let mut bad = Vec::new();
            for name in list.split([' ', ',', '|']).filter(|s| !s.is_empty()) {
                if let Some(level) = gg_vocab::tools_for_level(name) {
                    chosen.extend_from_slice(level);
                    continue;
                }
                match Tool::from_name(name) {
                    Some(Tool::TakeScreenshot) => {
                        bad.push(format!("{name} (screenshots need the Gemma Gem extension)"))
                    }
                    Some(Tool::RunJavascript) if !allow_javascript => {
                        bad.push(format!("{name} (needs the allow-javascript attribute)"))
                    }
                    Some(tool) => chosen.push(tool),
                    None => bad.push(format!("{name} (no such tool)")),
                }
            }
            if !bad.is_empty() {
                chosen.sort_by_key(|t| Tool::ALL.iter().position(|a| a == t));
                chosen.dedup();
                warnings.push(Warning {
                    attribute: "tools",
                    value: raw.to_owned(),
                    used: format!(
                        "{} (left out: {}; allowed: read, act, or names of {})",
                        tool_names(&chosen),
                        bad.join(", "),
                        tool_names(&tools_of_level(ToolLevel::Act))
                    ),
                });
            }
            chosen
        }
    };
    if allow_javascript && matches!(v.as_str(), "act" | "") {
        chosen.push(Tool::RunJavascript);
    }
    chosen.sort_by_key(|t| Tool::ALL.iter().position(|a| a == t));
    chosen.dedup();
    chosen
}

impl Config {
    /// The configuration of an element whose attributes `get` returns.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> (Self, Vec<Warning>) {
        let d = Self::default();
        let mut w = Vec::new();
        let text = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let model_size = match text("model-size").map(|v| v.to_ascii_uppercase()) {
            None => d.model_size.clone(),
            Some(v) if v == "E2B" || v == "E4B" => v,
            Some(_) => {
                w.push(Warning {
                    attribute: "model-size",
                    value: get("model-size").unwrap_or_default(),
                    used: "E2B (allowed: E2B, E4B)".into(),
                });
                d.model_size.clone()
            }
        };
        let corner = match text("corner") {
            None => d.corner,
            Some(v) => Corner::from_name(&v.to_ascii_lowercase()).unwrap_or_else(|| {
                w.push(Warning {
                    attribute: "corner",
                    value: v,
                    used: "bottom-right (allowed: top-left, top-right, bottom-left, bottom-right)"
                        .into(),
                });
                d.corner
            }),
        };
        let theme = match text("theme").map(|v| v.to_ascii_lowercase()).as_deref() {
            None | Some("auto") => ThemeAttr::Auto,
            Some("light") => ThemeAttr::Light,
            Some("dark") => ThemeAttr::Dark,
            Some(_) => {
                w.push(Warning {
                    attribute: "theme",
                    value: get("theme").unwrap_or_default(),
                    used: "auto (allowed: light, dark, auto)".into(),
                });
                ThemeAttr::Auto
            }
        };
        let image_tokens = match text("image-tokens") {
            None => d.image_tokens,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if gg_agent::IMAGE_TOKEN_BUDGETS.contains(&n) => n,
                _ => {
                    w.push(Warning {
                        attribute: "image-tokens",
                        value: v,
                        used: format!(
                            "{} (allowed: {:?})",
                            d.image_tokens,
                            gg_agent::IMAGE_TOKEN_BUDGETS
                        ),
                    });
                    d.image_tokens
                }
            },
        };
        let allow_javascript = boolean(
            "allow-javascript",
            get("allow-javascript").as_deref(),
            false,
            &mut w,
        );
        let config = Self {
            model_source: text("model-source").unwrap_or_default(),
            model_size,
            thinking: boolean("thinking", get("thinking").as_deref(), d.thinking, &mut w),
            max_iterations: number(
                "max-iterations",
                get("max-iterations").as_deref(),
                d.max_iterations,
                gg_components::Settings::MAX_ITERATIONS_RANGE,
                &mut w,
            ),
            temperature: number(
                "temperature",
                get("temperature").as_deref(),
                d.temperature,
                gg_components::Settings::TEMPERATURE_RANGE,
                &mut w,
            ),
            tools: tools(get("tools").as_deref(), allow_javascript, &mut w),
            scope: text("scope"),
            corner,
            open: boolean("open", get("open").as_deref(), d.open, &mut w),
            theme,
            system_prompt: text("system-prompt"),
            greeting: text("greeting"),
            allow_javascript,
            image_tokens,
            constrain_tool_calls: boolean(
                "constrain-tool-calls",
                get("constrain-tool-calls").as_deref(),
                d.constrain_tool_calls,
                &mut w,
            ),
        };
        (config, w)
    }

    /// Whether the page lets the model call `name`.
    pub fn allows(&self, name: &str) -> bool {
        Tool::from_name(name).is_some_and(|t| self.tools.contains(&t))
    }

    /// The tool names, for the turn's settings.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.name().to_owned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<Warning>) {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::parse(|name| map.get(name).cloned())
    }

    fn names(c: &Config) -> Vec<String> {
        c.tool_names()
    }

    #[test]
    fn no_attributes_is_the_default() {
        let (c, w) = parse(&[]);
        assert!(w.is_empty());
        assert_eq!(c, Config::default());
        assert_eq!(
            names(&c),
            [
                "read_page_content",
                "snapshot_page",
                "click_element",
                "type_text",
                "scroll_page",
                "get_page_title"
            ]
        );
    }

    #[test]
    fn good_values_are_used() {
        let (c, w) = parse(&[
            ("model-source", " /models/tiny/ "),
            ("model-size", "e4b"),
            ("thinking", ""),
            ("max-iterations", "3"),
            ("temperature", "0.5"),
            ("tools", "read"),
            ("scope", "#main"),
            ("corner", "top-left"),
            ("open", "true"),
            ("theme", "dark"),
            ("system-prompt", "Be brief."),
            ("greeting", "Hello!"),
            ("image-tokens", "70"),
            ("constrain-tool-calls", "false"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.model_source, "/models/tiny/");
        assert_eq!(c.model_size, "E4B");
        assert!(c.thinking && c.open && !c.constrain_tool_calls);
        assert_eq!((c.max_iterations, c.temperature), (3, 0.5));
        assert_eq!(
            names(&c),
            [
                "read_page_content",
                "snapshot_page",
                "scroll_page",
                "get_page_title"
            ]
        );
        assert!(c.allows("snapshot_page") && !c.allows("click_element"));
        assert_eq!(c.scope.as_deref(), Some("#main"));
        assert_eq!(c.corner, Corner::TopLeft);
        assert_eq!(c.theme, ThemeAttr::Dark);
        assert_eq!(c.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(c.greeting.as_deref(), Some("Hello!"));
        assert_eq!(c.image_tokens, 70);
    }

    #[test]
    fn bad_values_warn_and_fall_back() {
        let (c, w) = parse(&[
            ("model-size", "E9B"),
            ("thinking", "maybe"),
            ("max-iterations", "500"),
            ("temperature", "hot"),
            ("corner", "middle"),
            ("theme", "neon"),
            ("image-tokens", "100"),
        ]);
        assert_eq!(c.model_size, "E2B");
        assert!(!c.thinking);
        assert_eq!(c.max_iterations, 50);
        assert_eq!(c.temperature, 1.0);
        assert_eq!(c.corner, Corner::BottomRight);
        assert_eq!(c.theme, ThemeAttr::Auto);
        assert_eq!(c.image_tokens, 280);
        let attrs: Vec<&str> = w.iter().map(|w| w.attribute).collect();
        assert_eq!(
            attrs,
            [
                "model-size",
                "corner",
                "theme",
                "image-tokens",
                "thinking",
                "max-iterations",
                "temperature"
            ]
        );
        let text = w[5].to_string();
        assert!(
            text.contains("max-iterations=\"500\"") && text.contains("using 50"),
            "{text}"
        );
    }

    #[test]
    fn tool_lists_and_opt_ins() {
        let (c, w) = parse(&[(
            "tools",
            "click_element, snapshot_page bogus run_javascript take_screenshot",
        )]);
        assert_eq!(names(&c), ["snapshot_page", "click_element"]);
        assert_eq!(w.len(), 1);
        let text = w[0].to_string();
        assert!(text.contains("bogus (no such tool)"), "{text}");
        assert!(
            text.contains("run_javascript (needs the allow-javascript attribute)"),
            "{text}"
        );
        assert!(text.contains("take_screenshot (screenshots need"), "{text}");

        let (c, w) = parse(&[("tools", "run_javascript"), ("allow-javascript", "")]);
        assert!(w.is_empty());
        assert_eq!(names(&c), ["run_javascript"]);
        let (c, _) = parse(&[("allow-javascript", "true")]);
        assert!(c.allows("run_javascript") && c.allows("type_text"));
        let (c, _) = parse(&[("tools", "read"), ("allow-javascript", "true")]);
        assert!(!c.allows("run_javascript"), "read stays read-only");
    }

    #[test]
    fn decimals_read_as_the_attribute_says() {
        // Plain decimals read as f32::from_str reads them.
        for text in [
            "1",
            "0.7",
            "+.5",
            "2.",
            "-1.25",
            "1.3333333333333333",
            "0.1",
            "1.9",
        ] {
            assert_eq!(<f32 as Number>::read(text), text.parse().ok(), "{text}");
        }
        for bad in [
            "", ".", "-", "1e3", "inf", "NaN", "0,5", "1.2.3", " 1", "0x1",
        ] {
            assert_eq!(<f32 as Number>::read(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_loader_observes_every_attribute() {
        let loader = include_str!("../static/gemma-gem-widget.js");
        for name in OBSERVED {
            assert!(
                loader.contains(&format!("'{name}'")),
                "gemma-gem-widget.js does not observe {name}"
            );
        }
        let listed = loader.matches("', '").count() + 1;
        assert_eq!(
            listed,
            OBSERVED.len(),
            "the loader observes attributes the widget ignores"
        );
    }
}
