//! A specialised validator for the simple schemas most tools have, compiled once per tool.
//!
//! The subset (anything else compiles to `None`, and the jsonschema path alone decides):
//! - the root's `$schema` absent or draft 2020-12 (the jsonschema default, where `format` is an annotation);
//!   no `$schema` or `$id` below the root;
//! - `type` (a name or a list of names), `enum` and `const` of strings, booleans and null;
//! - `minLength`/`maxLength` (counted in code points, as jsonschema does);
//! - `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` of numbers within ±2^53;
//! - `properties`, `required`, `additionalProperties` (a boolean or a schema of the subset),
//!   `minProperties`, `maxProperties`;
//! - `items` (one schema of the subset), `minItems`, `maxItems`, `uniqueItems: false`;
//! - boolean schemas; annotations (`title`, `description`, `default`, `examples`, `$comment`,
//!   `deprecated`, `readOnly`, `writeOnly`, `format`) and unused `$defs`/`definitions`.
//!
//! It answers only "valid or not", with the number rule of [`super::arguments`] built in: a number beyond
//! ±2^53 anywhere makes the call invalid (the jsonschema path then words the errors).
//!
//! How a call is checked without allocating or re-reading the schema: types are a bit mask; an object's
//! properties are a slice sorted by name, the order in which a `serde_json::Map` yields its keys, so an
//! object that gives exactly the listed properties is checked by walking its entries and the slice side by
//! side, and any other by trying the property after the last found before searching; names of at most 16
//! bytes are compared by their length and two words (no `memcmp` call); required properties are counted,
//! not looked up; the root `type: "object"` is checked with no dispatch.

use serde_json::{Map, Number, Value};

use super::arguments::{has_unsafe_number, is_unsafe};

/// Nesting deeper than this is left to jsonschema.
const MAX_DEPTH: usize = 32;
/// Objects with more properties than this are looked up by binary search instead of a scan.
const SCAN_PROPERTIES: usize = 8;

const NULL: u8 = 1;
const BOOLEAN: u8 = 2;
const INTEGER: u8 = 4;
const NUMBER: u8 = 8;
const STRING: u8 = 16;
const ARRAY: u8 = 32;
const OBJECT: u8 = 64;
const ANY_TYPE: u8 = 127;

/// The keywords that change nothing about validity here.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "$defs",
    "definitions",
];

/// A compiled schema of the subset.
#[derive(Debug)]
pub(crate) struct Simple {
    root: Node,
}

#[derive(Debug)]
enum Node {
    /// Any value (`true`, `{}`): only the number rule applies.
    Any,
    /// No value (`false`).
    Never,
    /// Only `type` (the most common property schema): checked inline.
    Types(u8),
    /// `type: "object"` and object keywords only (an argument schema's root, a row of an array).
    Object(Box<ObjectChecks>),
    /// `type: "array"` and array keywords only.
    Array(Box<ArrayChecks>),
    Check(Box<Checks>),
}

#[derive(Debug, Default)]
struct Checks {
    /// The admitted types (bits above); `INTEGER` alone admits integral numbers.
    types: u8,
    /// `enum`/`const`: the admitted values (strings, booleans, null), when given.
    allowed: Option<Vec<Value>>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    /// Lower and upper bounds: the value and whether it is excluded.
    lower: Vec<(f64, bool)>,
    upper: Vec<(f64, bool)>,
    object: Option<ObjectChecks>,
    array: Option<ArrayChecks>,
}

#[derive(Debug)]
struct ObjectChecks {
    /// Sorted by name, the order in which a `serde_json::Map` (a `BTreeMap`) yields its keys, so that the
    /// property a key names is most often the one after the last found.
    properties: Box<[Property]>,
    /// How many of `properties` are required.
    required_known: usize,
    /// Required names that `properties` does not list.
    required_other: Box<[String]>,
    additional: Node,
    /// `minProperties` and `maxProperties` (0 and `usize::MAX` when absent).
    min: usize,
    max: usize,
}

#[derive(Debug)]
struct Property {
    key: Key,
    node: Node,
    required: bool,
}

