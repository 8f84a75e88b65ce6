//! Checks (scorers): each gives a score in [0, 1], whether it passed, and a reason.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A check as written: `kind` says which, the other keys are its parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckDef {
    /// equals, contains, regex, json_schema, json_pointer, tool_called, tool_not_called, tool_order,
    /// max_steps, max_tool_calls, max_cost_usd, max_duration, status, verifier or judge.
    pub kind: String,
    /// Its weight in the case's score (default 1).
    #[serde(default)]
    pub weight: Option<f64>,
    /// What the subject must equal or contain (equals, contains, json_pointer, status).
    #[serde(default)]
    pub value: Option<toml::Value>,
    /// The regular expression (regex).
    #[serde(default)]
    pub pattern: Option<String>,
    /// Compare without case (contains).
    #[serde(default)]
    pub ignore_case: Option<bool>,
    /// The subject: `answer` (default) or `output` (the structured output).
    #[serde(default)]
    pub on: Option<String>,
    /// A JSON pointer into the output (json_pointer).
    #[serde(default)]
    pub pointer: Option<String>,
    /// An inline JSON Schema (json_schema).
    #[serde(default)]
    pub schema: Option<toml::Table>,
    /// A JSON Schema file (json_schema), relative to the case's file.
    #[serde(default)]
    pub schema_file: Option<PathBuf>,
    /// The tool (tool_called, tool_not_called).
    #[serde(default)]
    pub tool: Option<String>,
    /// Arguments a call must have (tool_called): every key given, equal (recursively a subset).
    #[serde(default)]
    pub arguments: Option<toml::Table>,
    /// Tools that must be called in this order, others in between allowed (tool_order).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The bound (max_steps, max_tool_calls: a count; max_cost_usd: dollars; max_duration: e.g. "30s").
    #[serde(default)]
    pub max: Option<toml::Value>,
    /// The verifier's command and arguments, run in the attempt's workspace after the agent ended (verifier).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// A directory of the verifier's files (relative to the case's file), kept out of the workspace while the
    /// agent runs; the command finds it in `$REINS_EVAL_VERIFIER` (verifier).
    #[serde(default)]
    pub files: Option<PathBuf>,
    /// The verifier's deadline (default 10m).
    #[serde(default)]
    pub timeout: Option<String>,
    /// The least reward (verifier) or judge's score (judge) that passes (default 1).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// The judge's model (judge): any model spec; `script:FILE` relative to the case's file.
    #[serde(default)]
    pub model: Option<String>,
    /// What the judge grades by (judge).
    #[serde(default)]
    pub rubric: Option<String>,
}

/// The subject of an answer check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// The final answer's text.
    Answer,
    /// The structured output (or the answer parsed as JSON).
    Output,
}

/// What a check tests.
#[derive(Clone, Debug)]
pub enum Kind {
    /// The subject equals the value (text trimmed; JSON by value).
    Equals {
        /// What is compared: the answer or the structured output.
        on: On,
        /// The expected value.
        value: serde_json::Value,
    },
    /// The answer contains the text.
    Contains {
        /// The text looked for.
        text: String,
        /// Whether case is ignored.
        ignore_case: bool,
    },
    /// The answer matches the expression.
    Regex(regex::Regex),
    /// The output matches the schema.
    JsonSchema(Arc<jsonschema::Validator>),
    /// The output's value at the pointer equals the value.
    JsonPointer {
        /// The JSON pointer into the output (`/a/0`).
        pointer: String,
        /// The value expected there.
        value: serde_json::Value,
    },
    /// The tool was called (with these arguments, when given).
    ToolCalled {
        /// The tool's name.
        tool: String,
        /// Arguments the call must match (a subset, compared recursively), when given.
        arguments: Option<serde_json::Value>,
    },
    /// The tool was never called.
    ToolNotCalled(String),
    /// The tools were called in this order.
    ToolOrder(Vec<String>),
    /// At most this many steps.
    MaxSteps(u64),
    /// At most this many tool calls.
    MaxToolCalls(u64),
    /// At most this cost.
    MaxCostUsd(f64),
    /// At most this long.
    MaxDuration(Duration),
    /// The run ended with this status.
    Status(String),
    /// A verifier command.
    Verifier(Verifier),
    /// An LLM judge.
    Judge(Judge),
}

