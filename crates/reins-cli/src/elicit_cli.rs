//! An MCP server's request for the person's input, asked inline on the terminal like an approval: its message,
//! then each field of its schema in turn (`/decline` declines, `/cancel` or the end of input cancels). The
//! answer is checked against the server's schema before it is sent; one that does not match is asked again.

use std::sync::Arc;

use async_trait::async_trait;
use reins_mcp::elicit::{ElicitationRequest, Elicited, Elicitor};
use serde_json::{Map, Value};

use crate::terminal_approver::Answers;

/// Asks on standard error and reads the answers from `answers`: standard input, or `reins chat`'s line
/// editor.
pub struct TerminalElicitor {
    answers: Arc<dyn Answers>,
}

impl TerminalElicitor {
    /// An elicitor whose answers are the lines of `answers`.
    pub fn with_answers(answers: Arc<dyn Answers>) -> Self {
        Self { answers }
    }
}

/// Registers the terminal elicitor for this process, when standard input and error are a terminal: the MCP
/// servers started afterwards may ask the person for input. Otherwise nobody can be asked: servers are told
/// so (no `elicitation` capability) and any request is declined.
pub fn register_on_terminal() {
    if crate::terminal_approver::on_terminal() {
        let answers = Arc::new(crate::terminal_approver::StdinAnswers);
        reins_mcp::elicit::set_elicitor(Some(Arc::new(TerminalElicitor::with_answers(answers))));
    }
}

/// What one typed line is as a value of the field `schema`, or why it is not.
fn parse_field(line: &str, schema: &Value) -> Result<Value, String> {
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("string");
    match kind {
        "boolean" => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Value::Bool(true)),
            "n" | "no" | "false" => Ok(Value::Bool(false)),
            _ => Err("answer yes or no".into()),
        },
        "integer" => line.parse::<i64>().map(Value::from).map_err(|_| "a whole number is expected".into()),
        "number" => line
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| "a number is expected".into()),
        _ => Ok(Value::String(line.to_owned())),
    }
}

/// The prompt of one field: its name, title or description, type, the values allowed, whether it is required.
fn field_prompt(name: &str, schema: &Value, required: bool) -> String {
    let about = schema.get("description").or_else(|| schema.get("title")).and_then(Value::as_str).unwrap_or("");
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("string");
    let choices = schema
        .get("enum")
        .and_then(Value::as_array)
        .map(|v| format!(", one of {}", v.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")))
        .unwrap_or_default();
    let optional = if required { "" } else { ", optional: empty skips" };
    let about = if about.is_empty() { String::new() } else { format!(" — {about}") };
    format!("  {name} ({kind}{choices}{optional}){about} > ")
}

/// Reads one answer to every field; `Err` is the person's decline or cancel.
async fn read_answer(answers: &dyn Answers, schema: &Value) -> Result<Value, Elicited> {
    let empty = Map::new();
    let fields = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let mut answer = Map::new();
    for (name, field) in fields {
        let is_required = required.contains(&name.as_str());
        loop {
            let Some(line) = answers.line(&field_prompt(name, field, is_required)).await else {
                return Err(Elicited::Cancel);
            };
            match line.as_str() {
                "/decline" => return Err(Elicited::Decline),
                "/cancel" => return Err(Elicited::Cancel),
                "" if !is_required => break,
                _ => {}
            }
            match parse_field(&line, field) {
                Ok(v) => {
                    answer.insert(name.clone(), v);
                    break;
                }
                Err(why) => errln!("  {why}"),
            }
        }
    }
    Ok(Value::Object(answer))
}

#[async_trait]
impl Elicitor for TerminalElicitor {
    async fn elicit(&self, request: &ElicitationRequest) -> Elicited {
        errln!("? MCP server {:?} asks: {}", request.server, request.message);
        errln!("  (the model does not see this; /decline declines, /cancel cancels)");
        loop {
            let answer = match read_answer(self.answers.as_ref(), &request.schema).await {
                Ok(a) => a,
                Err(e) => return e,
            };
            match reins_mcp::elicit::check_answer(&request.schema, &answer) {
                Ok(()) => return Elicited::Accept(answer),
                Err(why) => errln!("  that does not match what the server asked for: {why}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typed_lines_become_values_of_the_fields_type() {
        assert_eq!(parse_field("yes", &json!({"type": "boolean"})), Ok(json!(true)));
        assert!(parse_field("maybe", &json!({"type": "boolean"})).is_err());
        assert_eq!(parse_field("42", &json!({"type": "integer"})), Ok(json!(42)));
        assert!(parse_field("4.2", &json!({"type": "integer"})).is_err());
        assert_eq!(parse_field("a b", &json!({"type": "string"})), Ok(json!("a b")));
    }
}
