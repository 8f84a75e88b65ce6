//! From a definition to a ready agent: the model (a script or a `reins-providers` provider), the tools (test
//! tools, workspace file tools, command presets), the MCP servers, the limits, the context budget (by default
//! the known model's window less its response cap), the pricing, and the session record.

use std::path::Path;
use std::sync::Arc;

use reins::{
    Agent, AgentBuilder, CharCounter, ContextConfig, Limits, Model, Registry, ScriptedModel, TokenCounter, Tool,
};
use reins_mcp::McpTools;
use reins_providers::{Price, Provider, ProviderError, RateLimiter, RetryPolicy};
use reins_tools::{
    CommandConfig, CommandRunner, DEFAULT_PROTECTED, RunCommand, SandboxMode, Workspace, WorkspaceConfig,
};

use crate::definition::{AgentDef, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOOL_RESULT_CHARS};
use crate::error::{BuildError, DefError};
use crate::load::{MAX_INSTRUCTIONS_BYTES, MAX_SCRIPT_BYTES, read_bounded};
use crate::value::ModelKind;

/// The price of a real model's run.
#[derive(Clone, Debug, PartialEq)]
pub struct Pricing {
    /// The provider's model name.
    pub model: String,
    /// Its list price, when known.
    pub price: Option<Price>,
}

impl Pricing {
    /// The cost of `usage` in US dollars, when the price is known.
    pub fn cost(&self, usage: &reins::UsageTotals) -> Option<f64> {
        self.price.as_ref().map(|p| reins_providers::cost(p, usage))
    }

    /// The prices a session records.
    pub fn store_prices(&self) -> Option<reins_store::Prices> {
        self.price.map(|p| reins_store::Prices {
            input_per_mtok: p.input_per_mtok,
            output_per_mtok: p.output_per_mtok,
            cached_input_per_mtok: p.cache_read(),
            cache_write_per_mtok: p.cache_write_per_mtok,
        })
    }
}

/// The parts of an agent built from a definition, before they are put together: replace one (wrap the model
/// to watch its deltas, add observers) and call [`Parts::builder`].
pub struct Parts {
    /// The definition they were built from.
    pub def: AgentDef,
    /// The model.
    pub model: Arc<dyn Model>,
    /// The price of a real model.
    pub pricing: Option<Pricing>,
    /// The tools other than the MCP servers'.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The started MCP servers, if any (shut them down after the run: [`McpTools::shutdown`]).
    pub mcp: Option<Arc<McpTools>>,
    /// The limits.
    pub limits: Limits,
    /// The context rules.
    pub context: ContextConfig,
    /// The model that writes summaries under the `summarize` strategy, when it is not the run's own.
    pub compact_model: Option<Arc<dyn Model>>,
    /// What the model is told: the workspace preamble, `AGENTS.md` and the definition's instructions.
    pub instructions: Option<String>,
    /// The definition's own instructions (`instructions`, or the text of `instructions_file`): what a session
    /// records (the preamble and `AGENTS.md` are made again from the workspace when it is rebuilt).
    pub own_instructions: Option<String>,
    /// Notes for the person running the agent (an `AGENTS.md` that was cut or not read).
    pub notes: Vec<String>,
    /// The schema the final answer must match (`output_schema`).
    pub output_schema: Option<reins::OutputSchema>,
    /// The pricing of each sub-agent with a real model, by name.
    pub agent_pricing: std::collections::BTreeMap<String, Pricing>,
}

