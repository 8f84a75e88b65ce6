//! # Reins — the model proposes, the harness disposes
//!
//! The core of a vendor-neutral agent harness: types, the [`Model`] and [`Tool`] traits, a [`Registry`]
//! that validates every call with full JSON Schema, [`Limits`], context bounding and selection, events,
//! a sans-I/O run engine with an async driver ([`Agent`]), and a testing kit ([`ScriptedModel`]).
//! No network, no processes: adapters live in other crates.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use reins::*;
//! let echo = FnTool::new("echo", "Returns its text.", serde_json::json!({
//!     "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
//!     "additionalProperties": false}),
//!     |args, _ctx| async move { Ok(ToolOutput::Json(args["text"].clone())) });
//! let model = ScriptedModel::new(vec![
//!     ModelResponse::tool_calls("", vec![ToolCall::new("1", "echo", serde_json::json!({"text": "hi"}))]),
//!     ModelResponse::text("done"),
//! ]);
//! let agent = Agent::builder(model).registry(Registry::builder().tool(echo).build().unwrap()).build().unwrap();
//! let outcome = agent.run("say hi", tokio_util::sync::CancellationToken::new()).await;
//! assert_eq!(outcome.status, Status::Completed);
//! assert_eq!(outcome.messages[2], Message::tool_result("1", "hi", false));
//! # });
//! ```
//!
//! ## A real model and a tool of your own
//!
//! The same loop with a hosted model ([`reins_providers`](../reins_providers/index.html): OpenAI, Anthropic,
//! every OpenAI-compatible server, and services by name such as Ollama or Groq) and a typed tool added with
//! [`AgentBuilder::tool`]. It needs `OPENAI_API_KEY` (for a local Ollama instead:
//! `reins_providers::named_provider("ollama")` and its `builder("qwen3")`, no key).
//!
//! ```no_run
//! use reins::prelude::*;
//! use reins_providers::{Api, Provider};
//!
//! #[derive(serde::Deserialize, reins::schemars::JsonSchema)]
//! #[schemars(crate = "reins::schemars")]
//! struct Args {
//!     /// The city.
//!     city: String,
//! }
//!
//! struct Weather;
//!
//! impl TypedTool for Weather {
//!     type Args = Args;
//!     const NAME: &'static str = "weather";
//!     const DESCRIPTION: &'static str = "Today's weather in a city.";
//!     async fn run(&self, args: Args, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
//!         Ok(ToolOutput::Text(format!("Sunny and 21 °C in {}", args.city)))
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let model = Provider::builder(Api::OpenAiResponses, "gpt-4.1-mini").api_key_from_env().build()?;
//!     let agent = Agent::builder(model).tool(typed(Weather)).build()?;
//!     let outcome = agent.run("What is the weather in Paris?", CancellationToken::new()).await;
//!     println!("{:?}: {}", outcome.status, outcome.answer.unwrap_or_default());
//!     Ok(())
//! }
//! ```

#![warn(missing_docs)]
// No function of the library over 80 lines (crates/reins/clippy.toml; tests may allow it).
#![warn(clippy::too_many_lines)]

pub mod approval;
pub mod context;
pub mod cost;
pub mod engine;
pub mod events;
pub mod hook;
pub mod image;
pub mod journal;
pub mod limits;
pub mod message;
pub mod model;
pub mod outcome;
pub mod output;
pub mod policy;
pub mod registry;
pub mod secrets;
pub mod spans;
pub mod subagent;
pub mod testing;
pub mod tool;
pub mod transcript;
pub mod usage;
pub mod validate;

pub use approval::{
    ApprovalDecision, ApprovalError, ApprovalRequest, Approver, DecisionError, GivenDecisions, HeldResult, PendingCall,
    SubAgentCall, Verdict, arguments_hash, canonical_json, check_decisions,
};
#[cfg(feature = "tiktoken")]
pub use context::TiktokenCounter;
pub use context::{
    CharCounter, ContextConfig, ContextError, ContextStrategy, DEFAULT_SUMMARY_PROMPT, TokenCounter, bound_text,
    bound_to_units,
};
pub use cost::Price;
pub use engine::driver::{Agent, AgentBuilder, TypedRunError};
pub use engine::perform::{Direct, ModelStep, Performer, ToolStep, idempotency_key, idempotency_prefix};
pub use engine::state::{
    Action, Admission, AgentWait, Batch, CallResult, Compaction, Plan, PlannedCall, RunState, without_edit_note,
};
pub use events::{
    ApprovalCall, ApprovalDecidedData, CompactionEndData, EVENT_VERSION, ElicitationData, Event, EventKind, HookData,
    ModelEndData, Observer, ObserverError, RunEndData, RunStartData,
};
pub use hook::{Hook, HookAnswer, HookContext, HookError, HookEvent, HookResult, PostTool, PreTool, StopAnswer};
pub use image::{Image, ImageCost, ImageError, ImageFormat, MAX_IMAGE_BYTES};
pub use journal::{Journal, JournalError, RunJournal};
pub use limits::{ConfigError, DurationError, Limits, MIN_DURATION, parse_duration};
pub use message::{Message, Reasoning, ToolCall, ToolResult};
pub use model::{
    AnsweredBy, Conversation, Delta, DeltaSink, FinishReason, Model, ModelError, ModelIdentity, ModelRequest,
    ModelResponse,
};
pub use outcome::{AgentTotals, Outcome, Status};
pub use output::{FINAL_ANSWER_TOOL, OutputSchema, OutputSchemaError};
pub use policy::{Decision, Policy, PolicyDecision};
pub use registry::{CallError, Registry, RegistryBuilder, RegistryError, ToolSource, is_valid_tool_name};
/// `schemars`, re-exported (a program need not guess its version) for a [`TypedTool`]'s arguments:
/// `#[derive(reins::schemars::JsonSchema)] #[schemars(crate = "reins::schemars")]`.
pub use schemars;
pub use secrets::{MaskedModel, REDACTED, Secrets};
/// `serde_json`, re-exported for tool schemas, arguments and results.
pub use serde_json;
pub use subagent::{AgentTool, AgentToolError};
pub use testing::{FnModel, ScriptError, ScriptStep, ScriptedModel, parse_script};
/// Cancels a run ([`Agent::run`] takes one): `tokio_util`'s, re-exported.
pub use tokio_util::sync::CancellationToken;
pub use tool::{FnTool, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, Typed, TypedTool, typed};
pub use transcript::{Transcript, TranscriptError, drop_marker};
pub use usage::{Usage, UsageTotals};
pub use validate::{ArgumentError, MAX_SAFE_INTEGER, ResponseError, check_response, parse_response};

/// What most programs use, in one import: `use reins::prelude::*;`.
///
/// ```
/// use reins::prelude::*;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let agent = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("hello")])).build().unwrap();
/// let outcome = agent.run("hi", CancellationToken::new()).await;
/// assert_eq!((outcome.status, outcome.answer.as_deref()), (Status::Completed, Some("hello")));
/// # });
/// ```
pub mod prelude {
    pub use crate::{
        Agent, AgentBuilder, CancellationToken, FnTool, Limits, Message, Model, ModelResponse, Outcome, OutputSchema,
        Price, Registry, ScriptedModel, Status, Tool, ToolCall, ToolContext, ToolError, ToolOutput, ToolSpec,
        TypedTool, typed,
    };
    pub use serde_json::json;
}
