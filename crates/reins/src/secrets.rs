//! Secrets Reins knows — API keys, header values, URL userinfo, MCP `env` values — and the one redactor
//! that masks them in text that comes from the wire (a provider's error body, an MCP server's answer or
//! stderr) before it is recorded, printed or exported; plus the scrubbed environment a child process
//! (a command preset, an MCP server) starts from.
//!
//! A [`Secrets`] is built once, where the secrets are known (a provider, an MCP server), and applied where
//! text from the wire is turned into an error or a result: every later consumer (events, the store, the
//! outcome, the session page, the spans) sees the masked text. Masking is one pass of an Aho-Corasick
//! automaton over the text; values shorter than [`MIN_SECRET_CHARS`] are not looked for (a `DEBUG = "1"`
//! would otherwise mask every `1`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::cost::Price;
use crate::model::{Delta, DeltaSink, Model, ModelError, ModelIdentity, ModelRequest, ModelResponse};
use crate::tool::{ToolError, ToolOutput};

/// What a secret is replaced with, in text and in a recorded definition.
pub const REDACTED: &str = "<redacted>";

/// The shortest value looked for in text: shorter ones are too likely to occur by chance.
pub const MIN_SECRET_CHARS: usize = 8;

/// The variables a child process gets from Reins' environment by default (the names that look like
/// secrets among them are still withheld: see [`is_secret_name`]).
pub const DEFAULT_ENV_ALLOW: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME"];

/// True for names that look like credentials: containing `KEY`, `SECRET`, `TOKEN` or `PASSWORD` (any case).
/// Such variables are passed to a child process only when it names them exactly.
pub fn is_secret_name(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    ["KEY", "SECRET", "TOKEN", "PASSWORD"].iter().any(|w| up.contains(w))
}

/// Whether an allow-list entry (`NAME`, or a prefix ending in `*`) matches a variable's name.
pub fn env_pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The environment a child process starts from, never the whole of Reins': the variables of Reins'
/// environment that `allow` matches and whose names do not look like secrets, those `explicit` names
/// (whatever their names), then `set` (values given in the configuration, which win).
pub fn child_environment<'a>(
    allow: impl IntoIterator<Item = &'a str> + Clone,
    explicit: &BTreeSet<&str>,
    set: &BTreeMap<String, String>,
) -> Vec<(String, OsString)> {
    let mut out: BTreeMap<String, OsString> = BTreeMap::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let allowed = allow.clone().into_iter().any(|p| env_pattern_matches(p, name));
        if explicit.contains(name) || (allowed && !is_secret_name(name)) {
            out.insert(name.to_owned(), value);
        }
    }
    for (k, v) in set {
        out.insert(k.clone(), OsString::from(v));
    }
    out.into_iter().collect()
}

/// A set of secret values and the automaton that finds them. Cheap to clone; the empty set masks nothing
/// and costs one branch.
#[derive(Clone, Default)]
pub struct Secrets(Option<Arc<Inner>>);

struct Inner {
    values: Vec<String>,
    finder: Option<AhoCorasick>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.len())
    }
}

impl Secrets {
    /// The secrets among `values`: each value trimmed, plus the token of a header value with a scheme
    /// (`Bearer TOKEN`, `Basic TOKEN`), plus the percent-decoded form of a value that has one; values shorter
    /// than [`MIN_SECRET_CHARS`] are left out.
    pub fn new<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Secrets {
        let mut set = BTreeSet::new();
        for v in values {
            add_forms(v.as_ref(), &mut set);
        }
        Self::from_set(set)
    }