/// A property name, compared with a key without a call to `memcmp` when it is at most 16 bytes long: its
/// length and its first and last 8 (or 4) bytes, which overlap and so cover every byte.
#[derive(Debug)]
struct Key {
    name: String,
    head: u64,
    tail: u64,
}

#[derive(Debug)]
struct ArrayChecks {
    items: Node,
    /// `minItems` and `maxItems` (0 and `usize::MAX` when absent).
    min: usize,
    max: usize,
}

impl Simple {
    /// The specialised validator of `schema`, or `None` when the schema is outside the subset. Call it only
    /// for a schema jsonschema compiled (it assumes a schema its meta-schema accepts).
    pub(crate) fn compile(schema: &Value) -> Option<Simple> {
        if let Value::Object(map) = schema {
            match map.get("$schema") {
                None => {}
                Some(Value::String(uri)) if is_draft_2020_12(uri) => {}
                Some(_) => return None,
            }
        }
        Some(Simple { root: node(schema, 0, true)? })
    }

    /// Whether `value` is valid: the same verdict as the jsonschema path of [`super::arguments`].
    #[inline]
    pub(crate) fn is_valid(&self, value: &Value) -> bool {
        // Arguments are an object, and most roots are `type: "object"`: checked without a dispatch.
        match (&self.root, value) {
            (Node::Object(checks), Value::Object(map)) => checks.is_valid(map),
            (root, value) => root.is_valid_outlined(value),
        }
    }
}

fn is_draft_2020_12(uri: &str) -> bool {
    matches!(
        uri.trim_end_matches('#'),
        "https://json-schema.org/draft/2020-12/schema" | "http://json-schema.org/draft/2020-12/schema"
    )
}

/// Compiles one (sub)schema; `root` admits `$schema` and `$id`.
fn node(schema: &Value, depth: usize, root: bool) -> Option<Node> {
    let map = match schema {
        Value::Bool(true) => return Some(Node::Any),
        Value::Bool(false) => return Some(Node::Never),
        Value::Object(map) => map,
        _ => return None,
    };
    if depth > MAX_DEPTH {
        return None;
    }
    let mut checks = Checks { types: ANY_TYPE, ..Checks::default() };
    let mut constrained = false;
    for (key, value) in map {
        match key.as_str() {
            k if ANNOTATIONS.contains(&k) => continue,
            "$schema" | "$id" if root => continue,
            "type" => checks.types = types(value)?,
            "enum" => checks.allowed = Some(allowed(value.as_array()?)?),
            "const" => checks.allowed = Some(allowed(std::slice::from_ref(value))?),
            "minLength" => checks.min_length = Some(size(value)?),
            "maxLength" => checks.max_length = Some(size(value)?),
            "minimum" => checks.lower.push((bound(value)?, false)),
            "exclusiveMinimum" => checks.lower.push((bound(value)?, true)),
            "maximum" => checks.upper.push((bound(value)?, false)),
            "exclusiveMaximum" => checks.upper.push((bound(value)?, true)),
            "uniqueItems" if value == &Value::Bool(false) => continue,
            "properties" | "required" | "additionalProperties" | "minProperties" | "maxProperties" => {
                if checks.object.is_none() {
                    checks.object = Some(object(map, depth)?);
                }
            }
            "items" | "minItems" | "maxItems" => {
                if checks.array.is_none() {
                    checks.array = Some(array(map, depth)?);
                }
            }
            _ => return None,
        }
        constrained = true;
    }
    if !constrained {
        return Some(Node::Any);
    }
    let only_types = checks.allowed.is_none()
        && checks.min_length.is_none()
        && checks.max_length.is_none()
        && checks.lower.is_empty()
        && checks.upper.is_empty()
        && checks.object.is_none()
        && checks.array.is_none();
    if only_types {
        return Some(Node::Types(checks.types));
    }
    let only_containers = checks.allowed.is_none()
        && checks.min_length.is_none()
        && checks.max_length.is_none()
        && checks.lower.is_empty()
        && checks.upper.is_empty();
    if only_containers && checks.types == OBJECT && checks.array.is_none() {
        if let Some(object) = checks.object.take() {
            return Some(Node::Object(Box::new(object)));
        }
    }
    if only_containers && checks.types == ARRAY && checks.object.is_none() {
        if let Some(array) = checks.array.take() {
            return Some(Node::Array(Box::new(array)));
        }
    }
    // `enum`/`const` values whose type is not admitted are never met; they change nothing.
    Some(Node::Check(Box::new(checks)))
}

