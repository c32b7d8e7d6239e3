//! Streaming parser of the model's output: answer text, thinking, tool calls.
//!
//! Feed it text as the detokenizer produces it ([`OutputParser::push`]); it returns what became
//! certain. A chunk that ends inside a marker (`<|tool_`), a call or a channel header is held back,
//! never reported as an error: errors are reported only once the call region is over (at
//! `<tool_call|>`, at a marker that cannot be inside a call, or at [`OutputParser::finish`]). The
//! events do not depend on how the text was split into chunks.
//!
//! Recognised markers (decoded with special tokens kept):
//! - `<|tool_call>` ... `<tool_call|>`: a tool call, parsed by [`crate::syntax::parse_tool_call`].
//! - `<|channel>NAME\n` ... `<channel|>`: thinking (Gemma 4 writes `<|channel>thought\n`).
//! - `<turn|>`, `<|tool_response>`, `<eos>`, `<|turn>`: the end of the model's output (these are
//!   end ids; the session normally stops before feeding them, and the parser reports them when
//!   it does see them).
//!
//! Inside a tool call, `<tool_call|>` closes it; `<|tool_call>`, `<turn|>`, `<|tool_response>`,
//! `<eos>` and `<|turn>` end it without closing it (a [`ToolCallErrorKind::MissingCallEnd`] error,
//! or the structural error the unfinished call has, such as an unterminated string) and are then
//! handled as usual. Inside a channel, `<channel|>` closes it, end markers end it, and
//! `<|tool_call>` closes it and starts a call; any other text is thinking.

use crate::special::text::{
    CHANNEL_END, CHANNEL_START, EOS, TOOL_CALL_END, TOOL_CALL_START, TOOL_RESPONSE_START, TURN_END,
    TURN_START,
};
use crate::syntax::{
    ParsedToolCall, ToolCallError, ToolCallErrorKind, parse_tool_call, peek_call_name,
};

/// Default limit on the length of one tool call (bytes of the body).
pub const DEFAULT_MAX_CALL_LEN: usize = 64 * 1024;

/// Channel headers longer than this without a newline are treated as thinking text.
const MAX_CHANNEL_HEADER: usize = 64;

/// The end markers, as they end the model's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndMarker {
    /// `<turn|>`: the model finished its turn.
    TurnEnd,
    /// `<|tool_response>`: the model made its calls and waits for the results.
    ToolResponse,
    /// `<eos>`.
    Eos,
    /// `<|turn>`: the model started a new turn (it should have ended its own first).
    TurnStart,
}

impl EndMarker {
    /// The marker text.
    pub fn text(self) -> &'static str {
        match self {
            EndMarker::TurnEnd => TURN_END,
            EndMarker::ToolResponse => TOOL_RESPONSE_START,
            EndMarker::Eos => EOS,
            EndMarker::TurnStart => TURN_START,
        }
    }

    fn from_text(text: &str) -> Option<Self> {
        [
            EndMarker::TurnEnd,
            EndMarker::ToolResponse,
            EndMarker::Eos,
            EndMarker::TurnStart,
        ]
        .into_iter()
        .find(|m| m.text() == text)
    }
}

/// Something the model said.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    /// Answer text for the user.
    Text(String),
    /// Thinking text (inside `<|channel>...<channel|>`).
    Thinking(String),
    /// A tool call started and its name is known; the arguments are still streaming.
    ToolCallStart {
        /// Tool name.
        name: String,
    },
    /// A complete, well-formed tool call.
    ToolCall(ParsedToolCall),
    /// A malformed tool call (or a stray `<tool_call|>`).
    ToolCallError(ToolCallError),
    /// A closing marker with nothing to close, e.g. `<channel|>` outside a channel. Dropped from
    /// the text and reported here.
    StrayMarker(String),
    /// An end marker.
    End(EndMarker),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Text,
    ChannelHeader,
    Channel,
    Call {
        start_reported: bool,
    },
    /// After a call was reported too long: discard until it ends.
    SkipCall,
}

