//! Loading: read a scenario file within the YAML reader's limits (size, depth, aliases, one
//! document, no NUL), parse it, and hand it to the builder (`build.rs`), which checks what the
//! parser cannot (an agent's kind, a reply with two behaviours, a step with no action); every
//! error is located at a line and column.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use serde_saphyr::Spanned;

pub use super::build::known_invariants;
use super::build::Builder;
use super::error::clamp;
pub use super::error::ScenarioError;
use super::format::*;
use super::free::{Collector, Place};
use super::Scenario;

/// The largest scenario file read, in bytes. A scenario within the documented limits (100,000
/// steps) is far smaller; anything larger is refused before it is read, never read without bound.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Reads and validates a scenario file (YAML, or JSON, which YAML includes). Only a regular file
/// is read (a pipe, a device or a directory is refused before it is opened, so nothing blocks or
/// grows without bound), and only up to [`MAX_FILE_BYTES`].
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let unreadable = |message: String| ScenarioError {
        path: path.to_owned(),
        line: 0,
        column: 0,
        message,
    };
    let meta =
        std::fs::metadata(path).map_err(|e| unreadable(format!("cannot read the file: {e}")))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a pipe, a socket or a device)"
        };
        return Err(unreadable(format!(
            "cannot read the file: it is {what}; a scenario is a regular file"
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "the file has {} bytes, more than the {} a scenario file may have",
            meta.len(),
            MAX_FILE_BYTES
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    let file =
        std::fs::File::open(path).map_err(|e| unreadable(format!("cannot read the file: {e}")))?;
    // The file may grow between the two looks: read one byte past the cap to tell.
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_FILE_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| unreadable(format!("cannot read the file: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "the file grew past the {MAX_FILE_BYTES} bytes a scenario file may have while it was read"
        )));
    }
    parse_bytes(&bytes, path)
}

/// Parses and validates a scenario file's bytes: [`parse`] after a located UTF-8 check.
pub fn parse_bytes(bytes: &[u8], path: &Path) -> Result<Scenario, ScenarioError> {
    let src = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = position(&bytes[..e.valid_up_to()]);
        ScenarioError {
            path: path.to_owned(),
            line,
            column,
            message: "the file is not valid UTF-8 here; scenario files are UTF-8 text".into(),
        }
    })?;
    parse(src, path)
}

/// The 1-based line and column just after `before`.
fn position(before: &[u8]) -> (u32, u32) {
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    (clamp(line as u64), clamp(column as u64))
}

/// Parses and validates scenario text; `path` is used in errors and reports.
pub fn parse(src: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    // The parser stops at a NUL byte as if the file ended there: every step after it would be
    // silently dropped. Scenario files are text; a NUL is an error where it stands.
    if let Some(at) = src.find('\0') {
        let (line, column) = position(&src.as_bytes()[..at]);
        return Err(ScenarioError {
            path: path.to_owned(),
            line,
            column,
            message:
                "a NUL byte (U+0000): scenario files are text, and nothing after it would be read"
                    .into(),
        });
    }
    let file: ScenarioFile =
        serde_saphyr::from_str_with_options(src, yaml_options()).map_err(|e| {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            ScenarioError {
                path: path.to_owned(),
                line: clamp(line),
                column: clamp(column),
                message: plain_message(&e),
            }
        })?;
    let wanted = free_places(&file);
    let mut collector = Collector::new(&wanted);
    single_document(src, path, &mut collector)?;
    let free = collector.nodes;
    Builder { path, free: &free }.scenario(file)
}

/// Where the free-form values start (see [`free`](super::free)).
fn free_places(file: &ScenarioFile) -> BTreeSet<Place> {
    let mut places = BTreeSet::new();
    let mut add = |v: &Option<Spanned<Value>>| {
        if let Some(v) = v {
            places.insert((v.referenced.line(), v.referenced.column()));
        }
    };
    for replies in file.llm.values() {
        for entry in &replies.value {
            let ReplyEntry::Full(r) = &entry.value else {
                continue;
            };
            add(&r.use_skill);
            add(&r.use_agent);
            add(&r.ask_user);
            if let Some(uses) = &r.tool_use {
                let uses: &[ToolUseSpec] = match uses {
                    OneOrMany::One(u) => std::slice::from_ref(u),
                    OneOrMany::Many(v) => v,
                };
                for u in uses {
                    add(&u.input);
                }
            }
            for chunk in r.chunks.iter().flatten() {
                if let ChunkSpec::Full(full) = chunk {
                    if let Some(u) = &full.tool_use {
                        add(&u.input);
                    }
                }
            }
        }
    }
    for step in &file.steps {
        if let Some(t) = &step.value.trigger {
            add(&t.payload);
        }
    }
    places
}