    fn from_set(set: BTreeSet<String>) -> Secrets {
        if set.is_empty() {
            return Secrets(None);
        }
        let values: Vec<String> = set.into_iter().collect();
        // Leftmost-longest: of two secrets that overlap (a token and the header value holding it), the
        // longer is masked whole.
        let finder = AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&values).ok();
        Secrets(Some(Arc::new(Inner { values, finder })))
    }

    /// The values of the userinfo of `url` (`scheme://USER:PASSWORD@host/...`) — whole, its user and its
    /// password, and the Base64 of `USER:PASSWORD` an HTTP client sends as Basic credentials (each also
    /// percent-decoded by [`Secrets::new`]): what [`Secrets::new`] should be given for a URL with credentials.
    pub fn url_userinfo(url: &str) -> Vec<String> {
        use base64::Engine as _;
        let Some((start, end)) = userinfo_span(url) else { return Vec::new() };
        let info = &url[start..end];
        let mut out = vec![info.to_owned()];
        out.extend(info.split(':').map(str::to_owned));
        let decoded = percent_decoded(info).unwrap_or_else(|| info.to_owned());
        out.push(base64::engine::general_purpose::STANDARD.encode(decoded.as_bytes()));
        out
    }

    /// Both sets together.
    pub fn with(&self, other: &Secrets) -> Secrets {
        match (&self.0, &other.0) {
            (_, None) => self.clone(),
            (None, _) => other.clone(),
            (Some(a), Some(b)) => Self::from_set(a.values.iter().chain(&b.values).cloned().collect()),
        }
    }

    /// True when there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// How many values are looked for (their forms included).
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |i| i.values.len())
    }

    /// `text` with every occurrence of a secret replaced by [`REDACTED`] (borrowed when there is none).
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(inner) = &self.0 else { return Cow::Borrowed(text) };
        match &inner.finder {
            Some(finder) => {
                if !finder.is_match(text) {
                    return Cow::Borrowed(text);
                }
                Cow::Owned(finder.replace_all(text, &vec![REDACTED; inner.values.len()]))
            }
            // The automaton could not be built (never for a handful of values): mask value by value, the
            // longest first.
            None => {
                let mut out = text.to_owned();
                let mut values: Vec<&String> = inner.values.iter().collect();
                values.sort_by_key(|v| std::cmp::Reverse(v.len()));
                for v in values {
                    if out.contains(v.as_str()) {
                        out = out.replace(v.as_str(), REDACTED);
                    }
                }
                if out == text { Cow::Borrowed(text) } else { Cow::Owned(out) }
            }
        }
    }

    /// [`Secrets::mask`] of an owned string (no allocation when there is nothing to mask).
    pub fn mask_string(&self, text: String) -> String {
        match self.mask(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(masked) => masked,
        }
    }

    /// The error with its message masked.
    pub fn mask_model_error(&self, e: ModelError) -> ModelError {
        if self.is_empty() {
            return e;
        }
        match e {
            ModelError::Failed(m) => ModelError::Failed(self.mask_string(m)),
            ModelError::Malformed(m) => ModelError::Malformed(self.mask_string(m)),
            ModelError::Rejected { status, message } => {
                ModelError::Rejected { status, message: self.mask_string(message) }
            }
            ModelError::Unauthorized { status, message } => {
                ModelError::Unauthorized { status, message: self.mask_string(message) }
            }
            ModelError::ContextOverflow(m) => ModelError::ContextOverflow(self.mask_string(m)),
            ModelError::QuotaExhausted(m) => ModelError::QuotaExhausted(self.mask_string(m)),
            other @ (ModelError::Cancelled | ModelError::Exhausted { .. }) => other,
        }
    }

    /// The error with its message masked.
    pub fn mask_tool_error(&self, e: ToolError) -> ToolError {
        match e {
            ToolError::Failed(m) if !self.is_empty() => ToolError::Failed(self.mask_string(m)),
            ToolError::InvalidArguments(m) if !self.is_empty() => ToolError::InvalidArguments(self.mask_string(m)),
            other => other,
        }
    }

    /// The output with its text masked (a JSON output's strings, keys included).
    pub fn mask_output(&self, o: ToolOutput) -> ToolOutput {
        if self.is_empty() {
            return o;
        }
        match o {
            ToolOutput::Text(t) => ToolOutput::Text(self.mask_string(t)),
            ToolOutput::Json(v) => ToolOutput::Json(self.mask_json(v)),
            ToolOutput::Parts { text, images } => ToolOutput::Parts { text: self.mask_string(text), images },
        }
    }

    /// A JSON value with every string in it masked, object keys included.
    pub fn mask_json(&self, v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.is_empty() {
            return v;
        }
        match v {
            Value::String(s) => Value::String(self.mask_string(s)),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.mask_json(x)).collect()),
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, x)| (self.mask_string(k), self.mask_json(x))).collect())
            }
            other => other,
        }
    }
}

