//! Questions' callbacks (seed 003's B20) from an outbox: each callback is stored with its question
//! in one operation ([`QuestionStore::ask_with`]), posted from a task of its own (so a
//! receiver that hangs or refuses delays nothing else), retried by the scenario's policy, and
//! settled in the store once delivered. A callback still in the outbox at a start (the service
//! was killed before it got through, or it was given up) is posted again if its question is
//! still open: every question's callback is delivered at least once. Each carries its question's
//! id as an `Idempotency-Key` (the same on every attempt, before and after a restart, so a
//! receiver drops the repeats), and with a secret an `X-Agentsim-Signature: sha256=<hex>`, the
//! HMAC-SHA256 of the exact body bytes.

use std::sync::Arc;

use uuid::Uuid;

use crate::store::questions::{Callback, QuestionStore, SessionStatus, Settled};

use super::{lock, wall_ms, Shared};

/// The header that carries a callback's signature.
pub const SIGNATURE_HEADER: &str = "X-Agentsim-Signature";
/// The header that carries a callback's idempotency key (its question's id).
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// `sha256=` and the hex HMAC-SHA256 of `body` under `secret`: the value of
/// [`SIGNATURE_HEADER`].
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key size");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The key answer tokens are made with: `--answer-secret`'s bytes, else one derived from the
/// service's `--token` (so that a token's holder can make answer tokens, and nobody else); none
/// without either (then anyone who reaches the service may answer).
pub(super) fn answer_key(answer_secret: Option<&str>, token: Option<&str>) -> Option<Arc<[u8]>> {
    match (answer_secret, token) {
        (Some(secret), _) => Some(Arc::from(secret.as_bytes())),
        (None, Some(token)) => {
            let derived = hmac_hex(token.as_bytes(), b"agentsim answer tokens");
            Some(Arc::from(derived.as_bytes()))
        }
        (None, None) => None,
    }
}

fn hmac_hex(key: &[u8], data: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key size");
    mac.update(data);
    let bytes = mac.finalize().into_bytes();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The token that answers question `question` of session `session`, and nothing else: the hex
/// HMAC-SHA256 of `answer\n<session>\n<question>` under the answer key.
pub fn answer_token(key: &[u8], session: &str, question: &str) -> String {
    hmac_hex(key, format!("answer\n{session}\n{question}").as_bytes())
}

/// Whether `given` is the answer token of `question` of `session` (compared in constant time).
pub(super) fn answers(key: &[u8], session: &str, question: &str, given: &str) -> bool {
    let expected = answer_token(key, session, question);
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Sends questions' callbacks: one POST with `X-Agent-Session`, `Idempotency-Key` and (with a
/// secret) the signature, retried by the scenario's policy when it fails (refused, timed out, a
/// status other than 2xx). The question stays listed whatever the callback got.
#[derive(Clone)]
pub(super) struct CallbackSender {
    pub(super) client: reqwest::Client,
    pub(super) policy: crate::agents::session::CallbackPolicy,
    pub(super) public_url: String,
    pub(super) secret: Option<Arc<[u8]>>,
    /// The key of the answer tokens put in each callback's body, if there is one.
    pub(super) answer_key: Option<Arc<[u8]>>,
}

impl CallbackSender {
    /// Posts `callback` in a task of its own; settles it in the store once delivered. One given
    /// up stays in the outbox, posted again at the next start.
    pub(super) fn send(&self, shared: Arc<Shared>, callback: Callback) {
        let this = self.clone();
        tokio::spawn(async move {
            use crate::agents::session::CALLBACK_SESSION_HEADER;
            let Callback {
                question_id,
                session_id: session,
                url,
                body,
            } = callback;
            let signature = this
                .secret
                .as_deref()
                .map(|secret| signature(secret, body.as_bytes()));
            let timeout = std::time::Duration::from_millis(this.policy.timeout_ms);
            for n in 0..=this.policy.retries {
                if n > 0 {
                    let wait = this.policy.backoff_before(n);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                let mut request = this
                    .client
                    .post(&url)
                    .header(CALLBACK_SESSION_HEADER, &session)
                    .header(IDEMPOTENCY_HEADER, &question_id)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .timeout(timeout)
                    .body(body.clone());
                if let Some(signature) = &signature {
                    request = request.header(SIGNATURE_HEADER, signature);
                }
                match request.send().await {
                    Ok(reply) if reply.status().is_success() => {
                        tracing::info!(%url, %session, question = %question_id, attempt = n + 1, "question callback delivered");
                        let settled = lock(&shared.store).settle_callback(
                            &question_id,
                            Settled::Delivered,
                            wall_ms(),
                        );
                        if let Err(e) = settled {
                            // Not settled: sent again at the next start, which the key makes
                            // harmless.
                            tracing::error!(question = %question_id, error = %e, "a delivered callback could not be settled");
                        }
                        return;
                    }
                    Ok(reply) => {
                        tracing::warn!(%url, %session, attempt = n + 1, status = %reply.status(), "question callback refused");
                    }
                    Err(e) => {
                        tracing::warn!(%url, %session, attempt = n + 1, error = %e, "question callback failed");
                    }
                }
            }
            tracing::warn!(%url, %session, "question callback given up; the question stays listed and the callback is sent again at the next start");
        });
    }
}

/// At a start: every callback still in the outbox is posted again if its question is still
/// open, and settled as obsolete otherwise (answered, or its session ended).
pub(super) fn resend_outbox(shared: &Arc<Shared>) {
    let outbox = {
        let mut store = lock(&shared.store);
        let outbox = match store.outbox() {
            Ok(outbox) => outbox,
            Err(e) => {
                tracing::error!(error = %e, "the callbacks' outbox could not be read");
                return;
            }
        };
        let mut open = Vec::new();
        for callback in outbox {
            if still_open(&**store, &callback) {
                open.push(callback);
            } else if let Err(e) =
                store.settle_callback(&callback.question_id, Settled::Obsolete, wall_ms())
            {
                tracing::error!(question = %callback.question_id, error = %e, "an obsolete callback could not be settled");
            }
        }
        open
    };
    for callback in outbox {
        tracing::info!(question = %callback.question_id, url = %callback.url, "a question callback not delivered before the restart is sent again");
        shared.callbacks.send(shared.clone(), callback);
    }
}

/// Whether the callback's question still waits for its answer.
fn still_open(store: &(dyn QuestionStore + Send), callback: &Callback) -> bool {
    let waiting = matches!(
        store.session(&callback.session_id),
        Ok(Some(row)) if row.status == SessionStatus::PendingInput
    );
    waiting
        && store.questions(&callback.session_id).is_ok_and(|qs| {
            qs.iter()
                .any(|q| q.id == callback.question_id && q.answer.is_none())
        })
}

/// The callback of a question `question` of `session` asked by `agent`, to `url`: its body as
/// seed 003 has it, with the service's answer URL.
pub(super) fn callback(
    shared: &Shared,
    (session, question): (Uuid, Uuid),
    agent: &str,
    (text, context): (&str, Option<&str>),
    url: &str,
) -> Callback {
    let mut body = crate::agents::session::callback_body(
        session,
        agent,
        question,
        text,
        context,
        &shared.callbacks.public_url,
    );
    // The receiver's authority to answer this question, and no other.
    if let (Some(key), serde_json::Value::Object(map)) = (&shared.callbacks.answer_key, &mut body) {
        let token = answer_token(key, &session.to_string(), &question.to_string());
        map.insert("answer_token".to_owned(), token.into());
    }
    Callback {
        question_id: question.to_string(),
        session_id: session.to_string(),
        url: url.to_owned(),
        body: body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            super::signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
