//! A model response taken: validated, its step and usage counted against the budgets, then a final answer
//! (under an output schema, one that matches it) or a batch admitted, each call validated and put to the
//! policy.

use crate::context::ContextConfig;
use crate::cost::Price;
use crate::message::{Message, ToolCall, ToolResult};
use crate::model::{FinishReason, ModelError, ModelResponse};
use crate::outcome::Status;
use crate::output::{FINAL_ANSWER_TOOL, WRAPPED_KEY, json_in_text, reminder};
use crate::policy::{Decision, Policy};
use crate::registry::Registry;
use crate::transcript::{TranscriptError, measure};
use crate::validate::check_response;

use super::{Admission, MIN_RESULT_UNITS, Phase, Plan, RunState};

impl RunState {
    /// Takes a model's answer. In order: the response is validated; the step and its usage are counted;
    /// the token limits are checked; a final answer completes the run; a batch must fit the remaining
    /// tool-call budget and the context budget whole, or it is refused whole and not recorded; each call
    /// is validated and put to the policy; then the turn is recorded and the batch admitted.
    pub fn on_model_response(
        &mut self,
        mut result: Result<ModelResponse, ModelError>,
        registry: &Registry,
        policy: Option<&dyn Policy>,
        ctx: &ContextConfig,
    ) -> Admission {
        self.take_model_response(&mut result, registry, policy, ctx)
    }

