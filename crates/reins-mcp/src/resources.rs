//! A server's resources as two tools of that server: `NAME__list_resources` (its resources and resource
//! templates) and `NAME__read_resource {uri}` (one resource's contents: text, images, other binary contents
//! described, never dumped). Their results are validated and bounded like every tool result.

use std::sync::Arc;

use async_trait::async_trait;
use reins::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use crate::config::qualified_name;
use crate::server::{McpServer, RemoteResource};

/// The name, on its server, of the tool that lists the server's resources (`NAME__list_resources`).
pub const LIST_RESOURCES: &str = "list_resources";
/// The name, on its server, of the tool that reads one resource (`NAME__read_resource`).
pub const READ_RESOURCE: &str = "read_resource";

/// `NAME__list_resources` or `NAME__read_resource`.
struct ResourceTool {
    spec: ToolSpec,
    server: Arc<McpServer>,
    read: bool,
}

#[async_trait]
impl Tool for ResourceTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, arguments: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        if self.read {
            let uri = arguments.get("uri").and_then(Value::as_str).unwrap_or_default();
            return self.server.read_resource(uri, &ctx.cancel).await;
        }
        let listed = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            l = self.server.list_resources() => l,
        };
        listed
            .map(|l| ToolOutput::Text(render_list(self.server.name(), &l)))
            .map_err(|e| ToolError::Failed(e.to_string()))
    }
}

/// The listing the model sees: one line per resource (`URI — name (MIME): description`), then the templates.
pub fn render_list(server: &str, resources: &[RemoteResource]) -> String {
    if resources.is_empty() {
        return format!("MCP server {server:?} lists no resources.");
    }
    let line = |r: &RemoteResource| {
        let mut s = format!("{} — {}", r.uri, r.name);
        if let Some(m) = &r.mime_type {
            s.push_str(&format!(" ({m})"));
        }
        if !r.description.is_empty() {
            s.push_str(": ");
            s.push_str(&r.description.replace('\n', " "));
        }
        s
    };
    let (templates, plain): (Vec<_>, Vec<_>) = resources.iter().partition(|r| r.template);
    let mut out = String::new();
    if !plain.is_empty() {
        out.push_str(&format!("Resources ({}):\n", plain.len()));
        for r in plain {
            out.push_str(&line(r));
            out.push('\n');
        }
    }
    if !templates.is_empty() {
        out.push_str(&format!(
            "Resource templates ({}; fill in the {{placeholders}} to make a URI):\n",
            templates.len()
        ));
        for r in templates {
            out.push_str(&line(r));
            out.push('\n');
        }
    }
    out.push_str(&format!("Read one with {} {{\"uri\": \"...\"}}.", qualified_name(server, READ_RESOURCE)));
    out
}

/// The two resource tools of `server`, when it offers resources and its configuration lets them through;
/// none otherwise. A name the server already uses for a tool of its own stays the server's.
pub fn resource_tools(server: &Arc<McpServer>, taken: &[String]) -> Vec<Arc<dyn Tool>> {
    if !server.has_resources() || !server.config().resources {
        return Vec::new();
    }
    let name = server.name();
    let list = ToolSpec {
        name: qualified_name(name, LIST_RESOURCES),
        description: format!(
            "List the resources (documents, files, records) of the MCP server {name:?}, and its resource \
             templates; read one with {}.",
            qualified_name(name, READ_RESOURCE)
        ),
        input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
    };
    let read = ToolSpec {
        name: qualified_name(name, READ_RESOURCE),
        description: format!(
            "Read one resource of the MCP server {name:?} by its URI (as listed by {}, or made from one of its \
             templates). Text comes back as text, images as images; other binary contents are only described.",
            qualified_name(name, LIST_RESOURCES)
        ),
        input_schema: json!({
            "type": "object",
            "properties": {"uri": {"type": "string", "minLength": 1, "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": false
        }),
    };
    [(list, false), (read, true)]
        .into_iter()
        .filter(|(spec, _)| !taken.contains(&spec.name))
        .map(|(spec, read)| Arc::new(ResourceTool { spec, server: Arc::clone(server), read }) as Arc<dyn Tool>)
        .collect()
}
