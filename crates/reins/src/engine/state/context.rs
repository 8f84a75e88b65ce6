//! The context budget and compaction: what the instructions and tool specs take of it, when a summary is
//! due, the summary request, and the summary (or the marker of left-out groups) recorded.

use std::sync::Arc;

use crate::context::{ContextConfig, ContextStrategy, DEFAULT_SUMMARY_PROMPT};
use crate::message::Message;
use crate::model::{ModelError, ModelRequest, ModelResponse};
use crate::outcome::Status;
use crate::registry::Registry;
use crate::transcript::measure_tools;

use super::{Action, Compaction, Phase, RunState, ToolsSize};

impl RunState {
    /// What the instructions and the tool specs take of the context budget: `(instructions, tools)`.
    /// The specs are measured when they are not the ones measured last (once per run unless a tool
    /// source changes them), never per step.
    pub(super) fn fixed_sizes(&mut self, registry: &Registry, ctx: &ContextConfig) -> (u64, u64) {
        let specs = registry.specs();
        let tools = match &self.tools_size {
            Some(t) if Arc::ptr_eq(&t.specs, specs) => t.size,
            _ => {
                let size = measure_tools(specs, ctx.counter.as_ref());
                self.tools_size = Some(ToolsSize { specs: Arc::clone(specs), size });
                size
            }
        };
        (self.instructions_size, tools)
    }

    /// A compaction on request, whatever the threshold (for example between the turns of a chat): the next
    /// action is the summary call replacing every item but the first message and the newest group, as
    /// under the `summarize` strategy; once it is recorded the run ends `completed` with no answer (no model
    /// call is made). Refused, with the reason, when the state is not ready for a model call, when the
    /// context rules are not `summarize` under a budget (the summary would not change what the model is
    /// sent), or when there is nothing to compact yet.
    pub fn compact_now(&mut self, ctx: &ContextConfig) -> Result<(), String> {
        if !matches!(self.phase, Phase::Ready) {
            return Err("the run is not between two model calls".into());
        }
        if ctx.strategy != ContextStrategy::Summarize || ctx.max_context.is_none() {
            return Err("compaction needs the summarize strategy and a context budget".into());
        }
        let upto = self
            .transcript
            .compaction_cut(0)
            .filter(|&g| g > 1)
            .ok_or_else(|| "there is nothing to compact yet".to_owned())?;
        let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
        let chars_before = fixed.saturating_add(self.transcript.view_size());
        self.phase = Phase::Compacting { upto, chars_before, then_end: true };
        Ok(())
    }

    /// The most a summary may take, in the counter's unit: a quarter of the compaction threshold.
    pub(super) fn max_summary(full: u64, ctx: &ContextConfig) -> u64 {
        (Self::threshold(full, ctx) / 4).max(1)
    }

    pub(super) fn threshold(full: u64, ctx: &ContextConfig) -> u64 {
        let at = if ctx.compact_at.is_finite() && ctx.compact_at > 0.0 { ctx.compact_at.min(1.0) } else { 0.8 };
        (full as f64 * at) as u64
    }

    /// Under `summarize`: when what the model would see passes the threshold, plans a compaction of the
    /// oldest groups, enough of them to bring the context to half the threshold (with room for the
    /// summary), the newest group always kept.
    pub(super) fn plan_compaction(
        &mut self,
        full: u64,
        fixed: u64,
        ctx: &ContextConfig,
    ) -> Option<(ModelRequest, Compaction)> {
        let threshold = Self::threshold(full, ctx);
        let before = fixed.saturating_add(self.transcript.view_size());
        if before <= threshold {
            return None;
        }
        let rest = (threshold / 2)
            .saturating_sub(fixed)
            .saturating_sub(self.transcript.first_size())
            .saturating_sub(Self::max_summary(full, ctx));
        let upto = self.transcript.compaction_cut(rest)?;
        self.phase = Phase::Compacting { upto, chars_before: before, then_end: false };
        let request = self.compaction_request(upto, ctx);
        Some((request, Compaction { items: upto as u64 - 1, chars_before: before, chars_after: 0, fallback: None }))
    }

