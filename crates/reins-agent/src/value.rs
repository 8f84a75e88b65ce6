//! The small value types of an agent definition, each with the one rule that makes it valid and an error
//! message that says what was expected: [`Positive`] and [`Count`] integers, [`Dur`] durations,
//! [`ModelSpec`], [`Temperature`] and [`ToolChoiceSpec`]. Each serializes back to the form it was written in, so a
//! definition round-trips through TOML and JSON.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What a value was found to be, for error messages.
enum Seen {
    Int(i128),
    Float(f64),
    Str(String),
    Bool(bool),
    Other(&'static str),
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Int(n) => write!(f, "{n}"),
            Seen::Float(x) => write!(f, "{x}"),
            Seen::Str(s) => write!(f, "the string {s:?}"),
            Seen::Bool(b) => write!(f, "{b}"),
            Seen::Other(what) => f.write_str(what),
        }
    }
}

struct SeenVisitor;

impl<'de> Visitor<'de> for SeenVisitor {
    type Value = Seen;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Seen, E> {
        Ok(Seen::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Seen, E> {
        Ok(Seen::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Seen, E> {
        Ok(Seen::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Seen, E> {
        Ok(Seen::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Seen, E> {
        Ok(i128::try_from(v).map_or(Seen::Other("a huge integer"), Seen::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Seen, E> {
        Ok(Seen::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Seen, E> {
        Ok(Seen::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Seen, E> {
        Ok(Seen::Str(v))
    }
    fn visit_none<E>(self) -> Result<Seen, E> {
        Ok(Seen::Other("null"))
    }
    fn visit_unit<E>(self) -> Result<Seen, E> {
        Ok(Seen::Other("null"))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Seen, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Seen, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Seen::Other("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Seen, A::Error> {
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(Seen::Other("a table"))
    }
}

fn seen<'de, D: Deserializer<'de>>(d: D) -> Result<Seen, D::Error> {
    d.deserialize_any(SeenVisitor)
}

fn expected<E: de::Error>(what: &str, found: &Seen) -> E {
    E::custom(format_args!("expected {what}, not {found}"))
}

/// An integer of at least 1 (`max_steps`, a context budget, a byte cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Positive(u64);

impl Positive {
    /// `n`, when it is at least 1.
    pub fn new(n: u64) -> Option<Self> {
        (n >= 1).then_some(Self(n))
    }
    /// The value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Serialize for Positive {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match seen(d)? {
            Seen::Int(n) if n >= 1 && n <= i128::from(u64::MAX) => Ok(Self(n as u64)),
            other => Err(expected("a positive integer", &other)),
        }
    }
}

/// An integer of at least 0 (`max_tool_calls`, a token limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Count(pub u64);

impl Serialize for Count {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match seen(d)? {
            Seen::Int(n) if n >= 0 && n <= i128::from(u64::MAX) => Ok(Self(n as u64)),
            other => Err(expected("a non-negative integer", &other)),
        }
    }
}

/// A duration longer than zero, written `"30s"`, `"250ms"`, `"5m"`, `"1h 30m"` (or plain seconds, `"10"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

/// Parses a duration of a definition with the core's one rule ([`reins::parse_duration`]): `"30s"`, `"250ms"`,
/// `"1.5s"`, `"5m"`, `"1h 30m"`, plain seconds; at least 1 ms.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    reins::parse_duration(s).map_err(|e| e.to_string())
}

impl fmt::Display for Dur {
    /// `1h 30m` form, or exact decimal seconds (`1.0001s`) when the duration has a part below a millisecond (which
    /// no unit of the rule can write).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.subsec_nanos();
        if nanos % 1_000_000 == 0 {
            return write!(f, "{}", humantime::format_duration(self.0));
        }
        let fraction = format!("{nanos:09}");
        write!(f, "{}.{}s", self.0.as_secs(), fraction.trim_end_matches('0'))
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_duration(s).map(Dur)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match seen(d)? {
            Seen::Str(s) => s.parse().map_err(de::Error::custom),
            other => Err(expected("a duration such as \"30s\" or \"5m\"", &other)),
        }
    }
}

/// Which model family a [`ModelSpec`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// `script:FILE`: a script file replayed by `ScriptedModel`.
    Script,
    /// `openai:`, `openai-chat:`, `anthropic:` or a provider by name (`ollama:`, `groq:`, ...): a real provider
    /// speaking this API.
    Provider(reins_providers::Api),
}

/// The model, as `--model` takes it: `script:FILE`, `openai:MODEL`, `openai-chat:MODEL`, `anthropic:MODEL`, or
/// `NAME:MODEL` with a provider of [`reins_providers::PROVIDERS`] (`ollama:qwen3`, `groq:...`, `azure:DEPLOYMENT`).
/// Recorded as written; [`ModelSpec::named`] says what it resolves to. In a definition it may be a list
/// (`model = ["anthropic:...", "openai:..."]`): the first is the model, the others the ones a step falls over
/// to ([`ModelSpec::fallbacks`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModelSpec(String, Vec<ModelSpec>);

impl ModelSpec {
    /// The spec as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// What it names, and the rest after the colon (a file for scripts, a model name for providers).
    pub fn kind(&self) -> (ModelKind, &str) {
        let (prefix, rest) = self.0.split_once(':').unwrap_or(("", &self.0));
        match reins_providers::Api::parse_spec(&self.0) {
            Ok((api, _)) => (ModelKind::Provider(api), rest),
            Err(_) if prefix == "script" => (ModelKind::Script, rest),
            // Not reachable for a parsed spec; a script is the harmless answer.
            Err(_) => (ModelKind::Script, rest),
        }
    }
    /// The provider the spec names (`None`: a script).
    pub fn named(&self) -> Option<&'static reins_providers::NamedProvider> {
        reins_providers::parse_named_spec(&self.0).ok().map(|(p, _)| p)
    }
    /// The provider's model name (`gpt-4.1-mini`), or `None` for a script.
    pub fn provider_model(&self) -> Option<&str> {
        match self.kind() {
            (ModelKind::Provider(_), name) => Some(name),
            (ModelKind::Script, _) => None,
        }
    }
    pub(crate) fn with_script_path(&self, path: &std::path::Path) -> ModelSpec {
        ModelSpec(format!("script:{}", path.display()), self.1.clone())
    }
    /// The models a step falls over to, in order (none for a single model).
    pub fn fallbacks(&self) -> &[ModelSpec] {
        &self.1
    }
    /// The same model with `more` appended to its fallbacks (`--fallback-model`).
    pub fn with_fallbacks(mut self, more: impl IntoIterator<Item = ModelSpec>) -> ModelSpec {
        for m in more {
            self.1.push(ModelSpec(m.0, Vec::new()));
            self.1.extend(m.1);
        }
        self
    }
    /// This model alone, without its fallbacks.
    pub fn alone(&self) -> ModelSpec {
        ModelSpec(self.0.clone(), Vec::new())
    }
    /// Each model's script path (if any) passed through `f`.
    pub(crate) fn map_script_paths(&self, f: &dyn Fn(&std::path::Path) -> std::path::PathBuf) -> ModelSpec {
        let one = |m: &ModelSpec| match m.kind() {
            (ModelKind::Script, file) => {
                ModelSpec(format!("script:{}", f(std::path::Path::new(file)).display()), Vec::new())
            }
            _ => m.alone(),
        };
        ModelSpec(one(self).0, self.1.iter().map(one).collect())
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ModelSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let hint = "expected PROVIDER:NAME: script:FILE, openai:MODEL, openai-chat:MODEL, anthropic:MODEL, \
                    gemini:MODEL, bedrock:MODEL_ID or a provider by name (ollama, lmstudio, llamacpp, vllm, openrouter, groq, together, \
                    deepseek, mistral, xai, azure)";
        let Some((prefix, rest)) = s.split_once(':') else {
            return Err(format!("{hint}, not {s:?}"));
        };
        if s.contains('\0') {
            return Err(format!("{hint}; the spec holds a NUL byte"));
        }
        match prefix {
            "script" if rest.is_empty() => Err(format!("{s:?} names no script file after the colon")),
            "script" => Ok(Self(s.to_owned(), Vec::new())),
            p if reins_providers::named_provider(p).is_some() => match reins_providers::Api::parse_spec(s) {
                Ok(_) => Ok(Self(s.to_owned(), Vec::new())),
                Err(e) => Err(e.to_string().trim_start_matches("invalid model: ").to_owned()),
            },
            // Other servers that speak OpenAI's Chat Completions are reached through `openai-chat:` with their base
            // URL: say so rather than leave a user guessing.
            "google" | "llama" | "llama.cpp" | "lm-studio" => Err(format!(
                "{prefix:?} is not a provider of its own: reach it through its OpenAI-compatible endpoint with \
                 openai-chat:{rest} and [provider] base_url (or --base-url); {hint}"
            )),
            other => Err(format!("unknown provider {other:?} in {s:?}; {hint}")),
        }
    }
}

impl Serialize for ModelSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.1.is_empty() {
            return s.serialize_str(&self.0);
        }
        let all: Vec<&str> = std::iter::once(self.0.as_str()).chain(self.1.iter().map(|m| m.0.as_str())).collect();
        all.serialize(s)
    }
}

struct ModelSpecVisitor;

impl<'de> Visitor<'de> for ModelSpecVisitor {
    type Value = ModelSpec;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model such as \"openai:gpt-4.1-mini\" or \"script:turns.json\", or a list of them")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<ModelSpec, E> {
        v.parse().map_err(E::custom)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ModelSpec, A::Error> {
        let mut all = Vec::new();
        while let Some(s) = seq.next_element::<String>()? {
            all.push(s.parse::<ModelSpec>().map_err(de::Error::custom)?);
        }
        let mut it = all.into_iter();
        let Some(first) = it.next() else { return Err(de::Error::custom("expected at least one model in the list")) };
        Ok(first.with_fallbacks(it))
    }
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ModelSpecVisitor)
    }
}

/// A sampling temperature from 0 to 2.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Temperature(f64);

impl Temperature {
    /// `t`, when it is a finite number from 0 to 2.
    pub fn new(t: f64) -> Option<Self> {
        (t.is_finite() && (0.0..=2.0).contains(&t)).then_some(Self(t))
    }
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Temperature {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Temperature {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded_number(d, Temperature::new, "a number from 0 to 2")
    }
}

/// A number (an integer or a float) that `check` accepts, or the error saying what was `wanted`.
fn bounded_number<'de, D: Deserializer<'de>, T>(
    d: D,
    check: fn(f64) -> Option<T>,
    wanted: &str,
) -> Result<T, D::Error> {
    let found = seen(d)?;
    let x = match found {
        Seen::Float(x) => Some(x),
        Seen::Int(n) => Some(n as f64),
        _ => None,
    };
    x.and_then(check).ok_or_else(|| expected(wanted, &found))
}

/// A share of the context budget, more than 0 and at most 1 (`context.compact_at`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Share(f64);

impl Share {
    /// `x`, when it is a finite number in (0, 1].
    pub fn new(x: f64) -> Option<Self> {
        (x.is_finite() && x > 0.0 && x <= 1.0).then_some(Self(x))
    }
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Share {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded_number(d, Share::new, "a number more than 0 and at most 1")
    }
}

/// An amount of US dollars above 0 (`limits.max_cost_usd`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Usd(f64);

impl Usd {
    /// `x`, when it is a finite number above 0.
    pub fn new(x: f64) -> Option<Self> {
        (x.is_finite() && x > 0.0).then_some(Self(x))
    }
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded_number(d, Usd::new, "a number of US dollars above 0")
    }
}

/// A price in US dollars per million tokens, 0 or more.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// `x`, when it is a finite number of at least 0.
    pub fn new(x: f64) -> Option<Self> {
        (x.is_finite() && x >= 0.0).then_some(Self(x))
    }
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded_number(d, Rate::new, "a price of at least 0 (US dollars per million tokens)")
    }
}

/// `[provider] price`: what the model's tokens cost, in US dollars per million tokens. Cache reads and
/// writes default to the input price.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceDef {
    /// Input not read from a cache.
    pub input_per_mtok: Rate,
    /// Output (reasoning included).
    pub output_per_mtok: Rate,
    /// Input read from a prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<Rate>,
    /// Input written to a prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<Rate>,
}

impl PriceDef {
    /// The price the engine charges.
    pub fn to_price(&self) -> reins::Price {
        reins::Price {
            input_per_mtok: self.input_per_mtok.get(),
            output_per_mtok: self.output_per_mtok.get(),
            cache_read_per_mtok: self.cache_read_per_mtok.map(Rate::get),
            cache_write_per_mtok: self.cache_write_per_mtok.map(Rate::get),
        }
    }
}

/// Which tool the model may or must call: `"auto"`, `"required"`, `"none"` or `"tool:NAME"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolChoiceSpec(pub reins_providers::ToolChoice);

impl fmt::Display for ToolChoiceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use reins_providers::ToolChoice as T;
        match &self.0 {
            T::Auto => f.write_str("auto"),
            T::Required => f.write_str("required"),
            T::None => f.write_str("none"),
            T::Tool(name) => write!(f, "tool:{name}"),
        }
    }
}

