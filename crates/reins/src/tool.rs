//! Tools: the `Tool` trait, typed tools whose schema comes from a Rust type, and their errors.

use std::future::Future;

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// What a model is told about a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by: `^[a-zA-Z][a-zA-Z0-9_-]{0,63}$`.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema its arguments must satisfy.
    pub input_schema: serde_json::Value,
}

/// What a tool returns on success.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutput {
    /// Text, recorded as is.
    Text(String),
    /// A JSON value: a string is recorded as the string itself, anything else as compact JSON.
    Json(serde_json::Value),
    /// Text and images: the model is shown the text, then the images (each adapter in its API's own form).
    Parts {
        /// The text (may be empty).
        text: String,
        /// The images, in order.
        images: Vec<crate::image::Image>,
    },
}

impl ToolOutput {
    /// An image alone.
    pub fn image(image: crate::image::Image) -> Self {
        ToolOutput::Parts { text: String::new(), images: vec![image] }
    }

    /// The text the model is shown (before bounding); images are left out.
    pub fn into_text(self) -> String {
        self.into_parts().0
    }

    /// The text the model is shown (before bounding) and the images.
    #[inline]
    pub fn into_parts(self) -> (String, Vec<crate::image::Image>) {
        match self {
            ToolOutput::Text(s) | ToolOutput::Json(serde_json::Value::String(s)) => (s, Vec::new()),
            ToolOutput::Json(v) => (v.to_string(), Vec::new()),
            ToolOutput::Parts { text, images } => (text, images),
        }
    }
}

impl From<String> for ToolOutput {
    fn from(s: String) -> Self {
        ToolOutput::Text(s)
    }
}

impl From<&str> for ToolOutput {
    fn from(s: &str) -> Self {
        ToolOutput::Text(s.to_owned())
    }
}

/// Why a tool call failed. The model gets the message as an error result; the run goes on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
    /// The arguments passed schema validation but the tool still could not use them.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool saw the cancellation and stopped.
    #[error("aborted: the run was cancelled")]
    Cancelled,
}

impl ToolError {
    /// A failure with the given message.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }
}

/// What a tool call may know of its run.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The id of this call (shared with the call's [`crate::ToolCall::id`]: no copy per call).
    pub call_id: Arc<str>,
    /// Fires when the run is cancelled, its deadline passes, or this call's timeout expires.
    pub cancel: CancellationToken,
    /// What the idempotency key is made of (built only when asked for: no cost per call).
    key: KeyParts,
}

#[derive(Clone, Debug)]
enum KeyParts {
    /// The call id alone (a call made outside a run).
    CallId,
    /// A key given whole.
    Given(Arc<str>),
    /// `prefix` (`[session/]run/`, escaped) + step + `/` + the escaped call id.
    Run { prefix: Arc<str>, step: u64 },
}

impl ToolContext {
    /// A context for call `call_id` whose idempotency key is the call id itself (for calls made outside
    /// a run, such as tests and benchmarks).
    pub fn new(call_id: impl Into<Arc<str>>, cancel: CancellationToken) -> Self {
        ToolContext { call_id: call_id.into(), cancel, key: KeyParts::CallId }
    }

    /// The context of call `call_id` of step `step` of a run whose key prefix is `prefix` (see
    /// [`crate::idempotency_prefix`]).
    pub fn in_run(call_id: impl Into<Arc<str>>, cancel: CancellationToken, prefix: Arc<str>, step: u64) -> Self {
        ToolContext { call_id: call_id.into(), cancel, key: KeyParts::Run { prefix, step } }
    }

    /// The same context with this idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = KeyParts::Given(key.into());
        self
    }

    /// A key that names this call and stays the same every time it is performed again (a durable run
    /// retries the call that was in flight when its worker died): `[session/]run/step/call`, made of
    /// `A-Za-z0-9._-/%` only (see [`crate::idempotency_key`]). A tool with side effects outside the
    /// workspace can hand it to the service it calls so that a retried call is not done twice. Outside a
    /// run it is the call id.
    pub fn idempotency_key(&self) -> String {
        match &self.key {
            KeyParts::CallId => self.call_id.to_string(),
            KeyParts::Given(k) => k.to_string(),
            KeyParts::Run { prefix, step } => crate::engine::perform::key_with_prefix(prefix, *step, &self.call_id),
        }
    }
}

