//! Workspace tools for the command line: `--workspace`, `--preset`, `--command-timeout`, `--no-sandbox`,
//! `--accept-weaker-sandbox`, `--config`, and `reins sandbox-check`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use reins::Tool;
use reins_tools::{
    CommandConfig, CommandRunner, DEFAULT_PROTECTED, Preset, ResourceLimits, RunCommand, SandboxMode, Workspace,
    WorkspaceConfig, file_tools,
};
use serde::Deserialize;

use crate::exit::{CliError, usage};

/// Flags that give the model workspace tools.
#[derive(Args, Debug, Default)]
pub struct ToolFlags {
    /// Gives the model the file tools (read_file, write_file, edit_file, list_dir, search) over DIR.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Adds a command preset the model may run by name: 'NAME=PROGRAM ARG...' (split like a shell would, never
    /// run by one; takes no arguments from the model). Repeatable. Needs a workspace.
    #[arg(long = "preset", value_name = "NAME=PROGRAM ARG...")]
    pub presets: Vec<String>,
    /// The default command timeout, e.g. 10s.
    #[arg(long, value_parser = crate::run::parse_duration, value_name = "DURATION")]
    pub command_timeout: Option<Duration>,
    /// Runs commands without the OS sandbox (process group, scrubbed environment and limits still apply).
    #[arg(long, conflicts_with = "accept_weaker_sandbox")]
    pub no_sandbox: bool,
    /// Runs commands with whatever isolation the host supports instead of refusing when a layer is missing.
    #[arg(long)]
    pub accept_weaker_sandbox: bool,
    /// A TOML file with the workspace, command defaults and presets (see the README).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// The workspace.
    #[serde(default)]
    pub workspace: WorkspaceSection,
    /// Command defaults.
    #[serde(default)]
    pub commands: CommandsSection,
    /// Presets.
    #[serde(default)]
    pub presets: Vec<Preset>,
    /// `[mcp.NAME]` tables: read by the MCP module, accepted here.
    #[serde(default, rename = "mcp")]
    _mcp: Option<toml::Value>,
}

/// `[workspace]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSection {
    /// The root, relative to the config file (the `--workspace` flag overrides it).
    pub path: Option<PathBuf>,
    /// Protected-path globs, added to the defaults (`.git`, `**/.git`), which always apply.
    pub protected: Option<Vec<String>>,
    /// The most bytes `read_file` loads.
    pub max_read_bytes: Option<u64>,
}

/// `[commands]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsSection {
    /// Default timeout, e.g. "10s".
    pub timeout: Option<String>,
    /// Output cap per stream in bytes.
    pub output_cap: Option<usize>,
    /// "required" (default), "best-effort" or "off".
    pub sandbox: Option<SandboxMode>,
    /// Variables passed from the environment (secret-looking names are still withheld unless a preset names them).
    pub env_allow: Option<Vec<String>>,
    /// Default resource limits.
    pub limits: Option<ResourceLimits>,
}

/// Parses `NAME=PROGRAM ARG...` into a preset.
pub fn parse_preset(spec: &str) -> Result<Preset, String> {
    let (name, command) =
        spec.split_once('=').ok_or_else(|| format!("--preset {spec:?}: expected NAME=PROGRAM ARG..."))?;
    let words = shlex::split(command).ok_or_else(|| format!("--preset {spec:?}: unbalanced quotes or escape"))?;
    let (program, args) =
        words.split_first().ok_or_else(|| format!("--preset {spec:?}: the command after `=` is empty"))?;
    Ok(Preset::new(name.trim(), program.clone(), args.to_vec()))
}

fn load_config(path: &Path) -> Result<ToolsConfig, CliError> {
    let text = crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES)
        .map_err(|e| usage(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| usage(format!("invalid config {}: {e}", path.display())))
}

/// The tools the flags ask for (none without a workspace).
pub fn build_tools(flags: &ToolFlags) -> Result<Vec<Arc<dyn Tool>>, CliError> {
    build_workspace_tools(flags).map(|w| w.tools)
}

/// The workspace tools, with the workspace and the command runner they act through (for the preamble
/// and `AGENTS.md`).
#[derive(Default)]
pub struct WorkspaceTools {
    /// The file tools and `run_command`.
    pub tools: Vec<Arc<dyn Tool>>,
    /// The workspace, when there is one.
    pub workspace: Option<Arc<Workspace>>,
    /// The command runner, when there are presets.
    pub runner: Option<Arc<CommandRunner>>,
}

