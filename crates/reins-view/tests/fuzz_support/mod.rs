//! The check of the `session_view` fuzz target (`fuzz/fuzz_targets/session_view.rs`), also run as a property
//! test: bytes → the entries of a session (one JSON value a line, the kind picked by the line's first byte)
//! and a request target → the view, the page and the server's parsers. Never a panic; the page's data
//! block never holds `<`, `>`, `&`, U+2028 or U+2029 and parses back.

/// Checks one input; an `Err` says what broke.
pub fn check(data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let target = lines.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let _ = reins_view::server::route(path);
    if let Some(t) = reins_view::server::query_token(query) {
        let _ = reins_view::server::same_token(t.as_bytes(), b"00");
    }
    let kinds = ["run_start", "message", "response", "event", "run_end", "other"];
    let entries = lines
        .enumerate()
        .map(|(i, line)| {
            let k = line.bytes().next().map_or(0, |b| usize::from(b) % kinds.len());
            let data =
                serde_json::from_str(line.get(1..).unwrap_or("")).unwrap_or(serde_json::Value::String(line.to_owned()));
            reins_store::Entry {
                seq: i as u64,
                run: 1 + (i as u64 / 7),
                kind: kinds[k].to_owned(),
                msg_index: (k == 1).then_some(i as u64),
                ts: "2026-01-01T00:00:00Z".into(),
                data,
            }
        })
        .collect();
    let summary: reins_store::SessionSummary = serde_json::from_value(serde_json::json!({
        "id": target, "created_at": target, "updated_at": "", "model": target, "workspace": null,
        "status": "running", "runs": 1, "steps": 0, "tool_calls": 0, "input_tokens": 0, "output_tokens": 0,
        "calls_without_usage": 0, "cost_usd": null, "messages": 0
    }))
    .map_err(|e| e.to_string())?;
    let view = reins_view::build(&reins_store::Session { summary, entries });
    let html = reins_view::session_html(&view).map_err(|e| e.to_string())?;
    let open = "data-page=\"session\">";
    let start = html.find(open).ok_or("no data block")? + open.len();
    let end = start + html[start..].find("</script>").ok_or("the data block does not end")?;
    let block = &html[start..end];
    if let Some(c) = block.chars().find(|c| matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}')) {
        return Err(format!("{c:?} in the data block"));
    }
    let back: serde_json::Value =
        serde_json::from_str(block).map_err(|e| format!("the data block does not parse: {e}"))?;
    if back["session"]["id"] != serde_json::Value::String(target.to_owned()) {
        return Err("the data block does not give back the session".into());
    }
    Ok(())
}