    /// The summary request: the summary prompt as instructions, and one user message holding the task (the
    /// first message), the summary being replaced, if any, and exactly the groups being replaced. No tools.
    pub(super) fn compaction_request(&self, upto: usize, ctx: &ContextConfig) -> ModelRequest {
        use std::fmt::Write as _;
        let (prev, items) = self.transcript.replaced(upto);
        let mut text = String::from("The task (the first user message of the run):\n<task>\n");
        if let Some(first) = self.transcript.conversation().get(0) {
            text.push_str(first.content());
        }
        text.push_str("\n</task>\n");
        if let Some(p) = prev {
            let _ = write!(
                text,
                "The summary of the history before the turns below:\n<summary>\n{}\n</summary>\n",
                p.content()
            );
        }
        text.push_str("The turns to compact, oldest first:\n<turns>\n");
        for m in items {
            match m {
                Message::User { content, images } => {
                    let _ = writeln!(text, "[user]\n{content}");
                    if !images.is_empty() {
                        let _ = writeln!(text, "[{} image(s)]", images.len());
                    }
                }
                Message::Assistant { content, tool_calls, .. } => {
                    let _ = writeln!(text, "[assistant]\n{content}");
                    for c in tool_calls {
                        let _ = writeln!(text, "[tool call {} {}] {}", c.id, c.name, c.arguments);
                    }
                }
                Message::ToolResult(r) => {
                    let tag = if r.is_error { " error" } else { "" };
                    let _ = writeln!(text, "[tool result {}{tag}]\n{}", r.call_id, r.content);
                }
                Message::Summary { content, .. } => {
                    let _ = writeln!(text, "[summary]\n{content}");
                }
            }
        }
        text.push_str("</turns>\nWrite the summary now.");
        let prompt = ctx.summary_prompt.clone().unwrap_or_else(|| Arc::from(DEFAULT_SUMMARY_PROMPT));
        ModelRequest {
            instructions: Some(prompt),
            messages: crate::model::Conversation::from_messages([Message::user(text)]),
            tools: Arc::from(Vec::new()),
            cache_key: None,
        }
    }

    /// Takes the answer to a summary call and records the compaction as an item of the transcript: the
    /// summary, or — when the call failed, or its answer is empty, calls tools or is longer than a quarter
    /// of the threshold — the marker of left-out groups. The run never fails because of a compaction,
    /// except when the call's usage passes a token limit. Returns what was recorded.
    pub fn on_compaction_response(
        &mut self,
        result: Result<ModelResponse, ModelError>,
        ctx: &ContextConfig,
    ) -> Option<Compaction> {
        let Phase::Compacting { upto, chars_before, then_end } = self.phase else {
            return None;
        };
        self.phase = Phase::Ready;
        let counter = ctx.counter.as_ref();
        let max = ctx.max_context.map_or(u64::MAX, |full| Self::max_summary(full, ctx));
        let items = upto - 1;
        let summary = match result {
            Err(e) => Err(format!("the summary call failed: {e}")),
            Ok(r) => {
                if let Some(usage) = self.usage.add(r.usage.as_ref()) {
                    self.usage = usage;
                    let price = match &r.answered_by {
                        // Another model of a fallback answered: its price (the cost unknown without one).
                        Some(by) => {
                            self.fallback_priced |= by.price.is_some();
                            by.price
                        }
                        None if self.own_compact_model => self.compact_price,
                        None => self.price,
                    };
                    if price.is_none() && r.usage.is_some() {
                        self.unpriced_calls += 1;
                    }
                    self.charge(price, r.usage.as_ref());
                }
                if !r.tool_calls.is_empty() {
                    Err("the summary call answered with tool calls".to_owned())
                } else if r.text.trim().is_empty() {
                    Err("the summary is empty".to_owned())
                } else {
                    let size = counter.count(&r.text);
                    if size > max {
                        Err(format!("the summary is too long ({size} {} > {max})", counter.unit()))
                    } else {
                        Ok(r.text)
                    }
                }
            }
        };
        let (content, fallback) = match summary {
            Ok(text) => (format!("[Summary of the {items} earlier items of this conversation]\n{text}"), None),
            Err(why) => {
                let lo = self.transcript.summary().map_or(1, |(_, b)| b);
                let groups = self.transcript.groups_between(lo, upto);
                (drop_marker_text(groups, items), Some(why))
            }
        };
        if let Err(e) = self.transcript.push_summary(content, items as u64, counter) {
            self.end(Status::ModelError, None, Some(format!("internal: {e}")));
            return None;
        }
        self.compactions += 1;
        let fixed = self.instructions_size.saturating_add(self.tools_size.as_ref().map_or(0, |t| t.size));
        let done = Compaction {
            items: items as u64,
            chars_before,
            chars_after: fixed.saturating_add(self.transcript.view_size()),
            fallback,
        };
        if let Some(detail) = self.token_limit_hit() {
            self.end(Status::TokenLimit, None, Some(detail));
        } else if let Some(detail) = self.cost_limit_hit() {
            self.end(Status::CostLimit, None, Some(detail));
        } else if then_end {
            self.end(Status::Completed, None, None);
        }
        Some(done)
    }

