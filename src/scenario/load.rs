//! Loading: parse a scenario file and check what the parser cannot (an agent's kind, a reply with
//! two behaviours, a step with no action), every error located at a line and column.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use serde_saphyr::{Location, Spanned};

use crate::drive::scripted::{ReplyKind, ScriptBlock, ScriptChunk, ScriptedReply};
use crate::drive::scripted::{ToolBehavior, ToolScript, ToolStep};
use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::observe::names;
use crate::runtime::{RuntimeConfig, ToolSpec};
use crate::sim::Limits;

use super::format::*;
use super::free::{Collector, Mode, Node, Place};
use super::{Scenario, Step, StepKind};

/// A scenario file could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line (0 when the file could not be read at all).
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What was wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.path.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

/// Invariant names a scenario may expect to see broken.
pub fn known_invariants() -> impl Iterator<Item = &'static str> {
    names::ALL.into_iter().chain(names::WIRE)
}

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
pub const MAX_DEPTH: usize = 64;
/// How many YAML nodes aliases may expand to in all. A file that reuses an anchored reply for
/// each of 200,000 steps stays inside; an alias bomb ("billion laughs") does not.
pub const MAX_ALIAS_EXPANSION: usize = 1_000_000;

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

struct Builder<'a> {
    path: &'a Path,
    /// Free-form values as written, by where they start.
    free: &'a BTreeMap<Place, Node>,
}

