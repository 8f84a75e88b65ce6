//! [`AgentBuilder`]: how an [`Agent`] is configured and checked, and the constructors that start one.

use std::sync::Arc;

use super::Agent;
use crate::approval::Approver;
use crate::context::ContextConfig;
use crate::events::Observer;
use crate::hook::Hook;
use crate::journal::Journal;
use crate::limits::{ConfigError, Limits};
use crate::model::Model;
use crate::output::OutputSchema;
use crate::policy::Policy;
use crate::registry::{Registry, ToolSource};

/// Builds an [`Agent`].
pub struct AgentBuilder {
    agent: Agent,
    /// Tools added one by one ([`AgentBuilder::tool`]), put beside the registry's at [`AgentBuilder::build`].
    tools: Vec<Arc<dyn crate::tool::Tool>>,
}

impl AgentBuilder {
    /// The agent's name: its runs' spans are `invoke_agent {name}` with `gen_ai.agent.name` (see
    /// [`crate::spans`]). Empty text is none.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name: String = name.into();
        self.agent.name = (!name.is_empty()).then(|| Arc::from(name));
        self
    }
    /// The instructions (a system prompt) of every run: each model call carries them, and each adapter
    /// sends them in its API's own slot (OpenAI Responses `instructions`, Chat Completions a leading
    /// `system` message, Anthropic `system`). They are part of the run's state (so a resumed or replayed
    /// run has them), recorded with the session, and counted in the context budget, measured once per
    /// run. Empty text is none.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        let text: String = text.into();
        self.agent.instructions = (!text.is_empty()).then(|| Arc::from(text));
        self
    }
    /// Binds the final answer of every run to a JSON Schema (see [`crate::output`]): the model gets one more
    /// tool, [`crate::FINAL_ANSWER_TOOL`], whose arguments are the answer; every other tool stays on offer on
    /// every turn. The outcome's `output` holds the validated JSON.
    pub fn output_schema(mut self, schema: OutputSchema) -> Self {
        self.agent.output_schema = Some(schema);
        self
    }
    /// The model that writes summaries under the `summarize` context strategy (default: the run's own).
    pub fn compact_model(mut self, model: Arc<dyn Model>) -> Self {
        self.agent.compact_model = Some(model);
        self
    }
    /// The tools (those added with [`AgentBuilder::tool`] join them).
    pub fn registry(mut self, registry: impl Into<Arc<Registry>>) -> Self {
        self.agent.registry = registry.into();
        self
    }
    /// Adds one tool, beside the registry's (if one is given) and the others added so far; names and schemas
    /// are checked by [`AgentBuilder::build`], which refuses a name taken twice.
    ///
    /// ```
    /// use reins::prelude::*;
    /// let echo = FnTool::new("echo", "Returns its text.", serde_json::json!({"type": "object"}),
    ///     |args, _| async move { Ok(ToolOutput::Json(args)) });
    /// let agent = Agent::builder(ScriptedModel::new(vec![ModelResponse::text("hi")])).tool(echo).build().unwrap();
    /// assert!(agent.registry().get("echo").is_some());
    /// ```
    pub fn tool(mut self, tool: impl crate::tool::Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }
    /// Adds one shared tool (see [`AgentBuilder::tool`]).
    pub fn shared_tool(mut self, tool: Arc<dyn crate::tool::Tool>) -> Self {
        self.tools.push(tool);
        self
    }
    /// Tools that may change between steps: asked at the start of each run and after each tool batch
    /// (replaces [`AgentBuilder::registry`]).
    pub fn tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.agent.tool_source = Some(source);
        self
    }
    /// The limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.agent.limits = limits;
        self
    }
    /// The context rules.
    pub fn context(mut self, context: ContextConfig) -> Self {
        self.agent.context = context;
        self
    }
    /// The pre-execution hook.
    pub fn policy(mut self, policy: impl Policy + 'static) -> Self {
        self.agent.policy = Some(Arc::new(policy));
        self
    }
    /// Adds an observer.
    pub fn observer(mut self, observer: impl Observer + 'static) -> Self {
        self.agent.observers.push(Arc::new(observer));
        self
    }
    /// Adds a shared observer.
    pub fn shared_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.agent.observers.push(observer);
        self
    }
    /// Hears about observers that fail or panic.
    pub fn on_observer_error(
        mut self,
        hook: impl Fn(usize, &crate::events::ObserverError) + Send + Sync + 'static,
    ) -> Self {
        self.agent.on_observer_error = Some(Arc::new(hook));
        self
    }
    /// Puts prompts, arguments, texts and results into events (off by default).
    pub fn include_content(mut self, on: bool) -> Self {
        self.agent.include_content = on;
        self
    }
    /// Puts prompts, instructions, messages, arguments and results into the run's spans (see
    /// [`crate::spans`]); by default they follow [`AgentBuilder::include_content`]. A sub-agent's spans carry
    /// content when its own setting or its parent run's says so.
    pub fn trace_content(mut self, on: bool) -> Self {
        self.agent.trace_content = Some(on);
        self
    }
    /// Records every run durably through `journal` (see [`crate::journal`]).
    pub fn journal(mut self, journal: impl Journal + 'static) -> Self {
        self.agent.journal = Some(Arc::new(journal));
        self
    }
    /// Records every run durably through a shared journal.
    pub fn shared_journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.agent.journal = Some(journal);
        self
    }
    /// Decides on calls a policy or hook asks about (see [`crate::approval`]). Without one, a batch that
    /// needs a decision ends the run `awaiting_approval`.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.agent.approver = Some(approver);
        self
    }
    /// Adds a hook (see [`crate::hook`]); hooks run in the order they were added.
    pub fn hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.agent.hooks.push(hook);
        self
    }
    /// Checks the configuration.
    pub fn build(mut self) -> Result<Agent, ConfigError> {
        self.agent.limits.validate()?;
        if !self.tools.is_empty() {
            if self.agent.tool_source.is_some() {
                return Err(ConfigError(
                    "tools added one by one join a registry, not a tool source: add them to the source".into(),
                ));
            }
            let tools = std::mem::take(&mut self.tools);
            let registry = self.agent.registry.with_tools(tools).map_err(|e| ConfigError(format!("tools: {e}")))?;
            self.agent.registry = Arc::new(registry);
        }
        if let Some(schema) = &self.agent.output_schema {
            if self.agent.tool_source.is_none() {
                self.agent.registry.with_output(schema).map_err(|e| ConfigError(format!("output schema: {e}")))?;
            }
        }
        if self.agent.context.max_tool_result_chars == Some(0) {
            return Err(ConfigError("max_tool_result_chars must be at least 1".into()));
        }
        if self.agent.context.max_context == Some(0) {
            return Err(ConfigError("the context budget must be at least 1".into()));
        }
        if let Some(max) = self.agent.limits.max_cost_usd {
            if self.agent.model.price().is_none() {
                return Err(ConfigError(format!(
                    "max_cost_usd ${max} needs a model whose price is known (a script model takes one from `[provider] price`)"
                )));
            }
            if self.agent.compact_model.as_ref().is_some_and(|m| m.price().is_none()) {
                return Err(ConfigError(format!(
                    "max_cost_usd ${max} needs the summary model's price too (its calls are charged at it)"
                )));
            }
        }
        let at = self.agent.context.compact_at;
        if !(at.is_finite() && at > 0.0 && at <= 1.0) {
            return Err(ConfigError(format!("compact_at must lie in (0, 1], not {at}")));
        }
        Ok(self.agent)
    }
}

impl Agent {
    /// A builder around `model`, with no tools and default limits.
    pub fn builder(model: impl Model + 'static) -> AgentBuilder {
        Self::builder_shared(Arc::new(model))
    }

    /// A builder around a shared model.
    pub fn builder_shared(model: Arc<dyn Model>) -> AgentBuilder {
        AgentBuilder {
            agent: Agent {
                name: None,
                model,
                compact_model: None,
                instructions: None,
                registry: Arc::new(Registry::empty()),
                tool_source: None,
                limits: Limits::default(),
                context: ContextConfig::default(),
                policy: None,
                observers: Vec::new(),
                on_observer_error: None,
                include_content: false,
                trace_content: None,
                journal: None,
                output_schema: None,
                approver: None,
                hooks: Vec::new(),
            },
            tools: Vec::new(),
        }
    }
}