/// The tools of a definition other than MCP servers', with the workspace and the command runner.
pub struct WorkspaceTools {
    /// The test tools, file tools and `run_command`.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The workspace, when there is one.
    pub workspace: Option<Arc<Workspace>>,
    /// The command runner, when there are presets.
    pub runner: Option<Arc<CommandRunner>>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("def", &self.def.redacted())
            .field("tools", &self.tools.iter().map(|t| t.spec().name.clone()).collect::<Vec<_>>())
            .field("mcp", &self.mcp.is_some())
            .field("limits", &self.limits)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// A built agent, its MCP servers and its pricing. Derefs to the [`Agent`].
pub struct Built {
    /// The agent.
    pub agent: Agent,
    /// Its MCP servers, if any.
    pub mcp: Option<Arc<McpTools>>,
    /// Its pricing, for a real model.
    pub pricing: Option<Pricing>,
}

impl std::ops::Deref for Built {
    type Target = Agent;
    fn deref(&self) -> &Agent {
        &self.agent
    }
}

impl Built {
    /// Stops the MCP servers (their process groups are killed).
    pub async fn shutdown(&self) {
        if let Some(mcp) = &self.mcp {
            mcp.shutdown().await;
        }
    }
}

/// What [`AgentDef::build_with`] adds to the agent.
#[derive(Default)]
pub struct BuildOptions {
    /// Records each run in this store: a new session, or the session to continue (its transcript is the
    /// run's start: see [`reins_store::Session::resume_state`]).
    pub store: Option<(reins_store::Store, Option<reins_store::Session>)>,
}

fn invalid(m: impl Into<String>) -> BuildError {
    BuildError::Invalid(m.into())
}

/// A model of unknown price under a cost limit, named by its key.
fn unpriced(key: &str, spec: Option<&crate::value::ModelSpec>, max: f64) -> BuildError {
    let spec = spec.map_or_else(String::new, |s| format!("{:?} ", s.to_string()));
    DefError::at(
        key,
        format!(
            "the model {spec}has no known price, and the run has a cost limit (max_cost_usd ${max}) that every model of it counts against: give its price ([provider] price, in this agent's table) or remove the limit"
        ),
    )
    .into()
}

/// A sub-agent's build error, said to be the sub-agent's.
fn within_agent(name: &str, e: BuildError) -> BuildError {
    match e {
        BuildError::Definition(d) => BuildError::Definition(d.under(&format!("agents.{name}"))),
        BuildError::Invalid(m) => invalid(format!("agents.{name}: {m}")),
        other => other,
    }
}

fn tiktoken() -> Result<Arc<dyn TokenCounter>, BuildError> {
    Ok(Arc::new(reins::TiktokenCounter::o200k_base().map_err(BuildError::Internal)?))
}

impl AgentDef {
    fn model_spec(&self) -> Result<&crate::value::ModelSpec, BuildError> {
        self.model.as_ref().ok_or_else(|| {
            invalid("no model: set `model` in the agent file or the user config, or pass --model (script:FILE, openai:MODEL, openai-chat:MODEL, anthropic:MODEL, ollama:MODEL, groq:MODEL, ...: `reins models` lists them)")
        })
    }

    /// The model and, for a real provider, its pricing. The API key comes from the environment variable
    /// `[provider] api_key_env` names, else the provider's own (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
    /// `GROQ_API_KEY`, ...; a local server's none), never from the definition.
    ///
    /// With fallbacks (`model = [...]`, `--fallback-model`) the model is a [`reins_providers::FallbackModel`]
    /// over each of them, built alike (the pricing is the first's).
    pub fn build_model(&self) -> Result<(Arc<dyn Model>, Option<Pricing>), BuildError> {
        let spec = self.model_spec()?;
        if spec.fallbacks().is_empty() {
            return self.build_one_model();
        }
        let (first, pricing) = self.with_model(spec.alone()).build_one_model()?;
        let mut models = vec![first];
        for m in spec.fallbacks() {
            models.push(self.with_model(m.clone()).build_one_model()?.0);
        }
        let cooldown = self.fallback_cooldown.map_or(reins_providers::DEFAULT_FALLBACK_COOLDOWN, |d| d.0);
        let names = std::iter::once(spec).chain(spec.fallbacks()).map(|m| m.as_str().to_owned()).collect();
        Ok((Arc::new(reins_providers::FallbackModel::new(models, cooldown).named(names)), pricing))
    }

    /// This definition with `model` as its model.
    fn with_model(&self, model: crate::value::ModelSpec) -> AgentDef {
        let mut def = self.clone();
        def.model = Some(model);
        def
    }

    /// Each fallback model of `model` without a known price (checked when a cost limit applies).
    fn unpriced_fallback(&self) -> Result<Option<crate::value::ModelSpec>, BuildError> {
        let Some(spec) = &self.model else { return Ok(None) };
        for m in spec.fallbacks() {
            if self.with_model(m.clone()).build_one_model()?.0.price().is_none() {
                return Ok(Some(m.clone()));
            }
        }
        Ok(None)
    }

    /// [`AgentDef::build_model`] of the first model alone.
    fn build_one_model(&self) -> Result<(Arc<dyn Model>, Option<Pricing>), BuildError> {
        let spec = self.model_spec()?;
        let (api, name) = match spec.kind() {
            (ModelKind::Script, file) => return self.script_model(spec, file),
            (ModelKind::Provider(api), name) => (api, name.to_owned()),
        };
        let b = match spec.named() {
            Some(named) => named.builder(name.clone()),
            None => Provider::builder(api, name.clone()),
        };
        let b = provider_settings(b, &self.provider);
        let p = &self.provider;
        // What the API would refuse, named by its key (the provider checks it again, without key paths).
        reins_providers::check_reasoning(&reins_providers::ReasoningSettings {
            api,
            model: &name,
            max_output_tokens: p.max_response_tokens.map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
            temperature: p.temperature.is_some(),
            tool_choice: p.tool_choice.as_ref().map_or(&reins_providers::ToolChoice::Auto, |c| &c.0),
            effort: p.reasoning_effort,
            thinking_budget: p.thinking_budget.map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
        })
        .map_err(|c| DefError::at(format!("provider.{}", c.setting), c.reason))?;
        let secrets = self.provider_secrets(api);
        let provider = b.build().map_err(|e| match e {
            ProviderError::MissingApiKey { env } => BuildError::MissingApiKey { model: spec.to_string(), env },
            other => invalid(secrets.mask(&other.to_string())),
        })?;
        let pricing = Pricing { price: reins::Model::price(&provider), model: name };
        // What the server sends back in an error (a gateway echoing the key it was sent) is masked before
        // the engine records it.
        Ok((reins::MaskedModel::wrap(Arc::new(provider), secrets), Some(pricing)))
    }