/// A model whose errors have its secrets masked — and the reasons of its retries, streamed as
/// [`Delta::Restart`]: what a server sends back in an error body (a gateway echoing the key it was sent)
/// is masked before the engine records it, so events, the store, the outcome and the spans never see it.
/// Successful responses pass untouched (no cost per step).
pub struct MaskedModel {
    inner: Arc<dyn Model>,
    secrets: Secrets,
}

impl MaskedModel {
    /// `inner` with `secrets` masked in its errors, or `inner` itself when there is nothing to mask.
    pub fn wrap(inner: Arc<dyn Model>, secrets: Secrets) -> Arc<dyn Model> {
        if secrets.is_empty() { inner } else { Arc::new(MaskedModel { inner, secrets }) }
    }
}

#[async_trait]
impl Model for MaskedModel {
    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let call = self.inner.generate(request, cancel);
        let result = match DeltaSink::current() {
            Some(outer) => {
                let secrets = self.secrets.clone();
                let sink = DeltaSink::new(move |d| match d {
                    Delta::Restart { attempt, reason } => {
                        outer.send(&Delta::Restart { attempt: *attempt, reason: secrets.mask(reason).into_owned() })
                    }
                    other => outer.send(other),
                });
                sink.scope(call).await
            }
            None => call.await,
        };
        result.map_err(|e| self.secrets.mask_model_error(e))
    }

    fn identity(&self) -> ModelIdentity {
        self.inner.identity()
    }

    fn price(&self) -> Option<Price> {
        self.inner.price()
    }
}

/// The byte range of a URL's userinfo (between `://` and the last `@` of the authority), if it has one.
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    Some((start, start + at))
}

/// `url` with its userinfo (`user:password@`), if any, replaced by [`REDACTED`]: how a URL with credentials
/// is shown and recorded.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    match userinfo_span(url) {
        Some((start, end)) => Cow::Owned(format!("{}{REDACTED}{}", &url[..start], &url[end..])),
        None => Cow::Borrowed(url),
    }
}

/// Whether `url`'s userinfo was redacted by [`redact_url`].
pub fn is_redacted_url(url: &str) -> bool {
    userinfo_span(url).is_some_and(|(s, e)| &url[s..e] == REDACTED)
}

fn add_forms(value: &str, set: &mut BTreeSet<String>) {
    let v = value.trim();
    let mut push = |s: &str| {
        if s.chars().count() >= MIN_SECRET_CHARS && s != REDACTED {
            set.insert(s.to_owned());
        }
    };
    push(v);
    // `Bearer TOKEN`, `Basic TOKEN`, `token TOKEN`: a server may echo the token alone.
    if let Some((scheme, token)) = v.split_once(' ') {
        if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphabetic()) {
            push(token.trim());
        }
    }
    if let Some(decoded) = percent_decoded(v) {
        push(&decoded);
    }
}

