//! `agentsim serve`: the reference runtime as an HTTP service, driven by tokio in real time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;

use agentsim::scenario;

use super::shared::{async_runtime, stop_signal};

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The scenario whose agents, tools and settings to run (and, with `--llm scripted`,
    /// whose `llm` scripts answer the model calls). Without it: only a main agent, no tools,
    /// answered by `--llm anthropic` or `--llm openai` (the default `--llm scripted` needs a
    /// scenario to script it, and says so).
    scenario: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: std::net::SocketAddr,
    /// Who answers the model calls: the scenario's scripts (in real milliseconds), or a
    /// provider's API at --base-url (the key from ANTHROPIC_API_KEY or OPENAI_API_KEY).
    #[arg(long, value_enum, default_value_t = ServeLlm::Scripted)]
    llm: ServeLlm,
    /// The API's base URL, e.g. https://api.anthropic.com/v1 or the address of `agentsim
    /// mock-llm` (http://127.0.0.1:8080/v1).
    #[arg(long)]
    base_url: Option<String>,
    /// A bearer token every request must carry (`Authorization: Bearer T`); 401 without it.
    #[arg(long, env = "AGENTSIM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The largest request body taken, in bytes; larger ones get 413.
    #[arg(long, default_value_t = 1 << 20)]
    body_limit: usize,
    /// Keep async sessions and their questions in this SQLite database (seed 003's two
    /// tables; created if missing). Default: in memory.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Persist the runtime (`state.json`, `context.jsonl`) in this directory and resume from
    /// it at start: with --db, a killed service restarted on both loses nothing it
    /// acknowledged. Default: in memory.
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
    /// Post every async question to this URL (seed 003's callback: `X-Agent-Session` and
    /// a `question_pending` body; retried by the scenario's `callbacks` settings, default
    /// three retries with 1 s, 2 s, 4 s backoff and a 10 s timeout). Agents that name their
    /// own `question_callback` keep it. Default: the scenario's `question_callback_url`.
    #[arg(long, value_name = "URL")]
    question_callback: Option<String>,
    /// Sign every question callback with this secret: the header X-Agentsim-Signature:
    /// sha256=<hex>, the HMAC-SHA256 of the body's bytes. Default: unsigned.
    #[arg(
        long,
        env = "AGENTSIM_CALLBACK_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    callback_secret: Option<String>,
    /// The secret each callback's answer_token is made with (the HMAC-SHA256 of its session and
    /// question): a receiver answers its own question with `Authorization: Bearer <token>`,
    /// which answers no other question and opens no other endpoint. Default: derived from
    /// --token (no answer tokens without either).
    #[arg(
        long,
        env = "AGENTSIM_ANSWER_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    answer_secret: Option<String>,
    /// At start, end as failed the sessions the --db holds that have not ended but that this
    /// service cannot resume (no --state, or another one than they ran with); answers to them
    /// then get 410. Without it, such sessions refuse the start.
    #[arg(long)]
    abandon_sessions: bool,
    /// This service's address as callback receivers reach it: each callback's
    /// `answer_url` is URL/agent/answer/{session_id}. Default: http:// and --addr.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    #[command(flatten)]
    deploy: DeployArgs,
}

/// How `agentsim serve` meets its clients: what it lets in and how long it waits.
#[derive(clap::Args)]
pub(crate) struct DeployArgs {
    /// How many of the newest events GET /agent/stream keeps for readers that reconnect with
    /// Last-Event-ID or fall behind (those get a `dropped` event saying how many they missed).
    #[arg(long, value_name = "N", default_value_t = agentsim::serve::DEFAULT_EVENT_BUFFER as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    event_buffer: u64,
    /// A host name the service also answers to (in Host and Origin), besides loopback names
    /// and the address it listens on; repeat it for more, `*` for any. Requests naming another
    /// host get 400, pages of another origin 403.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// Listen on an address other than loopback without --token (refused otherwise): anyone
    /// who reaches the address can then drive the service.
    #[arg(long)]
    insecure_no_token: bool,
    /// Seconds a request's headers may take to arrive (then the connection is closed).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = seconds)]
    header_timeout: std::time::Duration,
    /// Seconds a request's body may take to arrive once its headers did (then 408).
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = seconds)]
    body_timeout: std::time::Duration,
    /// How many connections may be open at once; one more is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = agentsim::serve::DEFAULT_MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Delete each session that ended (completed or failed, expired ones included) this long
    /// after it ended, with its questions: a number and a unit, `90s`, `30m`, `12h`, `7d` (a
    /// bare number is seconds). Default: kept for ever.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    retention: Option<std::time::Duration>,
    /// Seconds a graceful stop (Ctrl-C, SIGTERM) waits for the requests in flight before it
    /// closes the connections left.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = seconds)]
    shutdown_timeout: std::time::Duration,
}

