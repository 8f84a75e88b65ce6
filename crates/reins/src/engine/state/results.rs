//! The results of the admitted batch recorded: bounded one by one and together under the context budget,
//! an edited call's result noted as such; and a run ended from outside.

use crate::context::{ContextConfig, bound_text, bound_to_units, fair_shares};
use crate::image::Image;
use crate::message::ToolResult;
use crate::outcome::Status;

use super::{CallResult, Held, MIN_RESULT_UNITS, Phase, RunState};

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
        let Phase::AwaitingTools { assistant_size, edits, .. } = std::mem::replace(&mut self.phase, Phase::Ready)
        else {
            return;
        };
        if !self.held.is_empty() {
            self.held = Held::default();
        }
        let counter = ctx.counter.as_ref();
        let mut results = results.into_iter();
        let mut texts: Vec<(String, String, bool, Vec<Image>)> = self
            .transcript
            .unanswered()
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let mut r = results.next().flatten().unwrap_or_else(|| CallResult::text(unfinished, true));
                if let Some(Some(e)) = edits.get(i) {
                    r.content = format!("{EDIT_NOTE}{}: {}]\n{}", e.by, e.call.arguments, r.content);
                }
                let content = match ctx.max_tool_result_chars {
                    // Within the limit in bytes is within it in characters: keep the string as it is.
                    Some(max) if r.content.len() > max => bound_text(&r.content, max),
                    _ => r.content,
                };
                (id.clone(), content, r.is_error, r.images)
            })
            .collect();
        if let Some(budget) = ctx.max_context {
            let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
            let mut available = budget
                .saturating_sub(fixed)
                .saturating_sub(self.transcript.first_size())
                .saturating_sub(assistant_size);
            // Images are not cut: when the batch's images do not fit with room for the texts, they are left
            // out, and each result that had some says so.
            let images: u64 =
                texts.iter().flat_map(|t| &t.3).fold(0u64, |a, i| a.saturating_add(counter.count_image(i)));
            if images > 0 {
                if images.saturating_add(MIN_RESULT_UNITS.saturating_mul(texts.len() as u64)) > available {
                    for t in texts.iter_mut().filter(|t| !t.3.is_empty()) {
                        let n = std::mem::take(&mut t.3).len();
                        t.1.push_str(&format!("\n[{n} image(s) left out: they do not fit the context budget]"));
                    }
                } else {
                    available -= images;
                }
            }
            let sizes: Vec<u64> = texts.iter().map(|t| counter.count(&t.1)).collect();
            if sizes.iter().fold(0u64, |a, s| a.saturating_add(*s)) > available {
                let shares = fair_shares(&sizes, available);
                for (t, (size, share)) in texts.iter_mut().zip(sizes.iter().zip(shares)) {
                    if *size > share {
                        t.1 = bound_to_units(&t.1, share, counter).0;
                    }
                }
            }
        }
        for (call_id, content, is_error, images) in texts {
            if let Err(e) = self.transcript.push_result(ToolResult { call_id, content, is_error, images }, counter) {
                self.end(Status::ModelError, None, Some(format!("internal: {e}")));
                return;
            }
        }
        if let Some((status, reason)) = end {
            self.end(status, None, Some(reason));
        }
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
