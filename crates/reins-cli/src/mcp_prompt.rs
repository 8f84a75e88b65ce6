//! `--mcp-prompt SERVER/NAME [-a KEY=VALUE ...]` of `reins run` and `/prompt SERVER/NAME [KEY=VALUE ...]` of
//! `reins chat`: a prompt of an MCP server of the run, got with its arguments, used as the prompt.

use std::sync::Arc;

use reins_mcp::McpTools;

use crate::exit::{CliError, usage};

/// Splits `SERVER/NAME`.
pub fn parse_spec(spec: &str) -> Result<(&str, &str), String> {
    match spec.split_once('/') {
        Some((server, name)) if !server.is_empty() && !name.is_empty() => Ok((server, name)),
        _ => Err(format!("{spec:?}: expected SERVER/NAME (a configured MCP server and one of its prompts)")),
    }
}

/// Parses `KEY=VALUE` arguments into the prompt's argument object (every value a string, as MCP prompts take).
pub fn parse_args(args: &[String]) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut out = serde_json::Map::new();
    for a in args {
        let (k, v) =
            a.split_once('=').filter(|(k, _)| !k.is_empty()).ok_or_else(|| format!("{a:?}: expected KEY=VALUE"))?;
        out.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
    }
    Ok(out)
}

/// The text of prompt `spec` (`SERVER/NAME`) of the run's servers, with `args`; its images are not used (a
/// note says so). A missing server, prompt or required argument is an error naming what there is.
pub async fn get(mcp: Option<&Arc<McpTools>>, spec: &str, args: &[String]) -> Result<String, String> {
    let (server_name, name) = parse_spec(spec)?;
    let arguments = parse_args(args)?;
    let servers = mcp.map(|m| m.servers()).unwrap_or_default();
    let Some(server) = servers.iter().find(|s| s.name() == server_name) else {
        let names: Vec<&str> = servers.iter().map(|s| s.name()).collect();
        return Err(format!("no MCP server {server_name:?} in this run (servers: {})", list(&names)));
    };
    let prompts = server.list_prompts().await.map_err(|e| e.to_string())?;
    let Some(prompt) = prompts.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
        return Err(format!("MCP server {server_name:?} has no prompt {name:?} (its prompts: {})", list(&names)));
    };
    let missing: Vec<&str> = prompt
        .arguments
        .iter()
        .filter(|a| a.required && !arguments.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("the prompt {spec} needs {} (give each as -a KEY=VALUE)", missing.join(", ")));
    }
    let out = server.get_prompt(name, arguments).await.map_err(|e| e.to_string())?;
    Ok(match out {
        reins::ToolOutput::Parts { text, images } => {
            format!("{text}\n[{} image(s) of the prompt left out]", images.len())
        }
        other => other.into_text(),
    })
}

fn list(names: &[&str]) -> String {
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// The prompt of a run with `--mcp-prompt`: the MCP prompt's text, then the prompt given on the command line
/// (if any) after a blank line.
pub async fn run_prompt(
    mcp: Option<&Arc<McpTools>>,
    flags: &crate::instructions_cli::InstructionFlags,
    given: Option<String>,
) -> Result<Option<String>, CliError> {
    let Some(spec) = &flags.mcp_prompt else {
        return Ok(given);
    };
    let text = get(mcp, spec, &flags.prompt_args).await.map_err(|e| usage(format!("--mcp-prompt {e}")))?;
    Ok(Some(match given.filter(|g| !g.trim().is_empty()) {
        Some(g) => format!("{text}\n\n{g}"),
        None => text,
    }))
}