/// The deserializer reads the first document and stops: whatever follows it (a second JSON object,
/// text after a flow mapping) would be silently ignored. A scenario file holds exactly one
/// document; anything after it is an error where it starts.
/// The same walk hands every event to `free`, which keeps the free-form values as written.
fn single_document(src: &str, path: &Path, free: &mut Collector) -> Result<(), ScenarioError> {
    use serde_saphyr::granit_parser::{Event, Parser};
    let at = |line: usize, col: usize, message: String| ScenarioError {
        path: path.to_owned(),
        line: clamp(line as u64),
        column: clamp(col as u64 + 1),
        message,
    };
    let mut documents = 0;
    let collect = !free.idle();
    for event in Parser::new_from_str(src) {
        if collect {
            if let Ok((event, span)) = &event {
                let at = (span.start.line() as u64, span.start.col() as u64 + 1);
                free.event(event, at);
            }
        }
        match event {
            Ok((Event::DocumentStart(..), span)) => {
                documents += 1;
                if documents > 1 {
                    return Err(at(
                        span.start.line(),
                        span.start.col(),
                        "a second document starts here: a scenario file holds exactly one".into(),
                    ));
                }
            }
            Ok((Event::StreamEnd, _)) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(at(
                    e.marker().line(),
                    e.marker().col(),
                    format!("after the scenario: {}", e.info()),
                ))
            }
        }
    }
    Ok(())
}

/// How deep a scenario file's YAML may nest (mappings and lists).
pub(crate) const MAX_DEPTH: usize = 64;
/// How many YAML nodes aliases may expand to in all. A file that reuses an anchored reply for
/// each of 200,000 steps stays inside; an alias bomb ("billion laughs") does not.
pub(crate) const MAX_ALIAS_EXPANSION: usize = 1_000_000;

/// The reader's limits, sized to what a scenario file may be: the text is already capped at
/// [`MAX_FILE_BYTES`], so counts that grow with the text (events, nodes, anchors, aliases,
/// scalar bytes) are not limited again; what can grow without the text growing is (nesting,
/// alias expansion).
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: usize::MAX,
            max_nodes: usize::MAX,
            max_aliases: usize::MAX,
            max_anchors: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
            max_total_comment_bytes: usize::MAX,
            max_merge_keys: usize::MAX,
            max_depth: MAX_DEPTH,
            enforce_alias_anchor_ratio: false,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_ALIAS_EXPANSION,
            max_replay_stack_depth: MAX_DEPTH,
        },
    }
}

/// The reader's message in the scenario's terms: its own wording names its API ("set
/// DuplicateKeyPolicy in Options", "use Option<String>", "budget breached: Depth { depth: 65 }").
/// Errors met through an alias arrive as text, so the rewriting works on the text.
fn scenario_terms(message: &str) -> String {
    const NEST: &str = "the YAML nests deeper than";
    if message.starts_with("multiple YAML documents") {
        return "a second document starts here: a scenario file holds exactly one".to_owned();
    }
    if let Some(rest) = message.strip_prefix("duplicate mapping key") {
        let key = rest
            .strip_prefix(": ")
            .and_then(|k| k.rsplit_once(", set DuplicateKeyPolicy"))
            .map(|(k, _)| k);
        return match key {
            Some(k) => format!("`{k}` appears twice in this mapping; keep one"),
            None => "a key appears twice in this mapping; keep one".to_owned(),
        };
    }
    if message.starts_with("cannot deserialize null into string") {
        return "text is needed here, and this is empty or null (`~`, `null`); quote it to mean the word"
            .to_owned();
    }
    if message.starts_with("!!binary scalar is not valid UTF-8") {
        return "a `!!binary` value that is not UTF-8 cannot be text".to_owned();
    }
    if message.starts_with("alias replay limit exceeded") {
        return format!(
            "aliases expand past {MAX_ALIAS_EXPANSION} YAML nodes in all, the most a scenario file \
             may expand to (an alias that repeats an alias that repeats ...)"
        );
    }
    if message.starts_with("alias replay stack depth exceeded") {
        return format!(
            "{NEST} {MAX_DEPTH} levels through aliases, the most a scenario file may nest"
        );
    }
    if message.starts_with("budget breached: Depth") {
        return format!("{NEST} {MAX_DEPTH} levels here, the most a scenario file may nest");
    }
    if message.starts_with("budget breached") {
        return "the file is beyond what the YAML reader accepts".to_owned();
    }
    message.to_owned()
}

/// The parser's message without its rendered source snippet (we print the location ourselves),
/// in the scenario's terms.
fn plain_message(e: &serde_saphyr::Error) -> String {
    let full = e.without_snippet().to_string();
    // Drop the " at line X, column Y" (and alias "(defined at ...)") tails that repeat our own
    // location prefix.
    let trimmed = match full.find(" at line ") {
        Some(i) => &full[..i],
        None => &full,
    };
    scenario_terms(trimmed.trim())
}
