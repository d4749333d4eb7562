//! One rule for user-supplied text that reaches a person: a scenario file, a model reply or a
//! runtime under test may hold bytes that drive a terminal (ESC sequences that clear the screen,
//! OSC 52 that writes the clipboard, BEL, a carriage return that overwrites a line) or reorder what
//! is shown (bidirectional controls). Every report that prints such text (the terminal, JUnit,
//! HTML pages, transcripts) escapes it with [`printable`], [`terminal`] or [`markup`], which share
//! [`is_unsafe`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must never reach a reader raw: every control character (C0, DEL, C1) and the
/// bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to
/// U+2069), which make a text display in another order than it reads.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

fn escape_where(s: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&escape) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if escape(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// `s` on one line with every unsafe character escaped as `\u{1b}` (newlines and tabs too): for
/// a name, a key or a value shown inside a line.
pub fn printable(s: &str) -> Cow<'_, str> {
    escape_where(s, is_unsafe)
}

/// `s` with every unsafe character escaped except newlines and tabs: for a whole message made of
/// lines (an error, a failure with its mismatches) on its way to a terminal.
pub fn terminal(s: &str) -> Cow<'_, str> {
    escape_where(s, |c| c != '\n' && c != '\t' && is_unsafe(c))
}

/// A JSON document (as serde_json writes it) with every unsafe character that serde_json leaves
/// raw (DEL, the C1 controls, the bidirectional controls) written as a `\uXXXX` escape: the same
/// JSON value, safe to print. Such characters only occur inside strings, where the escape is
/// valid.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) && !matches!(c, '\n' | '\t' | '\r') {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Text fit for an XML or HTML attribute or element: the five special characters escaped, and
/// every other unsafe character (except tab, newline and carriage return, which XML holds) written
/// as `\u{..}`, as are U+FFFE and U+FFFF, which XML 1.0 cannot hold at all.
pub fn markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if is_unsafe(c) || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ESC (a CSI clear and an OSC 52 clipboard write), BEL, CR, DEL, a C1 control and the bidi
    /// overrides.
    const HOSTILE: &str =
        "a\u{1b}[2J\u{1b}]52;c;aGk=\u{7}b\rc\u{7f}d\u{9b}e\u{202e}f\u{2066}g\u{200f}h\u{61c}";

    fn clean(s: &str) -> bool {
        !s.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t')
    }

    #[test]
    fn every_form_escapes_every_hostile_character() {
        assert!(clean(&printable(HOSTILE)));
        assert!(clean(&terminal(HOSTILE)));
        assert!(clean(&markup(HOSTILE)));
        assert_eq!(
            printable("x\u{1b}y\u{202e}z"),
            "x\\u{1b}y\\u{202e}z",
            "escaped as a readable code point"
        );
    }

    #[test]
    fn lines_survive_where_a_message_is_made_of_lines() {
        assert_eq!(terminal("a\nb\tc\rd"), "a\nb\tc\\u{d}d");
        assert_eq!(printable("a\nb"), "a\\u{a}b");
        assert_eq!(markup("<a\rb>\n"), "&lt;a\\u{d}b&gt;\n");
    }

    #[test]
    fn safe_text_is_borrowed_unchanged() {
        assert!(matches!(printable("plain → ünïcode"), Cow::Borrowed(_)));
        assert!(matches!(terminal("two\nlines"), Cow::Borrowed(_)));
    }
}
