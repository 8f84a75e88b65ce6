//! The page: one HTML document with its style, script and data inline, under a Content-Security-Policy
//! that allows no network access (`default-src 'none'`), only the page's own style and script (by a nonce
//! made for each page) and, for a page served by `reins ui`, requests to the same server.

use serde::Serialize;

use crate::ViewError;
use crate::escape::json_for_html;
use crate::model::View;

const CSS: &str = include_str!("../assets/view.css");
const JS: &str = include_str!("../assets/view.js");

/// Which page the script builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// One session's timeline, chart and transcript.
    Session,
    /// The store's session list (`reins ui`).
    List,
}

/// A fresh nonce: 128 bits from the operating system's CSPRNG, as hex.
pub fn nonce() -> Result<String, ViewError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| ViewError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The Content-Security-Policy of a page with `nonce`: no network access; with `same_origin`, requests to
/// the server that served it (the live refresh of `reins ui`).
pub fn csp(nonce: &str, same_origin: bool) -> String {
    let connect = if same_origin { " connect-src 'self';" } else { "" };
    format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}';{connect} img-src 'none'; \
         base-uri 'none'; form-action 'none'"
    )
}

/// The HTML of a page showing `data` (a [`View`] for [`PageKind::Session`]). `same_origin`: the page may
/// ask the server that served it for fresh data. Returns the page and its Content-Security-Policy (also in
/// the page, as a meta element; a server sends it as a header too).
pub fn page(kind: PageKind, data: &impl Serialize, same_origin: bool) -> Result<(String, String), ViewError> {
    let nonce = nonce()?;
    let policy = csp(&nonce, same_origin);
    let json = json_for_html(data).map_err(|e| ViewError::Serialize(e.to_string()))?;
    let kind = match kind {
        PageKind::Session => "session",
        PageKind::List => "list",
    };
    let mut html = String::with_capacity(json.len() + CSS.len() + JS.len() + 1024);
    html.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    html.push_str(&format!("<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"));
    html.push_str("<meta name=\"referrer\" content=\"no-referrer\">\n");
    html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    html.push_str("<title>Reins</title>\n");
    html.push_str(&format!("<style nonce=\"{nonce}\">\n{CSS}</style>\n</head><body>\n"));
    html.push_str("<noscript>This page is drawn by its own inline script (it makes no network request).</noscript>\n");
    html.push_str("<div id=\"app\"></div>\n");
    html.push_str(&format!("<script type=\"application/json\" id=\"reins-data\" data-page=\"{kind}\">"));
    html.push_str(&json);
    html.push_str("</script>\n");
    html.push_str(&format!("<script nonce=\"{nonce}\">\n{JS}</script>\n</body></html>\n"));
    Ok((html, policy))
}

/// The self-contained HTML file of one session's view.
pub fn session_html(view: &View) -> Result<String, ViewError> {
    page(PageKind::Session, view, view.live.is_some()).map(|(html, _)| html)
}