/// The tools the flags ask for (none without a workspace), with their workspace and command runner.
pub fn build_workspace_tools(flags: &ToolFlags) -> Result<WorkspaceTools, CliError> {
    let config = match &flags.config {
        Some(p) => load_config(p)?,
        None => ToolsConfig::default(),
    };
    let from_config = config.workspace.path.as_ref().map(|p| match flags.config.as_ref().and_then(|c| c.parent()) {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.clone(),
    });
    // Checked whether or not there are presets: a bad value is refused the same way every time.
    let timeout = config.commands.timeout.as_deref().map(reins_tools::parse_duration).transpose();
    let timeout = timeout.map_err(|e| usage(format!("[commands] timeout: {e}")))?;
    if let Some(limits) = &config.commands.limits {
        limits.validate().map_err(|m| usage(format!("[commands] {m}")))?;
    }
    let Some(root) = flags.workspace.clone().or(from_config) else {
        if !flags.presets.is_empty() || !config.presets.is_empty() {
            return Err(usage("presets need a workspace: pass --workspace DIR (or [workspace] path in the config)"));
        }
        return Ok(WorkspaceTools::default());
    };
    let ws_config = WorkspaceConfig {
        protected: config
            .workspace
            .protected
            .unwrap_or_else(|| DEFAULT_PROTECTED.iter().map(|s| (*s).to_owned()).collect()),
        max_read_bytes: config.workspace.max_read_bytes.unwrap_or(reins_tools::DEFAULT_MAX_READ_BYTES),
        ..WorkspaceConfig::default()
    };
    let ws = Arc::new(Workspace::open_with(&root, ws_config).map_err(|e| usage(e.to_string()))?);
    let mut tools = file_tools(ws.clone());
    let mut runner = None;

    let mut presets = config.presets;
    for spec in &flags.presets {
        presets.push(parse_preset(spec).map_err(usage)?);
    }
    if !presets.is_empty() {
        let mut cmd = CommandConfig::default();
        if let Some(t) = timeout {
            cmd.timeout = t;
        }
        if let Some(t) = flags.command_timeout {
            cmd.timeout = t;
        }
        if let Some(cap) = config.commands.output_cap {
            if cap == 0 {
                return Err(usage("[commands] output_cap must be positive"));
            }
            cmd.output_cap = cap;
        }
        if let Some(env) = config.commands.env_allow {
            cmd.env_allow = env;
        }
        if let Some(limits) = config.commands.limits {
            cmd.limits = limits;
        }
        cmd.sandbox = config.commands.sandbox.unwrap_or(SandboxMode::Required);
        if flags.accept_weaker_sandbox && cmd.sandbox == SandboxMode::Required {
            cmd.sandbox = SandboxMode::BestEffort;
        }
        if flags.no_sandbox {
            cmd.sandbox = SandboxMode::Off;
        }
        let r = Arc::new(CommandRunner::new(ws.clone(), presets, cmd).map_err(|e| usage(e.to_string()))?);
        tools.push(Arc::new(RunCommand::new(r.clone())));
        runner = Some(r);
    }
    Ok(WorkspaceTools { tools, workspace: Some(ws), runner })
}

/// Flags of `reins sandbox-check`.
#[derive(Args, Debug)]
pub struct SandboxCheckArgs {
    /// Prints the facts as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `reins sandbox-check`: what isolation this host can give commands.
pub fn sandbox_check(args: &SandboxCheckArgs) -> Result<u8, CliError> {
    let support = reins_tools::probe();
    if args.json {
        let v = serde_json::to_value(support).map_err(|e| CliError::Internal(e.into()))?;
        jsonln!("{v}");
    } else {
        out!("{}", support.render());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_split_like_a_shell_but_never_run_by_one() {
        let p = parse_preset("test=cargo test -- 'a b' \"c;d\"").expect("valid");
        assert_eq!(p.name, "test");
        assert_eq!(p.program, "cargo");
        assert_eq!(p.args, ["test", "--", "a b", "c;d"]);
        assert!(parse_preset("nocommand").is_err());
        assert!(parse_preset("x=").is_err());
        assert!(parse_preset("x=echo 'open").is_err());
    }

    #[test]
    fn config_files_parse() {
        let c: ToolsConfig = toml::from_str(
            r#"
            [workspace]
            path = "."
            protected = [".git", "**/*.pem"]
            [commands]
            timeout = "10s"
            sandbox = "best-effort"
            [commands.limits]
            cpu_seconds = 5
            [[presets]]
            name = "grep"
            program = "grep"
            args = ["-rn"]
            arg_schema = { type = "array", items = { type = "string", pattern = "^[A-Za-z0-9_]+$" }, maxItems = 1 }
            timeout = "2m"
            network = false
            "#,
        )
        .expect("parse");
        assert_eq!(c.commands.sandbox, Some(SandboxMode::BestEffort));
        assert_eq!(c.presets[0].timeout, Some(Duration::from_secs(120)));
        assert!(c.presets[0].arg_schema.is_some());
        // The MCP module's tables may share the file.
        assert!(toml::from_str::<ToolsConfig>("[mcp.fs]\ncommand = \"x\"\n").is_ok());
        assert!(toml::from_str::<ToolsConfig>("[[presets]]\nname = \"x\"\nprogram = \"y\"\nbogus = 1\n").is_err());
        assert!(
            toml::from_str::<ToolsConfig>("[[presets]]\nname = \"x\"\nprogram = \"y\"\ntimeout = \"soon\"\n").is_err()
        );
    }
}