/// `s` with its `%XX` escapes decoded, when it has any and the result is UTF-8.
fn percent_decoded(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok().filter(|d| d != s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_occurrence_and_borrows_when_clean() {
        let s = Secrets::new(["sk-abcdefghijkl", "short", "Bearer hdr-secret-value"]);
        assert_eq!(s.len(), 3, "{s:?}");
        let text = "you sent Bearer sk-abcdefghijkl and hdr-secret-value; again sk-abcdefghijkl";
        assert_eq!(s.mask(text), "you sent Bearer <redacted> and <redacted>; again <redacted>",);
        assert!(matches!(s.mask("nothing here, short"), Cow::Borrowed(_)));
        assert!(Secrets::new(["1", "abc"]).is_empty());
        assert!(matches!(Secrets::default().mask("sk-abcdefghijkl"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_longest_overlapping_secret_is_masked_whole() {
        let s = Secrets::new(["abcdefgh", "abcdefgh-more-of-it"]);
        assert_eq!(s.mask("x abcdefgh-more-of-it y abcdefgh"), "x <redacted> y <redacted>");
    }

    #[test]
    fn url_userinfo_forms_and_redaction() {
        let url = "http://user:p%40ss-word-long@example.test:8080/v1";
        let info = Secrets::url_userinfo(url);
        let s = Secrets::new(&info);
        assert_eq!(
            s.mask("failed for http://user:p%40ss-word-long@example.test"),
            "failed for http://<redacted>@example.test"
        );
        assert_eq!(s.mask("password p@ss-word-long"), "password <redacted>");
        assert_eq!(redact_url(url), "http://<redacted>@example.test:8080/v1");
        assert!(is_redacted_url(&redact_url(url)));
        assert_eq!(redact_url("https://example.test/a@b"), "https://example.test/a@b");
        assert!(Secrets::url_userinfo("https://example.test/a@b").is_empty());
    }

    #[test]
    fn errors_outputs_and_json_are_masked() {
        let s = Secrets::new(["sk-abcdefghijkl"]);
        let e = s.mask_model_error(ModelError::Rejected { status: 400, message: "bad key sk-abcdefghijkl".into() });
        assert_eq!(e.to_string(), "model request rejected (HTTP 400): bad key <redacted>");
        let o = s.mask_output(ToolOutput::Json(serde_json::json!({"sk-abcdefghijkl": ["x sk-abcdefghijkl"]})));
        assert!(matches!(o, ToolOutput::Json(v) if v == serde_json::json!({"<redacted>": ["x <redacted>"]})));
        assert_eq!(s.mask_tool_error(ToolError::Failed("sk-abcdefghijkl".into())).to_string(), "<redacted>");
    }

    /// A model that streams a retry whose reason names the key, then text, then fails naming it.
    struct Echoing;

    #[async_trait]
    impl Model for Echoing {
        async fn generate(&self, _: &ModelRequest, _: &CancellationToken) -> Result<ModelResponse, ModelError> {
            DeltaSink::emit(&Delta::Restart { attempt: 2, reason: "HTTP 503 for sk-abcdefghijkl".into() });
            DeltaSink::emit(&Delta::Text { text: "partial".into() });
            Err(ModelError::Unauthorized { status: 401, message: "bad key sk-abcdefghijkl".into() })
        }
    }

    #[test]
    fn a_masked_model_masks_its_errors_and_its_retry_reasons() {
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = Arc::clone(&heard);
        let sink = DeltaSink::new(move |d| h.lock().unwrap().push(d.clone()));
        let model = MaskedModel::wrap(Arc::new(Echoing), Secrets::new(["sk-abcdefghijkl"]));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = rt.block_on(sink.scope(model.generate(&ModelRequest::default(), &CancellationToken::new())));
        let e = result.unwrap_err().to_string();
        assert_eq!(e, "model request not authorized (HTTP 401): bad key <redacted> (check the API key)");
        assert_eq!(
            *heard.lock().unwrap(),
            [
                Delta::Restart { attempt: 2, reason: "HTTP 503 for <redacted>".into() },
                Delta::Text { text: "partial".into() }
            ]
        );
        // Nothing to mask: the model itself, not wrapped.
        let plain: Arc<dyn Model> = Arc::new(Echoing);
        assert!(Arc::ptr_eq(&MaskedModel::wrap(Arc::clone(&plain), Secrets::default()), &plain));
    }

    #[test]
    fn children_get_the_allowed_variables_less_secrets_plus_their_own() {
        let set = BTreeMap::from([("MINE".to_owned(), "v".to_owned())]);
        let env = child_environment(["PATH", "CARGO*"], &BTreeSet::new(), &set);
        assert!(env.iter().any(|(k, _)| k == "PATH"));
        assert!(env.iter().any(|(k, v)| k == "MINE" && v == "v"));
        assert!(env.iter().all(|(k, _)| k == "MINE" || k == "PATH" || k.starts_with("CARGO")));
        assert!(env.iter().all(|(k, _)| !is_secret_name(k)));
    }
}
