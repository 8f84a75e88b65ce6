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

/// Prints each event as a readable progress line on stderr.
pub fn progress_observer(event: &Event) -> Result<(), ObserverError> {
    if let Some(line) = progress_line(event) {
        errln!("{line}");
    }
    Ok(())
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
                EventKind::RunStart { tools, .. } => {
                    Some(format!("    ▷ sub-agent {name} · run {} · tools: {}", event.run_id, tools.join(", ")))
                }
                EventKind::RunEnd { status, steps, tool_calls, .. } => {
                    Some(format!("    ◁ sub-agent {name} · {status} · {steps} step(s) · {tool_calls} tool call(s)"))
                }
                _ => run_line(event).map(|l| format!("    [{name}] {}", l.trim_start())),
            }
        }
    }
}

fn run_line(event: &Event) -> Option<String> {
    let line = match &event.kind {
        EventKind::RunStart { tools, session_id, .. } => {
            let session = session_id.as_deref().map(|s| format!(" · session {s}")).unwrap_or_default();
            format!("▶ run {}{session} · tools: {}", event.run_id, tools.join(", "))
        }
        EventKind::ModelStart { .. } => return None,
        EventKind::ModelEnd { step, duration_ms, tool_calls, text, .. } => {
            let text = text.as_deref().filter(|t| !t.is_empty()).map(preview).unwrap_or_default();
            format!("  step {step} · model {duration_ms:.1} ms · {tool_calls} tool call(s) {text}")
        }
        EventKind::ModelError { step, error, .. } => format!("  step {step} · model error: {}", preview(error)),
        EventKind::ToolStart { name, arguments, .. } => {
            let args = arguments.as_ref().map(|a| preview(&a.to_string())).unwrap_or_default();
            format!("    → {name} {args}")
        }
        EventKind::ToolEnd { name, is_error, duration_ms, content, .. } => {
            let mark = if *is_error { "error" } else { "ok" };
            let content = content.as_deref().map(preview).unwrap_or_default();
            format!("    ← {name} [{mark}] {duration_ms:.1} ms {content}")
        }
        EventKind::CompactionStart { .. } => return None,
        EventKind::CompactionEnd { items, chars_before, chars_after, duration_ms, fallback, .. } => {
            let how = match fallback {
                None => "summarized".to_owned(),
                Some(why) => format!("left out (no summary: {})", preview(why)),
            };
            format!(
                "  ⇊ compaction · {items} earlier items {how} · context {chars_before} → {chars_after} · {duration_ms:.1} ms"
            )
        }
        EventKind::ApprovalRequested { calls, .. } => {
            let list: Vec<String> =
                calls.iter().map(|c| format!("{} {} ({})", c.call_id, c.name, preview(&c.reason))).collect();
            format!("  ? approval needed: {}", list.join("; "))
        }
        EventKind::ApprovalDecided { call_id, name, decision, reason, .. } => {
            let why = reason.as_deref().map(|r| format!(": {}", preview(r))).unwrap_or_default();
            format!("  ✓ {decision} {call_id} {name}{why}")
        }
        EventKind::Hook { hook_event, hook, call_id, decision, reason, error, duration_ms } => {
            let call = call_id.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
            let why = match (error, reason) {
                (Some(e), _) => format!(" (failed: {})", preview(e)),
                (None, Some(r)) => format!(": {}", preview(r)),
                _ => String::new(),
            };
            format!("    ⚑ {hook_event} hook {}{call} · {decision}{why} · {duration_ms:.1} ms", preview(hook))
        }
        EventKind::LimitHit { status, detail } => format!("  limit hit ({status}): {detail}"),
        EventKind::RunEnd { .. } => return None,
    };
    Some(line)
}

/// Prints the end of a run: the answer on stdout, the status line on stderr.
pub fn summary(outcome: &Outcome) {
    if let Some(answer) = &outcome.answer {
        outln!("{answer}");
    }
    for line in status_lines(outcome) {
        errln!("{line}");
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
    lines.extend(crate::agents_cli::summary_lines(outcome));
    lines
}
