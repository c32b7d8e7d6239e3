//! The vocabulary the extension's sides share: which built-in tools exist and what they are
//! called ([`Tool`]), how a tool call fails ([`ToolErrorKind`]), and the corner the launcher
//! sits in ([`Corner`]). The agent declares the tools to the model and parses its calls with
//! these names; the content script dispatches the same names and answers failures with these
//! kinds; the content script's launcher and the UI kit's launcher move between the same corners
//! the same way; which key turns it off on a site ([`disabled_key`], [`host_of`]). `no_std`
//! (with `alloc`), no dependencies (`serde` behind the `serde` feature: the agent's and
//! the UI kit's wire form), so the content script links it too.
//!
//! ```
//! use gg_vocab::{Tool, ToolErrorKind};
//!
//! assert_eq!(Tool::from_name("click_element"), Some(Tool::ClickElement));
//! assert_eq!(Tool::TypeText.name(), "type_text");
//! assert_eq!(Tool::from_name("no_such_tool"), None);
//! assert_eq!(ToolErrorKind::from_name("stale_ref"), Some(ToolErrorKind::StaleRef));
//! assert_eq!(ToolErrorKind::NotInteractable.name(), "not_interactable");
//!
//! use gg_vocab::Corner;
//! assert_eq!(Corner::nearest(10.0, 10.0, 1000.0, 800.0), Corner::TopLeft);
//! assert_eq!(Corner::BottomRight.moved(0, -1), Corner::TopRight);
//! assert_eq!(Corner::from_name("top-left"), Some(Corner::TopLeft));
//! ```

#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::String;

/// The built-in tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `read_page_content {selector?, format: text|html, mode?: all|main, offset?, max_chars?}`.
    ReadPageContent,
    /// `snapshot_page {max_tokens?}`.
    SnapshotPage,
    /// `click_element {ref|selector}`.
    ClickElement,
    /// `type_text {ref|selector, text, submit?, clear?}`.
    TypeText,
    /// `scroll_page {direction, amount?}` or `{ref}`.
    ScrollPage,
    /// `get_page_title {}`.
    GetPageTitle,
    /// `take_screenshot {}` (run by the service worker, not in the page).
    TakeScreenshot,
    /// `run_javascript {code}` (run by the service worker, not in the page).
    RunJavascript,
}

impl Tool {
    /// All built-in tools, in declaration order.
    pub const ALL: [Self; 8] = [
        Self::ReadPageContent,
        Self::SnapshotPage,
        Self::ClickElement,
        Self::TypeText,
        Self::ScrollPage,
        Self::GetPageTitle,
        Self::TakeScreenshot,
        Self::RunJavascript,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReadPageContent => "read_page_content",
            Self::SnapshotPage => "snapshot_page",
            Self::ClickElement => "click_element",
            Self::TypeText => "type_text",
            Self::ScrollPage => "scroll_page",
            Self::GetPageTitle => "get_page_title",
            Self::TakeScreenshot => "take_screenshot",
            Self::RunJavascript => "run_javascript",
        }
    }

    /// The tool with this name, if it is built in.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }
}

/// The in-page tools that only read the page: what a page that embeds the widget with
/// `tools="read"` allows. The safety gate classes each of them `RiskClass::Read`
/// (`gg_agent::gate::classify_builtin`, which a test there checks against this list); scrolling
/// moves the view, never the page's data. `take_screenshot` is a read too, but it is not an
/// in-page tool: a page opts in to it separately.
pub const READ_TOOLS: [Tool; 4] = [
    Tool::SnapshotPage,
    Tool::ReadPageContent,
    Tool::GetPageTitle,
    Tool::ScrollPage,
];

/// The in-page tools that may also act: [`READ_TOOLS`] and the tools that change the page
/// (`tools="act"`). `run_javascript` is never part of a level: a page opts in to it separately.
pub const ACT_TOOLS: [Tool; 6] = [
    Tool::SnapshotPage,
    Tool::ReadPageContent,
    Tool::GetPageTitle,
    Tool::ScrollPage,
    Tool::ClickElement,
    Tool::TypeText,
];

