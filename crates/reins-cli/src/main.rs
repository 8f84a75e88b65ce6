//! The `reins` command: runs agents under Reins' limits and reports what happened.

// Everything printed goes through `output` (text for people escaped, stdout failures reported): no raw print.
#![deny(clippy::print_stdout, clippy::print_stderr)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

/// A line of text for people on stdout, escaped (see `output`). Output to a closed pipe (`reins sessions list |
/// head`) is dropped and the command ends with its own exit code; any other failed write ends it with exit 1.
macro_rules! outln {
    () => {
        $crate::output::stdout_text("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_text(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// Text for people on stdout, escaped (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::stdout_text(&format!($($arg)*))
    };
}

/// A line of JSON on stdout, as serde wrote it (see `outln!` for failures).
macro_rules! jsonln {
    ($($arg:tt)*) => {
        $crate::output::stdout_raw(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// A line of text for people on stderr, escaped.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::stderr_text(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod agent_cli;
mod approve_cli;
mod chat;
mod decisions;
mod demo;
mod durable_cli;
mod elicit_cli;
mod eval_cli;
mod exit;
mod heartbeat;
mod history;
mod instructions_cli;
mod loopback;
mod mcp_cli;
mod mcp_login;
mod mcp_prompt;
mod mcp_serve;
mod mcp_servers;
mod media_cli;
mod models_cli;
mod outcome_file;
mod output;
mod providers_cli;
mod render;
mod replay_cli;
mod resolve;
mod restate_client;
mod run;
mod run_args;
mod run_session;
mod scratch_copy;
mod session_page;
mod sessions_cli;
mod signals;
mod store_open;
mod telemetry;
mod terminal_approver;
mod tools_cli;
mod view_cli;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::exit::{CliError, EXIT_CODES_HELP};

/// `reins --version`: the version and the commit it was built from (`unknown` outside a git checkout).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("REINS_GIT_COMMIT"), ")");

/// Reins: a vendor-neutral agent harness. The model proposes; the harness disposes.
#[derive(Parser, Debug)]
#[command(name = "reins", version = VERSION, about, after_help = EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a short scripted session offline and show what happened.
    Demo,
    /// Run an agent on a prompt.
    #[command(after_help = EXIT_CODES_HELP)]
    Run(Box<run_args::RunArgs>),
    /// An interactive session on a terminal: a line editor, the model's text streamed, tool calls shown,
    /// approvals asked inline (default --approve writes), /exit /cost /compact /resume ID /help. Every turn is
    /// recorded in the session. Ctrl-C cancels the turn; Ctrl-D or /exit ends the chat.
    #[command(after_help = EXIT_CODES_HELP)]
    Chat(Box<chat::ChatArgs>),
    /// Decide about the calls a session waits on (exit 14 of `reins run`) and continue its run.
    #[command(after_help = EXIT_CODES_HELP)]
    Approve(Box<approve_cli::ApproveArgs>),
    /// Recorded sessions: `reins sessions list|show|view|export|backup|rm|prune`.
    Sessions(sessions_cli::SessionsArgs),
    /// Re-runs a recorded session offline (recorded model responses, tools in a scratch copy of the
    /// workspace) and reports the first divergence. Exit 0 when identical, 10 when it diverged.
    Replay(replay_cli::ReplayArgs),
    /// Serves the store's sessions to a browser on loopback (read-only, live while runs go on); prints the URL
    /// with its access token.
    Ui(view_cli::UiArgs),
    /// Show what OS sandbox this host can give commands (Landlock, seccomp, namespaces).
    SandboxCheck(tools_cli::SandboxCheckArgs),
    /// MCP servers: `reins mcp list` starts each configured server and shows its tools.
    Mcp(mcp_cli::McpArgs),
    /// The providers a model spec may name and the models of the price table (context window, output cap,
    /// prices); for a local server (ollama, lmstudio, llamacpp, vllm), the models it serves.
    Models(models_cli::ModelsArgs),
    /// The agent definition: `reins config show` prints the resolved agent and where each value came from.
    Config(agent_cli::ConfigArgs),
    /// Serve durable runs for Restate: a service endpoint that runs agents (loopback by default).
    Worker(durable_cli::WorkerArgs),
    /// Start a durable run on Restate (prints its session and run ids; --wait waits like `reins run`).
    /// Exit 15 when Restate is unreachable or the session unknown.
    Submit(Box<durable_cli::SubmitArgs>),
    /// Show where a durable run (or a session's newest run) stands. Exit 15 for an unknown id.
    Status(durable_cli::IdArgs),
    /// Print the outcome of a finished durable run like `reins run`, with its exit code. Exit 15 when it is
    /// unknown or not finished.
    Result(durable_cli::IdArgs),
    /// Cancel a durable run: it ends `aborted` at its next step, its transcript coherent.
    Cancel(durable_cli::IdArgs),
    /// Evals: `reins eval run|resume|show|diff|rescore|replay` — suites of cases scored by checks, compared with statistics.
    Eval(eval_cli::EvalArgs),
    /// Prints a completion script for SHELL on stdout (bash, zsh, fish, elvish, powershell).
    ///
    /// For example `reins completions bash > ~/.local/share/bash-completion/completions/reins`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff) on stdout: `reins man > reins.1; man ./reins.1`.
    Man,
}

/// `reins completions SHELL`.
fn completions(shell: clap_complete::Shell) -> Result<u8, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "reins", &mut script);
    output::stdout_raw(&String::from_utf8_lossy(&script));
    Ok(0)
}

/// `reins man`.
fn man() -> Result<u8, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot render the manual page: {e}")))?;
    output::stdout_raw(&String::from_utf8_lossy(&page));
    Ok(0)
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let printed = e.print().and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
            // `--help` and `--version` go to stdout: a failed write there is exit 1 like any other (a closed pipe
            // stays quiet).
            if let Err(why) = printed
                && !e.use_stderr()
                && why.kind() != std::io::ErrorKind::BrokenPipe
            {
                return CliError::Internal(anyhow::anyhow!("cannot write to stdout: {why}")).report();
            }
            return std::process::ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return CliError::Internal(anyhow::anyhow!("cannot start the async runtime: {e}")).report(),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo => demo::demo().await,
            Command::Run(args) => run::run(*args).await,
            Command::Chat(args) => chat::chat(*args).await,
            Command::Approve(args) => approve_cli::approve(*args).await,
            Command::Sessions(args) => sessions_cli::sessions(args),
            Command::Replay(args) => replay_cli::replay(args).await,
            Command::Ui(args) => view_cli::ui(args).await,
            Command::SandboxCheck(args) => tools_cli::sandbox_check(&args),
            Command::Mcp(args) => mcp_cli::mcp(args).await,
            Command::Config(args) => agent_cli::config(args),
            Command::Models(args) => models_cli::models(args).await,
            Command::Worker(args) => durable_cli::worker(args).await,
            Command::Submit(args) => durable_cli::submit(*args).await,
            Command::Status(args) => durable_cli::status(args).await,
            Command::Result(args) => durable_cli::result(args).await,
            Command::Cancel(args) => durable_cli::cancel(args).await,
            Command::Eval(args) => eval_cli::eval(args).await,
            Command::Completions { shell } => completions(shell),
            Command::Man => man(),
        }
    });
    // The spans not sent yet, before the runtime goes (a gRPC exporter runs on it); bounded.
    telemetry::finish();
    // Every way out (a run that ended, an error): the stores are closed, their logs checkpointed.
    store_open::close_stores();
    output::flush_stdout();
    match (result, output::stdout_failure()) {
        (Err(e), _) => e.report(),
        (Ok(_), Some(why)) => CliError::Internal(anyhow::anyhow!("cannot write to stdout: {why}")).report(),
        (Ok(code), None) => std::process::ExitCode::from(code),
    }
}
