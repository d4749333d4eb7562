//! The SVG timeline of a run: a lane per conversation with its stack depth over the order of
//! events, a row of markers per kind of event, and the violation as a red cross.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::drive::Note;
use crate::protocol::Event;
use crate::report::check::markup;
use crate::sim::{Entry, Record};

use super::clip;

/// The SVG timeline: a lane per conversation with its stack depth as a step line, and under it a
/// row of markers per kind of event (user, model calls, tool calls, pushes and pops, faults). The
/// x axis is the order of events, so that what happens within one millisecond stays readable;
/// the virtual time is marked along it wherever it moves on. The violation, if any, is a red
/// cross where the run stopped.
pub(super) fn timeline(records: &[Record], broken: Option<&str>) -> String {
    const ROWS: [&str; 5] = ["user", "llm", "tool", "stack", "fault"];
    let mut keys: Vec<Arc<str>> = Vec::new();
    // (order, time, key, depth after it if it pushed or popped, marker row, title)
    type Point = (usize, u64, Arc<str>, Option<usize>, usize, String);
    let mut points: Vec<Point> = Vec::new();
    let mut last_key: Option<Arc<str>> = None;
    for r in records {
        let (key, depth, row, title) = match &r.entry {
            Entry::Runtime(e) => {
                let (key, depth, row) = match e {
                    Event::Push { key, depth, .. } | Event::Pop { key, depth, .. } => {
                        (key, Some(*depth), 3)
                    }
                    Event::LlmRequest { key, .. } => (key, None, 1),
                    Event::LlmError { key, .. } => (key, None, 4),
                    Event::ToolCall { key, .. } => (key, None, 2),
                    Event::Sent { key, .. } | Event::UserMessage { key, .. } => (key, None, 0),
                    _ => continue,
                };
                (
                    key.clone(),
                    depth,
                    row,
                    crate::report::transcript::line(&r.entry),
                )
            }
            Entry::Sim(Note::Fault { what }) => match &last_key {
                Some(key) => (key.clone(), None, 4, format!("fault injected: {what}")),
                None => continue,
            },
            Entry::Sim(_) => continue,
        };
        if !keys.contains(&key) {
            keys.push(key.clone());
        }
        last_key = Some(key.clone());
        points.push((points.len(), r.t_ms, key, depth, row, title));
    }
    if keys.is_empty() {
        keys.push("default".into());
    }
    let n = points.len().max(2) - 1;
    let max_depth = points.iter().filter_map(|p| p.3).max().unwrap_or(1).max(1);
    let (left, width) = (120.0, 760.0);
    let depth_h = 16.0 * max_depth as f64;
    let lane = 20.0 + depth_h + 10.0 * ROWS.len() as f64 + 16.0;
    let height = 44.0 + lane * keys.len() as f64;
    let x = |j: usize| left + width * j as f64 / n as f64;
    let total = left + width + 20.0;
    let mut svg = format!(
        "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{total}\" height=\"{height}\" viewBox=\"0 0 {total} {height}\" role=\"img\" aria-label=\"stack depth over virtual time\">\n"
    );
    let end_ms = records.iter().map(|r| r.t_ms).max().unwrap_or(0);
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"12\" class=\"axis\">virtual time, 0 to {end_ms} ms (marked where it moves on), events in order</text>"
    );
    // Time ticks where the time moves on, labels at least 44 px apart.
    let mut last_label = f64::NEG_INFINITY;
    let mut last_t = None;
    for p in &points {
        if last_t == Some(p.1) {
            continue;
        }
        last_t = Some(p.1);
        let px = x(p.0);
        let _ = writeln!(
            svg,
            "<line class=\"tick\" x1=\"{px:.1}\" y1=\"26\" x2=\"{px:.1}\" y2=\"{:.1}\"/>",
            height - 8.0
        );
        if px - last_label >= 44.0 {
            last_label = px;
            let _ = writeln!(
                svg,
                "<text class=\"time\" x=\"{px:.1}\" y=\"24\" text-anchor=\"middle\">{}ms</text>",
                p.1
            );
        }
    }
    for (k, key) in keys.iter().enumerate() {
        let top = 36.0 + lane * k as f64;
        let base = top + 10.0 + depth_h;
        let y = |d: usize| base - 16.0 * d as f64;
        let _ = writeln!(
            svg,
            "<g class=\"lane\" data-key=\"{}\"><text x=\"4\" y=\"{:.1}\" class=\"key\">{}</text><line x1=\"{left}\" y1=\"{base:.1}\" x2=\"{:.1}\" y2=\"{base:.1}\" class=\"base\"/>",
            markup(key),
            base,
            markup(&clip(key)),
            left + width
        );
        let mut line = format!("{left},{base:.1}");
        let mut current = 0usize;
        for p in points.iter().filter(|p| &p.2 == key) {
            if let Some(d) = p.3 {
                let px = x(p.0);
                let _ = write!(line, " {px:.1},{:.1} {px:.1},{:.1}", y(current), y(d));
                current = d;
            }
        }
        let _ = write!(line, " {:.1},{:.1}", left + width, y(current));
        let _ = writeln!(svg, "<polyline class=\"depth\" points=\"{line}\"/>");
        for (r, name) in ROWS.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"row\" text-anchor=\"end\">{name}</text>",
                left - 6.0,
                base + 14.0 + 10.0 * r as f64
            );
        }
        for p in points.iter().filter(|p| &p.2 == key) {
            let kind = if p.4 == 3 {
                if p.3.is_some_and(|d| d > 0) && p.5.starts_with("push") {
                    "push"
                } else {
                    "pop"
                }
            } else {
                ROWS[p.4]
            };
            let _ = writeln!(
                svg,
                "<circle class=\"mark {kind}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"><title>[{}ms] {}</title></circle>",
                x(p.0),
                base + 11.0 + 10.0 * p.4 as f64,
                p.1,
                markup(&p.5)
            );
        }
        let _ = svg.write_str("</g>\n");
    }
    if let Some(message) = broken {
        let px = x(n);
        let py = 36.0 + 10.0;
        let _ = writeln!(
            svg,
            "<g class=\"violation\"><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><title>{}</title></g>",
            px - 8.0,
            py - 8.0,
            px + 8.0,
            py + 8.0,
            px - 8.0,
            py + 8.0,
            px + 8.0,
            py - 8.0,
            markup(message)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html;
    use crate::report::html::tests::{outcome, NESTED};

    #[test]
    fn every_event_has_its_marker_in_its_row() {
        let o = outcome(NESTED);
        let page = html::page(&o);
        let marks = page.matches("<circle class=\"mark ").count();
        let expected = o
            .records
            .iter()
            .filter(|r| {
                matches!(
                    r.entry,
                    Entry::Runtime(
                        Event::Push { .. }
                            | Event::Pop { .. }
                            | Event::LlmRequest { .. }
                            | Event::LlmError { .. }
                            | Event::ToolCall { .. }
                            | Event::Sent { .. }
                            | Event::UserMessage { .. }
                    )
                )
            })
            .count();
        assert_eq!(marks, expected);
        assert_eq!(page.matches("<circle class=\"mark push\"").count(), 2);
        assert_eq!(page.matches("<circle class=\"mark pop\"").count(), 2);
    }
}