/// Why a call of `tool` is refused where only `allowed` may run: the one wording of the widget's
/// worker, its page side and the page tools (`gg_content::embedded`).
///
/// ```
/// use gg_vocab::{Tool, not_allowed};
/// assert_eq!(
///     not_allowed("click_element", &[Tool::SnapshotPage, Tool::ReadPageContent]),
///     "click_element is not allowed on this page: the page allows only snapshot_page, read_page_content"
/// );
/// assert_eq!(
///     not_allowed("type_text", &[]),
///     "type_text is not allowed on this page: the page allows no page tools"
/// );
/// ```
pub fn not_allowed(tool: &str, allowed: &[Tool]) -> String {
    if allowed.is_empty() {
        return format!("{tool} is not allowed on this page: the page allows no page tools");
    }
    let mut names = String::new();
    for (i, t) in allowed.iter().enumerate() {
        if i > 0 {
            names.push_str(", ");
        }
        names.push_str(t.name());
    }
    format!("{tool} is not allowed on this page: the page allows only {names}")
}

/// The tools of a level word: `read` ([`READ_TOOLS`]) or `act` ([`ACT_TOOLS`]), any case;
/// `None` for anything else.
///
/// ```
/// use gg_vocab::{Tool, tools_for_level};
/// assert!(tools_for_level("read").unwrap().contains(&Tool::SnapshotPage));
/// assert!(!tools_for_level("read").unwrap().contains(&Tool::ClickElement));
/// assert!(tools_for_level("ACT").unwrap().contains(&Tool::TypeText));
/// assert_eq!(tools_for_level("all"), None);
/// ```
pub fn tools_for_level(level: &str) -> Option<&'static [Tool]> {
    let level = level.trim();
    if level.eq_ignore_ascii_case("read") {
        Some(&READ_TOOLS)
    } else if level.eq_ignore_ascii_case("act") {
        Some(&ACT_TOOLS)
    } else {
        None
    }
}

/// A page's list of tools (the widget's `tools` attribute) split into what it names: a level
/// word ([`tools_for_level`]) or tool names and level words separated by spaces, commas or `|`,
/// in any mix, any case. The tools in declaration order, each once, and the words that are
/// neither, in the order written. The widget's attribute and [`parse_tool_list`] both read lists
/// with it; what a caller then refuses (a tool it cannot offer) is its own business.
///
/// ```
/// use gg_vocab::{Tool, split_tool_list};
/// let (tools, unknown) = split_tool_list("Click_Element, read | bogus  nope");
/// assert_eq!(tools.len(), 5); // the 4 read tools and click_element, each once
/// assert!(tools.contains(&Tool::SnapshotPage) && tools.contains(&Tool::ClickElement));
/// assert_eq!(unknown, ["bogus", "nope"]);
/// ```
pub fn split_tool_list(value: &str) -> (alloc::vec::Vec<Tool>, alloc::vec::Vec<&str>) {
    let mut wanted = [false; Tool::ALL.len()];
    let mut unknown = alloc::vec::Vec::new();
    for word in value
        .split(|c: char| c == ',' || c == '|' || c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
    {
        let mut want = |tool: &Tool| {
            if let Some(i) = Tool::ALL.iter().position(|t| t == tool) {
                wanted[i] = true;
            }
        };
        if let Some(level) = tools_for_level(word) {
            level.iter().for_each(want);
        } else if let Some(tool) = Tool::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(word))
        {
            want(&tool);
        } else {
            unknown.push(word);
        }
    }
    let tools = Tool::ALL
        .into_iter()
        .zip(wanted)
        .filter_map(|(tool, on)| on.then_some(tool))
        .collect();
    (tools, unknown)
}

/// A list of tools ([`split_tool_list`]) that must name nothing else: `Err` names every word
/// that is neither a level nor a tool (the caller warns and uses its default).
///
/// ```
/// use gg_vocab::{Tool, parse_tool_list};
/// assert_eq!(parse_tool_list("read").unwrap().len(), 4);
/// assert_eq!(
///     parse_tool_list("snapshot_page, click_element").unwrap(),
///     [Tool::SnapshotPage, Tool::ClickElement]
/// );
/// assert_eq!(
///     parse_tool_list("read | take_screenshot").unwrap().last(),
///     Some(&Tool::TakeScreenshot)
/// );
/// let err = parse_tool_list("read, delete_everything, rm").unwrap_err();
/// assert!(err.contains("`delete_everything`, `rm`"), "{err}");
/// assert_eq!(parse_tool_list("  ").unwrap(), []);
/// ```
pub fn parse_tool_list(value: &str) -> Result<alloc::vec::Vec<Tool>, String> {
    let (tools, unknown) = split_tool_list(value);
    if unknown.is_empty() {
        return Ok(tools);
    }
    let words: alloc::vec::Vec<String> = unknown.iter().map(|w| format!("`{w}`")).collect();
    Err(format!(
        "{} {} neither a tool level (read, act) nor a tool name",
        words.join(", "),
        if unknown.len() == 1 { "is" } else { "are" }
    ))
}