    /// A script file's model, priced when `[provider] price` says so (the only provider key a script takes).
    fn script_model(
        &self,
        spec: &crate::value::ModelSpec,
        file: &str,
    ) -> Result<(Arc<dyn Model>, Option<Pricing>), BuildError> {
        let p = &self.provider;
        let priced = crate::definition::ProviderDef { price: None, ..p.clone() };
        if priced != Default::default() {
            let key = serde_json::to_value(&priced)
                .ok()
                .and_then(|v| v.as_object().and_then(|m| m.keys().next().cloned()))
                .unwrap_or_default();
            return Err(DefError::at(
                format!("provider.{key}"),
                format!(
                    "applies to openai:, openai-chat: and anthropic: models, not {:?} (only `price` applies to a script)",
                    spec.as_str()
                ),
            )
            .into());
        }
        let text = read_bounded(Path::new(file), MAX_SCRIPT_BYTES)
            .map_err(|e| invalid(format!("cannot read script file {file:?}: {e}")))?;
        let steps = reins::parse_script(&text).map_err(|e| invalid(format!("script file {file:?}: {e}")))?;
        // A script file continues where the conversation it is asked to continue is (a resumed
        // session, an approval, a durable turn after a restart, a chat turn).
        let script = ScriptedModel::new(steps).following_transcript();
        let Some(price) = p.price.map(|d| d.to_price()) else {
            return Ok((Arc::new(script), None));
        };
        let pricing = Pricing { model: spec.as_str().to_owned(), price: Some(price) };
        Ok((Arc::new(script.with_price(price)), Some(pricing)))
    }

    /// The environment variable of this definition's API key: `[provider] api_key_env`, else its provider's
    /// (`None`: a script, or a local server that needs none).
    pub fn api_key_env(&self) -> Option<String> {
        if let Some(env) = &self.provider.api_key_env {
            return Some(env.clone());
        }
        let spec = self.model.as_ref()?;
        spec.named().and_then(|n| n.key_env).map(str::to_owned)
    }

    /// The secrets of this definition's provider for `api`: its API key (from the environment), its header
    /// values and the userinfo of its base URL — masked in whatever its server answers.
    pub fn provider_secrets(&self, api: reins_providers::Api) -> reins::Secrets {
        let p = &self.provider;
        let env = self.api_key_env().or_else(|| self.model.is_none().then(|| api.key_env().to_owned()));
        let key = env.and_then(|e| reins_providers::env_key(&e));
        let userinfo = p.base_url.as_deref().map(reins::Secrets::url_userinfo).unwrap_or_default();
        // Bedrock signs with the AWS secret key and session token (or sends a Bedrock API key): each is a secret.
        let aws = match api {
            reins_providers::Api::Bedrock => {
                reins_providers::bedrock::SECRET_ENV.iter().filter_map(|e| reins_providers::env_key(e)).collect()
            }
            _ => Vec::new(),
        };
        reins::Secrets::new(key.into_iter().chain(p.headers.values().cloned()).chain(userinfo).chain(aws))
    }

    /// The tools other than MCP servers': the test tools, and the file tools and command presets of the workspace.
    pub fn build_tools(&self) -> Result<Vec<Arc<dyn Tool>>, BuildError> {
        self.build_workspace().map(|w| w.tools)
    }

