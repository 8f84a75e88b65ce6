//! What a server offers besides tools: its resources (and resource templates), read under the per-call timeout,
//! and its prompts. Everything it says is masked like its tool results.

use std::time::Duration;

use reins::{ToolError, ToolOutput};
use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{McpServer, call_error, plain};
use crate::error::McpError;

/// One resource, or one resource template, as the server listed it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RemoteResource {
    /// Its URI, or the URI template (RFC 6570) of a template.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Its description (empty when the server gave none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its MIME type, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// True for a template (`uri` is a URI template).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub template: bool,
}

/// One argument of a prompt.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// Its description (empty when the server gave none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The prompt cannot be had without it.
    pub required: bool,
}

/// One prompt a server offers.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RemotePrompt {
    /// Its name on the server.
    pub name: String,
    /// Its description (empty when the server gave none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

impl McpServer {
    /// Lists the server's resources and resource templates (following pagination), within the start-up
    /// timeout. A server without resources has none.
    pub async fn list_resources(&self) -> Result<Vec<RemoteResource>, McpError> {
        if !self.has_resources {
            return Ok(Vec::new());
        }
        let limit = self.config.startup_timeout;
        let what = "resources/list";
        let resources = self.timed(what, limit, self.peer.list_all_resources()).await?;
        // Templates are optional: a server that has resources but not templates answers with an error.
        let templates = self.timed(what, limit, self.peer.list_all_resource_templates()).await.unwrap_or_default();
        let mut out = Vec::with_capacity(resources.len() + templates.len());
        for r in resources {
            let v = serde_json::to_value(&r).unwrap_or_default();
            out.push(self.resource_of(&v, "uri", false));
        }
        for t in templates {
            let v = serde_json::to_value(&t).unwrap_or_default();
            out.push(self.resource_of(&v, "uriTemplate", true));
        }
        Ok(out)
    }

    fn resource_of(&self, v: &Value, uri_key: &str, template: bool) -> RemoteResource {
        let mask = |s: Option<String>| self.secrets.mask_string(s.unwrap_or_default());
        RemoteResource {
            uri: mask(str_of(v, uri_key)),
            name: mask(str_of(v, "name")),
            description: mask(str_of(v, "description")),
            mime_type: str_of(v, "mimeType"),
            template,
        }
    }

    /// Reads the resource at `uri` within the per-call timeout, stopping when `cancel` fires: text contents as
    /// text, a valid image as an image, any other binary content described (never shown).
    pub async fn read_resource(&self, uri: &str, cancel: &CancellationToken) -> Result<ToolOutput, ToolError> {
        let read = self.peer.read_resource(ReadResourceRequestParams::new(uri.to_owned()));
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
            r = tokio::time::timeout(self.config.call_timeout, read) => r,
        };
        let out = match result {
            Err(_) => Err(ToolError::Failed(format!(
                "MCP server {:?} did not answer the read of {uri:?} within {}",
                self.name(),
                humantime::format_duration(self.config.call_timeout)
            ))),
            Ok(Err(e)) => Err(ToolError::Failed(format!(
                "MCP server {:?} failed the read of {uri:?}: {}",
                self.name(),
                call_error(&e)
            ))),
            Ok(Ok(result)) => Ok(crate::result::map_read_result(&serde_json::to_value(&result).unwrap_or_default())),
        };
        out.map(|o| self.spilled(self.secrets.mask_output(o), crate::resources::READ_RESOURCE))
            .map_err(|e| self.secrets.mask_tool_error(e))
    }

    /// Lists the server's prompts (following pagination), within the start-up timeout. A server without
    /// prompts has none.
    pub async fn list_prompts(&self) -> Result<Vec<RemotePrompt>, McpError> {
        if !self.has_prompts {
            return Ok(Vec::new());
        }
        let prompts = self.timed("prompts/list", self.config.startup_timeout, self.peer.list_all_prompts()).await?;
        Ok(prompts
            .into_iter()
            .map(|p| RemotePrompt {
                name: p.name,
                description: self.secrets.mask_string(p.description.unwrap_or_default()),
                arguments: p
                    .arguments
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| PromptArgument {
                        name: a.name,
                        description: self.secrets.mask_string(a.description.unwrap_or_default()),
                        required: a.required.unwrap_or(false),
                    })
                    .collect(),
            })
            .collect())
    }

    /// Gets prompt `name` with `arguments`, within the per-call timeout, as the text of its messages (each
    /// headed by its role when there are several) and the images among them.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<ToolOutput, McpError> {
        let mut params = GetPromptRequestParams::new(name.to_owned());
        if !arguments.is_empty() {
            params.arguments = Some(arguments);
        }
        let result = self.timed("prompts/get", self.config.call_timeout, self.peer.get_prompt(params)).await?;
        let messages = serde_json::to_value(&result).unwrap_or_default();
        let out = crate::result::map_prompt_result(&messages);
        Ok(self.secrets.mask_output(out))
    }

    /// Runs a request of this server under `limit`, its failure an [`McpError::List`] naming `what`.
    async fn timed<T>(
        &self,
        what: &str,
        limit: Duration,
        request: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        let reason = match tokio::time::timeout(limit, request).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => match &e {
                rmcp::ServiceError::McpError(_) => call_error(&e),
                _ => plain(&e.to_string()),
            },
            Err(_) => format!("no answer within {}", humantime::format_duration(limit)),
        };
        Err(McpError::List {
            server: self.name().to_owned(),
            what: what.to_owned(),
            reason: self.secrets.mask_string(self.explain(&reason)),
        })
    }
}