/// What kind of failure a tool error is; lets the UI and the loop tell them apart. Its wire form
/// is [`ToolErrorKind::name`] (snake_case), with or without `serde`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ToolErrorKind {
    /// The model called a tool that is not declared.
    UnknownTool,
    /// The model's call could not be parsed at all.
    MalformedCall,
    /// The arguments do not match the tool's parameters.
    InvalidArguments,
    /// The CSS selector is not valid.
    InvalidSelector,
    /// The ref is no longer in the page (it changed after the snapshot).
    StaleRef,
    /// Nothing matches the ref or selector.
    NotFound,
    /// The element is hidden, disabled, covered or detached.
    NotInteractable,
    /// The page does not allow it (e.g. its Content-Security-Policy forbids evaluation).
    Blocked,
    /// The user denied the call, or tools are turned off on this site.
    Denied,
    /// The tool cannot run here (no tab, unsupported page, not implemented by this executor).
    Unavailable,
    /// The tool did not finish in time.
    Timeout,
    /// Anything else.
    Failed,
}

impl ToolErrorKind {
    /// Every kind.
    pub const ALL: [Self; 12] = [
        Self::UnknownTool,
        Self::MalformedCall,
        Self::InvalidArguments,
        Self::InvalidSelector,
        Self::StaleRef,
        Self::NotFound,
        Self::NotInteractable,
        Self::Blocked,
        Self::Denied,
        Self::Unavailable,
        Self::Timeout,
        Self::Failed,
    ];

    /// The kind's wire name (snake_case, as `serde` writes it).
    pub fn name(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::MalformedCall => "malformed_call",
            Self::InvalidArguments => "invalid_arguments",
            Self::InvalidSelector => "invalid_selector",
            Self::StaleRef => "stale_ref",
            Self::NotFound => "not_found",
            Self::NotInteractable => "not_interactable",
            Self::Blocked => "blocked",
            Self::Denied => "denied",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }

    /// The kind of a wire name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A corner of the viewport, where a launcher sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Corner {
    TopLeft,
    TopRight,
    BottomLeft,
    #[default]
    BottomRight,
}

impl Corner {
    /// Every corner.
    pub const ALL: [Self; 4] = [
        Self::TopLeft,
        Self::TopRight,
        Self::BottomLeft,
        Self::BottomRight,
    ];

    /// Its name as the content script stores it (`chrome.storage.local`) and marks its host
    /// (`data-corner`): `top-left`, ..., `bottom-right`.
    pub fn name(self) -> &'static str {
        match self {
            Self::TopLeft => "top-left",
            Self::TopRight => "top-right",
            Self::BottomLeft => "bottom-left",
            Self::BottomRight => "bottom-right",
        }
    }

    /// The corner of a stored [`Corner::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Its name in the UI kit's data (the `serde` form, and the kit's `data-corner`):
    /// `top_left`, ..., `bottom_right`.
    pub fn snake_name(self) -> &'static str {
        match self {
            Self::TopLeft => "top_left",
            Self::TopRight => "top_right",
            Self::BottomLeft => "bottom_left",
            Self::BottomRight => "bottom_right",
        }
    }

    /// On the top edge.
    pub fn top(self) -> bool {
        matches!(self, Self::TopLeft | Self::TopRight)
    }

    /// On the left edge.
    pub fn left(self) -> bool {
        matches!(self, Self::TopLeft | Self::BottomLeft)
    }

    /// The corner on these edges.
    pub fn from_sides(top: bool, left: bool) -> Self {
        match (top, left) {
            (true, true) => Self::TopLeft,
            (true, false) => Self::TopRight,
            (false, true) => Self::BottomLeft,
            (false, false) => Self::BottomRight,
        }
    }

    /// The corner nearest to the point `(x, y)` of a `width` x `height` viewport (where a
    /// dragged launcher lands).
    pub fn nearest(x: f64, y: f64, width: f64, height: f64) -> Self {
        Self::from_sides(y < height / 2.0, x < width / 2.0)
    }

    /// The corner reached by one step in a direction (arrow keys): `dx` < 0 left, > 0 right,
    /// `dy` < 0 up, > 0 down; 0 keeps that side.
    pub fn moved(self, dx: i8, dy: i8) -> Self {
        let left = if dx == 0 { self.left() } else { dx < 0 };
        let top = if dy == 0 { self.top() } else { dy < 0 };
        Self::from_sides(top, left)
    }

    /// The corner an arrow key (`KeyboardEvent.key`: `ArrowUp`, ...) moves a launcher to, with
    /// Alt held; `None` for any other key.
    pub fn after_key(self, key: &str) -> Option<Self> {
        Some(match key {
            "ArrowUp" => self.moved(0, -1),
            "ArrowDown" => self.moved(0, 1),
            "ArrowLeft" => self.moved(-1, 0),
            "ArrowRight" => self.moved(1, 0),
            _ => return None,
        })
    }
}