fn types(value: &Value) -> Option<u8> {
    let one = |name: &str| -> Option<u8> {
        Some(match name {
            "null" => NULL,
            "boolean" => BOOLEAN,
            "integer" => INTEGER,
            "number" => NUMBER,
            "string" => STRING,
            "array" => ARRAY,
            "object" => OBJECT,
            _ => return None,
        })
    };
    match value {
        Value::String(name) => one(name),
        Value::Array(names) => names.iter().try_fold(0, |acc, n| Some(acc | one(n.as_str()?)?)),
        _ => None,
    }
}

/// The values of `enum`/`const`, when each is a string, a boolean or null (compared by plain equality).
fn allowed(values: &[Value]) -> Option<Vec<Value>> {
    values.iter().all(|v| matches!(v, Value::String(_) | Value::Bool(_) | Value::Null)).then(|| values.to_vec())
}

/// A length or count limit.
fn size(value: &Value) -> Option<u64> {
    let Value::Number(n) = value else { return None };
    n.as_u64()
}

/// A numeric bound that compares exactly with every number within ±2^53 as an `f64`.
fn bound(value: &Value) -> Option<f64> {
    let Value::Number(n) = value else { return None };
    if is_unsafe(n) {
        return None;
    }
    n.as_f64()
}

fn object(map: &Map<String, Value>, depth: usize) -> Option<ObjectChecks> {
    let mut properties = Vec::new();
    if let Some(props) = map.get("properties") {
        for (name, schema) in props.as_object()? {
            properties.push(Property { key: Key::new(name), node: node(schema, depth + 1, false)?, required: false });
        }
    }
    let mut required_other: Vec<String> = Vec::new();
    if let Some(required) = map.get("required") {
        for name in required.as_array()? {
            let name = name.as_str()?;
            match properties.iter_mut().find(|p| p.key.name == name) {
                Some(p) => p.required = true,
                None if !required_other.iter().any(|r| r == name) => required_other.push(name.to_owned()),
                None => {}
            }
        }
    }
    properties.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    let additional = match map.get("additionalProperties") {
        None => Node::Any,
        Some(schema) => node(schema, depth + 1, false)?,
    };
    Some(ObjectChecks {
        required_known: properties.iter().filter(|p| p.required).count(),
        properties: properties.into_boxed_slice(),
        required_other: required_other.into_boxed_slice(),
        additional,
        min: limit(map, "minProperties", 0)?,
        max: limit(map, "maxProperties", usize::MAX)?,
    })
}

fn array(map: &Map<String, Value>, depth: usize) -> Option<ArrayChecks> {
    let items = match map.get("items") {
        None => Node::Any,
        Some(schema @ (Value::Object(_) | Value::Bool(_))) => node(schema, depth + 1, false)?,
        Some(_) => return None,
    };
    Some(ArrayChecks { items, min: limit(map, "minItems", 0)?, max: limit(map, "maxItems", usize::MAX)? })
}

/// A count limit of `map` (`absent` when not given); a limit beyond `usize` is no limit at all.
fn limit(map: &Map<String, Value>, key: &str, absent: usize) -> Option<usize> {
    match map.get(key) {
        None => Some(absent),
        Some(value) => Some(usize::try_from(size(value)?).unwrap_or(usize::MAX)),
    }
}

impl Key {
    fn new(name: &str) -> Key {
        let (head, tail) = words(name.as_bytes()).unwrap_or((0, 0));
        Key { name: name.to_owned(), head, tail }
    }

