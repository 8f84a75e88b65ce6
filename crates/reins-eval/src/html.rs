//! The HTML report: one self-contained page (the session page's approach: a Content-Security-Policy with no network
//! access, style and script inline under a nonce, the data as an inert JSON block), paged so that thousands of cases
//! stay fast: the script builds only the rows of the page shown, with `textContent` (never HTML from the data).
//! With [`write_session_pages`] each attempt's session page (`reins-view`'s, as `reins sessions view` writes it)
//! is written beside the report, in `sessions/ID.html`, and [`html_linked`]'s report links each attempt to it by a
//! relative link (the pair can be moved or archived together; nothing is served).

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::error::EvalError;
use crate::report::Summary;

/// The directory beside the report that holds the session pages.
pub const SESSIONS_DIR: &str = "sessions";

/// Cases per page.
pub const PAGE_SIZE: usize = 100;

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;width:100%}\
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}td.n{text-align:right}\
.ok{color:#176f2c}.fail{color:#b3261e}.infra{color:#8a5a00}nav button{margin:0 .3em}code{font-size:12px}";

const SCRIPT: &str = r#"
const data = JSON.parse(document.getElementById('eval-data').textContent);
const PAGE = Number(document.body.dataset.page);
const root = document.getElementById('report');
const links = data.session_pages || null;
const missing = new Set(links ? links.missing : []);
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function num(x, d) { return x === null || x === undefined ? '-' : Number(x).toFixed(d); }
root.appendChild(el('h1', 'Eval ' + data.id + ' of ' + data.suite));
root.appendChild(el('p', data.done + ' of ' + data.planned + ' attempts, ' + data.epochs + ' epoch(s)' + (data.complete ? '' : ' (incomplete)')));
for (const agent of data.agents) {
  const sec = el('section');
  sec.appendChild(el('h2', 'Agent ' + agent.label + (agent.path ? ' (' + agent.path + ')' : '')));
  sec.appendChild(el('p', 'mean ' + num(agent.mean, 3) + ' ± ' + num(agent.se, 3) + ' (95% CI ' + num(agent.ci95[0], 3) + '..' + num(agent.ci95[1], 3) + '); ' + agent.cases.length + ' cases, ' + agent.passed + ' passed, ' + agent.failed + ' failed, ' + agent.infra_failures.length + ' infrastructure failures; cost $' + num(agent.cost_usd, 4)));
  const nav = el('nav'); const table = el('table'); const info = el('span');
  const head = el('tr');
  for (const h of ['case', 'score', 'passed', 'pass@1', 'pass@k', 'pass^k', 'cost', 'steps', 'why', 'sessions']) head.appendChild(el('th', h));
  const body = el('tbody');
  table.appendChild(el('thead')).appendChild(head); table.appendChild(body);
  const pages = Math.max(1, Math.ceil(agent.cases.length / PAGE));
  let page = 0;
  function show() {
    body.replaceChildren();
    for (const c of agent.cases.slice(page * PAGE, page * PAGE + PAGE)) {
      const tr = el('tr');
      tr.appendChild(el('td', c.id));
      tr.appendChild(el('td', num(c.mean, 2), 'n'));
      const verdict = c.attempts === 0 && c.infra.length ? 'infra' : (c.passed ? 'ok' : 'fail');
      tr.appendChild(el('td', c.passes + '/' + c.attempts, verdict));
      tr.appendChild(el('td', num(c.pass_at_1, 2), 'n'));
      tr.appendChild(el('td', num(c.pass_at_k, 2), 'n'));
      tr.appendChild(el('td', num(c.pass_hat_k, 2), 'n'));
      tr.appendChild(el('td', num(c.cost_usd, 4), 'n'));
      tr.appendChild(el('td', num(c.steps, 1), 'n'));
      tr.appendChild(el('td', c.failures.concat(c.infra.map(i => 'infrastructure: ' + i)).join('\n')));
      const s = el('td');
      for (const id of c.sessions) {
        if (links && !missing.has(id)) {
          const a = el('a', 'session ' + id.slice(0, 8)); a.href = links.dir + '/' + encodeURIComponent(id) + '.html'; a.title = id;
          s.appendChild(a);
        } else {
          s.appendChild(el('code', 'reins sessions view ' + id));
        }
        s.appendChild(el('br'));
      }
      tr.appendChild(s);
      body.appendChild(tr);
    }
    info.textContent = 'page ' + (page + 1) + ' of ' + pages;
  }
  const prev = el('button', 'previous'); const next = el('button', 'next');
  prev.onclick = () => { if (page > 0) { page--; show(); } };
  next.onclick = () => { if (page + 1 < pages) { page++; show(); } };
  nav.append(prev, info, next);
  sec.append(nav, table);
  root.appendChild(sec);
  show();
}
"#;

/// The report page of `summary`; each attempt's session is named by the command that writes its page.
pub fn html(summary: &Summary) -> Result<String, EvalError> {
    page(summary, None)
}

/// The report page of `summary` with a link from each attempt to its session page in `sessions/ID.html` beside
/// the report (see [`write_session_pages`]); the sessions in `pages.missing` are named as by [`html`] instead.
pub fn html_linked(summary: &Summary, pages: &SessionPages) -> Result<String, EvalError> {
    page(summary, Some(pages))
}

fn page(summary: &Summary, pages: Option<&SessionPages>) -> Result<String, EvalError> {
    let bad = |e: serde_json::Error| EvalError::Io(e.to_string());
    let mut value = serde_json::to_value(summary).map_err(bad)?;
    if let (Some(p), Some(object)) = (pages, value.as_object_mut()) {
        object.insert(
            "session_pages".into(),
            serde_json::json!({"dir": SESSIONS_DIR, "missing": p.missing.iter().collect::<Vec<_>>()}),
        );
    }
    let data = reins_view::escape::json_for_html(&value).map_err(bad)?;
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let csp = reins_view::csp(&nonce, false);
    let title = reins_view::escape::html_text(&format!("Eval {} of {}", summary.id, summary.suite));
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{title}</title>\
<style nonce=\"{nonce}\">{STYLE}</style></head>\
<body data-page=\"{PAGE_SIZE}\"><div id=\"report\"></div>\
<script type=\"application/json\" id=\"eval-data\">{data}</script>\
<script nonce=\"{nonce}\">{SCRIPT}</script></body></html>\n"
    ))
}