/// An LLM judge: a model given the rubric, the task, the answer and the output, at temperature 0, answering
/// `{"score": 0..1, "reason": "..."}`.
#[derive(Clone, Debug)]
pub struct Judge {
    /// The model spec.
    pub model: String,
    /// The rubric.
    pub rubric: String,
    /// The least score that passes.
    pub threshold: f64,
}

/// A verifier command.
#[derive(Clone, Debug)]
pub struct Verifier {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Its files, outside the workspace.
    pub files: Option<PathBuf>,
    /// Its deadline.
    pub timeout: Duration,
    /// The least reward that passes.
    pub threshold: f64,
    /// A Harbor task's tests: `/tests`, `/logs/verifier` and `/app` in its text files are rewritten to the
    /// verifier's directory, its log directory and the workspace (no container here).
    pub harbor: bool,
}

/// A check ready to score.
#[derive(Clone, Debug)]
pub struct Check {
    /// Its kind's name, as written.
    pub name: String,
    /// What it tests.
    pub kind: Kind,
    /// Its weight.
    pub weight: f64,
}

/// The result of one check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's kind.
    pub kind: String,
    /// Its score in [0, 1].
    pub score: f64,
    /// Whether it passed.
    pub passed: bool,
    /// Why.
    pub reason: String,
    /// Its weight.
    pub weight: f64,
}

impl CheckResult {
    fn of(check: &Check, passed: bool, reason: String) -> CheckResult {
        CheckResult {
            kind: check.name.clone(),
            score: if passed { 1.0 } else { 0.0 },
            passed,
            reason,
            weight: check.weight,
        }
    }
}

/// A tool call the agent made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
}

/// What an attempt did, as the checks see it (all from the recorded outcome).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The final status (`completed`, `step_limit`, ...).
    pub status: String,
    /// The final answer.
    #[serde(default)]
    pub answer: Option<String>,
    /// The structured output.
    #[serde(default)]
    pub output: Option<serde_json::Value>,
    /// The run's error.
    #[serde(default)]
    pub error: Option<String>,
    /// Model responses.
    pub steps: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost, when known.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Wall-clock milliseconds of the agent's run.
    pub duration_ms: u64,
    /// The calls, in order.
    #[serde(default)]
    pub calls: Vec<Call>,
}

