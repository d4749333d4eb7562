//! Results entering a session: `single-delivery` (a popped child delivers exactly one result, to
//! exactly its parent, and none after it is gone), `batch-answer`'s check that the caller
//! receives what its batch child answered, `no-display-leak` (no display-only string becomes
//! model-visible), and a result for the link of a child still on the stack (`stack-linkage`).

use std::sync::Arc;

use uuid::Uuid;

use crate::protocol::FrameInfo;
use crate::runtime::Runtime;

use super::names::*;
use super::step::fact;
use super::{same_text, violation, Observer, Violation};

/// A child popped in this step, waiting for its one delivery.
#[derive(Clone, Debug)]
pub(super) struct Delivery {
    pub(super) child: FrameInfo,
    pub(super) parent_session: Uuid,
    pub(super) parent_name: Arc<str>,
    pub(super) count: u32,
    /// Whether the result delivered was an error.
    pub(super) is_error: Option<bool>,
    /// Whether it must be (`None`: the observer cannot tell).
    pub(super) expect_error: Option<bool>,
    /// The content it must have (a batch child's answer; see `batch-answer`).
    pub(super) expect_content: Option<Arc<str>>,
}

/// A `tool_result` event's parts.
pub(super) struct ResultSeen<'a> {
    pub(super) frame_id: Uuid,
    pub(super) session: Uuid,
    pub(super) tool_use_id: &'a Arc<str>,
    pub(super) content: &'a Arc<str>,
    pub(super) is_error: bool,
}

impl Observer {
    /// A `tool_result` event: the result of a child popped in this step, delivered once to its
    /// parent, or a result the other checks judge.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_result(
        &mut self,
        rt: &Runtime,
        key: &Arc<str>,
        frame: &Arc<str>,
        frame_id: Uuid,
        session_id: Uuid,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
    ) -> Result<(), Violation> {
        if let Some(display) = crate::model::messages::display_only(content) {
            return Err(violation(
                NO_DISPLAY_LEAK,
                format!(
                    "the display-only string {display:?} entered {frame}'s session {session_id} as the result of {tool_use_id}"
                ),
            ));
        }
        self.tree
            .on_result(frame_id, frame, tool_use_id, content, is_error)?;
        self.tools
            .on_result(frame_id, frame, tool_use_id, content, is_error, rt.now())?;
        let mut delivery = false;
        for d in &mut self.deliveries {
            if d.child.parent_tool_use_id.as_ref() == Some(tool_use_id) {
                if d.parent_session != session_id {
                    return Err(violation(
                        SINGLE_DELIVERY,
                        format!(
                            "{} delivered its result to {frame} instead of its parent {}",
                            d.child.name, d.parent_name
                        ),
                    ));
                }
                d.count += 1;
                d.is_error = Some(is_error);
                delivery = true;
                if let Some(want) = &d.expect_content {
                    if !same_text(want, content) || is_error {
                        return Err(violation(
                            BATCH_ANSWER,
                            format!(
                                "{} answered {want:?}, but {frame} received {content:?}{}",
                                d.child.name,
                                if is_error { " as an error" } else { "" }
                            ),
                        ));
                    }
                }
            }
        }
        let again = !self.delivered.is_empty()
            && self
                .delivered
                .get(&session_id)
                .is_some_and(|ids| ids.contains(tool_use_id));
        if again {
            return Err(violation(
                SINGLE_DELIVERY,
                format!(
                    "a second result for {tool_use_id} reached {frame} after its child was gone"
                ),
            ));
        }
        // A result for the link of a child that is still on the stack breaks the link.
        let model = self.model(key);
        if let Some(i) = model.iter().rposition(|f| f.info.session_id == session_id) {
            if let Some(child) = model.get(i + 1).map(|c| &c.info) {
                if child.parent_tool_use_id.as_ref() == Some(tool_use_id) {
                    return Err(violation(
                        STACK_LINKAGE,
                        format!(
                            "{frame} got a result for {tool_use_id} while its child {} is still active",
                            child.name
                        ),
                    ));
                }
            }
        }
        let k = self.key_index(key);
        let seen = ResultSeen {
            frame_id,
            session: session_id,
            tool_use_id,
            content,
            is_error,
        };
        self.on_tool_result(k, seen, delivery);
        Ok(())
    }

    /// At the end of a step: each child popped in it delivered exactly one result, an error
    /// exactly when it failed.
    #[inline]
    pub(super) fn check_deliveries(&mut self) -> Result<(), Violation> {
        for d in self.deliveries.drain(..) {
            if d.count != 1 {
                return Err(violation(
                    SINGLE_DELIVERY,
                    format!(
                        "{} was popped and delivered {} results to {}",
                        d.child.name, d.count, d.parent_name
                    ),
                ));
            }
            if let (Some(got), Some(want)) = (d.is_error, d.expect_error) {
                if got != want && self.step.deferred.is_none() {
                    self.step.mark(fact::DEFERRED).deferred = Some(violation(
                        ERROR_PROPAGATION,
                        format!(
                            "{} delivered {} to {}, but it {}",
                            d.child.name,
                            if got { "an error" } else { "a success" },
                            d.parent_name,
                            if want { "failed" } else { "completed" }
                        ),
                    ));
                }
            }
            if let Some(id) = d.child.parent_tool_use_id {
                self.delivered.entry(d.parent_session).or_default().push(id);
            }
        }
        Ok(())
    }
}