    /// [`RunState::on_model_response`] of a response the caller keeps: it is read in place, and its text,
    /// calls, reasoning items and finish reason are moved out of it (left empty), so the response itself is
    /// never copied.
    pub(crate) fn take_model_response(
        &mut self,
        result: &mut Result<ModelResponse, ModelError>,
        registry: &Registry,
        policy: Option<&dyn Policy>,
        ctx: &ContextConfig,
    ) -> Admission {
        if !matches!(self.phase, Phase::Ready) {
            return self.end(
                Status::ModelError,
                None,
                Some("internal: a model response arrived while no model call was due".into()),
            );
        }
        let response = match result {
            Ok(r) => r,
            Err(e) => return self.end(Status::ModelError, None, Some(e.to_string())),
        };
        if let Err(e) = check_response(response) {
            return self.end(Status::ModelError, None, Some(format!("malformed model response: {e}")));
        }
        self.steps += 1;
        let Some(usage) = self.usage.add(response.usage.as_ref()) else {
            return self.end(Status::ModelError, None, Some("invalid usage: the run's token totals overflow".into()));
        };
        self.usage = usage;
        match &response.answered_by {
            // The run's model of unknown price answered: the run's cost is unknown.
            None if self.price.is_none() && response.usage.is_some() => self.unpriced_calls += 1,
            None => self.charge(self.price, response.usage.as_ref()),
            // Another model answered: priced at its price; without one, the run's cost is unknown.
            Some(by) if by.price.is_none() && response.usage.is_some() => self.unpriced_calls += 1,
            Some(by) => {
                self.fallback_priced |= by.price.is_some();
                self.charge(by.price, response.usage.as_ref());
            }
        }
        self.finish_reason = response.finish_reason.take();
        if let Some(detail) = self.token_limit_hit() {
            return self.end(Status::TokenLimit, None, Some(detail));
        }
        if let Some(detail) = self.cost_limit_hit() {
            return self.end(Status::CostLimit, None, Some(detail));
        }
        let (text, tool_calls) = (std::mem::take(&mut response.text), std::mem::take(&mut response.tool_calls));
        // Swapped, not assigned: the state's (empty) list goes back into the response, nothing is dropped here.
        std::mem::swap(&mut self.pending_reasoning, &mut response.reasoning_items);
        let counter = ctx.counter.as_ref();
        if self.output.is_some() {
            match self.take_output(text, tool_calls, registry, ctx) {
                Ok(admission) => return admission,
                Err((text, calls)) => return self.admit_calls(text, calls, registry, policy, ctx),
            }
        }
        if tool_calls.is_empty() {
            if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
                return self.end(Status::ModelError, None, Some(e.to_string()));
            }
            return match final_status(self.finish_reason.as_ref()) {
                None => self.end(Status::Completed, Some(text), None),
                Some((status, why)) => self.end(status, Some(text), Some(why)),
            };
        }
        self.admit_calls(text, tool_calls, registry, policy, ctx)
    }

    /// Under an output schema: a lone valid final-answer call, or a plain-text answer, is taken here; any
    /// other turn (tool calls, an invalid final-answer call) is handed back to be admitted as a batch.
    #[allow(clippy::type_complexity)]
    pub(super) fn take_output(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        registry: &Registry,
        ctx: &ContextConfig,
    ) -> Result<Admission, (String, Vec<ToolCall>)> {
        let counter = ctx.counter.as_ref();
        let Some(state) = self.output.as_ref() else { return Err((text, tool_calls)) };
        let wrapped = state.wrapped;
        let unwrap = |v: &serde_json::Value| if wrapped { v.get(WRAPPED_KEY).cloned() } else { Some(v.clone()) };
        if let [call] = tool_calls.as_slice() {
            if call.name == FINAL_ANSWER_TOOL && registry.check(FINAL_ANSWER_TOOL, &call.arguments).is_ok() {
                let Some(value) = unwrap(&call.arguments) else { return Err((text, tool_calls)) };
                let call_id = String::from(&*call.id);
                let answer = value.to_string();
                if let Err(e) = self.push_turn(text, tool_calls, counter) {
                    return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
                }
                let accepted = ToolResult::new(call_id, "accepted as the final answer", false);
                if let Err(e) = self.transcript.push_result(accepted, counter) {
                    return Ok(self.end(Status::ModelError, None, Some(format!("internal: {e}"))));
                }
                self.set_output_value(value);
                return Ok(self.end(Status::Completed, Some(answer), None));
            }
        }
        if !tool_calls.is_empty() {
            return Err((text, tool_calls));
        }
        // Plain text: JSON that matches the schema (an API's native JSON mode) is the output.
        let mut why = None;
        if let Some(json) = json_in_text(&text) {
            // The tool's own arguments (an API's native format, given the tool's schema), else the bare answer.
            let native = (wrapped && registry.check(FINAL_ANSWER_TOOL, &json).is_ok())
                .then(|| json.get(WRAPPED_KEY).cloned())
                .flatten();
            let (args, value) = match native {
                Some(v) => (json, v),
                None if wrapped => (serde_json::json!({ WRAPPED_KEY: json.clone() }), json),
                None => (json.clone(), json),
            };
            match registry.check(FINAL_ANSWER_TOOL, &args) {
                Ok(_) => {
                    if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
                        return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
                    }
                    self.set_output_value(value);
                    return Ok(self.end(Status::Completed, Some(text), None));
                }
                Err(crate::registry::CallError::InvalidArguments { errors, .. }) => {
                    why = Some(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "));
                }
                Err(e) => why = Some(e.to_string()),
            }
        }
        let told = self.output.as_ref().is_some_and(|o| o.told);
        if let Err(e) = self.push_turn(text.clone(), Vec::new(), counter) {
            return Ok(self.end(Status::ModelError, None, Some(e.to_string())));
        }
        if told {
            // Told once already: the run ends with the text as its answer, no output, and a status of its own.
            let detail = match &why {
                Some(why) => format!("the final answer did not match the output schema: {why}"),
                None => "the final answer did not match the output schema: it held no JSON value".to_owned(),
            };
            return Ok(self.end(Status::OutputInvalid, Some(text), Some(detail)));
        }
        if let Err(e) = self.transcript.push_user(reminder(why.as_deref()), counter) {
            return Ok(self.end(Status::ModelError, None, Some(format!("internal: {e}"))));
        }
        if let Some(o) = self.output.as_mut() {
            o.told = true;
        }
        Ok(Admission::Reminded)
    }

    pub(super) fn set_output_value(&mut self, value: serde_json::Value) {
        if let Some(o) = self.output.as_mut() {
            o.value = Some(value);
        }
    }

    /// The tool-call half of [`RunState::on_model_response`]: the tool-call budget, the context admission,
    /// each call validated and put to the policy, then the turn recorded and the batch admitted.
    pub(super) fn admit_calls(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        registry: &Registry,
        policy: Option<&dyn Policy>,
        ctx: &ContextConfig,
    ) -> Admission {
        let counter = ctx.counter.as_ref();
        let n = tool_calls.len() as u64;
        if let Some(detail) = self.tool_calls_exceeded(n) {
            return self.end(Status::ToolLimit, None, Some(detail));
        }
        let reasoning = std::mem::take(&mut self.pending_reasoning);
        let assistant = Message::Assistant { content: text, tool_calls, reasoning };
        let assistant_size = measure(&assistant, counter);
        if let Some(detail) = self.batch_exceeds_context(n, assistant_size, registry, ctx) {
            return self.end(Status::ContextLimit, None, Some(detail));
        }
        let (plans, stop) = plan_calls(assistant.tool_calls(), registry, policy, std::mem::take(&mut self.spare_plans));
        self.tool_calls += n;
        if let Err(e) = self.transcript.push_measured(assistant, assistant_size) {
            return self.end(Status::ModelError, None, Some(e.to_string()));
        }
        if let Some(reason) = stop {
            let message = format!("not run: the run was stopped by policy: {reason}");
            for id in self.transcript.unanswered().to_vec() {
                let id = String::from(&*id);
                let _ = self.transcript.push_result(ToolResult::new(id, message.clone(), true), counter);
            }
            return self.end(Status::Aborted, None, Some(format!("stopped by policy: {reason}")));
        }
        self.phase = Phase::AwaitingTools { plans, assistant_size, edits: Vec::new() };
        Admission::Batch
    }

    /// Adds one call's cost at `price` (nothing without usage or price).
    pub(super) fn charge(&mut self, price: Option<Price>, usage: Option<&crate::usage::Usage>) {
        if let (Some(p), Some(u)) = (price, usage) {
            self.cost_usd += p.cost(u);
        }
    }

    /// Why a batch of `n` calls does not fit the tool-call budget (the run's calls and its sub-agents'), if
    /// it does not.
    fn tool_calls_exceeded(&self, n: u64) -> Option<String> {
        let max = self.limits.max_tool_calls?;
        let used = if self.agents.is_empty() {
            self.tool_calls
        } else {
            self.tool_calls.saturating_add(self.agent_tool_calls())
        };
        let left = max.saturating_sub(used);
        (n > left).then(|| {
            format!(
                "tool-call limit: a batch of {n} calls does not fit the {left} left of max_tool_calls {max}; none ran"
            )
        })
    }

    /// Why the newest turn (`assistant_size`, `n` calls, each with room for a result) does not fit the context
    /// budget with the first message, the instructions and the tool specs, if it does not.
    fn batch_exceeds_context(
        &mut self,
        n: u64,
        assistant_size: u64,
        registry: &Registry,
        ctx: &ContextConfig,
    ) -> Option<String> {
        let budget = ctx.max_context?;
        let (instructions, tools) = self.fixed_sizes(registry, ctx);
        let fixed = instructions.saturating_add(tools);
        let first = self.transcript.first_size();
        let reserve = n.saturating_mul(MIN_RESULT_UNITS.min(ctx.max_tool_result_chars.map_or(u64::MAX, |c| c as u64)));
        let need = first.saturating_add(assistant_size).saturating_add(reserve).saturating_add(fixed);
        if need <= budget {
            return None;
        }
        let unit = ctx.counter.unit();
        let with_fixed =
            if fixed > 0 { format!(" and the instructions and tool specs ({fixed} {unit})") } else { String::new() };
        Some(format!(
            "context limit: the newest turn ({assistant_size} {unit}, {n} calls, at least {reserve} {unit} for their results) plus the first user message ({first} {unit}){with_fixed} exceeds the context budget ({budget} {unit}); no call ran"
        ))
    }

    /// The limit that ends the run before its next model call, if one is reached: the step limit (its own
    /// steps and its sub-agents'), and the token and cost limits with what its sub-agents spent since the
    /// last response.
    pub(super) fn limit_before_step(&self) -> Option<(Status, String)> {
        if let Some(max) = self.limits.max_steps {
            let agents = if self.agents.is_empty() { 0 } else { self.agent_steps() };
            if self.steps.saturating_add(agents) >= max {
                let of_agents = if agents > 0 { format!(" and {agents} of its sub-agents") } else { String::new() };
                let detail = format!("step limit reached: {} model responses{of_agents} (max_steps {max})", self.steps);
                return Some((Status::StepLimit, detail));
            }
        }
        if self.agents.is_empty() {
            return None;
        }
        // Sub-agents' usage was rolled in after the last response: it may have passed a token limit.
        if let Some(detail) = self.token_limit_hit() {
            let detail = detail.replace("; the turn was not recorded", " (with the sub-agents' usage)");
            return Some((Status::TokenLimit, detail));
        }
        // And their cost a cost limit.
        let detail = self.cost_limit_hit()?;
        Some((Status::CostLimit, detail.replace("; the turn was not recorded", " (with the sub-agents' cost)")))
    }

    pub(super) fn token_limit_hit(&self) -> Option<String> {
        let u = &self.usage;
        let l = &self.limits;
        if l.max_input_tokens.is_none() && l.max_output_tokens.is_none() && l.max_total_tokens.is_none() {
            return None;
        }
        for (name, used, max) in [
            ("input", u.input_tokens, l.max_input_tokens),
            ("output", u.output_tokens, l.max_output_tokens),
            ("total", u.total_tokens, l.max_total_tokens),
        ] {
            if let Some(max) = max {
                if used > max {
                    return Some(format!(
                        "token limit: {used} {name} tokens exceed max_{name}_tokens {max}; the turn was not recorded"
                    ));
                }
            }
        }
        None
    }

    pub(super) fn cost_limit_hit(&self) -> Option<String> {
        let max = self.limits.max_cost_usd?;
        let cost = self.cost_usd().filter(|c| *c > max)?;
        Some(format!("cost limit: the run cost ${cost:.6}, over max_cost_usd ${max}; the turn was not recorded"))
    }

    /// Records the assistant turn of the response being taken, with its reasoning items.
    pub(super) fn push_turn(
        &mut self,
        text: String,
        tool_calls: Vec<ToolCall>,
        counter: &dyn crate::context::TokenCounter,
    ) -> Result<(), crate::transcript::TranscriptError> {
        let reasoning = std::mem::take(&mut self.pending_reasoning);
        self.transcript.push_assistant_message(Message::Assistant { content: text, tool_calls, reasoning }, counter)
    }

    /// A `stop` hook refused the final answer: the run goes on, the model gets `feedback` as a user message
    /// (the answer stays in the transcript; its step counted, so the step limit bounds the loop).
    pub fn refuse_answer(&mut self, feedback: impl Into<String>, ctx: &ContextConfig) -> Result<(), TranscriptError> {
        if !matches!(self.phase, Phase::Done { status: Status::Completed, .. }) {
            return Ok(());
        }
        self.transcript.push_user(feedback, ctx.counter.as_ref())?;
        self.phase = Phase::Ready;
        Ok(())
    }

    /// A final answer could not be checked (a `stop` hook failed): the run ends `aborted` with `error`, the
    /// answer withheld (it stays in the transcript).
    pub fn withhold_answer(&mut self, error: String) {
        if matches!(self.phase, Phase::Done { status: Status::Completed, .. }) {
            self.phase = Phase::Done { status: Status::Aborted, answer: None, error: Some(error) };
        }
    }
}

