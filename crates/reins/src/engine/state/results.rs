//! The results of the admitted batch recorded: bounded one by one and together under the context budget,
//! an edited call's result noted as such; and a run ended from outside.

use std::sync::Arc;

use crate::context::{ContextConfig, TokenCounter, bound_text, bound_to_units, fair_shares};
use crate::image::Image;
use crate::message::ToolResult;
use crate::outcome::Status;

use super::{CallResult, Held, MIN_RESULT_UNITS, Phase, ResultText, RunState};

impl RunState {
    /// Records the results of the admitted batch, in call order. `None` marks a call that did not finish:
    /// it gets an error result saying `unfinished`. Each result is bounded to `max_tool_result_chars`;
    /// under a context budget the results are then bounded together so that the newest group fits.
    /// With `end` set the run ends with that status and `end_reason` (cancellation, deadline).
    pub fn record_batch(
        &mut self,
        results: Vec<Option<CallResult>>,
        unfinished: &str,
        end: Option<(Status, String)>,
        ctx: &ContextConfig,
    ) {
        self.record_results(results, unfinished, end, ctx);
    }

    /// [`RunState::record_batch`] of results taken one by one (the driver takes them out of storage it keeps
    /// from one batch to the next).
    pub(crate) fn record_results(
        &mut self,
        results: impl IntoIterator<Item = Option<CallResult>>,
        unfinished: &str,
        end: Option<(Status, String)>,
        ctx: &ContextConfig,
    ) {
        let Phase::AwaitingTools { plans, assistant_size, edits } = std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return;
        };
        if !self.held.is_empty() {
            self.held = Held::default();
        }
        let counter = ctx.counter.as_ref();
        let mut results = results.into_iter();
        // The text of each call's result (in call order), its own bound applied.
        let mut text = |i: usize| {
            let mut r = results.next().flatten().unwrap_or_else(|| CallResult::text(unfinished, true));
            if let Some(Some(e)) = edits.get(i) {
                r.content = format!("{EDIT_NOTE}{}: {}]\n{}", e.by, e.call.arguments, r.content);
            }
            let content = match ctx.max_tool_result_chars {
                // Within the limit in bytes is within it in characters: keep the string as it is.
                Some(max) if r.content.len() > max => bound_text(&r.content, max),
                _ => r.content,
            };
            (content, r.is_error, r.images)
        };
        let n = self.transcript.unanswered().len();
        let recorded = if ctx.max_context.is_none() {
            self.record_each(n, text, counter)
        } else {
            let mut texts = std::mem::take(&mut self.spare_texts);
            texts.extend((0..n).map(|i| {
                let (content, is_error, images) = text(i);
                (content, is_error, images, 0u64)
            }));
            self.record_shared(texts, assistant_size, ctx)
        };
        if !recorded {
            return;
        }
        self.spare_plans(plans);
        if let Some((status, reason)) = end {
            self.end(status, None, Some(reason));
        }
    }

    /// Records the results as they come, each answering the first call without one (no context budget:
    /// nothing to share out). False when one could not be recorded (the run then ended).
    fn record_each(
        &mut self,
        n: usize,
        mut text: impl FnMut(usize) -> (String, bool, Vec<Image>),
        counter: &dyn TokenCounter,
    ) -> bool {
        for i in 0..n {
            let (content, is_error, images) = text(i);
            let call_id = self.transcript.unanswered().first().map_or_else(|| Arc::from(""), Arc::clone);
            let result = ToolResult { call_id, content, is_error, images };
            if let Err(e) = self.transcript.push_result(result, counter) {
                self.end(Status::ModelError, None, Some(format!("internal: {e}")));
                return false;
            }
        }
        true
    }

    /// Records the results under the context budget: bounded together so that the newest group fits, then
    /// recorded in call order. `texts` (text, error, images, size to be measured) is storage kept from one
    /// batch to the next. False when one could not be recorded (the run then ended).
    fn record_shared(&mut self, mut texts: Vec<ResultText>, assistant_size: u64, ctx: &ContextConfig) -> bool {
        let counter = ctx.counter.as_ref();
        let budget = ctx.max_context.unwrap_or(u64::MAX);
        let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
        let mut available =
            budget.saturating_sub(fixed).saturating_sub(self.transcript.first_size()).saturating_sub(assistant_size);
        // Images are not cut: when the batch's images do not fit with room for the texts, they are left
        // out, and each result that had some says so.
        let images: u64 = texts.iter().flat_map(|t| &t.2).fold(0u64, |a, i| a.saturating_add(counter.count_image(i)));
        if images > 0 {
            if images.saturating_add(MIN_RESULT_UNITS.saturating_mul(texts.len() as u64)) > available {
                for t in texts.iter_mut().filter(|t| !t.2.is_empty()) {
                    let n = std::mem::take(&mut t.2).len();
                    t.0.push_str(&format!("\n[{n} image(s) left out: they do not fit the context budget]"));
                }
            } else {
                available -= images;
            }
        }
        let mut total = 0u64;
        for t in texts.iter_mut() {
            t.3 = counter.count(&t.0);
            total = total.saturating_add(t.3);
        }
        if total > available {
            let sizes: Vec<u64> = texts.iter().map(|t| t.3).collect();
            let shares = fair_shares(&sizes, available);
            for (t, share) in texts.iter_mut().zip(shares) {
                if t.3 > share {
                    t.0 = bound_to_units(&t.0, share, counter).0;
                    t.3 = counter.count(&t.0);
                }
            }
        }
        for (content, is_error, images, size) in texts.drain(..) {
            let call_id = self.transcript.unanswered().first().map_or_else(|| Arc::from(""), Arc::clone);
            let result = ToolResult { call_id, content, is_error, images };
            // Measured above with the same counter: what `push_result` would measure.
            if let Err(e) = self.transcript.push_result_measured(result, size) {
                self.end(Status::ModelError, None, Some(format!("internal: {e}")));
                return false;
            }
        }
        self.spare_texts = texts;
        true
    }

    /// Keeps the recorded batch's plans' storage for the next batch (no allocation per step).
    #[inline]
    fn spare_plans(&mut self, mut plans: Vec<super::Plan>) {
        plans.clear();
        self.spare_plans = plans;
    }

    /// Ends the run from outside (cancellation or deadline between steps). A pending batch is completed
    /// with an error result for every call, so the transcript stays coherent.
    pub fn interrupt(&mut self, status: Status, reason: String, ctx: &ContextConfig) {
        match self.phase {
            Phase::AwaitingTools { .. } => {
                let n = match &self.phase {
                    Phase::AwaitingTools { plans, .. } => plans.len(),
                    _ => 0,
                };
                let unfinished = format!("aborted: {reason}");
                self.record_batch(vec![None; n], &unfinished, Some((status, reason)), ctx);
            }
            Phase::Ready | Phase::Compacting { .. } => {
                self.end(status, None, Some(reason));
            }
            Phase::Done { .. } => {}
        }
    }
}

/// How the result of a call whose arguments a hook or an approver changed begins: this, who changed them,
/// `: `, the arguments they run with, `]` and a newline, then the tool's result.
pub(super) const EDIT_NOTE: &str = "[the arguments were changed by ";

/// A recorded tool result without the note a run puts before the result of a call whose arguments a hook or
/// an approver changed: what the tool itself answered (a replay answers with it, and the run adds the note
/// again).
///
/// ```
/// assert_eq!(reins::without_edit_note("[the arguments were changed by the approver: {\"a\":1}]\nok"), "ok");
/// assert_eq!(reins::without_edit_note("ok"), "ok");
/// ```
pub fn without_edit_note(content: &str) -> &str {
    content.strip_prefix(EDIT_NOTE).and_then(|rest| rest.split_once("]\n")).map_or(content, |(_, after)| after)
}
