//! Readable output: progress lines on stderr, the answer on stdout.

use reins::{Event, EventKind, ObserverError, Outcome, Status};

const PREVIEW: usize = 160;

/// `s` as one line, escaped (newlines shown as ⏎, see [`crate::output::escape`]), cut to at most `PREVIEW`
/// characters.
pub fn preview(s: &str) -> String {
    let one_line = crate::output::escape(s, crate::output::Lines::Join);
    if one_line.chars().count() <= PREVIEW {
        one_line.into_owned()
    } else {
        let cut: String = one_line.chars().take(PREVIEW).collect();
        format!("{cut}…")
    }
}

/// Prints each event as a readable progress line on stderr (coloured on a terminal: see [`colour_on`]).
pub fn progress_observer(event: &Event) -> Result<(), ObserverError> {
    if let Some(line) = progress_line(event) {
        err_styled(&line, style_of(event));
    }
    Ok(())
}

/// The colour of an event's progress line, if it has one.
fn style_of(event: &Event) -> Option<Style> {
    match &event.kind {
        EventKind::RunStart(_) if event.agent.is_none() => Some(Style::Bold),
        EventKind::ToolEnd { is_error: true, .. } | EventKind::ModelError { .. } => Some(Style::Red),
        EventKind::LimitHit { .. } | EventKind::ApprovalRequested { .. } => Some(Style::Yellow),
        EventKind::ToolEnd { .. } | EventKind::ApprovalDecided(_) => Some(Style::Dim),
        _ => None,
    }
}

/// A colour (SGR) for a line of readable output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Bold.
    Bold,
    /// Dimmed.
    Dim,
    /// Red: errors.
    Red,
    /// Green: a completed run.
    Green,
    /// Yellow: limits, waiting.
    Yellow,
}

impl Style {
    fn sgr(self) -> &'static str {
        match self {
            Style::Bold => "1",
            Style::Dim => "2",
            Style::Red => "31",
            Style::Green => "32",
            Style::Yellow => "33",
        }
    }
}

/// Whether readable output on stderr is coloured: never with `NO_COLOR` set (to anything but the empty string);
/// else always with `CLICOLOR_FORCE` set (not `0`); else when stderr is a terminal whose `TERM` is not `dumb`.
pub fn colour_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        if set("NO_COLOR") {
            return false;
        }
        if set("CLICOLOR_FORCE") && std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| v != "0") {
            return true;
        }
        use std::io::IsTerminal as _;
        std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
    })
}

/// Writes `line` (text for people, escaped) on stderr, in `style` when colour is on.
pub fn err_styled(line: &str, style: Option<Style>) {
    match style.filter(|_| colour_on()) {
        Some(style) => {
            let text = crate::output::escape(line, crate::output::Lines::Keep);
            crate::output::stderr_raw(&format!("\x1b[{}m{text}\x1b[0m\n", style.sgr()));
        }
        None => errln!("{line}"),
    }
}

/// A duration as people read it: `0.4 ms`, `820 ms`, `5.3 s`, `5m 35s`, `1h 5m`.
pub fn human_ms(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return format!("{ms} ms");
    }
    if ms < 10.0 {
        return format!("{ms:.1} ms");
    }
    if ms < 1000.0 {
        return format!("{ms:.0} ms");
    }
    let secs = ms / 1000.0;
    if secs < 59.95 {
        return format!("{secs:.1} s");
    }
    // Whole seconds from here on.
    let total = secs.round() as u64;
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 { format!("{h}h {m}m") } else { format!("{m}m {s}s") }
}

/// Prints each event as a readable progress line on stdout.
pub fn progress_stdout(event: &Event) -> Result<(), ObserverError> {
    if let Some(line) = progress_line(event) {
        outln!("{line}");
    }
    Ok(())
}

/// One readable line for an event, if it deserves one: a sub-agent's lines are indented and carry its name.
pub fn progress_line(event: &Event) -> Option<String> {
    match &event.agent {
        None => run_line(event),
        Some(name) => {
            let name = preview(name);
            match &event.kind {
                EventKind::RunStart(e) => {
                    let reins::RunStartData { tools, .. } = &**e;
                    Some(format!("    ▷ sub-agent {name} · run {} · tools: {}", event.run_id, tools.join(", ")))
                }
                EventKind::RunEnd(e) => {
                    let reins::RunEndData { status, steps, tool_calls, .. } = &**e;
                    Some(format!("    ◁ sub-agent {name} · {status} · {steps} step(s) · {tool_calls} tool call(s)"))
                }
                _ => run_line(event).map(|l| format!("    [{name}] {}", l.trim_start())),
            }
        }
    }
}

