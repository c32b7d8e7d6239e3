//! Pure text helpers: whitespace, quoting, pagination and the snapshot's budget fitting.
//! No DOM here, so all of it is tested natively.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// Appends `text` to `out` with every run of whitespace collapsed to one space, the way a browser
/// renders `white-space: normal` text. A space is not added after `out`'s own trailing
/// whitespace.
pub fn push_collapsed(out: &mut String, text: &str) {
    let mut space = out.is_empty() || out.ends_with(char::is_whitespace);
    for c in text.chars() {
        if c.is_whitespace() {
            if !space {
                out.push(' ');
                space = true;
            }
        } else {
            out.push(c);
            space = false;
        }
    }
}

/// One line of text: whitespace collapsed and trimmed.
pub fn one_line(text: &str) -> String {
    let mut out = String::new();
    push_collapsed(&mut out, text);
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out
}

/// `text` cut to at most `max` characters, with `…` when something was cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => String::from(text),
        Some(_) => {
            let cut = text
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(text.len(), |(i, _)| i);
            let mut out = String::from(text[..cut].trim_end());
            out.push('…');
            out
        }
    }
}

/// `text` in double quotes, with quotes and backslashes escaped (for the snapshot outline).
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Tidies text gathered from the page: spaces around line breaks go, lines of only spaces go,
/// and at most one empty line separates blocks. Leading and trailing blank lines go. (The
/// all-at-once form, the oracle of [`Tidier`]'s tests.)
#[cfg(test)]
pub fn tidy(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut blank_run = 0usize;
    for line in raw.split('\n') {
        let line = line.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
            if blank_run > 1 {
                out.push('\n');
            }
        }
        blank_run = 0;
        out.push_str(line);
    }
    out
}

/// [`tidy`] done piece by piece, for text gathered in slices: [`Tidier::feed`] takes the
/// complete lines of what it is given (keeping the unfinished last line for later), and
/// [`Tidier::finish`] the rest.
#[derive(Default)]
pub struct Tidier {
    out: String,
    tail: String,
    blank_run: usize,
}

impl Tidier {
    /// Moves the complete lines of `raw` into the tidied text; `raw` keeps its last, unfinished
    /// line.
    pub fn feed(&mut self, raw: &mut String) {
        let Some(cut) = raw.rfind('\n') else {
            return;
        };
        self.tail.push_str(&raw[..cut]);
        raw.replace_range(..=cut, "");
        let lines = core::mem::take(&mut self.tail);
        for line in lines.split('\n') {
            self.line(line);
        }
        // The last piece before the cut ended a line too: the next line starts fresh.
    }

    fn line(&mut self, line: &str) {
        let line = line.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\r');
        if line.is_empty() {
            self.blank_run += 1;
            return;
        }
        if !self.out.is_empty() {
            self.out.push('\n');
            if self.blank_run > 1 {
                self.out.push('\n');
            }
        }
        self.blank_run = 0;
        self.out.push_str(line);
    }

    /// Bytes of tidied text so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// The tidied text, with `rest` (the unfinished last line) added.
    pub fn finish(mut self, rest: &str) -> String {
        for line in rest.split('\n') {
            self.line(line);
        }
        self.out
    }
}

/// One page of a longer text.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    /// The characters of this page.
    pub content: String,
    /// Characters in the page.
    pub returned: usize,
    /// Characters in the whole text.
    pub total: usize,
    /// Characters after this page.
    pub remaining: usize,
}

/// The page of `text` that starts at character `offset` and holds at most `max` characters.
/// When the cut would split a word and a break (space or line break) lies in the last sixth of
/// the page, the page ends after that break instead, so words are not cut in two. Offsets count
/// Unicode scalar values, and `offset + returned` is always where the next page starts.
pub fn paginate(text: &str, offset: usize, max: usize) -> Page {
    let total = text.chars().count();
    let start = offset.min(total);
    let max = max.max(1);
    let mut end = start.saturating_add(max).min(total);
    let chars: Vec<char> = text[byte_of_char(text, start)..]
        .chars()
        .take(end - start + 1)
        .collect();
    let page_len = end - start;
    if end < total && page_len > 0 {
        let next = chars.get(page_len).copied().unwrap_or(' ');
        let last = chars[page_len - 1];
        if !next.is_whitespace() && !last.is_whitespace() {
            let floor = page_len - page_len / 6;
            if let Some(i) = (floor..page_len)
                .rev()
                .find(|&i| chars[i - 1].is_whitespace())
            {
                end = start + i;
            }
        }
    }
    let content: String = chars[..end - start].iter().collect();
    Page {
        content,
        returned: end - start,
        total,
        remaining: total - end,
    }
}

/// The byte index of character `n` of `text` (its length past the end). Not `chars().skip(n)`:
/// in the content script that decodes every character before the page, 40 ms for the last page
/// of a 3.5-million-character text; this counts the bytes that start a character instead.
fn byte_of_char(text: &str, n: usize) -> usize {
    if text.is_ascii() {
        return n.min(text.len());
    }
    let mut seen = 0usize;
    for (i, b) in text.bytes().enumerate() {
        if b & 0xC0 != 0x80 {
            if seen == n {
                return i;
            }
            seen += 1;
        }
    }
    text.len()
}

/// One candidate line of the snapshot outline, for [`fit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The enclosing structural line (landmark or frame), if any.
    pub parent: Option<usize>,
    /// Its size (characters, including indentation and line break).
    pub cost: usize,
    /// It is inside the viewport: kept before anything out of view.
    pub in_view: bool,
    /// A landmark or frame: shown only when something inside it is shown.
    pub structural: bool,
}