    /// The tools other than MCP servers', with the workspace and command runner they act through (which the
    /// workspace preamble describes).
    pub fn build_workspace(&self) -> Result<WorkspaceTools, BuildError> {
        let mut tools = Vec::new();
        if self.test_tools == Some(true) {
            tools.extend(crate::test_tools::tools());
        }
        let Some(root) = &self.workspace.path else {
            if !self.presets.is_empty() {
                return Err(invalid(
                    "presets need a workspace: pass --workspace DIR (or [workspace] path in the agent file)",
                ));
            }
            return Ok(WorkspaceTools { tools, workspace: None, runner: None });
        };
        let ws = &self.workspace;
        let ws_config = WorkspaceConfig {
            protected: ws
                .protected
                .clone()
                .unwrap_or_else(|| DEFAULT_PROTECTED.iter().map(|s| (*s).to_owned()).collect()),
            max_read_bytes: ws.max_read_bytes.map_or(reins_tools::DEFAULT_MAX_READ_BYTES, |n| n.get()),
            ..WorkspaceConfig::default()
        };
        let ws = Arc::new(Workspace::open_with(root, ws_config).map_err(|e| invalid(e.to_string()))?);
        let read_only = self.workspace.read_only == Some(true);
        // The tools that only read are the parallel-safe ones.
        let mut own: Vec<Arc<dyn Tool>> =
            reins_tools::file_tools(ws.clone()).into_iter().filter(|t| !read_only || t.parallel_safe()).collect();
        let mut runner = None;
        if !self.presets.is_empty() {
            let c = &self.commands;
            let mut cmd = CommandConfig::default();
            if let Some(t) = c.timeout {
                cmd.timeout = t.0;
            }
            if let Some(cap) = c.output_cap {
                cmd.output_cap = usize::try_from(cap.get()).unwrap_or(usize::MAX);
            }
            if let Some(env) = &c.env_allow {
                cmd.env_allow = env.clone();
            }
            if let Some(limits) = c.limits {
                cmd.limits = limits;
            }
            cmd.sandbox = c.sandbox.unwrap_or(SandboxMode::Required);
            let r = Arc::new(
                CommandRunner::new(ws.clone(), self.presets.clone(), cmd)
                    .map_err(|e| invalid(e.to_string()))?
                    .with_spill(self.spill(ws.host_root())),
            );
            own.push(Arc::new(RunCommand::new(r.clone())));
            runner = Some(r);
        }
        // A result over the bound is written whole beneath the workspace's scratch folder (`.reins/spill/`),
        // where the model can read it back; the model is shown its head and tail (in a read-only workspace, only
        // cut). The test tools are left as they are: their results are only cut, by the run's bound.
        tools.extend(reins_tools::SpillTool::wrap_all(own, self.spill(ws.host_root())));
        Ok(WorkspaceTools { tools, workspace: Some(ws), runner })
    }

    /// What the model is told, in order: the built-in workspace preamble (with file tools), the workspace's
    /// `AGENTS.md` (unless `workspace.agents_md = false`), then the definition's own instructions; and the notes
    /// about `AGENTS.md` (cut, or not read) for the person running the agent.
    pub fn compose_instructions(&self, w: &WorkspaceTools, own: Option<String>) -> (Option<String>, Vec<String>) {
        let mut notes = Vec::new();
        let (preamble, agents_md) = match &w.workspace {
            None => (None, None),
            Some(ws) => {
                let preamble = reins_tools::preamble(ws, w.runner.as_deref());
                let agents_md = if self.workspace.agents_md == Some(false) {
                    None
                } else {
                    let loaded = reins_tools::load_agents_md(ws, reins_tools::DEFAULT_AGENTS_MD_MAX_BYTES);
                    notes.extend(loaded.note());
                    loaded.section()
                };
                (Some(preamble), agents_md)
            }
        };
        (reins_tools::instructions::join([preamble, agents_md, own]), notes)
    }

    /// The MCP servers' configurations, in name order.
    pub fn mcp_configs(&self) -> Result<Vec<reins_mcp::ServerConfig>, DefError> {
        self.mcp.iter().map(|(name, server)| server.to_config(name)).collect()
    }

    /// Starts the MCP servers (`None` without any). A server that does not start stops them all.
    pub async fn start_mcp(&self) -> Result<Option<Arc<McpTools>>, BuildError> {
        let configs = self.mcp_configs()?;
        if configs.is_empty() {
            return Ok(None);
        }
        let mcp = McpTools::start(configs).await?;
        // With a workspace, a result over the bound is written whole beneath its scratch folder (`.reins/spill/`),
        // where the model can read it back; the model is shown its head and tail.
        if let Some(root) = &self.workspace.path {
            mcp.set_spill_with(&self.spill(root));
        }
        Ok(Some(Arc::new(mcp)))
    }

    /// How results over the run's bound are spilled beneath the workspace at `root` (read-only: only cut).
    fn spill(&self, root: &std::path::Path) -> reins_tools::Spill {
        let cut = self.context.max_tool_result_chars.map_or(DEFAULT_MAX_TOOL_RESULT_CHARS, |n| n.get());
        reins_tools::Spill::new(root, usize::try_from(cut).unwrap_or(usize::MAX))
            .read_only(self.workspace.read_only == Some(true))
    }

    /// The limits of a run.
    pub fn build_limits(&self) -> Limits {
        let l = &self.limits;
        Limits {
            max_steps: Some(l.max_steps.map_or(DEFAULT_MAX_STEPS, |n| n.get())),
            max_tool_calls: l.max_tool_calls.map(|c| c.0),
            max_input_tokens: l.max_input_tokens.map(|c| c.0),
            max_output_tokens: l.max_output_tokens.map(|c| c.0),
            max_total_tokens: l.max_total_tokens.map(|c| c.0),
            max_cost_usd: l.max_cost_usd.map(|c| c.get()),
            timeout: l.timeout.map(|d| d.0),
            tool_timeout: l.tool_timeout.map(|d| d.0),
        }
    }

