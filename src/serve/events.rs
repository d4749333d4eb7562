//! The event stream's log (`GET /agent/stream`): every event gets an id (`RUN-N`: the run's
//! start time in ms, then a counter from 1), and the newest events stay in a bounded buffer, so
//! that a reader that reconnects with `Last-Event-ID` gets what came after it, and a reader that
//! fell behind the buffer (or names an id it no longer holds, or one of another run) is told how
//! many events it missed with a `dropped` event, never silently.
//!
//! Readers do not hold queues of their own: each keeps the id it read last and takes from the
//! buffer what came after it, so a slow reader costs the service nothing but its cursor.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::response::sse::Event as SseEvent;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::lock;

/// How many events the stream's buffer holds by default.
pub const DEFAULT_EVENT_BUFFER: usize = 4096;

/// How many events a reader takes from the buffer at once.
const BATCH: usize = 256;

/// One event of the stream.
struct Event {
    id: u64,
    kind: String,
    data: String,
}

/// The stream's events: the newest ones, and the id of the last.
pub(super) struct EventLog {
    /// This run's prefix of the ids.
    run: u64,
    cap: usize,
    buffer: Mutex<VecDeque<Arc<Event>>>,
    /// The id of the newest event (0: none yet).
    latest: watch::Sender<u64>,
}

/// Where a reader starts, from its `Last-Event-ID`.
pub(super) enum Start {
    /// After the event with this id (0: from the start of the run).
    After(u64),
    /// The reader named an id this log cannot place (another run's, or not an id at all): it
    /// gets every event the buffer holds, after a `dropped` event saying so.
    Unknown(String),
}

impl EventLog {
    pub(super) fn new(run: u64, cap: usize) -> EventLog {
        EventLog {
            run,
            cap: cap.max(1),
            buffer: Mutex::new(VecDeque::new()),
            latest: watch::channel(0).0,
        }
    }

    /// Adds an event: it gets the next id, and the oldest leaves a full buffer.
    pub(super) fn push(&self, kind: String, data: &Value) {
        let mut buffer = lock(&self.buffer);
        let id = *self.latest.borrow() + 1;
        buffer.push_back(Arc::new(Event {
            id,
            kind,
            data: data.to_string(),
        }));
        while buffer.len() > self.cap {
            buffer.pop_front();
        }
        self.latest.send_replace(id);
    }

    fn id_text(&self, id: u64) -> String {
        format!("{}-{id}", self.run)
    }

    /// Where a reader with this `Last-Event-ID` starts: a new reader (none) after the newest
    /// event; one of this run's ids after it (an id not issued yet: after the newest).
    pub(super) fn start(&self, last_event_id: Option<&str>) -> Start {
        let latest = *self.latest.borrow();
        let Some(text) = last_event_id.map(str::trim) else {
            return Start::After(latest);
        };
        let ours = text
            .split_once('-')
            .filter(|(run, _)| run.parse::<u64>().ok() == Some(self.run))
            .and_then(|(_, n)| n.parse::<u64>().ok());
        match ours {
            Some(n) => Start::After(n.min(latest)),
            None => Start::Unknown(text.to_owned()),
        }
    }

    /// A reader's next events after `cursor`, as server-sent events, and its new cursor: first a
    /// `dropped` event if events after `cursor` already left the buffer. Empty when it has read
    /// everything.
    fn after(&self, cursor: u64) -> (Vec<SseEvent>, u64) {
        let buffer = lock(&self.buffer);
        let mut out = Vec::new();
        let Some(oldest) = buffer.front().map(|e| e.id) else {
            return (out, cursor);
        };
        if cursor + 1 < oldest {
            let dropped = oldest - cursor - 1;
            out.push(self.dropped(json!({
                "dropped": dropped,
                "after": self.id_text(cursor),
                "resumes_at": self.id_text(oldest),
                "reason": "the reader fell behind the service's event buffer",
            })));
        }
        let skip = cursor.saturating_sub(oldest - 1) as usize;
        let mut last = cursor;
        for event in buffer.iter().skip(skip).take(BATCH) {
            last = event.id;
            out.push(
                SseEvent::default()
                    .id(self.id_text(event.id))
                    .event(event.kind.as_str())
                    .data(event.data.as_str()),
            );
        }
        (out, last.max(cursor))
    }

    fn dropped(&self, data: Value) -> SseEvent {
        SseEvent::default().event("dropped").data(data.to_string())
    }

    /// The stream of a reader starting at `start`, until `stop` turns true.
    pub(super) fn reader(
        self: &Arc<Self>,
        start: Start,
        stop: watch::Receiver<bool>,
    ) -> impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>> {
        let mut pending = VecDeque::new();
        let cursor = match start {
            Start::After(n) => n,
            Start::Unknown(text) => {
                let oldest = lock(&self.buffer).front().map_or(1, |e| e.id);
                pending.push_back(self.dropped(json!({
                    "dropped": Value::Null,
                    "after": text,
                    "resumes_at": self.id_text(oldest),
                    "reason": "Last-Event-ID names no event of this run of the service (it restarted, or the id is not one it gave): the events after it are unknown",
                })));
                oldest - 1
            }
        };
        let state = (self.clone(), self.latest.subscribe(), stop, cursor, pending);
        futures_util::stream::unfold(state, |mut state| async move {
            let (log, latest, stop, cursor, pending) = &mut state;
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((Ok(event), state));
                }
                if *stop.borrow() {
                    return None;
                }
                // Marked seen before reading, so that an event pushed meanwhile wakes us.
                latest.borrow_and_update();
                let (events, next) = log.after(*cursor);
                *cursor = next;
                pending.extend(events);
                if !pending.is_empty() {
                    continue;
                }
                tokio::select! {
                    changed = latest.changed() => if changed.is_err() { return None },
                    _ = stop.wait_for(|s| *s) => return None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(log: &EventLog, cursor: u64) -> (Vec<String>, u64) {
        let (events, next) = log.after(cursor);
        let texts = events.into_iter().map(|e| format!("{e:?}")).collect();
        (texts, next)
    }

    #[test]
    fn a_reader_behind_the_buffer_is_told_how_many_it_missed() {
        let log = EventLog::new(7, 3);
        for n in 0..5 {
            log.push("message".to_owned(), &json!({ "n": n }));
        }
        let (events, next) = texts(&log, 0);
        assert_eq!(next, 5);
        assert_eq!(events.len(), 4, "{events:?}");
        assert!(events[0].contains("dropped") && events[0].contains(r#"\"dropped\":2"#));
        assert!(events[1].contains("7-3"), "{events:?}");
        let (events, next) = texts(&log, 4);
        assert_eq!((events.len(), next), (1, 5));
        assert!(texts(&log, 5).0.is_empty());
    }

    #[test]
    fn last_event_ids_of_this_run_of_another_and_none() {
        let log = EventLog::new(7, 3);
        log.push("message".to_owned(), &json!({}));
        assert!(matches!(log.start(None), Start::After(1)));
        assert!(matches!(log.start(Some("7-0")), Start::After(0)));
        assert!(matches!(log.start(Some("7-99")), Start::After(1)));
        assert!(matches!(log.start(Some("6-1")), Start::Unknown(_)));
        assert!(matches!(log.start(Some("x")), Start::Unknown(_)));
    }
}
