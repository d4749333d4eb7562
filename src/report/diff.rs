//! A failed expectation for a person at a terminal: expected and actual one above the other, the
//! part where they differ marked in color (expected in red, actual in green), plain text when
//! color is off (not a terminal, or `NO_COLOR` set: <https://no-color.org>).

use std::fmt::Write as _;

use super::escape::{printable, terminal};
use crate::scenario::Failure;

const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// Whether to color output written to a stream that `is_terminal` says is (or is not) a
/// terminal: only on a terminal, and never with `NO_COLOR` set to anything but the empty string.
pub fn color_wanted(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `a` and `b` split into (common prefix, differing middle, common suffix) lengths in bytes, at
/// character boundaries.
fn spans(a: &str, b: &str) -> (usize, usize) {
    let prefix = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i);
    let prefix = {
        // Both strings agree up to `prefix`, which is a boundary in `a`; it is one in `b` too.
        let mut p = prefix.min(b.len());
        while !b.is_char_boundary(p) {
            p -= 1;
        }
        p
    };
    let (ra, rb) = (&a[prefix..], &b[prefix..]);
    let suffix = ra
        .chars()
        .rev()
        .zip(rb.chars().rev())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x.len_utf8())
        .sum::<usize>();
    (prefix, suffix.min(ra.len()).min(rb.len()))
}

fn marked(text: &str, prefix: usize, suffix: usize, color: &str) -> String {
    let end = text.len() - suffix;
    format!(
        "{}{color}{BOLD}{}{RESET}{}",
        &text[..prefix],
        &text[prefix..end],
        &text[end..]
    )
}

/// The failure as text, with what the scenario and the run wrote escaped
/// ([`super::escape::terminal`]); with `color`, each mismatch's differing part marked.
pub fn failure_text(failure: &Failure, color: bool) -> String {
    let Failure::Expectation {
        step,
        line,
        column,
        mismatches,
    } = failure
    else {
        return terminal(&failure.to_string()).into_owned();
    };
    if !color {
        return terminal(&failure.to_string()).into_owned();
    }
    let mut out = format!("step {step} (line {line}, column {column}): expectation failed");
    for m in mismatches {
        let (expected, actual) = (printable(&m.expected), printable(&m.actual));
        let (prefix, suffix) = spans(&expected, &actual);
        let _ = write!(
            out,
            "\n    {}:\n      expected: {}\n      actual:   {}",
            printable(&m.what),
            marked(&expected, prefix, suffix, RED),
            marked(&actual, prefix, suffix, GREEN)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::expect::Mismatch;

    fn failure() -> Failure {
        Failure::Expectation {
            step: 2,
            line: 6,
            column: 5,
            mismatches: vec![Mismatch {
                what: "sent".into(),
                expected: "[\"goodbye, Zoë\"]".into(),
                actual: "[\"hello, Zoë\"]".into(),
            }],
        }
    }

    #[test]
    fn plain_text_is_the_failure_itself() {
        assert_eq!(failure_text(&failure(), false), failure().to_string());
    }

    #[test]
    fn color_marks_only_the_differing_part() {
        let text = failure_text(&failure(), true);
        assert!(
            text.contains("expected: [\"\x1b[31m\x1b[1mgoodbye\x1b[0m, Zoë\"]"),
            "{text:?}"
        );
        assert!(
            text.contains("actual:   [\"\x1b[32m\x1b[1mhello\x1b[0m, Zoë\"]"),
            "{text:?}"
        );
        // Without its escapes, the colored text is the plain one.
        let plain: String = text
            .replace(RED, "")
            .replace(GREEN, "")
            .replace(BOLD, "")
            .replace(RESET, "");
        assert_eq!(plain, failure().to_string());
    }

    #[test]
    fn spans_cut_at_character_boundaries() {
        assert_eq!(spans("abc", "abc"), (3, 0));
        assert_eq!(spans("aéz", "aèz"), (1, 1));
        assert_eq!(spans("", "x"), (0, 0));
        assert_eq!(spans("ab", "abab"), (2, 0));
        let (p, s) = spans("x€y", "x€€y");
        assert!("x€y".is_char_boundary(p) && "x€€y".is_char_boundary("x€€y".len() - s));
    }
}