/// Streaming output parser. See the module documentation.
#[derive(Debug, Clone)]
pub struct OutputParser {
    state: State,
    buf: String,
    max_call_len: usize,
}

impl Default for OutputParser {
    fn default() -> Self {
        Self::new()
    }
}

const TEXT_MARKERS: &[&str] = &[
    TOOL_CALL_START,
    CHANNEL_START,
    TOOL_CALL_END,
    CHANNEL_END,
    TURN_END,
    TOOL_RESPONSE_START,
    EOS,
    TURN_START,
];
const CHANNEL_MARKERS: &[&str] = &[
    CHANNEL_END,
    TOOL_CALL_START,
    TURN_END,
    TOOL_RESPONSE_START,
    EOS,
    TURN_START,
];
const CALL_TERMINATORS: &[&str] = &[
    TOOL_CALL_END,
    TOOL_CALL_START,
    TURN_END,
    TOOL_RESPONSE_START,
    EOS,
    TURN_START,
];

/// Earliest occurrence of any marker: (position, marker).
fn find_marker(buf: &str, markers: &[&'static str]) -> Option<(usize, &'static str)> {
    buf.match_indices('<').find_map(|(i, _)| {
        markers
            .iter()
            .find(|m| buf[i..].starts_with(**m))
            .map(|m| (i, *m))
    })
}

/// Length of the text that can be released: everything except a suffix that may be the start of
/// a marker.
fn releasable(buf: &str, markers: &[&str]) -> usize {
    let longest = markers.iter().map(|m| m.len()).max().unwrap_or(0);
    let from = buf.len().saturating_sub(longest.saturating_sub(1));
    buf.match_indices('<')
        .map(|(i, _)| i)
        .filter(|&i| i >= from)
        .find(|&i| {
            markers
                .iter()
                .any(|m| m.len() > buf.len() - i && m.starts_with(&buf[i..]))
        })
        .unwrap_or(buf.len())
}

fn push_text(events: &mut Vec<OutputEvent>, text: &str, thinking: bool) {
    if text.is_empty() {
        return;
    }
    match (events.last_mut(), thinking) {
        (Some(OutputEvent::Text(t)), false) | (Some(OutputEvent::Thinking(t)), true) => {
            t.push_str(text)
        }
        _ => events.push(if thinking {
            OutputEvent::Thinking(text.to_owned())
        } else {
            OutputEvent::Text(text.to_owned())
        }),
    }
}

impl OutputParser {
    /// A parser with the default call-length limit.
    pub fn new() -> Self {
        Self::with_max_call_len(DEFAULT_MAX_CALL_LEN)
    }

    /// A parser that reports calls longer than `max_call_len` bytes as
    /// [`ToolCallErrorKind::TooLong`].
    pub fn with_max_call_len(max_call_len: usize) -> Self {
        Self {
            state: State::Text,
            buf: String::new(),
            max_call_len,
        }
    }

    /// Whether the parser is inside a tool call (the session may want to keep generating past
    /// an end id only in this state — normally it does not).
    pub fn in_tool_call(&self) -> bool {
        matches!(self.state, State::Call { .. } | State::SkipCall)
    }

    /// Whether the parser is inside a thinking channel.
    pub fn in_thinking(&self) -> bool {
        matches!(self.state, State::Channel | State::ChannelHeader)
    }

    /// Feeds the next piece of output text and returns the events that became certain.
    pub fn push(&mut self, text: &str) -> Vec<OutputEvent> {
        self.buf.push_str(text);
        let mut events = Vec::new();
        self.run(&mut events, false);
        events
    }

    /// Ends the output: releases held-back text and reports an unfinished call. The parser is
    /// then ready for a new output.
    pub fn finish(&mut self) -> Vec<OutputEvent> {
        let mut events = Vec::new();
        self.run(&mut events, true);
        events
    }

    fn run(&mut self, events: &mut Vec<OutputEvent>, at_end: bool) {
        loop {
            let progressed = match self.state {
                State::Text => self.step_text(events, at_end),
                State::ChannelHeader => self.step_header(at_end),
                State::Channel => self.step_channel(events, at_end),
                State::Call { start_reported } => self.step_call(events, start_reported, at_end),
                State::SkipCall => self.step_skip(at_end),
            };
            if !progressed {
                break;
            }
        }
        if at_end {
            self.buf.clear();
            self.state = State::Text;
        }
    }

    /// Consumes `n` bytes of the buffer.
    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
    }

    fn step_text(&mut self, events: &mut Vec<OutputEvent>, at_end: bool) -> bool {
        let Some((i, marker)) = find_marker(&self.buf, TEXT_MARKERS) else {
            let n = if at_end {
                self.buf.len()
            } else {
                releasable(&self.buf, TEXT_MARKERS)
            };
            push_text(events, &self.buf[..n], false);
            self.consume(n);
            return false;
        };
        push_text(events, &self.buf[..i], false);
        self.consume(i + marker.len());
        match marker {
            TOOL_CALL_START => {
                self.state = State::Call {
                    start_reported: false,
                }
            }
            CHANNEL_START => self.state = State::ChannelHeader,
            TOOL_CALL_END => events.push(OutputEvent::ToolCallError(ToolCallError::new(
                ToolCallErrorKind::StrayCallEnd,
                0,
                TOOL_CALL_END.to_owned(),
            ))),
            CHANNEL_END => events.push(OutputEvent::StrayMarker(CHANNEL_END.to_owned())),
            other => {
                if let Some(end) = EndMarker::from_text(other) {
                    events.push(OutputEvent::End(end));
                }
            }
        }
        true
    }

    fn step_header(&mut self, at_end: bool) -> bool {
        // The header is the text up to the first newline or marker, if that comes within
        // MAX_CHANNEL_HEADER bytes; otherwise there is no header. Deciding on a fixed window keeps
        // the result independent of how the text arrives.
        let newline = self.buf.find('\n');
        let marker = find_marker(&self.buf, CHANNEL_MARKERS).map(|(i, _)| i);
        let first = match (newline, marker) {
            (Some(n), Some(m)) => Some(n.min(m)),
            (n, m) => n.or(m),
        };
        match first {
            Some(i) if i < MAX_CHANNEL_HEADER => {
                // `<|channel>thought\n`: drop the header line. A marker first
                // (`<|channel>thought<channel|>`): drop the name, handle the marker as thinking
                // state does.
                let consumed = if newline == Some(i) { i + 1 } else { i };
                self.consume(consumed);
                self.state = State::Channel;
                true
            }
            _ => {
                let longest = CHANNEL_MARKERS.iter().map(|m| m.len()).max().unwrap_or(0);
                if at_end || self.buf.len() >= MAX_CHANNEL_HEADER + longest {
                    // No header line: everything is thinking.
                    self.state = State::Channel;
                    true
                } else {
                    false
                }
            }
        }
    }

    fn step_channel(&mut self, events: &mut Vec<OutputEvent>, at_end: bool) -> bool {
        let Some((i, marker)) = find_marker(&self.buf, CHANNEL_MARKERS) else {
            let n = if at_end {
                self.buf.len()
            } else {
                releasable(&self.buf, CHANNEL_MARKERS)
            };
            push_text(events, &self.buf[..n], true);
            self.consume(n);
            return false;
        };
        push_text(events, &self.buf[..i], true);
        if marker == CHANNEL_END {
            self.consume(i + marker.len());
        } else {
            // End markers and `<|tool_call>` leave the channel and are handled as text markers.
            self.consume(i);
        }
        self.state = State::Text;
        true
    }

    fn step_call(
        &mut self,
        events: &mut Vec<OutputEvent>,
        start_reported: bool,
        at_end: bool,
    ) -> bool {
        let terminator = find_marker(&self.buf, CALL_TERMINATORS);
        let body_len = match terminator {
            Some((i, _)) => i,
            None if at_end => self.buf.len(),
            None => {
                // Still streaming. Report the name once it is known, and give up on calls that
                // are certainly too long (a held partial terminator cannot make the body shorter
                // than this).
                let longest = CALL_TERMINATORS.iter().map(|m| m.len()).max().unwrap_or(0);
                if self.buf.len().saturating_sub(longest - 1) > self.max_call_len {
                    self.report_start(events, start_reported);
                    events.push(OutputEvent::ToolCallError(self.too_long_error()));
                    // Keep what may be the start of a terminator.
                    let n = releasable(&self.buf, CALL_TERMINATORS);
                    self.consume(n);
                    self.state = State::SkipCall;
                    return true;
                }
                if !start_reported && self.report_start(events, false) {
                    self.state = State::Call {
                        start_reported: true,
                    };
                }
                return false;
            }
        };
        self.report_start(events, start_reported);
        let body = &self.buf[..body_len];
        let closed = matches!(terminator, Some((_, TOOL_CALL_END)));
        let raw = || {
            let mut raw = format!("{TOOL_CALL_START}{body}");
            if closed {
                raw.push_str(TOOL_CALL_END);
            }
            raw
        };
        let event = if body.len() > self.max_call_len {
            OutputEvent::ToolCallError(self.too_long_error())
        } else {
            match parse_tool_call(body, raw) {
                Ok(call) if closed => OutputEvent::ToolCall(call),
                Ok(_) => {
                    let found = terminator.map(|(_, m)| m.to_owned());
                    OutputEvent::ToolCallError(ToolCallError::new(
                        ToolCallErrorKind::MissingCallEnd { found },
                        body.len(),
                        raw(),
                    ))
                }
                Err(err) => OutputEvent::ToolCallError(err),
            }
        };
        events.push(event);
        // `<tool_call|>` belongs to the call; any other terminator is handled as text.
        let consumed = body_len + if closed { TOOL_CALL_END.len() } else { 0 };
        self.consume(consumed);
        self.state = State::Text;
        true
    }

    /// The error for a call body longer than the limit; quotes the first `max_call_len` bytes of
    /// the body, which are known however the text was chunked.
    fn too_long_error(&self) -> ToolCallError {
        let mut end = self.max_call_len.min(self.buf.len());
        while !self.buf.is_char_boundary(end) {
            end -= 1;
        }
        ToolCallError::new(
            ToolCallErrorKind::TooLong {
                limit: self.max_call_len,
            },
            self.max_call_len,
            format!("{TOOL_CALL_START}{}", &self.buf[..end]),
        )
    }

    /// Emits `ToolCallStart` if the name is known and it was not reported yet. Returns whether the
    /// name is known.
    fn report_start(&self, events: &mut Vec<OutputEvent>, already: bool) -> bool {
        match peek_call_name(&self.buf) {
            Some(name) => {
                if !already {
                    events.push(OutputEvent::ToolCallStart {
                        name: name.to_owned(),
                    });
                }
                true
            }
            None => false,
        }
    }

    fn step_skip(&mut self, at_end: bool) -> bool {
        match find_marker(&self.buf, CALL_TERMINATORS) {
            Some((i, marker)) => {
                let consumed = i + if marker == TOOL_CALL_END {
                    marker.len()
                } else {
                    0
                };
                self.consume(consumed);
                self.state = State::Text;
                true
            }
            None => {
                if !at_end {
                    // Keep only what may be the start of a terminator.
                    let n = releasable(&self.buf, CALL_TERMINATORS);
                    self.consume(n);
                }
                false
            }
        }
    }
}