/// A tool the model may call. Its arguments arrive already validated against `spec().input_schema`.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The tool's name, description and schema.
    fn spec(&self) -> &ToolSpec;

    /// True when calls of this tool may run concurrently with other such calls of the same batch.
    fn parallel_safe(&self) -> bool {
        false
    }

    /// True when the tool only reads (an MCP tool its server marks `readOnlyHint`): `--approve writes`
    /// asks for no call of it. False unless a tool says so.
    fn read_only(&self) -> bool {
        false
    }

    /// True for a sub-agent ([`crate::AgentTool`]): its runs spend the calling run's budget, so the driver
    /// gives its calls the run's budget left (see [`crate::subagent`]).
    fn sub_agent(&self) -> bool {
        false
    }

    /// Runs the call.
    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;

    /// Runs the call with its arguments borrowed (from the run's transcript, where the call stays): what the
    /// driver calls. By default the arguments are copied and handed to [`Tool::call`]; a tool that reads them
    /// in place (a [`TypedTool`] deserializes its `Args` from the borrowed value) spares the copy.
    fn call_borrowed<'a>(
        &'a self,
        arguments: &'a serde_json::Value,
        ctx: ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>> {
        self.call(arguments.clone(), ctx)
    }
}

impl std::fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool").field("name", &self.spec().name).finish()
    }
}

/// A tool with typed arguments: its JSON Schema is derived from `Self::Args`, and its arguments arrive
/// deserialized. Register it with [`typed`].
///
/// ```
/// use reins::{Tool, TypedTool, ToolContext, ToolError, ToolOutput};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { text: String }
/// struct Echo;
/// impl TypedTool for Echo {
///     type Args = Args;
///     const NAME: &'static str = "echo";
///     const DESCRIPTION: &'static str = "Returns its text.";
///     async fn run(&self, args: Args, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
///         Ok(ToolOutput::Text(args.text))
///     }
/// }
/// let tool = reins::typed(Echo);
/// assert_eq!(tool.spec().name, "echo");
/// ```
pub trait TypedTool: Send + Sync + 'static {
    /// The argument type; its schema is what the model sees.
    type Args: DeserializeOwned + schemars::JsonSchema + Send;
    /// The tool's name.
    const NAME: &'static str;
    /// The tool's description.
    const DESCRIPTION: &'static str;
    /// True when calls may run concurrently.
    const PARALLEL_SAFE: bool = false;

    /// Runs the call with deserialized arguments.
    fn run(&self, args: Self::Args, ctx: ToolContext) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

/// Wraps a [`TypedTool`] as a [`Tool`].
pub fn typed<T: TypedTool>(tool: T) -> Typed<T> {
    let schema = schemars::schema_for!(T::Args);
    let spec =
        ToolSpec { name: T::NAME.to_owned(), description: T::DESCRIPTION.to_owned(), input_schema: schema.to_value() };
    Typed { tool, spec }
}

/// A [`TypedTool`] seen as a [`Tool`]; made by [`typed`].
pub struct Typed<T> {
    tool: T,
    spec: ToolSpec,
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn parallel_safe(&self) -> bool {
        T::PARALLEL_SAFE
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args =
            serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        self.tool.run(args, ctx).await
    }

    fn call_borrowed<'a>(
        &'a self,
        arguments: &'a serde_json::Value,
        ctx: ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>> {
        Box::pin(async move {
            // `call`'s deserializer reading the value in place: the same arguments, the same errors.
            let args = T::Args::deserialize(arguments).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
            self.tool.run(args, ctx).await
        })
    }
}

type BoxedFn = dyn Fn(serde_json::Value, ToolContext) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>
    + Send
    + Sync;

/// A tool backed by a closure, for quick tools and tests.
///
/// ```
/// let t = reins::FnTool::new("echo", "Returns its text.", serde_json::json!({"type": "object"}),
///     |args, _ctx| async move { Ok(reins::ToolOutput::Json(args)) });
/// assert_eq!(reins::Tool::spec(&t).name, "echo");
/// ```
pub struct FnTool {
    spec: ToolSpec,
    parallel_safe: bool,
    f: Arc<BoxedFn>,
}

impl FnTool {
    /// A tool named `name` whose calls run `f`.
    pub fn new<F, Fut>(name: &str, description: &str, input_schema: serde_json::Value, f: F) -> Self
    where
        F: Fn(serde_json::Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        Self {
            spec: ToolSpec { name: name.to_owned(), description: description.to_owned(), input_schema },
            parallel_safe: false,
            f: Arc::new(move |a, c| Box::pin(f(a, c))),
        }
    }

    /// Marks the tool safe to run concurrently with others of its batch.
    pub fn parallel(mut self) -> Self {
        self.parallel_safe = true;
        self
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn parallel_safe(&self) -> bool {
        self.parallel_safe
    }

    async fn call(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.f)(arguments, ctx).await
    }
}