/// A positive number of seconds, fractions allowed (`0.5`), at most a day.
fn seconds(text: &str) -> Result<std::time::Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(std::time::Duration::from_secs_f64(s)),
        _ => Err(format!(
            "`{text}` is not a number of seconds above 0 and at most 86400"
        )),
    }
}

/// A duration of at least a second: a number and a unit (`s`, `m`, `h`, `d`; none is seconds),
/// at most ten years.
fn duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => t.split_at(at),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3_600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "`{text}`: the unit is s, m, h or d (as in 90s, 30m, 12h, 7d)"
            ))
        }
    };
    match number.trim().parse::<f64>().map(|n| n * scale) {
        Ok(s) if (1.0..=10.0 * 365.0 * 86_400.0).contains(&s) => {
            Ok(std::time::Duration::from_secs_f64(s))
        }
        _ => Err(format!(
            "`{text}` is not a duration of at least 1s and at most ten years (as in 90s, 30m, 12h, 7d)"
        )),
    }
}

/// Who answers `agentsim serve`'s model calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ServeLlm {
    /// The scenario's `llm` scripts.
    Scripted,
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
    Openai,
}

/// Runs `agentsim serve` with its flags.
pub(crate) fn command(args: ServeArgs) -> ExitCode {
    let ServeArgs {
        scenario,
        addr,
        llm,
        base_url,
        token,
        body_limit,
        db,
        state,
        question_callback,
        public_url,
        callback_secret,
        answer_secret,
        abandon_sessions,
        deploy,
    } = args;
    serve(
        scenario.as_deref(),
        addr,
        (llm, base_url),
        (token, body_limit),
        (db.as_deref(), state, abandon_sessions),
        (
            question_callback,
            public_url,
            callback_secret,
            answer_secret,
        ),
        deploy,
    )
}