    /// The budget a known real model gets when the definition sets none: the model's window less its
    /// response cap (`provider.max_response_tokens`, else the model's output cap up to 32,000), in o200k_base
    /// tokens, with a tenth kept back for the difference between that tokenizer and the vendor's and for the
    /// framing of the request. `None` for a script, an unknown model, or a definition that sets a budget.
    pub fn default_context_tokens(&self) -> Option<u64> {
        if self.context.max_context_chars.is_some() || self.context.max_context_tokens.is_some() {
            return None;
        }
        let info = reins_providers::model_info(self.model.as_ref()?.provider_model()?)?;
        let reserve = self.provider.max_response_tokens.map_or(info.max_output_tokens.min(32_000), |n| n.get());
        let budget = info.context_window.saturating_sub(reserve) / 10 * 9;
        (budget > 0).then_some(budget)
    }

    /// The context rules: the budget (characters, tokens, or by default the model's window) and the cut of
    /// each tool result.
    pub fn build_context(&self) -> Result<ContextConfig, BuildError> {
        let c = &self.context;
        let (max_context, counter) = match (c.max_context_chars, c.max_context_tokens, self.default_context_tokens()) {
            (Some(n), _, _) => (Some(n.get()), Arc::new(CharCounter) as Arc<dyn TokenCounter>),
            (None, Some(n), _) => (Some(n.get()), tiktoken()?),
            (None, None, Some(n)) => (Some(n), tiktoken()?),
            (None, None, None) => (None, Arc::new(CharCounter) as Arc<dyn TokenCounter>),
        };
        // Images count at the API's own cost: Anthropic's pixels / 750, else OpenAI's tiles.
        let anthropic =
            self.model.as_ref().is_some_and(|m| m.kind().0 == ModelKind::Provider(reins_providers::Api::Anthropic));
        let counter: Arc<dyn TokenCounter> = if anthropic {
            Arc::new(reins::context::WithImageCost::new(counter, reins::ImageCost::Anthropic))
        } else {
            counter
        };
        let cut = c.max_tool_result_chars.map_or(DEFAULT_MAX_TOOL_RESULT_CHARS, |n| n.get());
        Ok(ContextConfig {
            max_context,
            max_tool_result_chars: Some(usize::try_from(cut).unwrap_or(usize::MAX)),
            counter,
            strategy: c.strategy.unwrap_or(if self.default_context_tokens().is_some() {
                reins::ContextStrategy::Summarize
            } else {
                reins::ContextStrategy::Drop
            }),
            compact_at: c.compact_at.map_or(0.8, |s| s.get()),
            summary_prompt: c.summary_prompt.as_deref().filter(|p| !p.is_empty()).map(Arc::from),
            ..ContextConfig::default()
        })
    }

    /// The model that writes summaries (`context.compact_model`), if one is set: built like the run's model,
    /// with the same `[provider]` settings unless it is a script.
    pub fn build_compact_model(&self) -> Result<Option<Arc<dyn Model>>, BuildError> {
        let Some(spec) = &self.context.compact_model else { return Ok(None) };
        let mut def = self.clone();
        if matches!(spec.kind().0, ModelKind::Script) {
            def.provider = Default::default();
        }
        def.model = Some(spec.clone());
        def.build_model().map(|(m, _)| Some(m)).map_err(|e| match e {
            BuildError::Invalid(m) => invalid(format!("context.compact_model: {m}")),
            other => other,
        })
    }

    /// The instructions: `instructions`, or the text of `instructions_file` (a regular file of at most 1 MiB).
    pub fn instructions_text(&self) -> Result<Option<String>, BuildError> {
        match (&self.instructions, &self.instructions_file) {
            (Some(t), _) => Ok(Some(t.clone())),
            (None, Some(f)) => read_bounded(f, MAX_INSTRUCTIONS_BYTES)
                .map(Some)
                .map_err(|e| invalid(format!("instructions_file: cannot read {}: {e}", f.display()))),
            (None, None) => Ok(None),
        }
    }

    /// Checks that no secret is missing (a definition read back from a session has its secrets redacted).
    pub fn check_secrets(&self) -> Result<(), BuildError> {
        match self.redacted_keys().first() {
            None => Ok(()),
            Some(key) => Err(DefError::at(
                key.clone(),
                "this secret was not recorded with the session: give it again (--agent FILE, or the flag)",
            )
            .into()),
        }
    }

    /// Builds every part, starting the MCP servers first.
    pub async fn parts(&self) -> Result<Parts, BuildError> {
        self.validate()?;
        self.check_secrets()?;
        let mcp = self.start_mcp().await?;
        self.parts_with(mcp)
    }

    /// Builds every part but the MCP servers, which the caller started ([`AgentDef::start_mcp`], for example
    /// raced against a signal). Dropping the result stops them.
    pub fn parts_with(&self, mcp: Option<Arc<McpTools>>) -> Result<Parts, BuildError> {
        self.parts_under(mcp, None)
    }