impl Observed {
    /// What `outcome` shows, the run having taken `duration`.
    pub fn from_outcome(outcome: &reins::Outcome, duration: Duration) -> Observed {
        let calls = outcome
            .messages
            .iter()
            .filter_map(|m| match m {
                reins::Message::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .map(|c| Call { name: c.name.clone(), arguments: c.arguments.clone() })
            .collect();
        let status = serde_json::to_value(outcome.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{:?}", outcome.status));
        Observed {
            status,
            answer: outcome.answer.clone(),
            output: outcome.output.clone(),
            error: outcome.error.clone(),
            steps: outcome.steps,
            tool_calls: outcome.tool_calls,
            input_tokens: outcome.usage.input_tokens,
            output_tokens: outcome.usage.output_tokens,
            cost_usd: outcome.cost_usd,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            calls,
        }
    }
}

type DefErr = (String, String);

fn need<T: Clone>(v: &Option<T>, key: &str, kind: &str) -> Result<T, DefErr> {
    v.clone().ok_or_else(|| (key.to_owned(), format!("a {kind} check needs `{key}`")))
}

fn to_json(v: &toml::Value, key: &str) -> Result<serde_json::Value, DefErr> {
    serde_json::to_value(v).map_err(|e| (key.to_owned(), e.to_string()))
}

/// A `json_schema` check: its schema, inline or from `schema_file`, compiled.
fn json_schema(def: &CheckDef, base: &Path) -> Result<Kind, DefErr> {
    let schema = match (&def.schema, &def.schema_file) {
        (Some(t), None) => to_json(&toml::Value::Table(t.clone()), "schema")?,
        (None, Some(f)) => {
            let p = base.join(f);
            let text = reins_agent::read_bounded(&p, crate::suite::MAX_SUITE_BYTES)
                .map_err(|e| ("schema_file".to_owned(), format!("cannot read {}: {e}", p.display())))?;
            serde_json::from_str(&text).map_err(|e| ("schema_file".to_owned(), format!("{}: {e}", p.display())))?
        }
        _ => return Err(("schema".into(), "give schema or schema_file (one of them)".into())),
    };
    let v = jsonschema::validator_for(&schema).map_err(|e| ("schema".to_owned(), e.to_string()))?;
    Ok(Kind::JsonSchema(Arc::new(v)))
}

/// A `verifier` check: its command, files, timeout and threshold.
fn verifier(def: &CheckDef, base: &Path) -> Result<Kind, DefErr> {
    let command = need(&def.command, "command", "verifier")?;
    if command.is_empty() {
        return Err(("command".into(), "the command is empty".into()));
    }
    let files = def.files.as_ref().map(|f| base.join(f));
    if let Some(f) = &files {
        if !f.is_dir() {
            return Err(("files".into(), format!("{} is not a directory", f.display())));
        }
    }
    let timeout = match &def.timeout {
        Some(t) => reins_agent::parse_duration(t).map_err(|e| ("timeout".to_owned(), e))?,
        None => Duration::from_secs(600),
    };
    let threshold = def.threshold.unwrap_or(1.0);
    Ok(Kind::Verifier(Verifier { command, files, timeout, threshold, harbor: false }))
}

/// A `judge` check: its model (a script path relative to `base`), rubric and threshold.
fn judge(def: &CheckDef, base: &Path) -> Result<Kind, DefErr> {
    let model = need(&def.model, "model", "judge")?;
    let model = match model.strip_prefix("script:") {
        Some(f) if !Path::new(f).is_absolute() => format!("script:{}", base.join(f).display()),
        _ => model,
    };
    reins_agent::AgentDef::new(&model).map_err(|e| ("model".to_owned(), e.message))?;
    Ok(Kind::Judge(Judge {
        model,
        rubric: need(&def.rubric, "rubric", "judge")?,
        threshold: def.threshold.unwrap_or(1.0),
    }))
}

fn count(v: &Option<toml::Value>, kind: &str) -> Result<u64, DefErr> {
    match v {
        Some(toml::Value::Integer(n)) if *n >= 0 => Ok(*n as u64),
        Some(_) => Err(("max".into(), "expected a non-negative integer".into())),
        None => Err(("max".into(), format!("a {kind} check needs `max`"))),
    }
}

impl Check {
    /// The check `def` (its files relative to `base`), or the key at fault and why.
    pub fn from_def(def: &CheckDef, base: &Path) -> Result<Check, DefErr> {
        let weight = def.weight.unwrap_or(1.0);
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(("weight".into(), "expected a number of at least 0".into()));
        }
        let on = match def.on.as_deref() {
            None | Some("answer") => On::Answer,
            Some("output") => On::Output,
            Some(o) => return Err(("on".into(), format!("{o:?}: expected \"answer\" or \"output\""))),
        };
        let k = def.kind.as_str();
        let kind = match k {
            "equals" => {
                let value = to_json(&need(&def.value, "value", k)?, "value")?;
                let on = if value.is_string() { on } else { On::Output };
                Kind::Equals { on, value }
            }
            "contains" => match need(&def.value, "value", k)? {
                toml::Value::String(text) => Kind::Contains { text, ignore_case: def.ignore_case.unwrap_or(false) },
                _ => return Err(("value".into(), "expected a string".into())),
            },
            "regex" => {
                let p = need(&def.pattern, "pattern", k)?;
                Kind::Regex(regex::Regex::new(&p).map_err(|e| ("pattern".to_owned(), e.to_string()))?)
            }
            "json_schema" => json_schema(def, base)?,
            "json_pointer" => {
                let pointer = need(&def.pointer, "pointer", k)?;
                if !(pointer.is_empty() || pointer.starts_with('/')) {
                    return Err(("pointer".into(), "a JSON pointer is empty or starts with '/'".into()));
                }
                Kind::JsonPointer { pointer, value: to_json(&need(&def.value, "value", k)?, "value")? }
            }
            "tool_called" => Kind::ToolCalled {
                tool: need(&def.tool, "tool", k)?,
                arguments: def.arguments.clone().map(|t| to_json(&toml::Value::Table(t), "arguments")).transpose()?,
            },
            "tool_not_called" => Kind::ToolNotCalled(need(&def.tool, "tool", k)?),
            "tool_order" => Kind::ToolOrder(need(&def.tools, "tools", k)?),
            "max_steps" => Kind::MaxSteps(count(&def.max, k)?),
            "max_tool_calls" => Kind::MaxToolCalls(count(&def.max, k)?),
            "max_cost_usd" => match &def.max {
                Some(toml::Value::Float(x)) if *x >= 0.0 => Kind::MaxCostUsd(*x),
                Some(toml::Value::Integer(x)) if *x >= 0 => Kind::MaxCostUsd(*x as f64),
                _ => return Err(("max".into(), "expected a number of US dollars".into())),
            },
            "max_duration" => match &def.max {
                Some(toml::Value::String(s)) => {
                    Kind::MaxDuration(reins_agent::parse_duration(s).map_err(|e| ("max".to_owned(), e))?)
                }
                _ => return Err(("max".into(), "expected a duration such as \"30s\"".into())),
            },
            "status" => match need(&def.value, "value", k)? {
                toml::Value::String(s) => Kind::Status(s),
                _ => return Err(("value".into(), "expected a status such as \"completed\"".into())),
            },
            "verifier" => verifier(def, base)?,
            "judge" => judge(def, base)?,
            other => return Err(("kind".into(), format!("unknown check kind {other:?}"))),
        };
        Ok(Check { name: def.kind.clone(), kind, weight })
    }

    /// Scores `seen` (a verifier is scored by the runner: here it fails).
    pub fn score(&self, seen: &Observed) -> CheckResult {
        let r = |passed: bool, reason: String| CheckResult::of(self, passed, reason);
        let answer = seen.answer.as_deref().unwrap_or("");
        match &self.kind {
            Kind::Equals { on: On::Answer, value } => {
                let want = value.as_str().unwrap_or_default();
                if answer.trim() == want.trim() {
                    r(true, format!("the answer equals {want:?}"))
                } else {
                    r(false, format!("the answer {:?} is not {want:?}", preview(answer)))
                }
            }
            Kind::Equals { on: On::Output, value } => match subject(seen) {
                Ok(v) if &v == value => r(true, format!("the output equals {value}")),
                Ok(v) => r(false, format!("the output {} is not {value}", preview(&v.to_string()))),
                Err(why) => r(false, why),
            },
            Kind::Contains { text, ignore_case } => {
                let found = if *ignore_case {
                    answer.to_lowercase().contains(&text.to_lowercase())
                } else {
                    answer.contains(text.as_str())
                };
                r(found, format!("the answer {} {text:?}", if found { "contains" } else { "does not contain" }))
            }
            Kind::Regex(re) => {
                let m = re.is_match(answer);
                r(m, format!("the answer {} /{}/", if m { "matches" } else { "does not match" }, re.as_str()))
            }
            Kind::JsonSchema(v) => match subject(seen) {
                Ok(value) => match v.iter_errors(&value).next() {
                    None => r(true, "the output matches the schema".into()),
                    Some(e) => r(
                        false,
                        format!("the output does not match the schema at {:?}: {e}", e.instance_path().to_string()),
                    ),
                },
                Err(why) => r(false, why),
            },
            Kind::JsonPointer { pointer, value } => match subject(seen) {
                Ok(v) => match v.pointer(pointer) {
                    Some(got) if got == value => r(true, format!("{pointer} is {value}")),
                    Some(got) => r(false, format!("{pointer} is {}, not {value}", preview(&got.to_string()))),
                    None => r(false, format!("the output has no {pointer}")),
                },
                Err(why) => r(false, why),
            },
            Kind::ToolCalled { tool, arguments } => self.tool_called(seen, tool, arguments.as_ref()),
            Kind::ToolNotCalled(tool) => {
                let n = seen.calls.iter().filter(|c| &c.name == tool).count();
                r(
                    n == 0,
                    if n == 0 { format!("{tool} was not called") } else { format!("{tool} was called {n} time(s)") },
                )
            }
            Kind::ToolOrder(tools) => self.tool_order(seen, tools),
            Kind::MaxSteps(max) => bound(self, seen.steps, *max, "steps"),
            Kind::MaxToolCalls(max) => bound(self, seen.tool_calls, *max, "tool calls"),
            Kind::MaxCostUsd(max) => match seen.cost_usd {
                Some(c) if c <= *max => r(true, format!("cost ${c:.6} ≤ ${max}")),
                Some(c) => r(false, format!("cost ${c:.6} > ${max}")),
                None => r(false, "the cost is unknown (the model has no price)".into()),
            },
            Kind::MaxDuration(max) => {
                let d = Duration::from_millis(seen.duration_ms);
                let ok = d <= *max;
                r(ok, format!("took {} ms ({} {} ms)", seen.duration_ms, if ok { "≤" } else { ">" }, max.as_millis()))
            }
            Kind::Status(want) => r(
                &seen.status == want,
                format!(
                    "ended {}{}",
                    seen.status,
                    if &seen.status == want { String::new() } else { format!(", not {want}") }
                ),
            ),
            Kind::Verifier(_) => r(false, "the verifier was not run".into()),
            Kind::Judge(_) => r(false, "the judge was not asked".into()),
        }
    }
    /// A `tool_called` check: `tool` called (with arguments holding `arguments`, when given).
    fn tool_called(&self, seen: &Observed, tool: &str, arguments: Option<&serde_json::Value>) -> CheckResult {
        let r = |passed: bool, reason: String| CheckResult::of(self, passed, reason);
        let calls: Vec<&Call> = seen.calls.iter().filter(|c| c.name == tool).collect();
        match arguments {
            None if calls.is_empty() => r(false, format!("{tool} was not called")),
            None => r(true, format!("{tool} was called {} time(s)", calls.len())),
            Some(want) => {
                if calls.iter().any(|c| subset(want, &c.arguments)) {
                    r(true, format!("{tool} was called with {want}"))
                } else if calls.is_empty() {
                    r(false, format!("{tool} was not called"))
                } else {
                    r(false, format!("{tool} was called {} time(s), never with {want}", calls.len()))
                }
            }
        }
    }

    /// A `tool_order` check: `tools` called in this order (others may come between).
    fn tool_order(&self, seen: &Observed, tools: &[String]) -> CheckResult {
        let r = |passed: bool, reason: String| CheckResult::of(self, passed, reason);
        let mut next = tools.iter().peekable();
        for c in &seen.calls {
            if next.peek().is_some_and(|t| **t == c.name) {
                next.next();
            }
        }
        match next.next() {
            None => r(true, format!("called in order: {}", tools.join(", "))),
            Some(t) => {
                r(false, format!("not called in order: {} (missing {t} after the ones before)", tools.join(", ")))
            }
        }
    }
}

fn bound(check: &Check, got: u64, max: u64, what: &str) -> CheckResult {
    let ok = got <= max;
    CheckResult::of(check, ok, format!("{got} {what} ({} {max})", if ok { "≤" } else { ">" }))
}

/// The JSON subject: the structured output, else the answer parsed as JSON.
fn subject(seen: &Observed) -> Result<serde_json::Value, String> {
    if let Some(o) = &seen.output {
        return Ok(o.clone());
    }
    let answer = seen.answer.as_deref().unwrap_or("");
    serde_json::from_str(answer.trim())
        .map_err(|_| format!("no output, and the answer {:?} is not JSON", preview(answer)))
}

/// Whether `want` is within `got`: objects key by key (recursively), anything else equal.
pub fn subset(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    match (want, got) {
        (serde_json::Value::Object(w), serde_json::Value::Object(g)) => {
            w.iter().all(|(k, v)| g.get(k).is_some_and(|gv| subset(v, gv)))
        }
        _ => want == got,
    }
}

/// The first 80 characters of `s`.
pub fn preview(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// A case's score and verdict from its checks' results: the weighted mean (1 when the weights are all 0 and
/// every check passed), passed when every check passed.
pub fn combine(results: &[CheckResult]) -> (f64, bool) {
    let total: f64 = results.iter().map(|r| r.weight).sum();
    let passed = results.iter().all(|r| r.passed);
    if total <= 0.0 {
        return (if passed { 1.0 } else { 0.0 }, passed);
    }
    (results.iter().map(|r| r.weight * r.score.clamp(0.0, 1.0)).sum::<f64>() / total, passed)
}
