//! The test tools (`test_tools = true`, `--test-tools`): `echo` and `fail`, for trying the harness out.

use reins::{ToolContext, ToolError, ToolOutput, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `echo`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    /// The text to return.
    pub text: String,
}

/// Returns its text.
pub struct Echo;

impl TypedTool for Echo {
    type Args = EchoArgs;
    const NAME: &'static str = "echo";
    const DESCRIPTION: &'static str = "Returns the given text unchanged.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: EchoArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Text(args.text))
    }
}

/// Arguments of `fail`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailArgs {
    /// The error message.
    pub message: String,
}

/// Always fails with its message.
pub struct Fail;

impl TypedTool for Fail {
    type Args = FailArgs;
    const NAME: &'static str = "fail";
    const DESCRIPTION: &'static str = "Always fails with the given message.";
    const PARALLEL_SAFE: bool = true;

    async fn run(&self, args: FailArgs, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(args.message))
    }
}

/// The two test tools.
pub fn tools() -> Vec<std::sync::Arc<dyn reins::Tool>> {
    vec![std::sync::Arc::new(reins::typed(Echo)), std::sync::Arc::new(reins::typed(Fail))]
}