/// Prefix of the `chrome.storage.local` key saying that Gemma Gem is turned off on one host
/// ([`disabled_key`]).
pub const DISABLED_PREFIX: &str = "disabled:";

/// The host of an absolute URL, an origin or a bare host name: lowercase, without port,
/// credentials or a trailing dot (`None` when there is none). Sites are turned off by host (any
/// scheme and port): the service worker writes the key of a site's host, the content script
/// reads the key of its page's `location.hostname`, both through this.
pub fn host_of(site: &str) -> Option<String> {
    let site = site.trim();
    let rest = site.split_once("://").map_or(site, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next()?
    } else {
        authority.split(':').next()?
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    valid.then_some(host)
}

/// The local key that turns Gemma Gem off on the host of `site` (a URL, origin or host name):
/// [`DISABLED_PREFIX`] and [`host_of`].
pub fn disabled_key(site: &str) -> Option<String> {
    host_of(site).map(|host| format!("{DISABLED_PREFIX}{host}"))
}

/// Pointer travel (CSS px) after which a press on a launcher is a drag rather than a click.
pub const DRAG_THRESHOLD: f64 = 5.0;

/// A press on a launcher that may become a drag to another corner: the logic the UI kit's
/// launcher (`use_drag_corner`) and the content script's launcher share. Positions are the
/// pointer's viewport coordinates (`clientX`, `clientY`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CornerDrag {
    pointer: i32,
    start: (f64, f64),
    offset: (f64, f64),
    dragging: bool,
}

/// How a [`CornerDrag`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DragEnd {
    /// The pointer never travelled [`DRAG_THRESHOLD`]: a click.
    Click,
    /// Dragged and released over this corner's quarter of the viewport (the corner the
    /// launcher had when the viewport's size is unknown). The click event that follows a drag
    /// is not a click of the launcher.
    Dropped(Corner),
}

impl CornerDrag {
    /// A press of pointer `pointer` at `(x, y)`.
    pub fn press(pointer: i32, x: f64, y: f64) -> Self {
        Self {
            pointer,
            start: (x, y),
            offset: (0.0, 0.0),
            dragging: false,
        }
    }

    /// The pressed pointer's id (moves and releases of other pointers are ignored).
    pub fn pointer(&self) -> i32 {
        self.pointer
    }

    /// A move of `pointer` to `(x, y)`: whether it is this press's pointer (other pointers
    /// change nothing). Past [`DRAG_THRESHOLD`] the press becomes a drag and stays one.
    pub fn move_to(&mut self, pointer: i32, x: f64, y: f64) -> bool {
        if pointer != self.pointer {
            return false;
        }
        self.offset = (x - self.start.0, y - self.start.1);
        let (dx, dy) = self.offset;
        self.dragging |= dx * dx + dy * dy > DRAG_THRESHOLD * DRAG_THRESHOLD;
        true
    }

    /// Whether the press has become a drag.
    pub fn dragging(&self) -> bool {
        self.dragging
    }

    /// How far the pointer is from where it was pressed.
    pub fn offset(&self) -> (f64, f64) {
        self.offset
    }