/// The status of a final answer that did not end naturally, and why: cut by the response cap
/// (`truncated`), refused or filtered (`refused`). `None`: completed.
pub(super) fn final_status(finish: Option<&FinishReason>) -> Option<(Status, String)> {
    match finish? {
        FinishReason::Length => Some((
            Status::Truncated,
            "the answer was cut by the response cap (finish reason `length`): raise the response cap (--max-response-tokens, [provider] max_response_tokens); the partial answer is kept".to_owned(),
        )),
        FinishReason::Refusal => Some((
            Status::Refused,
            "the model refused to answer (finish reason `refusal`); what it said is kept".to_owned(),
        )),
        FinishReason::ContentFilter => Some((
            Status::Refused,
            "a content filter cut the answer (finish reason `content_filter`); the partial answer is kept".to_owned(),
        )),
        FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_) => None,
    }
}

/// Each call of a batch validated against its tool's schema and put to the policy, in order: its plan, and
/// the reason of a policy's `stop` (the calls from that one on get no plan).
/// `plans` is empty storage to reuse.
fn plan_calls(
    calls: &[ToolCall],
    registry: &Registry,
    policy: Option<&dyn Policy>,
    mut plans: Vec<Plan>,
) -> (Vec<Plan>, Option<String>) {
    plans.reserve(calls.len());
    for call in calls {
        let plan = match registry.check(&call.name, &call.arguments) {
            Err(e) => Plan::Reject { message: e.to_string() },
            Ok(_) => match policy.map_or(Decision::Allow, |p| p.check(call)) {
                Decision::Allow => Plan::Run,
                Decision::Deny(reason) => Plan::Reject { message: format!("denied by policy: {reason}") },
                Decision::Stop(reason) => return (plans, Some(reason)),
                Decision::Ask(reason) => Plan::Ask { reason },
            },
        };
        plans.push(plan);
    }
    (plans, None)
}