    /// [`AgentDef::parts_with`] for an agent that runs under a cost limit of its parent's (`cost_limit`):
    /// every model of it — its own, its summary model's, its sub-agents' at every depth — must have a known
    /// price under its own or an inherited limit, or nothing is built.
    fn parts_under(&self, mcp: Option<Arc<McpTools>>, cost_limit: Option<f64>) -> Result<Parts, BuildError> {
        self.validate()?;
        self.check_secrets()?;
        let cost_limit = self.limits.max_cost_usd.map(|c| c.get()).or(cost_limit);
        let (model, pricing) = self.build_model()?;
        if let Some(max) = cost_limit {
            if model.price().is_none() {
                return Err(unpriced("model", self.model.as_ref(), max));
            }
            if let Some(m) = self.unpriced_fallback()? {
                return Err(unpriced("model", Some(&m), max));
            }
        }
        let mut workspace = self.build_workspace()?;
        let mut notes = Vec::new();
        let mut agent_pricing = std::collections::BTreeMap::new();
        for name in self.agents.keys() {
            let Some(def) = self.sub_agent(name) else { continue };
            if workspace.tools.iter().any(|t| t.spec().name == *name) {
                return Err(DefError::at(
                    format!("agents.{name}"),
                    format!("the agent already has a tool named {name:?}: name the sub-agent otherwise"),
                )
                .into());
            }
            let sub = def.parts_under(None, cost_limit).map_err(|e| within_agent(name, e))?;
            notes.extend(sub.notes.iter().map(|n| format!("sub-agent {name}: {n}")));
            if let Some(p) = &sub.pricing {
                agent_pricing.insert(name.clone(), p.clone());
            }
            let agent = sub.builder()?.build().map_err(|e| invalid(format!("agents.{name}: {e}")))?;
            let description = def.description.clone().unwrap_or_else(|| {
                format!("The sub-agent {name:?}: give it a task, in full (it sees nothing else of this conversation); it answers with its result.")
            });
            let tool = reins::AgentTool::new(name, &description, agent).map_err(|e| invalid(e.to_string()))?;
            workspace.tools.push(Arc::new(tool));
        }
        let limits = self.build_limits();
        let context = self.build_context()?;
        let compact_model = self.build_compact_model()?;
        if let (Some(max), Some(m)) = (cost_limit, &compact_model) {
            if m.price().is_none() {
                return Err(unpriced("context.compact_model", self.context.compact_model.as_ref(), max));
            }
        }
        let own_instructions = self.instructions_text()?;
        let (instructions, own_notes) = self.compose_instructions(&workspace, own_instructions.clone());
        notes.splice(0..0, own_notes);
        // A malformed tool of a server is left out, the server's others kept: say which and why.
        notes.extend(mcp.iter().flat_map(|m| m.warnings()));
        let output_schema = self.output_schema.as_ref().map(|s| s.load()).transpose()?;
        Ok(Parts {
            def: self.clone(),
            model,
            pricing,
            tools: workspace.tools,
            mcp,
            limits,
            context,
            compact_model,
            instructions,
            own_instructions,
            notes,
            output_schema,
            agent_pricing,
        })
    }

    /// A ready agent: model, tools, MCP servers, limits, context budget and pricing.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let agent = reins_agent::AgentDef::new("openai:gpt-4.1-mini")?.workspace("./repo").build().await?;
    /// let outcome = agent.run("What does this repository do?", tokio_util::sync::CancellationToken::new()).await;
    /// agent.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn build(&self) -> Result<Built, BuildError> {
        self.build_with(BuildOptions::default()).await
    }

    /// A ready agent, recorded in a store when `options` says so.
    pub async fn build_with(&self, options: BuildOptions) -> Result<Built, BuildError> {
        let parts = self.parts().await?;
        let builder = match options.store {
            Some((store, session)) => parts.recorded_builder(&store, session.as_ref())?,
            None => parts.builder()?,
        };
        let agent = builder.build().map_err(|e| invalid(e.to_string()))?;
        Ok(Built { agent, mcp: parts.mcp, pricing: parts.pricing })
    }

    /// What a session records about this agent: the definition with its secrets redacted, the instructions
    /// inlined (so a resumed run sees the same text) and the paths absolute; plus, for older readers, the
    /// keys `reins replay` read before definitions were recorded.
    pub fn session_config(&self, instructions: Option<&str>) -> serde_json::Value {
        let mut def = self.redacted();
        if let Some(text) = instructions {
            def.instructions = Some(text.to_owned());
            def.instructions_file = None;
        }
        absolute_paths(&mut def);
        // The schema is recorded inline, so a resumed or replayed run has it whatever became of its file.
        if let Some(schema) = def.output_schema.as_ref().and_then(|s| s.load().ok()) {
            def.output_schema = Some(crate::output::OutputSchemaDef::Inline(schema.schema().clone()));
        }
        // What the spec resolved to (a provider by name: its API, address and key variable), beside the spec as
        // written: a resumed run resolves the spec again by the same table.
        let resolved = def.model.as_ref().and_then(|m| m.named()).map(|n| {
            let base = def.provider.base_url.clone().or_else(|| n.resolve_base_url().ok());
            serde_json::json!({
                "provider": n.name,
                "api": n.api.name(),
                "base_url": base.map(|u| reins::secrets::redact_url(&u).into_owned()),
                "key_env": def.api_key_env(),
            })
        });
        serde_json::json!({
            "agent": def.to_json(),
            "model": def.model.as_ref().map(|m| m.to_string()),
            "model_resolved": resolved,
            "test_tools": def.test_tools.unwrap_or(false),
            "workspace": def.workspace.path.as_ref().map(|p| p.display().to_string()),
            "max_tool_result_chars": def.context.max_tool_result_chars.map_or(DEFAULT_MAX_TOOL_RESULT_CHARS, |n| n.get()),
            "max_context_chars": def.context.max_context_chars.map(|n| n.get()),
            "max_context_tokens": def.context.max_context_tokens.map(|n| n.get()),
        })
    }