impl Builder<'_> {
    /// A callback URL: `http://` or `https://` and a host.
    fn callback_url(&self, url: &Spanned<String>, what: &str) -> Result<Arc<str>, ScenarioError> {
        let rest = url
            .value
            .strip_prefix("http://")
            .or_else(|| url.value.strip_prefix("https://"));
        match rest {
            Some(rest)
                if !rest.is_empty()
                    && !rest.starts_with('/')
                    && !rest.contains(char::is_whitespace) =>
            {
                Ok(url.value.as_str().into())
            }
            _ => Err(self.error(
                url.referenced,
                format!(
                    "{what} must be an http:// or https:// URL with a host, not `{}`",
                    url.value
                ),
            )),
        }
    }

    /// A reply of the simulated callback endpoint: an HTTP status, `refused` or `hang`.
    fn callback_reply(
        &self,
        reply: &Spanned<serde_json::Value>,
    ) -> Result<crate::agents::session::CallbackReply, ScenarioError> {
        use crate::agents::session::CallbackReply;
        match &reply.value {
            serde_json::Value::Number(n) => {
                if let Some(status) = n.as_u64().filter(|s| (100..=599).contains(s)) {
                    return Ok(CallbackReply::Status(status as u16));
                }
            }
            serde_json::Value::String(s) if s == "refused" => return Ok(CallbackReply::Refused),
            serde_json::Value::String(s) if s == "hang" => return Ok(CallbackReply::Hang),
            _ => {}
        }
        Err(self.error(
            reply.referenced,
            format!(
                "callbacks: a reply is an HTTP status (100 to 599; 2xx delivers), `refused` or `hang`, not `{}`",
                reply.value
            ),
        ))
    }

    fn error(&self, at: Location, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            path: self.path.to_owned(),
            line: clamp(at.line()),
            column: clamp(at.column()),
            message: message.into(),
        }
    }

    fn scenario(&self, file: ScenarioFile) -> Result<Scenario, ScenarioError> {
        let ScenarioFile {
            schema: _,
            name,
            description,
            seed,
            expect_violation,
            settings,
            agents,
            llm,
            tools,
            steps: step_specs,
        } = file;
        let mut catalog = Catalog::default();
        for (name, spec) in &agents {
            catalog.add(self.agent(name, spec, &tools)?);
        }

        let mut config = RuntimeConfig::default();
        if let Some(t) = settings.question_timeout {
            config.question_timeout_ms = t.0;
        }
        config.session_expiry_ms = settings.session_expiry.map(|t| t.0);
        if let Some(url) = &settings.question_callback_url {
            config.callbacks.url =
                Some(self.callback_url(url, "settings: `question_callback_url`")?);
        }
        let mut callback_replies = Vec::new();
        if let Some(spec) = &settings.callbacks {
            let policy = &mut config.callbacks.policy;
            policy.retries = spec.retries.unwrap_or(policy.retries);
            policy.backoff_ms = spec.backoff.map_or(policy.backoff_ms, |t| t.0);
            policy.timeout_ms = spec.timeout.map_or(policy.timeout_ms, |t| t.0);
            for reply in &spec.replies {
                callback_replies.push(self.callback_reply(reply)?);
            }
        }
        if settings.query_user == Some(crate::scenario::format::QueryUserSpec::None) {
            config.query_user = crate::runtime::QueryUser::None;
        }
        if let Some(words) = &settings.cancel_words {
            config.cancel_words = words.clone();
        }
        if let Some(spec) = &settings.interruptions {
            let c = spec.value.config();
            if c.check_every_ms == 0 || c.timeout_ms == 0 {
                return Err(self.error(
                    spec.referenced,
                    "interruptions: `timeout` and `check_every` must be positive",
                ));
            }
            config.interruptions = Some(c);
        }
        if let Some(bug) = &settings.planted_bug {
            config.planted = Some(
                bug.value
                    .parse()
                    .map_err(|e: String| self.error(bug.referenced, e))?,
            );
        }
        let mut tool_scripts = BTreeMap::new();
        for (name, def) in &tools {
            if crate::agents::tools::builtin::is_builtin(name) {
                return Err(self.error(
                    def.referenced,
                    format!("`{name}` is a built-in tool: the runtime answers it itself, so a script for it would never run"),
                ));
            }
            let (script, timeout) = self.tool(&def.value, def.referenced)?;
            config.tools.insert(
                name.clone(),
                ToolSpec {
                    timeout_ms: timeout,
                },
            );
            if let Some(script) = script {
                tool_scripts.insert(name.clone(), script);
            }
        }
        for (name, spec) in &agents {
            if let Some(pass) = &spec.value.passthrough {
                let (script, timeout) = self.tool(pass, spec.referenced)?;
                if timeout.is_some() {
                    return Err(self.error(
                        spec.referenced,
                        format!("agent '{name}': a passthrough skill's run has no `timeout` (give its outcome: result, error, hang, after)"),
                    ));
                }
                let def = &catalog.skills[name];
                if let Some(script) = script {
                    tool_scripts.insert(def.frame_name.to_string(), script);
                }
            }
        }

        let step_specs_empty = step_specs.is_empty();
        let mut routes = BTreeMap::new();
        let mut per_conversation = std::collections::BTreeSet::new();
        for (name, spec) in &agents {
            if let Some(rule) = &spec.value.route {
                routes.insert(name.clone(), self.route(name, rule)?);
            }
            if let Some(mode) = &spec.value.script {
                if mode.value == crate::scenario::format::ScriptMode::PerConversation {
                    if !step_specs_empty {
                        return Err(self.error(
                            mode.referenced,
                            format!("agent '{name}': `script: per_conversation` is for `agentsim mock-llm`, which serves files without `steps`; the simulator shares an agent's script among its frames"),
                        ));
                    }
                    per_conversation.insert(name.clone());
                }
            }
        }

        let mut scripts = BTreeMap::new();
        // Every reply is served at most once a run, so the sum of all scripted usage bounds any
        // conversation's total: if that sum fits, no total can overflow.
        let mut usage_total = Usage::default();
        for (agent, entries) in &llm {
            let known = |agent: &str| {
                agent == "main"
                    || catalog.skills.contains_key(agent)
                    || catalog.agents.contains_key(agent)
            };
            // A fork's script: `<agent>#<handle>`, handles counted from 1, nested forks too.
            let fork_of = |agent: &str| -> Option<String> {
                let (base, handles) = agent.split_once('#')?;
                let numbered = handles.split('#').all(|h| {
                    !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()) && !h.starts_with('0')
                });
                numbered.then(|| base.to_owned())
            };
            if let Some(base) = fork_of(agent) {
                let forks = catalog
                    .get(&base)
                    .is_some_and(|d| d.fork || d.workflow.is_some());
                if !known(&base) || !forks {
                    return Err(self.error(
                        entries.referenced,
                        format!(
                            "llm script for '{agent}', a fork of '{base}', but '{base}' is not a declared agent with `fork: true` or a `workflow`"
                        ),
                    ));
                }
            }
            let known = known(agent) || fork_of(agent).is_some();
            if !known {
                let mut declared: Vec<&str> = vec!["main"];
                declared.extend(catalog.skills.keys().map(String::as_str));
                declared.extend(catalog.agents.keys().map(String::as_str));
                return Err(self.error(
                    entries.referenced,
                    format!(
                        "llm script for '{agent}', which is not a declared agent (declared: {})",
                        declared.join(", ")
                    ),
                ));
            }
            let mut replies = Vec::new();
            for entry in &entries.value {
                let reply = self.reply(&entry.value, entry.referenced)?;
                usage_total = (usage_total.checked_add(reply.usage))
                    .filter(|u| u.input_tokens.checked_add(u.output_tokens).is_some())
                    .ok_or_else(|| {
                    self.error(
                        entry.referenced,
                        format!(
                            "the token usage of the scripts (input and output tokens together) adds up past {} (the largest count a run can total) at this reply: use smaller `usage` counts",
                            u64::MAX
                        ),
                    )
                })?;
                replies.push(reply);
            }
            scripts.insert(agent.clone(), replies);
        }

        let mut steps = Vec::new();
        for step in step_specs {
            steps.push(self.step(step.value, step.referenced, &catalog)?);
        }
        config.persist =
            settings.persist || steps.iter().any(|s| matches!(s.kind, StepKind::Restart));

        let expect_violation = match &expect_violation {
            None => None,
            Some(name) if known_invariants().any(|k| k == name.value) => Some(name.value.clone()),
            Some(name) => {
                return Err(self.error(
                    name.referenced,
                    format!(
                        "expect_violation: unknown invariant '{}' (known: {})",
                        name.value,
                        known_invariants().collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        };

        let defaults = Limits::default();
        let limits = Limits {
            max_steps: settings.max_steps.unwrap_or(defaults.max_steps),
            max_depth: settings.max_depth.unwrap_or(defaults.max_depth),
            max_llm_calls: settings.max_llm_calls.unwrap_or(defaults.max_llm_calls),
        };

        Ok(Scenario {
            path: self.path.to_owned(),
            name,
            description,
            seed: seed.unwrap_or(0),
            catalog,
            config,
            scripts,
            more_replies: None,
            callback_replies,
            tools: tool_scripts,
            steps,
            limits,
            expect_violation,
            routes,
            per_conversation,
        })
    }

    fn route(
        &self,
        name: &str,
        spec: &Spanned<crate::scenario::format::MatchSpec>,
    ) -> Result<crate::scenario::MatchRule, ScenarioError> {
        let m = &spec.value;
        let rule = crate::scenario::MatchRule {
            system_contains: m.system_contains.clone(),
            model: m.model.clone(),
            headers: m
                .headers
                .iter()
                .flatten()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            tools: m.tools.clone(),
            first_user_contains: m.first_user_contains.clone(),
        };
        if rule == crate::scenario::MatchRule::default() {
            return Err(self.error(
                spec.referenced,
                format!("agent '{name}': `match` needs at least one of system_contains, model, headers, tools, first_user_contains"),
            ));
        }
        Ok(rule)
    }

    fn agent(
        &self,
        name: &str,
        spec: &Spanned<AgentSpec>,
        tools: &BTreeMap<String, Spanned<ToolDef>>,
    ) -> Result<AgentDef, ScenarioError> {
        let at = spec.referenced;
        let s = &spec.value;
        if name.trim().is_empty() {
            return Err(self.error(at, "an agent needs a name: `\"\"` is not one"));
        }
        if name.contains(':') {
            return Err(self.error(
                at,
                format!(
                    "agent name '{name}' contains ':', which frame names use (`skill:{name}`): pick a name without it"
                ),
            ));
        }
        let kind = match (name, s.kind) {
            ("main", None | Some(KindSpec::Main)) => AgentKind::Main,
            ("main", Some(_)) => return Err(self.error(
                at,
                "the agent named 'main' is the main agent: leave out `kind` or write `kind: main`",
            )),
            (_, Some(KindSpec::Skill)) => AgentKind::Skill,
            (_, Some(KindSpec::Agent)) => AgentKind::Agent,
            (_, Some(KindSpec::Main)) => {
                return Err(self.error(
                    at,
                    format!("'{name}' cannot be `kind: main`: only the agent named 'main' is"),
                ))
            }
            (_, None) => {
                return Err(self.error(
                    at,
                    format!("agent '{name}' needs `kind: skill` or `kind: agent`"),
                ))
            }
        };
        if s.batch.is_some() && kind == AgentKind::Main {
            return Err(self.error(
                at,
                "the main agent cannot be `batch`: only skills and agents are delegated",
            ));
        }
        if s.passthrough.is_some() && kind != AgentKind::Skill {
            return Err(self.error(at, format!("'{name}': only a skill can be `passthrough`")));
        }
        let mut def = AgentDef::new(name, kind);
        if let Some(d) = &s.description {
            def.description = d.clone();
        }
        if let Some(p) = &s.system {
            def.system_prompt = p.as_str().into();
        }
        def.model = s.model.clone();
        if let Some(n) = s.max_iterations {
            if n == 0 {
                return Err(self.error(
                    at,
                    format!("agent '{name}': `max_iterations: 0` lets it make no model call at all; the least is 1"),
                ));
            }
            def.max_iterations = n;
        }
        if let Some(list) = &s.tools {
            for tool in list {
                if !tools.contains_key(tool) && !crate::agents::tools::builtin::is_builtin(tool) {
                    return Err(self.error(
                        at,
                        format!("agent '{name}' lists tool '{tool}', which is not declared under `tools`"),
                    ));
                }
            }
            def.tools = Some(list.clone());
        }
        def.stream = s.stream;
        def.parallel_tools = s.parallel_tools;
        def.passthrough = s.passthrough.is_some();
        def.batch = s.batch;
        def.fork = s.fork;
        match (&s.workflow, &s.max_depth) {
            (Some(_), _) if def.passthrough => {
                return Err(self.error(
                    at,
                    format!("'{name}': a passthrough skill runs no model call, so it cannot run a `workflow`"),
                ));
            }
            (Some(_), depth) => {
                def.workflow = Some(crate::agents::workflow::WorkflowDef {
                    max_depth: depth
                        .as_ref()
                        .map_or(crate::agents::workflow::DEFAULT_MAX_DEPTH, |d| d.value),
                });
            }
            (None, Some(depth)) => {
                return Err(self.error(
                    depth.referenced,
                    format!("agent '{name}': `max_depth` bounds a workflow's children, but the agent has no `workflow: six_step`"),
                ));
            }
            (None, None) => {}
        }
        if !s.async_questions
            && (s.question_timeout.is_some()
                || s.on_timeout.is_some()
                || s.question_callback.is_some())
        {
            return Err(self.error(
                at,
                format!("agent '{name}': `question_timeout`, `on_timeout` and `question_callback` go with `async_questions: true`"),
            ));
        }
        if s.async_questions {
            use crate::model::agent::{AsyncQuestions, OnTimeout};
            let on_timeout = match &s.on_timeout {
                None => OnTimeout::Fail,
                Some(v) => match &v.value {
                    serde_json::Value::String(p) if p == "fail" => OnTimeout::Fail,
                    serde_json::Value::Object(m) if m.len() == 1 && m.get("default_answer").is_some_and(|a| a.is_string()) => {
                        OnTimeout::DefaultAnswer(m["default_answer"].as_str().unwrap_or_default().into())
                    }
                    _ => {
                        return Err(self.error(
                            v.referenced,
                            format!("agent '{name}': `on_timeout` is `fail` or `{{default_answer: <text>}}`"),
                        ))
                    }
                },
            };
            def.async_questions = Some(AsyncQuestions {
                timeout_ms: s.question_timeout.map(|t| t.0),
                on_timeout,
                callback: match &s.question_callback {
                    Some(url) => Some(
                        self.callback_url(url, &format!("agent '{name}': `question_callback`"))?,
                    ),
                    None => None,
                },
            });
        }
        Ok(def)
    }

    fn tool(
        &self,
        def: &ToolDef,
        at: Location,
    ) -> Result<(Option<ToolScript>, Option<u64>), ScenarioError> {
        Ok(match def {
            ToolDef::Fixed(text) => (Some(ToolScript::Fixed(result_step(text, false, 0))), None),
            ToolDef::PerCall(calls) => (Some(ToolScript::PerCall(self.calls(calls, at)?)), None),
            ToolDef::Table(t) => {
                let timeout = t.timeout.map(|m| m.0);
                let fixed = t.result.is_some() || t.error.is_some() || t.hang || t.is_error;
                let script = match (&t.calls, fixed) {
                    (Some(_), _) if t.after.is_some() => {
                        return Err(self.error(
                            at,
                            "a tool with `calls:` takes `after` on each call, not on the tool",
                        ))
                    }
                    (Some(_), true) => {
                        return Err(self.error(
                            at,
                            "a tool has either `calls:` or a fixed outcome (result/error/hang), not both",
                        ))
                    }
                    (Some(calls), false) => Some(ToolScript::PerCall(self.calls(calls, at)?)),
                    (None, true) => Some(ToolScript::Fixed(self.call(
                        &ToolCallFull {
                            result: t.result.clone(),
                            is_error: t.is_error,
                            error: t.error.clone(),
                            hang: t.hang,
                            after: t.after,
                        },
                        at,
                    )?)),
                    // Only settings: without `after` the tool echoes its input (no script); with
                    // `after` it returns an empty result after that latency.
                    (None, false) => t.after.map(|after| {
                        ToolScript::Fixed(ToolStep {
                            behavior: ToolBehavior::Result {
                                content: "".into(),
                                is_error: false,
                            },
                            after_ms: after.0,
                        })
                    }),
                };
                (script, timeout)
            }
        })
    }

    fn calls(&self, calls: &[ToolCallSpec], at: Location) -> Result<Vec<ToolStep>, ScenarioError> {
        calls
            .iter()
            .map(|c| match c {
                ToolCallSpec::Text(t) => Ok(result_step(t, false, 0)),
                ToolCallSpec::Full(full) => self.call(full, at),
            })
            .collect()
    }

    fn call(&self, c: &ToolCallFull, at: Location) -> Result<ToolStep, ScenarioError> {
        let after_ms = c.after.map_or(0, |m| m.0);
        if c.is_error && (c.error.is_some() || c.hang) {
            return Err(self.error(
                at,
                "`is_error` marks a `result` as an error; `error` and `hang` take none",
            ));
        }
        let behavior = match (&c.result, &c.error, c.hang) {
            (_, Some(_), true) | (Some(_), Some(_), _) | (Some(_), _, true) => {
                return Err(self.error(at, "a tool outcome has one of `result`, `error` or `hang`"))
            }
            (_, Some(message), false) => ToolBehavior::Fail(message.as_str().into()),
            (None, None, true) => ToolBehavior::Hang,
            (result, None, false) => ToolBehavior::Result {
                content: result.as_deref().unwrap_or("").into(),
                is_error: c.is_error,
            },
        };
        Ok(ToolStep { behavior, after_ms })
    }

    /// A free-form value as its author wrote it.
    fn free(&self, v: &Spanned<Value>, mode: Mode) -> Value {
        let at = (v.referenced.line(), v.referenced.column());
        match self.free.get(&at) {
            Some(node) => node.value(mode),
            // Every place was collected from this same text; keep the parser's reading if not.
            None => {
                debug_assert!(false, "no free-form node at {at:?}");
                v.value.clone()
            }
        }
    }

    fn script_tool_use(&self, u: &ToolUseSpec) -> ScriptBlock {
        ScriptBlock::ToolUse {
            id: u.id.as_deref().map(Into::into),
            name: u.name.as_str().into(),
            input: Arc::new(
                u.input
                    .as_ref()
                    .map_or_else(|| json!({}), |v| self.free(v, Mode::Json)),
            ),
        }
    }

    fn reply(&self, entry: &ReplyEntry, at: Location) -> Result<ScriptedReply, ScenarioError> {
        let r = match entry {
            ReplyEntry::Text(text) => {
                return Ok(ScriptedReply {
                    kind: ReplyKind::Content(vec![ScriptBlock::Text(text.as_str().into())]),
                    after_ms: 0,
                    usage: Usage::default(),
                })
            }
            ReplyEntry::Full(r) => r,
        };
        let content_keys = [
            ("text", r.text.is_some()),
            ("tool_use", r.tool_use.is_some()),
            ("use_skill", r.use_skill.is_some()),
            ("use_agent", r.use_agent.is_some()),
            ("ask_user", r.ask_user.is_some()),
            ("complete", r.complete.is_some()),
        ];
        let has_content = content_keys.iter().any(|(_, on)| *on);
        let mut kinds: Vec<&str> = Vec::new();
        if has_content {
            kinds.push("content");
        }
        for (key, flag) in [("empty", r.empty), ("stall", r.stall)] {
            if flag == Some(false) {
                return Err(self.error(at, format!("write `{key}: true` (or leave it out)")));
            }
        }
        if matches!(&r.tool_use, Some(OneOrMany::Many(many)) if many.is_empty()) {
            return Err(self.error(
                at,
                "`tool_use: []` names no tool use (write `empty: true` for an empty reply)",
            ));
        }
        for (key, on) in [
            ("empty", r.empty.is_some()),
            ("error", r.error.is_some()),
            ("stall", r.stall.is_some()),
            ("chunks", r.chunks.is_some()),
        ] {
            if on {
                kinds.push(key);
            }
        }
        if kinds.len() != 1 {
            let found = if kinds.is_empty() {
                "nothing".to_owned()
            } else {
                kinds.join(" and ")
            };
            return Err(self.error(
                at,
                format!("a reply needs exactly one of: content (text, tool_use, use_skill, use_agent, ask_user, complete), empty, error, stall, chunks; found {found}"),
            ));
        }
        let kind = if has_content {
            let mut blocks = Vec::new();
            if let Some(text) = &r.text {
                blocks.push(ScriptBlock::Text(text.as_str().into()));
            }
            if let Some(uses) = &r.tool_use {
                for u in uses_of(uses) {
                    blocks.push(self.script_tool_use(u));
                }
            }
            let shorthand = |name: &str, input: Value| ScriptBlock::ToolUse {
                id: None,
                name: name.into(),
                input: Arc::new(input),
            };
            if let Some(input) = &r.use_skill {
                blocks.push(shorthand("use_skill", self.free(input, Mode::Json)));
            }
            if let Some(input) = &r.use_agent {
                blocks.push(shorthand("use_agent", self.free(input, Mode::Json)));
            }
            if let Some(q) = &r.ask_user {
                // A question and its options are text shown to the user.
                let input = match self.free(q, Mode::Text) {
                    Value::String(s) => json!({ "question": s }),
                    other => other.clone(),
                };
                blocks.push(shorthand("ask_user", input));
            }
            if let Some(result) = &r.complete {
                blocks.push(shorthand("complete", json!({ "result": result })));
            }
            ReplyKind::Content(blocks)
        } else if r.empty.is_some() {
            ReplyKind::Content(Vec::new())
        } else if let Some(e) = &r.error {
            let (kind, message, mid_stream) = match e {
                ErrorSpec::Kind(k) => (error_kind(*k), None, false),
                ErrorSpec::Full(full) => (
                    error_kind(full.kind),
                    full.message.clone(),
                    full.mid_stream.unwrap_or(false),
                ),
            };
            let message = message.unwrap_or_else(|| kind.default_message().to_owned());
            ReplyKind::Error {
                kind,
                message: message.into(),
                mid_stream,
            }
        } else if r.stall.is_some() {
            ReplyKind::Stall
        } else {
            let chunks = r.chunks.as_deref().unwrap_or_default();
            let mut out = Vec::new();
            for c in chunks {
                out.push(match c {
                    ChunkSpec::Text(t) => ScriptChunk {
                        block: ScriptBlock::Text(t.as_str().into()),
                        after_ms: 0,
                    },
                    ChunkSpec::Full(full) => {
                        let block = match (&full.text, &full.tool_use) {
                            (Some(t), None) => ScriptBlock::Text(t.as_str().into()),
                            (None, Some(u)) => self.script_tool_use(u),
                            _ => {
                                return Err(self.error(
                                    at,
                                    "a stream piece has exactly one of `text` or `tool_use`",
                                ))
                            }
                        };
                        ScriptChunk {
                            block,
                            after_ms: full.after.map_or(0, |m| m.0),
                        }
                    }
                });
            }
            ReplyKind::Stream(out)
        };
        match &kind {
            ReplyKind::Stall if r.after.is_some() || r.usage.is_some() => {
                return Err(self.error(
                    at,
                    "a `stall` never answers: `after` and `usage` would mean nothing",
                ))
            }
            ReplyKind::Error { .. } if r.usage.is_some() => {
                return Err(self.error(at, "a failed call reports no `usage`"))
            }
            _ => {}
        }
        let usage = r.usage.map_or(Usage::default(), |u| Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        });
        Ok(ScriptedReply {
            kind,
            after_ms: r.after.map_or(0, |m| m.0),
            usage,
        })
    }

    fn step(
        &self,
        mut s: StepSpec,
        at: Location,
        catalog: &Catalog,
    ) -> Result<Step, ScenarioError> {
        if let Some(None) = s.user {
            return Err(self.error(
                at,
                "`user:` needs the message's text (for instance `user: hello`)",
            ));
        }
        let user = s.user.take().flatten();
        let actions = [
            user.is_some(),
            s.expect.is_some(),
            s.advance.is_some(),
            s.run.is_some(),
            s.restart.is_some(),
            s.intervene.is_some(),
            s.answer.is_some(),
            s.trigger.is_some(),
            s.async_answer.is_some(),
        ];
        if actions.iter().filter(|a| **a).count() != 1 {
            return Err(self.error(
                at,
                "a step has exactly one of `user`, `expect`, `advance`, `run`, `restart`, `intervene`, `answer`, `trigger` or `async_answer`",
            ));
        }
        if (s.trigger.is_some() || s.async_answer.is_some()) && s.key.is_some() {
            return Err(self.error(
                at,
                "a `trigger` or `async_answer` step names its agent or session, not a `key` (a session's key is its id)",
            ));
        }
        if user.is_none()
            && s.intervene.is_none()
            && s.answer.is_none()
            && s.trigger.is_none()
            && s.async_answer.is_none()
            && (s.key.is_some() || s.wait.is_some())
        {
            return Err(self.error(
                at,
                "`key` and `wait` go with a `user` step (an `expect` takes its own `key`)",
            ));
        }
        if s.intervene.is_some() && s.key.is_some() {
            return Err(self.error(at, "an `intervene` step names its agent, not a `key`"));
        }
        if s.answer.is_some() && s.key.is_some() {
            return Err(self.error(
                at,
                "an `answer` step names its agent or question, not a `key`",
            ));
        }
        if user.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(self.error(at, "a user message cannot be empty"));
        }
        let kind = if let Some(text) = user {
            StepKind::User {
                key: s.key.unwrap_or_else(|| super::DEFAULT_KEY.to_owned()),
                text,
                wait: s.wait.unwrap_or(true),
            }
        } else if let Some(ms) = s.advance {
            StepKind::Advance(ms.0)
        } else if let Some(n) = s.run {
            StepKind::Run(n)
        } else if let Some(iv) = s.intervene.take() {
            self.intervention(iv, s.wait.unwrap_or(true), at)?
        } else if let Some(a) = s.answer.take() {
            self.answer(a, s.wait.unwrap_or(true), at)?
        } else if let Some(t) = s.trigger.take() {
            if catalog.get(&t.agent).is_none() {
                return Err(self.error(
                    at,
                    format!("`trigger.agent: {}` is not a declared agent", t.agent),
                ));
            }
            let payload = t
                .payload
                .as_ref()
                .map_or_else(|| serde_json::json!({}), |p| self.free(p, Mode::Json));
            StepKind::Trigger {
                agent: t.agent,
                payload,
                wait: s.wait.unwrap_or(true),
            }
        } else if let Some(a) = s.async_answer.take() {
            if a.session == 0 || a.question == Some(0) {
                return Err(self.error(
                    at,
                    "`async_answer` counts sessions and questions from 1 (`session: 1` is the first triggered)",
                ));
            }
            if a.text.trim().is_empty() {
                return Err(self.error(at, "an answer cannot be empty"));
            }
            StepKind::AsyncAnswer {
                session: a.session,
                question: a.question,
                text: a.text,
                wait: s.wait.unwrap_or(true),
            }
        } else if let Some(on) = s.restart {
            if !on {
                return Err(self.error(at, "write `restart: true` (or leave the step out)"));
            }
            StepKind::Restart
        } else {
            StepKind::Expect(Box::new(s.expect.expect("counted above")))
        };
        Ok(Step {
            line: clamp(at.line()),
            column: clamp(at.column()),
            kind,
        })
    }
}

