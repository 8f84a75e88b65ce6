//! The HTML report: one self-contained page (the session page's approach: a Content-Security-Policy with no network
//! access, style and script inline under a nonce, the data as an inert JSON block), paged so that thousands of cases
//! stay fast: the script builds only the rows of the page shown, with `textContent` (never HTML from the data).

use crate::error::EvalError;
use crate::report::Summary;

/// Cases per page.
pub const PAGE_SIZE: usize = 100;

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;width:100%}\
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}td.n{text-align:right}\
.ok{color:#176f2c}.fail{color:#b3261e}.infra{color:#8a5a00}nav button{margin:0 .3em}code{font-size:12px}";

const SCRIPT: &str = r#"
const data = JSON.parse(document.getElementById('eval-data').textContent);
const PAGE = Number(document.body.dataset.page);
const root = document.getElementById('report');
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
      const s = el('td'); for (const id of c.sessions) { s.appendChild(el('code', 'reins sessions view ' + id)); s.appendChild(el('br')); }
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

/// The report page of `summary`.
pub fn html(summary: &Summary) -> Result<String, EvalError> {
    let data = reins_view::escape::json_for_html(summary).map_err(|e| EvalError::Io(e.to_string()))?;
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