/// Chooses the lines that fit in `budget` characters: first the lines in view, then the others,
/// each in document order, skipping lines that do not fit (a smaller one later may). A kept
/// line brings its structural ancestors with it (their cost counts). Returns which are kept.
pub fn fit(lines: &[Candidate], budget: usize) -> Vec<bool> {
    let mut kept = vec![false; lines.len()];
    let mut used = 0usize;
    for pass_in_view_only in [true, false] {
        for i in 0..lines.len() {
            let line = &lines[i];
            if kept[i] || line.structural || (pass_in_view_only && !line.in_view) {
                continue;
            }
            let mut cost = line.cost;
            let mut ancestor = line.parent;
            while let Some(a) = ancestor {
                if a >= i || kept[a] {
                    break;
                }
                cost += lines[a].cost;
                ancestor = lines[a].parent;
            }
            if used + cost > budget {
                continue;
            }
            used += cost;
            kept[i] = true;
            let mut ancestor = line.parent;
            while let Some(a) = ancestor {
                if a >= i || kept[a] {
                    break;
                }
                kept[a] = true;
                ancestor = lines[a].parent;
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_collapses_and_tidies() {
        let mut out = String::new();
        push_collapsed(&mut out, "  Hello \n\t world  ");
        assert_eq!(out, "Hello world ");
        push_collapsed(&mut out, " again");
        assert_eq!(out, "Hello world again");
        assert_eq!(one_line("  a \n b  "), "a b");
        assert_eq!(
            tidy("\n\n  Title \n\n\n\n Body  text\nnext \n\n"),
            "Title\n\nBody  text\nnext"
        );
        assert_eq!(tidy("a\n \nb"), "a\nb");
    }

    #[test]
    fn tidying_in_pieces_equals_tidying_at_once() {
        let raw = "\n\n  Title \n\n\n\n Body  text\nnext \n\n- a\n\t\n- b\r\nend  ";
        for step in 1..raw.len() {
            let mut t = Tidier::default();
            let mut pending = String::new();
            for chunk in raw.as_bytes().chunks(step) {
                pending.push_str(core::str::from_utf8(chunk).unwrap());
                t.feed(&mut pending);
            }
            assert_eq!(t.finish(&pending), tidy(raw), "pieces of {step}");
        }
        assert_eq!(Tidier::default().finish(""), "");
    }

    #[test]
    fn clip_and_quote() {
        assert_eq!(clip("hello", 5), "hello");
        assert_eq!(clip("hello world", 6), "hello…");
        assert_eq!(clip("héllo wörld", 3), "hé…");
        assert_eq!(quoted("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"");
    }

    #[test]
    fn pages_cover_the_text_exactly_once() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let mut offset = 0;
        let mut joined = String::new();
        let mut pages = 0;
        loop {
            let page = paginate(&text, offset, 37);
            assert!(page.returned <= 37 && page.returned > 0);
            assert_eq!(page.total, text.chars().count());
            assert_eq!(page.remaining, page.total - offset - page.returned);
            joined.push_str(&page.content);
            offset += page.returned;
            pages += 1;
            if page.remaining == 0 {
                break;
            }
        }
        assert_eq!(joined, text);
        assert!(pages > 20);
    }

    #[test]
    fn pages_prefer_word_breaks_and_count_characters() {
        let page = paginate("aaaa bbbbbb cccccc", 0, 14);
        assert_eq!(page.content, "aaaa bbbbbb ");
        assert_eq!(page.remaining, 6);
        // No break near the end: cut exactly.
        let page = paginate("abcdefghijklmnop", 0, 5);
        assert_eq!(page.content, "abcde");
        // Multi-byte characters count once.
        let page = paginate("ééééé", 1, 2);
        assert_eq!(
            (page.content.as_str(), page.returned, page.remaining),
            ("éé", 2, 2)
        );
        // Past the end.
        for (i, (at, _)) in "aé€😀b".char_indices().enumerate() {
            assert_eq!(byte_of_char("aé€😀b", i), at);
        }
        assert_eq!(byte_of_char("aé", 2), 3);
        assert_eq!(byte_of_char("ab", 9), 2);
        let page = paginate("abc", 10, 5);
        assert_eq!((page.returned, page.total, page.remaining), (0, 3, 0));
        assert_eq!(paginate("", 0, 10).total, 0);
    }

    fn line(parent: Option<usize>, cost: usize, in_view: bool, structural: bool) -> Candidate {
        Candidate {
            parent,
            cost,
            in_view,
            structural,
        }
    }

    #[test]
    fn fit_keeps_everything_when_it_fits() {
        let lines = [
            line(None, 5, true, true),
            line(Some(0), 10, true, false),
            line(Some(0), 10, false, false),
        ];
        assert_eq!(fit(&lines, 25), vec![true, true, true]);
    }

    #[test]
    fn fit_prefers_lines_in_view_and_brings_their_landmarks() {
        let lines = [
            line(None, 5, false, true),      // 0 banner
            line(Some(0), 10, false, false), // 1 link, out of view
            line(None, 5, true, true),       // 2 main
            line(Some(2), 10, true, false),  // 3 in view
            line(Some(2), 10, true, false),  // 4 in view
            line(None, 3, false, false),     // 5 small, out of view
        ];
        let kept = fit(&lines, 27);
        assert_eq!(kept, vec![false, false, true, true, true, false]);
        let kept = fit(&lines, 28);
        assert_eq!(kept, vec![false, false, true, true, true, true]);
        assert_eq!(fit(&lines, 43), vec![true; 6]);
        // An empty landmark is never kept on its own.
        assert_eq!(fit(&[line(None, 1, true, true)], 100), vec![false]);
        // Nothing fits.
        assert_eq!(fit(&lines, 2), vec![false; 6]);
    }
}