impl FromStr for ToolChoiceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use reins_providers::ToolChoice as T;
        Ok(Self(match s {
            "auto" => T::Auto,
            "required" => T::Required,
            "none" => T::None,
            _ => match s.strip_prefix("tool:") {
                Some(name) if reins::is_valid_tool_name(name) => T::Tool(name.to_owned()),
                _ => return Err(format!("expected \"auto\", \"required\", \"none\" or \"tool:NAME\", not {s:?}")),
            },
        }))
    }
}

impl Serialize for ToolChoiceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolChoiceSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match seen(d)? {
            Seen::Str(s) => s.parse().map_err(de::Error::custom),
            other => Err(expected("\"auto\", \"required\", \"none\" or \"tool:NAME\"", &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_both_forms_and_round_trip() {
        for (text, want) in [
            ("10s", Duration::from_secs(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("10", Duration::from_secs(10)),
            ("1h 30m", Duration::from_secs(5400)),
            ("250ms", Duration::from_millis(250)),
            ("1.0001s", Duration::from_micros(1_000_100)),
            ("2 months", Duration::from_secs(2 * 2_630_016)),
        ] {
            let d: Dur = text.parse().unwrap();
            assert_eq!(d.0, want, "{text}");
            assert_eq!(d.to_string().parse::<Dur>().unwrap(), d, "{text}");
        }
        for bad in ["0s", "soon", "", "-1s", "1ns"] {
            assert!(bad.parse::<Dur>().is_err(), "{bad}");
        }
    }

    #[test]
    fn model_specs() {
        for ok in ["script:a.json", "openai:gpt-4.1", "openai-chat:qwen3:8b", "anthropic:claude-sonnet-4-5"] {
            let spec: ModelSpec = ok.parse().unwrap();
            assert_eq!(spec.as_str(), ok);
        }
        assert_eq!("openai-chat:qwen3:8b".parse::<ModelSpec>().unwrap().provider_model(), Some("qwen3:8b"));
        assert_eq!("script:x".parse::<ModelSpec>().unwrap().kind().0, ModelKind::Script);
        let ollama: ModelSpec = "ollama:qwen3:8b".parse().unwrap();
        assert_eq!(
            (ollama.kind().0, ollama.provider_model()),
            (ModelKind::Provider(reins_providers::Api::OpenAiChat), Some("qwen3:8b"))
        );
        assert_eq!(ollama.named().map(|p| p.name), Some("ollama"));
        assert_eq!(
            "azure:dep".parse::<ModelSpec>().unwrap().kind().0,
            ModelKind::Provider(reins_providers::Api::OpenAiResponses)
        );
        assert_eq!(
            "gemini:gemini-2.5-flash".parse::<ModelSpec>().unwrap().kind().0,
            ModelKind::Provider(reins_providers::Api::Gemini)
        );
        for bad in ["gpt-4o", "script:", "openai:", "mystery:x", "openai: ", "groq:", "gemini:", "google:x"] {
            assert!(bad.parse::<ModelSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn tool_choices() {
        for s in ["auto", "required", "none", "tool:echo"] {
            assert_eq!(s.parse::<ToolChoiceSpec>().unwrap().to_string(), s);
        }
        assert!("tool:".parse::<ToolChoiceSpec>().is_err());
        assert!("sometimes".parse::<ToolChoiceSpec>().is_err());
    }
}