    /// The model call of a run ready for one: a compaction first when one is due (under `summarize`), else
    /// the request with what of the transcript fits the context budget left after the instructions and tool
    /// specs. The run ends `context_limit` when even the first message (and the newest turn) cannot fit.
    pub(super) fn model_call(&mut self, registry: &Registry, ctx: &ContextConfig) -> Action<'static> {
        let mut fixed = 0;
        let budget = match ctx.max_context {
            None => None,
            Some(budget) => {
                let (instructions, tools) = self.fixed_sizes(registry, ctx);
                fixed = instructions.saturating_add(tools);
                let first = self.transcript.first_size();
                if fixed > 0 && fixed.saturating_add(first) > budget {
                    let unit = ctx.counter.unit();
                    self.end(
                        Status::ContextLimit,
                        None,
                        Some(format!(
                            "context limit: the instructions ({instructions} {unit}) and tool specs ({tools} {unit}) plus the first user message ({first} {unit}) exceed the context budget ({budget} {unit})"
                        )),
                    );
                    return Action::Finished;
                }
                Some(budget - fixed)
            }
        };
        if let (ContextStrategy::Summarize, Some(full)) = (ctx.strategy, ctx.max_context) {
            if let Some((request, plan)) = self.plan_compaction(full, fixed, ctx) {
                return Action::Compact(request, plan);
            }
        }
        // The newest summary's view matters only under `summarize` with a budget: made only then.
        let view = match (ctx.strategy, budget) {
            (ContextStrategy::Summarize, Some(_)) => self.transcript.summary_view(),
            _ => None,
        };
        let selected = match (ctx.strategy, budget, view) {
            (_, None, _) => self.transcript.select(None, ctx.counter.unit()),
            (ContextStrategy::Summarize, Some(budget), Some(view)) => {
                let size = self.transcript.view_size();
                if size > budget {
                    Err(crate::context::ContextError(format!(
                        "the first user message, the newest summary and what follows it ({size} {}) exceed the context budget ({budget} {})",
                        ctx.counter.unit(),
                        ctx.counter.unit()
                    )))
                } else {
                    Ok(view)
                }
            }
            (_, Some(budget), _) => self.transcript.select_marked(Some(budget), ctx.counter.as_ref()),
        };
        match selected {
            Ok(messages) => Action::CallModel(ModelRequest {
                instructions: self.instructions.clone(),
                messages,
                tools: registry.specs().clone(),
                cache_key: None,
            }),
            Err(e) => {
                let after = if fixed > 0 {
                    format!(" left after the instructions and tool specs ({fixed} {})", ctx.counter.unit())
                } else {
                    String::new()
                };
                self.end(Status::ContextLimit, None, Some(format!("context limit: {e}{after}")));
                Action::Finished
            }
        }
    }
}

pub(super) fn drop_marker_text(groups: usize, items: usize) -> String {
    crate::transcript::drop_marker(groups, items).content().to_owned()
}