    /// The definition a session recorded (its `config` of a run start): the recorded agent, or for a session
    /// recorded before agents were, one rebuilt from the flags it recorded. `None` when nothing was recorded.
    pub fn from_session_config(config: &serde_json::Value) -> Result<Option<AgentDef>, DefError> {
        if let Some(agent) = config.get("agent") {
            return AgentDef::from_json(agent).map(Some).map_err(|e| e.within("the recorded agent"));
        }
        if !config.is_object() {
            return Ok(None);
        }
        let mut legacy = serde_json::Map::new();
        if let Some(m) = config.get("model").filter(|v| v.is_string()) {
            legacy.insert("model".into(), m.clone());
        }
        if let Some(t) = config.get("test_tools").filter(|v| v.is_boolean()) {
            legacy.insert("test_tools".into(), t.clone());
        }
        if let Some(w) = config.get("workspace").filter(|v| v.is_string()) {
            legacy.insert("workspace".into(), serde_json::json!({ "path": w }));
        }
        let mut context = serde_json::Map::new();
        for key in ["max_tool_result_chars", "max_context_chars", "max_context_tokens"] {
            if let Some(v) = config.get(key).filter(|v| v.is_u64()) {
                context.insert(key.into(), v.clone());
            }
        }
        if !context.is_empty() {
            legacy.insert("context".into(), context.into());
        }
        AgentDef::from_json(&serde_json::Value::Object(legacy)).map(Some).map_err(|e| e.within("the recorded flags"))
    }
}

/// A provider builder with every `[provider]` setting of the definition applied (the key from the environment).
fn provider_settings(
    mut b: reins_providers::ProviderBuilder,
    p: &crate::definition::ProviderDef,
) -> reins_providers::ProviderBuilder {
    if let Some(env) = &p.api_key_env {
        b = b.api_key_env(env.clone());
    }
    b = b.api_key_from_env();
    if let Some(url) = &p.base_url {
        b = b.base_url(url.clone());
    }
    if let Some(n) = p.max_response_tokens {
        b = b.max_output_tokens(u32::try_from(n.get()).unwrap_or(u32::MAX));
    }
    if let Some(t) = p.temperature {
        b = b.temperature(t.get());
    }
    if let Some(price) = p.price {
        b = b.price(price.to_price());
    }
    if let Some(c) = &p.tool_choice {
        b = b.tool_choice(c.0.clone());
    }
    if let Some(e) = p.reasoning_effort {
        b = b.reasoning_effort(e);
    }
    if let Some(n) = p.thinking_budget {
        b = b.thinking_budget(u32::try_from(n.get()).unwrap_or(u32::MAX));
    }
    if let Some(s) = p.stream {
        b = b.stream(s);
    }
    if let Some(c) = p.prompt_cache {
        b = b.prompt_cache(c);
    }
    for (k, v) in &p.headers {
        b = b.header(k.clone(), v.clone());
    }
    if let Some(extra) = &p.extra_body {
        b = b.extra_body(extra.clone());
    }
    if let Some(f) = &p.chat_max_tokens_field {
        b = b.chat_max_tokens_field(f.clone());
    }
    if let Some(d) = p.idle_timeout {
        b = b.idle_timeout(d.0);
    }
    if let Some(d) = p.response_timeout {
        b = b.response_timeout(d.0);
    }
    if let Some(d) = p.response_deadline {
        b = b.response_deadline(d.0);
    }
    if let Some(d) = p.connect_timeout {
        b = b.connect_timeout(d.0);
    }
    if let Some(n) = p.max_response_bytes {
        b = b.max_response_bytes(usize::try_from(n.get()).unwrap_or(usize::MAX));
    }
    if let Some(retry) = retry_policy(p) {
        b = b.retry(retry);
    }
    if p.requests_per_minute.is_some() || p.max_concurrent_requests.is_some() {
        b = b.rate_limiter(RateLimiter::new(
            p.requests_per_minute.map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
            p.max_concurrent_requests.map(|n| usize::try_from(n.get()).unwrap_or(usize::MAX)),
        ));
    }
    b
}