fn serve(
    file: Option<&Path>,
    addr: std::net::SocketAddr,
    (llm, base_url): (ServeLlm, Option<String>),
    (token, body_limit): (Option<String>, usize),
    (db, state_dir, abandon_sessions): (Option<&Path>, Option<PathBuf>, bool),
    (question_callback, public_url, callback_secret, answer_secret): (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    deploy: DeployArgs,
) -> ExitCode {
    use agentsim::drive::scripted::MockLlm;
    use agentsim::drive::tokio_driver::Backend;
    use agentsim::wire::Provider;
    use std::io::Write as _;
    let usage = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    if let Some(file) = file {
        // The lock file beside the database is written too.
        let db_lock = db.map(lock_beside);
        let stores = [
            ("--db", db),
            ("--state", state_dir.as_deref()),
            ("--db's lock file", db_lock.as_deref()),
        ];
        let stores: Vec<(&str, &Path)> = stores
            .into_iter()
            .filter_map(|(flag, path)| Some((flag, path?)))
            .collect();
        if let Err(e) = super::shared::refuse_outputs_over_inputs(&[file], &stores) {
            return usage(e);
        }
    }
    let scenario = match file.map(scenario::load).transpose() {
        Ok(s) => s,
        Err(e) => return usage(agentsim::report::terminal(&e.to_string()).into_owned()),
    };
    let mut setup = match &scenario {
        Some(s) => s.driver_setup(),
        None => {
            let empty = scenario::parse("name: serve\nsteps: []\n", Path::new("serve"))
                .expect("the empty scenario loads");
            empty.driver_setup()
        }
    };
    // A service has no run budget: it answers as many calls as its users make.
    setup.limits.max_llm_calls = u64::MAX;
    // Its ids (sessions, agents, questions) must not repeat those a previous run stored in the
    // same --db: the id source starts from the clock, as a real service's would.
    setup.config.seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    setup.limits.max_steps = u64::MAX;
    if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return usage("--token cannot be empty".to_owned());
    }
    for (flag, secret) in [
        ("--callback-secret", &callback_secret),
        ("--answer-secret", &answer_secret),
    ] {
        if secret.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return usage(format!("{flag} cannot be empty"));
        }
    }
    for (flag, url) in [
        ("--question-callback", &question_callback),
        ("--public-url", &public_url),
    ] {
        if let Some(url) = url {
            if let Err(e) = reqwest::Url::parse(url)
                .map_err(|e| e.to_string())
                .and_then(|u| {
                    if matches!(u.scheme(), "http" | "https") && u.has_host() {
                        Ok(())
                    } else {
                        Err("not an http:// or https:// URL with a host".to_owned())
                    }
                })
            {
                return usage(format!("{flag} {url}: {e}"));
            }
        }
    }
    if let Some(url) = question_callback {
        setup.config.callbacks.url = Some(url.into());
    }
    let backend = match (llm, &scenario, base_url) {
        (ServeLlm::Scripted, _, Some(_)) => {
            return usage("--base-url goes with --llm anthropic or openai".to_owned())
        }
        (ServeLlm::Scripted, None, None) => return usage(
            "--llm scripted (the default) needs a SCENARIO whose `llm` scripts answer the model"
                .to_owned(),
        ),
        (ServeLlm::Scripted, Some(s), None) => {
            Backend::Scripted(MockLlm::new(s.scripts.clone()).with_more(s.more_replies.clone()))
        }
        (_, _, None) => {
            return usage("--llm anthropic and --llm openai need --base-url".to_owned())
        }
        (provider, _, Some(url)) => {
            let (provider, var) = match provider {
                ServeLlm::Anthropic => (Provider::Anthropic, "ANTHROPIC_API_KEY"),
                _ => (Provider::OpenAiChat, "OPENAI_API_KEY"),
            };
            let key = std::env::var(var).unwrap_or_default();
            match agentsim::drive::http::HttpModel::new(
                provider,
                &url,
                &key,
                std::time::Duration::from_secs(120),
            ) {
                Ok(model) => Backend::Http(model),
                Err(e) => return usage(format!("--base-url {url}: {e}")),
            }
        }
    };
    // One service owns the database and the state directory for its whole life: a second one
    // would acknowledge answers to sessions it does not run.
    let mut owned = Vec::new();
    let lock_paths = [
        db.map(|p| (format!("--db {}", p.display()), lock_beside(p))),
        state_dir
            .as_deref()
            .map(|d| (format!("--state {}", d.display()), d.join("owner.lock"))),
    ];
    if let Some(dir) = &state_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return usage(format!("--state {}: cannot create it: {e}", dir.display()));
        }
    }
    for (what, path) in lock_paths.into_iter().flatten() {
        match agentsim::store::OwnerLock::acquire(&path, &what) {
            Ok(lock) => owned.push(lock),
            Err(e) => return usage(e),
        }
    }
    let store: agentsim::serve::Store = match db {
        None => Box::new(agentsim::store::MemoryQuestions::new()),
        #[cfg(feature = "sqlite")]
        Some(path) => match agentsim::store::SqliteQuestions::open(path) {
            Ok(store) => Box::new(store),
            Err(e) => return usage(format!("--db {}: {e}", path.display())),
        },
        #[cfg(not(feature = "sqlite"))]
        Some(_) => return usage("--db needs the `sqlite` feature".to_owned()),
    };
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let options = agentsim::serve::Options {
        addr,
        token,
        body_limit,
        state_dir,
        public_url,
        event_buffer: deploy.event_buffer as usize,
        allow_hosts: deploy.allow_hosts,
        insecure_no_token: deploy.insecure_no_token,
        header_timeout: deploy.header_timeout,
        body_timeout: deploy.body_timeout,
        max_connections: deploy.max_connections as usize,
        shutdown_timeout: deploy.shutdown_timeout,
        callback_secret,
        abandon_sessions,
        retention: deploy.retention,
        answer_secret,
    };
    let result = runtime.block_on(async {
        let running = agentsim::serve::start(setup, backend, store, options).await?;
        let signalled = stop_signal();
        let stop = running.stopper();
        tokio::spawn(async move {
            signalled.await;
            stop();
        });
        let listening = format!("http://{}", running.addr);
        for lock in &mut owned {
            if let Err(e) = lock.describe(Some(&listening)) {
                tracing::warn!(file = %lock.path().display(), error = %e, "the owner's lock file could not be written");
            }
        }
        println!("listening on {listening}");
        let _ = std::io::stdout().flush();
        running.finish().await
    });
    drop(owned);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The lock file that makes one service the owner of the database at `db`: `<db>.lock` beside it.
fn lock_beside(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    db.with_file_name(name)
}