    /// The press ends with the pointer at `(x, y)` of a `width` x `height` viewport; `corner`
    /// is where the launcher sits now.
    pub fn release(&self, x: f64, y: f64, width: f64, height: f64, corner: Corner) -> DragEnd {
        if !self.dragging {
            DragEnd::Click
        } else if width > 0.0 && height > 0.0 {
            DragEnd::Dropped(Corner::nearest(x, y, width, height))
        } else {
            DragEnd::Dropped(corner)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Corner, CornerDrag, DragEnd, Tool, ToolErrorKind, disabled_key, host_of};

    #[test]
    fn hosts_and_their_disabled_keys() {
        assert_eq!(
            host_of("https://Example.com:8443/a?b#c").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            host_of("http://127.0.0.1:8080").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            host_of("https://user@example.com/").as_deref(),
            Some("example.com")
        );
        assert_eq!(host_of("http://[::1]:8080/").as_deref(), Some("[::1]"));
        assert_eq!(host_of("Example.COM.").as_deref(), Some("example.com"));
        assert_eq!(host_of(""), None);
        assert_eq!(host_of("https://a b/"), None);
        assert_eq!(
            disabled_key("example.com").as_deref(),
            Some("disabled:example.com")
        );
        assert_eq!(
            disabled_key("https://EXAMPLE.com./x").as_deref(),
            Some("disabled:example.com")
        );
        assert_eq!(disabled_key("[::1]").as_deref(), Some("disabled:[::1]"));
        assert_eq!(disabled_key("file:///tmp/a.html"), None);
    }

    #[test]
    fn a_press_becomes_a_drag_past_the_threshold_and_lands_on_the_nearest_corner() {
        let mut d = CornerDrag::press(7, 100.0, 100.0);
        assert!(!d.move_to(8, 500.0, 500.0), "another pointer");
        assert!(!d.dragging());
        assert!(d.move_to(7, 103.0, 103.0));
        assert!(!d.dragging(), "4.2 px is not a drag");
        let c = Corner::BottomRight;
        assert_eq!(d.release(103.0, 103.0, 1000.0, 800.0, c), DragEnd::Click);
        assert!(d.move_to(7, 104.0, 104.0));
        assert!(d.dragging(), "5.7 px is");
        assert_eq!(d.offset(), (4.0, 4.0));
        // Back within the threshold: still a drag.
        d.move_to(7, 100.0, 100.0);
        assert!(d.dragging());
        assert_eq!(
            d.release(10.0, 10.0, 1000.0, 800.0, c),
            DragEnd::Dropped(Corner::TopLeft)
        );
        // An unknown viewport keeps the corner.
        assert_eq!(d.release(10.0, 10.0, 0.0, 0.0, c), DragEnd::Dropped(c));
        assert_eq!(d.pointer(), 7);
    }

    #[test]
    fn arrow_keys_move_corners() {
        assert_eq!(
            Corner::BottomRight.after_key("ArrowUp"),
            Some(Corner::TopRight)
        );
        assert_eq!(
            Corner::TopRight.after_key("ArrowLeft"),
            Some(Corner::TopLeft)
        );
        assert_eq!(
            Corner::TopLeft.after_key("ArrowDown"),
            Some(Corner::BottomLeft)
        );
        assert_eq!(
            Corner::BottomLeft.after_key("ArrowRight"),
            Some(Corner::BottomRight)
        );
        assert_eq!(Corner::TopLeft.after_key("ArrowUp"), Some(Corner::TopLeft));
        assert_eq!(Corner::TopLeft.after_key("Enter"), None);
    }

    #[test]
    fn corners_move_and_are_named() {
        for c in Corner::ALL {
            assert_eq!(Corner::from_name(c.name()), Some(c));
            assert_eq!(Corner::from_sides(c.top(), c.left()), c);
            assert_eq!(c.moved(0, 0), c);
        }
        assert_eq!(Corner::from_name("middle"), None);
        assert_eq!(Corner::from_name("top_left"), None);
        assert_eq!(Corner::TopLeft.snake_name(), "top_left");
        assert_eq!(
            Corner::nearest(990.0, 10.0, 1000.0, 800.0),
            Corner::TopRight
        );
        assert_eq!(
            Corner::nearest(10.0, 790.0, 1000.0, 800.0),
            Corner::BottomLeft
        );
        assert_eq!(
            Corner::nearest(600.0, 500.0, 1000.0, 800.0),
            Corner::BottomRight
        );
        assert_eq!(Corner::TopRight.moved(-1, 0), Corner::TopLeft);
        assert_eq!(Corner::TopLeft.moved(0, 1), Corner::BottomLeft);
        assert_eq!(Corner::BottomLeft.moved(1, -1), Corner::TopRight);
        assert_eq!(Corner::default(), Corner::BottomRight);
    }

    #[test]
    fn names_round_trip_and_are_distinct() {
        for (i, tool) in Tool::ALL.into_iter().enumerate() {
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            assert!(Tool::ALL[..i].iter().all(|t| t.name() != tool.name()));
        }
        for (i, kind) in ToolErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(ToolErrorKind::from_name(kind.name()), Some(kind));
            assert!(
                ToolErrorKind::ALL[..i]
                    .iter()
                    .all(|k| k.name() != kind.name())
            );
        }
        assert_eq!(Tool::from_name("Click_Element"), None);
        assert_eq!(ToolErrorKind::from_name(""), None);
    }
}