impl Builder<'_> {
    fn answer(
        &self,
        a: super::format::AnswerSpec,
        wait: bool,
        at: Location,
    ) -> Result<StepKind, ScenarioError> {
        let question = match a.question.as_deref() {
            None => None,
            Some(q) => Some(uuid::Uuid::parse_str(q.trim()).map_err(|_| {
                self.error(
                    at,
                    format!("`answer.question: {q}` is not a question id (a uuid such as the transcript's `question 4f1c...` shows)"),
                )
            })?),
        };
        match (&a.agent, question) {
            (Some(_), Some(_)) | (None, None) => return Err(self.error(
                at,
                "an answer names exactly one of `agent` (the asking agent) and `question` (its id)",
            )),
            (Some(agent), None) if agent.trim().is_empty() => {
                return Err(self.error(at, "`answer.agent` names the asking agent: a frame name such as `fork:main#1`, a path such as `main/fork:main#1`, or an agent id"));
            }
            _ => {}
        }
        if a.text.trim().is_empty() {
            return Err(self.error(at, "an answer cannot be empty"));
        }
        Ok(StepKind::Answer {
            agent: a.agent,
            question,
            text: a.text,
            wait,
        })
    }

    fn intervention(
        &self,
        iv: super::format::InterveneSpec,
        wait: bool,
        at: Location,
    ) -> Result<StepKind, ScenarioError> {
        use crate::agents::tree::{Intervention, Status};
        if iv.agent.trim().is_empty() {
            return Err(self.error(at, "`intervene.agent` names the agent: a frame name such as `agent:research`, a path such as `main/agent:research`, or an agent id"));
        }
        let status = match iv.status.as_deref() {
            None => None,
            Some(s) => Some(Status::parse(s).ok_or_else(|| {
                self.error(
                    at,
                    format!("`intervene.status: {s}` is not a status (running, awaiting_user, completed, error, deleted, modified)"),
                )
            })?),
        };
        if iv.comment.is_none() && iv.content.is_none() && status.is_none() {
            return Err(self.error(
                at,
                "an intervention gives at least one of `comment`, `content` or `status`",
            ));
        }
        Ok(StepKind::Intervene {
            agent: iv.agent,
            intervention: Intervention {
                user_comment: iv.comment.map(Into::into),
                user_content: iv.content.map(Into::into),
                status,
            },
            wait,
        })
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

fn uses_of(u: &OneOrMany<ToolUseSpec>) -> Vec<&ToolUseSpec> {
    match u {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many.iter().collect(),
    }
}

fn result_step(text: &str, is_error: bool, after_ms: u64) -> ToolStep {
    ToolStep {
        behavior: ToolBehavior::Result {
            content: text.into(),
            is_error,
        },
        after_ms,
    }
}

fn error_kind(k: ErrorKindSpec) -> LlmErrorKind {
    match k {
        ErrorKindSpec::RateLimit => LlmErrorKind::RateLimit,
        ErrorKindSpec::Overloaded => LlmErrorKind::Overloaded,
        ErrorKindSpec::Network => LlmErrorKind::Network,
        ErrorKindSpec::Other => LlmErrorKind::Other,
    }
}