    /// Whether `key` is this name.
    #[inline]
    fn matches(&self, key: &[u8]) -> bool {
        key.len() == self.name.len()
            && match words(key) {
                Some(words) => words == (self.head, self.tail),
                None => key == self.name.as_bytes(),
            }
    }
}

/// Whether two names are the same, compared as [`Key`] compares them (no call for names of at most 16
/// bytes): the registry's lookup of a tool by name.
#[inline]
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len()
        && match (words(a), words(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        }
}

/// The two words a name of at most 16 bytes is compared by (names of one length are equal when their
/// words are); `None` for a longer name.
#[inline]
fn words(k: &[u8]) -> Option<(u64, u64)> {
    let n = k.len();
    if n >= 8 {
        if n > 16 {
            return None;
        }
        let (Some(head), Some(tail)) = (k.first_chunk::<8>(), k.last_chunk::<8>()) else { return None };
        Some((u64::from_le_bytes(*head), u64::from_le_bytes(*tail)))
    } else if n >= 4 {
        let (Some(head), Some(tail)) = (k.first_chunk::<4>(), k.last_chunk::<4>()) else { return None };
        Some((u64::from(u32::from_le_bytes(*head)), u64::from(u32::from_le_bytes(*tail))))
    } else {
        // One to three bytes: the first, the middle and the last are all of them.
        let byte = |i: usize| k.get(i).copied().map_or(0, u64::from);
        Some((byte(0) | byte(n / 2) << 8 | byte(n.saturating_sub(1)) << 16, 0))
    }
}

impl Node {
    #[inline]
    fn is_valid(&self, value: &Value) -> bool {
        match self {
            Node::Types(types) => type_is_valid(*types, value),
            Node::Object(checks) => matches!(value, Value::Object(map) if checks.is_valid(map)),
            Node::Array(checks) => matches!(value, Value::Array(items) if checks.is_valid(items)),
            Node::Check(checks) => checks.is_valid(value),
            Node::Any => !has_unsafe_number(value),
            Node::Never => false,
        }
    }

    /// [`Node::is_valid`] as a call, which keeps the loops that check many values small.
    #[inline(never)]
    fn is_valid_outlined(&self, value: &Value) -> bool {
        self.is_valid(value)
    }
}

/// A value of one of `types`, holding no unsafe number.
#[inline]
fn type_is_valid(types: u8, value: &Value) -> bool {
    match value {
        Value::Null => types & NULL != 0,
        Value::Bool(_) => types & BOOLEAN != 0,
        Value::String(_) => types & STRING != 0,
        Value::Number(n) => number_type_is_valid(types, n),
        Value::Array(_) => types & ARRAY != 0 && !has_unsafe_number(value),
        Value::Object(_) => types & OBJECT != 0 && !has_unsafe_number(value),
    }
}

/// A safe number of one of `types` (an integer type admits integral numbers only).
#[inline]
fn number_type_is_valid(types: u8, n: &Number) -> bool {
    if is_unsafe(n) {
        return false;
    }
    types & NUMBER != 0
        || (types & INTEGER != 0 && (n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)))
}

impl Checks {
    #[inline(never)]
    fn is_valid(&self, value: &Value) -> bool {
        let admitted = |bit: u8| self.types & bit != 0;
        let listed = || self.allowed.as_ref().is_none_or(|a| a.contains(value));
        match value {
            Value::Null => admitted(NULL) && listed(),
            Value::Bool(_) => admitted(BOOLEAN) && listed(),
            Value::String(s) => admitted(STRING) && self.length_within(s) && listed(),
            Value::Number(n) => self.allowed.is_none() && self.number_is_valid(n),
            // A container no keyword looks into still holds no unsafe number.
            Value::Array(items) => {
                admitted(ARRAY)
                    && self.allowed.is_none()
                    && self.array.as_ref().map_or_else(|| !has_unsafe_number(value), |a| a.is_valid(items))
            }
            Value::Object(map) => {
                admitted(OBJECT)
                    && self.allowed.is_none()
                    && self.object.as_ref().map_or_else(|| !has_unsafe_number(value), |o| o.is_valid(map))
            }
        }
    }