/// The session pages [`write_session_pages`] made.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SessionPages {
    /// Pages written.
    pub written: usize,
    /// Pages already there (a session of a finished attempt does not change), left as they were.
    pub kept: usize,
    /// Sessions that have no page: not in the store any more (pruned), or an id that is not a file name.
    pub missing: BTreeSet<String>,
}

/// Writes the session page of every attempt of `summary` from `store` into `dir/sessions/ID.html` (the directory
/// made private; each page written whole through a temporary file renamed over it, readable by its owner only).
/// A page already there is kept (a finished attempt's session does not change), so writing the report of a
/// resumed or re-scored eval again writes only the new pages.
pub fn write_session_pages(
    store: &reins_store::Store,
    summary: &Summary,
    dir: &Path,
) -> Result<SessionPages, EvalError> {
    use std::io::Write as _;
    use std::os::unix::fs::DirBuilderExt as _;
    let out = dir.join(SESSIONS_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&out)
        .map_err(|e| EvalError::Io(format!("cannot create {}: {e}", out.display())))?;
    let ids: BTreeSet<&String> =
        summary.agents.iter().flat_map(|a| a.cases.iter()).flat_map(|c| c.sessions.iter()).collect();
    let mut pages = SessionPages::default();
    for id in ids {
        let file_name = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let path = out.join(format!("{id}.html"));
        if !file_name {
            pages.missing.insert(id.clone());
            continue;
        }
        if path.is_file() {
            pages.kept += 1;
            continue;
        }
        // Exactly this session (never a prefix's match): a pruned one has no page.
        let Ok(session) = store.load(id).map(|s| (s.id() == id.as_str()).then_some(s)) else {
            pages.missing.insert(id.clone());
            continue;
        };
        let Some(session) = session else {
            pages.missing.insert(id.clone());
            continue;
        };
        let html = reins_view::session_html(&reins_view::build(&session))
            .map_err(|e| EvalError::Io(format!("the page of session {id}: {e}")))?;
        let write = |e: std::io::Error| EvalError::Io(format!("cannot write {}: {e}", path.display()));
        let mut tmp =
            tempfile::Builder::new().prefix(".reins-session-").suffix(".tmp").tempfile_in(&out).map_err(write)?;
        tmp.write_all(html.as_bytes()).map_err(write)?;
        tmp.persist(&path).map_err(|e| write(e.error))?;
        pages.written += 1;
    }
    Ok(pages)
}