/// The retry policy of `[provider]`'s retry keys, when any is set.
fn retry_policy(p: &crate::definition::ProviderDef) -> Option<RetryPolicy> {
    if !(p.max_retries.is_some()
        || p.initial_backoff.is_some()
        || p.max_backoff.is_some()
        || p.max_retry_after.is_some())
    {
        return None;
    }
    let mut retry = RetryPolicy::default();
    if let Some(n) = p.max_retries {
        retry.max_retries = u32::try_from(n.0).unwrap_or(u32::MAX);
    }
    if let Some(d) = p.initial_backoff {
        retry.initial_backoff = d.0;
    }
    if let Some(d) = p.max_backoff {
        retry.max_backoff = d.0;
    }
    if let Some(d) = p.max_retry_after {
        retry.max_retry_after = d.0;
    }
    Some(retry)
}

/// Makes a definition's paths absolute (canonical where they exist), its sub-agents' too.
fn absolute_paths(def: &mut AgentDef) {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| crate::load::absolute(p));
    if let Some(p) = &def.workspace.path {
        def.workspace.path = Some(canonical(p));
    }
    if let Some(model) = &def.model {
        if let (ModelKind::Script, file) = model.kind() {
            def.model = Some(model.with_script_path(&canonical(Path::new(file))));
        }
    }
    for server in def.mcp.values_mut() {
        if let Some(cwd) = &server.cwd {
            server.cwd = Some(canonical(cwd));
        }
    }
    for sub in def.agents.values_mut() {
        absolute_paths(sub);
    }
}

impl Parts {
    /// The registry of the tools other than MCP servers'.
    pub fn registry(&self) -> Result<Registry, BuildError> {
        Registry::new(self.tools.clone()).map_err(|e| invalid(e.to_string()))
    }

    /// An agent builder with the model, the tools (and MCP servers as a tool source refreshed between steps),
    /// the limits and the context rules; add observers or a journal, then build.
    pub fn builder(&self) -> Result<AgentBuilder, BuildError> {
        let registry = self.registry()?;
        let mut builder = Agent::builder_shared(self.model.clone())
            .registry(registry)
            .limits(self.limits.clone())
            .context(self.context.clone());
        if let Some(mcp) = &self.mcp {
            let source = reins_mcp::McpToolSource::new(Arc::clone(mcp), self.tools.clone())
                .map_err(|e| invalid(e.to_string()))?;
            builder = builder.tool_source(Arc::new(source));
        }
        if let Some(text) = &self.instructions {
            builder = builder.instructions(text.clone());
        }
        if let Some(m) = &self.compact_model {
            builder = builder.compact_model(Arc::clone(m));
        }
        if let Some(on) = self.def.trace_content {
            builder = builder.trace_content(on);
        }
        let mode = self.def.approve.unwrap_or_default();
        if mode != crate::approve::ApproveMode::Never {
            builder = builder.policy(crate::approve::ApprovePolicy::new(mode, self.mcp.clone()));
        }
        for (i, hook) in self.def.hooks.iter().enumerate() {
            let built = hook
                .build(self.def.workspace.path.as_deref())
                .map_err(|m| BuildError::Definition(DefError::at(format!("hooks[{i}]"), m)))?;
            builder = builder.hook(Arc::new(built));
        }
        if let Some(schema) = &self.output_schema {
            builder = builder.output_schema(schema.clone());
        }
        Ok(builder)
    }

    /// The registry every call of the agent is checked against (an edited call's new arguments, for example):
    /// its tools and, when it has MCP servers, theirs as they list them now.
    pub fn call_registry(&self) -> Result<Registry, BuildError> {
        match &self.mcp {
            Some(mcp) => mcp.registry(self.tools.clone()).map_err(BuildError::Mcp),
            None => self.registry(),
        }
    }

    /// [`Parts::builder`] with a journal recording the agent's runs in `store`: each run a new session, or runs
    /// continuing `resume` ([`Parts::journal`]). Add an approver or observers, then build.
    pub fn recorded_builder(
        &self,
        store: &reins_store::Store,
        resume: Option<&reins_store::Session>,
    ) -> Result<AgentBuilder, BuildError> {
        Ok(self.builder()?.journal(self.journal(store, resume)?))
    }

    /// The session metadata of a run of this agent (model, workspace, prices, and the recorded definition).
    pub fn session_meta(&self) -> reins_store::SessionMeta {
        let config = self.def.session_config(self.own_instructions.as_deref());
        reins_store::SessionMeta {
            model: self.def.model.as_ref().map(|m| m.to_string()),
            workspace: config["workspace"].as_str().map(str::to_owned),
            prices: self.pricing.as_ref().and_then(Pricing::store_prices),
            config: Some(config),
        }
    }

    /// A journal recording this agent's runs in `store`: each run a new session, or runs continuing `resume`.
    pub fn journal(
        &self,
        store: &reins_store::Store,
        resume: Option<&reins_store::Session>,
    ) -> Result<reins_store::SessionJournal, BuildError> {
        let meta = self.session_meta();
        match resume {
            None => Ok(store.journal(meta)),
            Some(session) => store.resume_journal(session, meta).map_err(|e| BuildError::Internal(e.to_string())),
        }
    }
}