    fn length_within(&self, s: &str) -> bool {
        if self.min_length.is_none() && self.max_length.is_none() {
            return true;
        }
        let chars = s.chars().count() as u64;
        self.min_length.is_none_or(|min| chars >= min) && self.max_length.is_none_or(|max| chars <= max)
    }

    fn number_is_valid(&self, n: &Number) -> bool {
        if !number_type_is_valid(self.types, n) {
            return false;
        }
        if self.lower.is_empty() && self.upper.is_empty() {
            return true;
        }
        // Exact: a number within ±2^53 (the only kind left) is an `f64` without rounding.
        let Some(x) = n.as_f64() else { return false };
        self.lower.iter().all(|&(b, excluded)| if excluded { x > b } else { x >= b })
            && self.upper.iter().all(|&(b, excluded)| if excluded { x < b } else { x <= b })
    }
}

impl ObjectChecks {
    fn is_valid(&self, map: &Map<String, Value>) -> bool {
        let len = map.len();
        if len < self.min || len > self.max {
            return false;
        }
        // The common call gives every property the schema lists and no other: then its keys, in order, are
        // the properties (a `BTreeMap` yields them sorted), each required one is there, and a walk side by
        // side checks it. A key that is not the property at its place sends the call to the general walk.
        if len == self.properties.len() && self.required_other.is_empty() {
            let mut same = true;
            for ((key, value), property) in map.iter().zip(&*self.properties) {
                if !property.key.matches(key.as_bytes()) {
                    same = false;
                    break;
                }
                let valid = match &property.node {
                    Node::Types(types) => type_is_valid(*types, value),
                    node => node.is_valid_outlined(value),
                };
                if !valid {
                    return false;
                }
            }
            if same {
                return true;
            }
        }
        self.walk(map)
    }

    /// The general walk: each key's property found (the one after the last found tried first), the other
    /// keys checked against `additionalProperties`, the required ones counted.
    #[inline(never)]
    fn walk(&self, map: &Map<String, Value>) -> bool {
        let mut next = 0;
        let mut required = 0;
        for (key, value) in map {
            let key = key.as_bytes();
            // Keys come in the properties' order: the one after the last found is tried first, a search
            // over all of them only when it is not that one (an optional property left out, another key).
            let property = match self.properties.get(next) {
                Some(p) if p.key.matches(key) => p,
                _ => match self.find(key) {
                    Some((i, p)) => {
                        next = i;
                        p
                    }
                    None if self.additional.is_valid(value) => continue,
                    None => return false,
                },
            };
            next += 1;
            required += usize::from(property.required);
            // The common property schema, a bare `type`, is checked here rather than by a call.
            let valid = match &property.node {
                Node::Types(types) => type_is_valid(*types, value),
                node => node.is_valid_outlined(value),
            };
            if !valid {
                return false;
            }
        }
        required == self.required_known && self.required_other.iter().all(|name| map.contains_key(name))
    }

    /// The property named `key` and its index.
    #[inline(never)]
    fn find(&self, key: &[u8]) -> Option<(usize, &Property)> {
        let i = if self.properties.len() > SCAN_PROPERTIES {
            self.properties.binary_search_by(|p| p.key.name.as_bytes().cmp(key)).ok()?
        } else {
            self.properties.iter().position(|p| p.key.matches(key))?
        };
        Some((i, self.properties.get(i)?))
    }
}
impl ArrayChecks {
    fn is_valid(&self, items: &[Value]) -> bool {
        let len = items.len();
        if len < self.min || len > self.max {
            return false;
        }
        // Rows of objects and lists of a type, the common arrays, are checked without a dispatch per item.
        match &self.items {
            Node::Object(checks) => items.iter().all(|item| matches!(item, Value::Object(map) if checks.is_valid(map))),
            Node::Types(types) => items.iter().all(|item| type_is_valid(*types, item)),
            node => items.iter().all(|item| node.is_valid(item)),
        }
    }
}
