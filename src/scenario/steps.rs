//! The steps of a scenario (a user's message, an answer, an intervention, an expectation, the
//! passing of time, a restart, ...), built from the file with located errors.

use serde_saphyr::Location;

use crate::model::agent::Catalog;

use super::build::Builder;
use super::error::{clamp, ScenarioError};
use super::format::*;
use super::free::Mode;
use super::{Step, StepKind};

impl Builder<'_> {
    pub(super) fn step(
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

    pub(super) fn answer(
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

    pub(super) fn intervention(
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
