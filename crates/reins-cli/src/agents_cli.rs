//! Sub-agents on the command line (`[agents.NAME]` in the agent file): their lines in the summary. (Their cost is
//! the core's: each sub-agent's run priced at its own model, `agents.NAME.cost_usd`, added to the run's.)

use reins::Outcome;

/// One summary line for each sub-agent of the run.
pub fn summary_lines(outcome: &Outcome) -> Vec<String> {
    outcome
        .agents
        .iter()
        .map(|(name, a)| {
            let u = &a.usage;
            let usage = if u.calls_with_usage == 0 {
                "usage unknown".to_owned()
            } else {
                format!("usage {} in / {} out", u.input_tokens, u.output_tokens)
            };
            format!(
                "  sub-agent {}: {} run(s) · {} step(s) · {} tool call(s) · {usage}",
                crate::render::preview(name),
                a.runs,
                a.steps,
                a.tool_calls
            )
        })
        .collect()
}