fn run_line(event: &Event) -> Option<String> {
    let line = match &event.kind {
        EventKind::RunStart(e) => {
            let reins::RunStartData { tools, session_id, .. } = &**e;
            let session = session_id.as_deref().map(|s| format!(" · session {s}")).unwrap_or_default();
            format!("▶ run {}{session} · tools: {}", event.run_id, tools.join(", "))
        }
        EventKind::ModelStart { .. } => return None,
        EventKind::ModelEnd(e) => {
            let reins::ModelEndData { step, duration_ms, tool_calls, text, model, .. } = &**e;
            let text = text.as_deref().filter(|t| !t.is_empty()).map(preview).unwrap_or_default();
            // A step a fallback model answered names it.
            let by = model.as_deref().map(|m| format!(" ({})", preview(m))).unwrap_or_default();
            format!("  step {step} · model{by} {} · {tool_calls} tool call(s) {text}", human_ms(*duration_ms))
        }
        EventKind::ModelError { step, error, .. } => format!("  step {step} · model error: {}", preview(error)),
        EventKind::ToolStart { name, arguments, .. } => {
            let args = arguments.as_ref().map(|a| preview(&a.to_string())).unwrap_or_default();
            format!("    → {name} {args}")
        }
        EventKind::ToolEnd { name, is_error, duration_ms, content, .. } => {
            let mark = if *is_error { "error" } else { "ok" };
            let content = content.as_deref().map(preview).unwrap_or_default();
            format!("    ← {name} [{mark}] {} {content}", human_ms(*duration_ms))
        }
        EventKind::CompactionStart { .. } => return None,
        EventKind::CompactionEnd(e) => {
            let reins::CompactionEndData { items, chars_before, chars_after, duration_ms, fallback, .. } = &**e;
            let how = match fallback {
                None => "summarized".to_owned(),
                Some(why) => format!("left out (no summary: {})", preview(why)),
            };
            format!(
                "  ⇊ compaction · {items} earlier items {how} · context {chars_before} → {chars_after} · {}",
                human_ms(*duration_ms)
            )
        }
        EventKind::ApprovalRequested { calls, .. } => {
            let list: Vec<String> =
                calls.iter().map(|c| format!("{} {} ({})", c.call_id, c.name, preview(&c.reason))).collect();
            format!("  ? approval needed: {}", list.join("; "))
        }
        EventKind::ApprovalDecided(e) => {
            let reins::ApprovalDecidedData { call_id, name, decision, reason, .. } = &**e;
            let why = reason.as_deref().map(|r| format!(": {}", preview(r))).unwrap_or_default();
            format!("  ✓ {decision} {call_id} {name}{why}")
        }
        EventKind::Hook(e) => {
            let reins::HookData { hook_event, hook, call_id, decision, reason, error, duration_ms } = &**e;
            let call = call_id.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
            let why = match (error, reason) {
                (Some(e), _) => format!(" (failed: {})", preview(e)),
                (None, Some(r)) => format!(": {}", preview(r)),
                _ => String::new(),
            };
            format!("    ⚑ {hook_event} hook {}{call} · {decision}{why} · {}", preview(hook), human_ms(*duration_ms))
        }
        EventKind::ToolsChanged { added, removed, changed } => {
            let mut parts = Vec::new();
            for (what, names) in [("added", added), ("removed", removed), ("changed", changed)] {
                if !names.is_empty() {
                    parts.push(format!("{what} {}", names.join(", ")));
                }
            }
            format!("  ↻ tools changed: {}", parts.join("; "))
        }
        EventKind::Elicitation(e) => {
            let reins::ElicitationData { server, tool, outcome, defaults, .. } = &**e;
            let how = if *defaults { " with the form's defaults" } else { "" };
            format!("  ? MCP server {server:?} asked the person during {tool}: {outcome}{how}")
        }
        EventKind::LimitHit { status, detail } => format!("  limit hit ({status}): {detail}"),
        EventKind::RunEnd(_) => return None,
    };
    Some(line)
}

/// Prints the end of a run: the answer on stdout, the status line on stderr.
pub fn summary(outcome: &Outcome) {
    if let Some(answer) = &outcome.answer {
        outln!("{answer}");
    }
    let style = match outcome.status {
        Status::Completed => Style::Green,
        Status::AwaitingApproval => Style::Yellow,
        _ => Style::Red,
    };
    for (i, line) in status_lines(outcome).iter().enumerate() {
        err_styled(line, (i == 0).then_some(style));
    }
}

/// How much of the input was read from (and written to) the prompt cache: ` (1200 read from cache, 35%)`,
/// empty when the cache was not used.
pub fn cache_note(u: &reins::UsageTotals) -> String {
    let (read, write) = (u.cached_input_tokens, u.cache_write_tokens);
    if read == 0 && write == 0 {
        return String::new();
    }
    let share = if u.input_tokens > 0 { read as f64 * 100.0 / u.input_tokens as f64 } else { 0.0 };
    let mut note = format!(" ({read} read from cache, {share:.0}%");
    if write > 0 {
        note.push_str(&format!(", {write} written to it"));
    }
    note.push(')');
    note
}

/// The status line of a run, and its error if it did not complete.
pub fn status_lines(outcome: &Outcome) -> Vec<String> {
    let u = &outcome.usage;
    let usage = if u.calls_with_usage == 0 {
        "usage unknown".to_owned()
    } else {
        format!(
            "usage {} in{} / {} out ({} of {} model calls reported usage)",
            u.input_tokens,
            cache_note(u),
            u.output_tokens,
            u.calls_with_usage,
            u.calls_with_usage + u.calls_without_usage
        )
    };
    let mut lines = vec![format!(
        "■ {} · {} step(s) · {} tool call(s) · {usage}",
        outcome.status, outcome.steps, outcome.tool_calls
    )];
    if outcome.status != Status::Completed {
        if let Some(e) = &outcome.error {
            lines.push(format!("  {e}"));
        }
    }
    lines.extend(sub_agent_lines(outcome));
    lines
}

/// One summary line for each sub-agent of the run (`[agents.NAME]` in the agent file; their cost is the core's:
/// each sub-agent's run priced at its own model, `agents.NAME.cost_usd`, added to the run's).
fn sub_agent_lines(outcome: &Outcome) -> Vec<String> {
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
                preview(name),
                a.runs,
                a.steps,
                a.tool_calls
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::human_ms;

    #[test]
    fn durations_read_as_people_say_them() {
        let cases = [
            (0.42, "0.4 ms"),
            (820.4, "820 ms"),
            (5_300.0, "5.3 s"),
            (335_360.8, "5m 35s"),
            (3_900_000.0, "1h 5m"),
            (59_999.0, "1m 0s"),
        ];
        for (ms, shown) in cases {
            assert_eq!(human_ms(ms), shown, "{ms}");
        }
    }
}
