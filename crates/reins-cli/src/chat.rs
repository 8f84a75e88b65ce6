//! `reins chat`: an interactive session on a terminal. A line editor (rustyline: editing keys, history in
//! memory), the model's text streamed as it arrives, tool calls shown as they run, approvals asked inline
//! (`--approve writes` by default), and slash commands. Each turn is a run of one recorded session — the
//! session is loaded and resumed for each turn, exactly as `reins run --resume ID "..."` does — so `reins
//! sessions show` and `reins chat --resume ID` see every turn.
//!
//! Keys and signals: Ctrl-C during a turn (SIGINT) cancels that turn (it ends `aborted`, the session stays
//! open for the next one); Ctrl-C at the prompt clears the line; Ctrl-D at an empty prompt or `/exit` ends
//! the chat; SIGTERM or SIGHUP end the turn in progress (`aborted`, its run closed in the session) and the
//! chat (exit 7); a second signal while that happens exits at once (128 + its number).

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clap::Args;
use reins::{Delta, DeltaSink, Event, EventKind, Message, Model, ModelError, ModelRequest, ModelResponse};
use reins::{ObserverError, Outcome, RunState, Status};
use reins_cli::chat_line::{Said, parse};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, usage};
use crate::run_args::RunArgs;
use crate::run_session::Setup;

/// The most lines the line editor's history keeps (in memory only: nothing is written to disk).
const HISTORY: usize = 1000;

/// The prompt, and the prompt of a continued line (a line ending in `\`).
const PROMPT: &str = "> ";
const MORE: &str = ". ";

/// What `/help` prints.
const HELP: &str = "\
  /exit          end the chat (so does Ctrl-D at an empty prompt)
  /cost          tokens and cost: this chat's turns and the whole session
  /compact       summarize the conversation so far (summarize strategy under a context budget)
  /resume ID     continue another recorded session (its agent, as `reins chat --resume ID`)
  /prompt SERVER/NAME [KEY=VALUE ...]
                 send an MCP server's prompt as your message (`reins mcp list` shows them)
  /help          this list
  a line ending in \\ continues on the next line; //text sends /text
  Ctrl-C cancels the turn in progress (at the prompt: clears the line)";

/// `reins chat`: the flags of `reins run` (the prompt, if given, is the first message).
#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The agent, model, workspace, limits and session flags, as for `reins run`. Limits on steps, tool
    /// calls and time apply to each turn; limits on tokens and cost to the whole chat. Default `--approve
    /// writes`.
    #[command(flatten)]
    pub run: RunArgs,
    /// Keeps the line editor's history in memory only (by default it is also kept in
    /// $XDG_STATE_HOME/reins/chat_history, else ~/.local/state/reins/chat_history).
    #[arg(long)]
    pub no_history: bool,
}

/// `reins chat`.
pub async fn chat(args: ChatArgs) -> Result<u8, CliError> {
    let ChatArgs { mut run, no_history } = args;
    if !std::io::stdin().is_terminal() {
        return Err(usage(
            "reins chat is interactive and needs a terminal on standard input: use `reins run` (with --resume ID to \
             continue a session) in scripts and pipes",
        ));
    }
    for (given, flag) in [
        (run.json, "--json"),
        (run.events_content, "--events-content"),
        (run.output.is_some(), "--output"),
        (!run.media.images.is_empty(), "--image"),
        (run.instructions.prompt_file.is_some(), "--prompt-file"),
    ] {
        if given {
            return Err(usage(format!("{flag} is a flag of `reins run`: reins chat does not take it")));
        }
    }
    let first = run.prompt.take();
    if first.as_deref() == Some("-") {
        return Err(usage("reins chat reads its messages from the terminal: `-` (standard input) does not apply"));
    }
    crate::telemetry::start(&run.otlp)?;
    let terminal = Terminal::save();
    let end = CancellationToken::new();
    let turn = TurnSlot::default();
    let started = Arc::new(AtomicBool::new(false));
    // The line editor first: it installs its own SIGINT and SIGWINCH handlers when it is made, and the
    // listeners installed after it chain to them (not the other way round), so Ctrl-C during a turn reaches
    // `listen` (at the prompt, in raw mode, Ctrl-C is a key the editor reads).
    let input = Arc::new(Input::start()?);
    let history = if no_history { None } else { open_history(&input) };
    listen(end.clone(), turn.clone(), Arc::clone(&started), terminal.clone())?;
    let answers = Arc::new(ChatAnswers { input: Arc::clone(&input), turn: turn.clone() });
    // What an MCP server asks the person is asked inline too, read with the same line editor.
    let elicitor = crate::elicit_cli::TerminalElicitor::with_answers(answers.clone());
    reins_mcp::elicit::set_elicitor(Some(Arc::new(elicitor)));
    let approver: Arc<dyn reins::Approver> =
        Arc::new(crate::terminal_approver::TerminalApprover::with_answers(answers));
    let result = session_loop(&mut run, first, &end, &turn, &started, &input, history, approver).await;
    terminal.restore();
    result
}

/// The history file, its entries given to the line editor; `None` (a warning said why) keeps it in memory.
fn open_history(input: &Input) -> Option<crate::history::History> {
    let Some(dir) = crate::history::dir() else {
        errln!("reins: warning: neither XDG_STATE_HOME nor HOME is set: the chat's history is kept in memory only");
        return None;
    };
    match crate::history::History::open(&dir) {
        Ok((history, entries)) => {
            for e in entries {
                input.remember(&e);
            }
            Some(history)
        }
        Err(why) => {
            errln!("reins: warning: chat history {why}: kept in memory only");
            None
        }
    }
}

/// The chat itself, from the agent's set-up to the end.
#[allow(clippy::too_many_arguments)]
async fn session_loop(
    run: &mut RunArgs,
    first: Option<String>,
    end: &CancellationToken,
    slot: &TurnSlot,
    started: &AtomicBool,
    input: &Input,
    mut history: Option<crate::history::History>,
    approver: Arc<dyn reins::Approver>,
) -> Result<u8, CliError> {
    let setup = crate::run_session::setup(run, end, chat_defaults).await?;
    let mut chat = Chat::new(setup, approver);
    started.store(true, Ordering::SeqCst);
    chat.greet();
    if chat.waits_for_approval() {
        chat.turn(Ask::Continue, end, slot).await.unwrap_or_else(say);
    }
    let mut next = first;
    while !end.is_cancelled() {
        let text = match next.take() {
            Some(t) => t,
            None => match read_message(input, end).await? {
                Some(t) => {
                    if let Some(h) = &mut history {
                        h.append(&t);
                    }
                    t
                }
                None => break,
            },
        };
        match parse(&text) {
            Said::Nothing => {}
            Said::Message(message) => {
                // A turn that could not start (the store, the agent) is said; the chat goes on.
                chat.turn(Ask::Say(message), end, slot).await.unwrap_or_else(say);
            }
            Said::Command(word, rest) => match word {
                "exit" | "quit" => break,
                "help" => errln!("{HELP}"),
                "cost" => chat.cost(),
                "compact" => chat.turn(Ask::Compact, end, slot).await.unwrap_or_else(say),
                "resume" => chat.resume(run, rest, end, slot).await.unwrap_or_else(say),
                "prompt" => match mcp_prompt(&chat, rest).await {
                    Ok(text) => chat.turn(Ask::Say(&text), end, slot).await.unwrap_or_else(say),
                    Err(e) => errln!("{e}"),
                },
                other => errln!("unknown command /{other}; /help lists them"),
            },
        }
    }
    crate::mcp_servers::finish(chat.setup.mcp.as_ref()).await;
    if let Some(id) = &chat.session_id {
        errln!("reins: this chat is session {id} (`reins chat --resume {id}` continues it)");
    }
    if end.is_cancelled() {
        return Ok(crate::exit::code_for(Status::Aborted));
    }
    Ok(0)
}

/// `/prompt SERVER/NAME [KEY=VALUE ...]`: the text of that prompt of the chat's MCP servers (the words split
/// as a shell would, so a value can hold spaces in quotes).
async fn mcp_prompt(chat: &Chat, rest: &str) -> Result<String, String> {
    let usage = "/prompt SERVER/NAME [KEY=VALUE ...]: an MCP server's prompt (`reins mcp list` shows them)";
    let words = shlex::split(rest).ok_or_else(|| format!("{usage}: unbalanced quotes"))?;
    let (spec, args) = words.split_first().ok_or_else(|| usage.to_owned())?;
    crate::mcp_prompt::get(chat.setup.mcp.as_ref(), spec, args).await.map_err(|e| format!("/prompt {e}"))
}

/// `reins chat`'s default beneath every layer: approvals for writes.
fn chat_defaults(def: &mut reins_agent::AgentDef) {
    if def.approve.is_none() {
        def.approve = Some(reins_agent::ApproveMode::Writes);
    }
}

/// Reads one message: lines ending in `\` continue it. `None`: the chat ends (Ctrl-D, a signal).
async fn read_message(input: &Input, end: &CancellationToken) -> Result<Option<String>, CliError> {
    let mut text = String::new();
    loop {
        let prompt = if text.is_empty() { PROMPT } else { MORE };
        let got = tokio::select! {
            got = input.read(prompt) => got,
            () = end.cancelled() => return Ok(None),
        };
        match got {
            Got::Line(line) => match line.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push('\n');
                }
                None => {
                    text.push_str(&line);
                    input.remember(&text);
                    return Ok(Some(text));
                }
            },
            Got::Interrupted => {
                if text.is_empty() {
                    errln!("(Ctrl-D or /exit ends the chat)");
                }
                text.clear();
            }
            Got::Eof => return Ok(None),
            Got::Failed(why) => return Err(CliError::Internal(anyhow::anyhow!("reading the terminal: {why}"))),
        }
    }
}

/// What a turn does.
enum Ask<'a> {
    /// The person's message.
    Say(&'a str),
    /// Goes on without a new message (a batch that waits for decisions).
    Continue,
    /// Only a compaction.
    Compact,
}

/// What the turns of this chat spent (token and cost limits are over the whole chat).
#[derive(Default)]
struct Spent {
    turns: u64,
    input: u64,
    output: u64,
    total: u64,
    cost: Option<f64>,
}

/// The chat's session and agent.
struct Chat {
    setup: Setup,
    /// The session the turns are recorded in (none before the first turn of a new chat, or without a store).
    session_id: Option<String>,
    /// Without a store: the conversation so far.
    messages: Vec<Message>,
    approver: Arc<dyn reins::Approver>,
    /// Set while a step's text is being streamed (then its `model_end` does not print it again).
    streamed: Arc<AtomicBool>,
    spent: Spent,
}

impl Chat {
    fn new(mut setup: Setup, approver: Arc<dyn reins::Approver>) -> Self {
        let streamed = Arc::new(AtomicBool::new(false));
        if let Some(pricing) = &setup.parts.pricing {
            crate::providers_cli::set_pricing(pricing);
        }
        // Summaries are written by the model unwrapped: only the conversation's text is streamed.
        if setup.parts.compact_model.is_none() {
            setup.parts.compact_model = Some(Arc::clone(&setup.parts.model));
        }
        setup.parts.model =
            Arc::new(Streaming { inner: Arc::clone(&setup.parts.model), streamed: Arc::clone(&streamed) });
        let session_id = setup.session.as_ref().map(|s| s.id().to_owned());
        Self { setup, session_id, messages: Vec::new(), approver, streamed, spent: Spent::default() }
    }

    /// Says what the chat is: its session (when it continues one) and how to leave.
    fn greet(&self) {
        let model = self.setup.parts.def.model.as_ref().map(|m| m.to_string()).unwrap_or_default();
        match (&self.session_id, &self.setup.session) {
            (Some(id), Some(s)) => {
                errln!(
                    "reins chat · {model} · continuing session {id} ({} messages) · /help for commands",
                    s.summary.messages
                );
                if let Some(last) = s.messages().ok().and_then(|m| m.into_iter().rev().find(is_assistant_text)) {
                    errln!("  last answer: {}", crate::render::preview(last.content()));
                }
            }
            _ => errln!("reins chat · {model} · /help for commands, Ctrl-D or /exit to leave"),
        }
    }

    /// Whether the session continued waits for decisions about a batch.
    fn waits_for_approval(&self) -> bool {
        self.setup.session.as_ref().is_some_and(|s| matches!(s.pending_approval(), Ok(Some(_))))
    }

    /// The limits of the next turn: the agent's, its token and cost limits less what this chat spent.
    fn limits(&self) -> Result<reins::Limits, String> {
        let mut l = self.setup.parts.limits.clone();
        let left = |max: Option<u64>, spent: u64, flag: &str| match max {
            Some(m) if spent >= m => Err(format!("this chat has used its {flag} ({m}): start another to go on")),
            Some(m) => Ok(Some(m - spent)),
            None => Ok(None),
        };
        l.max_input_tokens = left(l.max_input_tokens, self.spent.input, "--max-input-tokens")?;
        l.max_output_tokens = left(l.max_output_tokens, self.spent.output, "--max-output-tokens")?;
        l.max_total_tokens = left(l.max_total_tokens, self.spent.total, "--max-total-tokens")?;
        if let (Some(max), Some(cost)) = (l.max_cost_usd, self.spent.cost) {
            if cost >= max {
                return Err(format!("this chat has spent its --max-cost-usd (${max}): start another to go on"));
            }
            l.max_cost_usd = Some(max - cost);
        }
        Ok(l)
    }

    /// One turn: a run of the session, resumed from the store (or from the conversation kept in memory).
    async fn turn(&mut self, ask: Ask<'_>, end: &CancellationToken, slot: &TurnSlot) -> Result<(), CliError> {
        let limits = match self.limits() {
            Ok(l) => l,
            Err(why) => {
                errln!("reins: {why}");
                return Ok(());
            }
        };
        let parts = &self.setup.parts;
        let store = self.setup.store.as_ref();
        let session = match (store, &self.session_id) {
            (Some(store), Some(id)) => Some(store.load(id).map_err(crate::store_open::store_err)?),
            _ => None,
        };
        let streamed = Arc::clone(&self.streamed);
        let agent =
            crate::run_session::agent_builder(parts, store, session.as_ref(), Some(Arc::clone(&self.approver)))?
                .limits(limits.clone())
                .observer(move |e: &Event| show(e, &streamed))
                .include_content(true)
                .build()
                .map_err(|e| usage(e.to_string()))?;
        let text = match ask {
            Ask::Say(t) => Some(t),
            Ask::Continue | Ask::Compact => None,
        };
        let mut state = match &session {
            Some(s) => Some(s.resume_state(limits, &parts.context, text).map_err(crate::store_open::store_err)?),
            None if !self.messages.is_empty() => {
                let run_id = uuid::Uuid::new_v4().to_string();
                let mut st = RunState::resume(run_id, self.messages.clone(), limits, &parts.context, "interrupted")
                    .map_err(|e| usage(e.to_string()))?;
                if let Some(t) = text {
                    st.push_user(t, &parts.context).map_err(|e| usage(e.to_string()))?;
                }
                Some(st)
            }
            None => None,
        };
        if let Some(st) = &mut state {
            if let Some(instructions) = agent.instructions() {
                st.set_instructions(Some(instructions.into()), agent.context());
            }
        }
        if let Ask::Compact = ask {
            let compacted = match &mut state {
                Some(st) => st.compact_now(agent.context()),
                None => Err("there is nothing to compact yet".into()),
            };
            if let Err(why) = compacted {
                errln!("reins: cannot compact: {why}");
                return Ok(());
            }
        }
        let cancel = end.child_token();
        slot.set(Some(cancel.clone()));
        let outcome = match state {
            Some(st) => agent.drive(st, cancel).await,
            None => agent.run(text.unwrap_or_default(), cancel).await,
        };
        slot.set(None);
        // The turn ended (its deadline passed) while a question was on the screen: the line editor still
        // reads its answer, which now goes nowhere.
        if slot.asking().swap(false, Ordering::SeqCst) && !end.is_cancelled() {
            errln!("\n  (the question above was withdrawn with the turn: press Enter to go on)");
        }
        self.after(&outcome);
        Ok(())
    }

    /// Takes what a turn did: its session, what it spent, and a word when it did not complete.
    fn after(&mut self, outcome: &Outcome) {
        if self.setup.store.is_some() {
            if let Some(id) = &outcome.session_id {
                self.session_id = Some(id.clone());
            }
        } else {
            self.messages = outcome.messages.clone();
        }
        let s = &mut self.spent;
        s.turns += 1;
        s.input += outcome.usage.input_tokens;
        s.output += outcome.usage.output_tokens;
        s.total += outcome.usage.total_tokens;
        if let Some(c) = outcome.cost_usd {
            s.cost = Some(s.cost.unwrap_or(0.0) + c);
        }
        if outcome.status != Status::Completed {
            for line in crate::render::status_lines(outcome) {
                errln!("{line}");
            }
            if outcome.status == Status::Aborted {
                errln!("  (the turn was cancelled; the conversation goes on)");
            }
        }
    }

    /// `/cost`: this chat's turns, and the whole session as the store has it.
    fn cost(&self) {
        let s = &self.spent;
        let cost = s.cost.map(|c| format!(" · ${c:.6}")).unwrap_or_else(|| " · cost unknown (no price)".into());
        errln!("this chat: {} turn(s) · {} in / {} out tokens{cost}", s.turns, s.input, s.output);
        let summary = match (&self.setup.store, &self.session_id) {
            (Some(store), Some(id)) => store.summary(id).ok(),
            _ => None,
        };
        match summary {
            Some(sum) => {
                let cost = sum.cost_usd.map(|c| format!(" · ${c:.6}")).unwrap_or_default();
                errln!(
                    "session {}: {} run(s) · {} step(s) · {} in / {} out tokens{cost}",
                    sum.id,
                    sum.runs,
                    sum.steps,
                    sum.input_tokens,
                    sum.output_tokens
                );
            }
            None if self.setup.store.is_none() => errln!("(not recorded: --no-store)"),
            None => errln!("(no session yet: nothing was said)"),
        }
    }

    /// `/resume ID`: continues another session with its recorded agent (as `reins chat --resume ID`). On an
    /// error the chat stays where it was.
    async fn resume(
        &mut self,
        run: &mut RunArgs,
        id: &str,
        end: &CancellationToken,
        slot: &TurnSlot,
    ) -> Result<(), CliError> {
        if id.is_empty() {
            errln!("usage: /resume ID");
            return Ok(());
        }
        if run.store.no_store {
            errln!("reins: /resume needs the session store (this chat runs with --no-store)");
            return Ok(());
        }
        let before = run.store.resume.replace(id.to_owned());
        let setup = match crate::run_session::setup(run, end, chat_defaults).await {
            Ok(s) => s,
            Err(e) => {
                run.store.resume = before;
                say(e);
                return Ok(());
            }
        };
        crate::mcp_servers::finish(self.setup.mcp.as_ref()).await;
        let spent = std::mem::take(&mut self.spent);
        *self = Chat::new(setup, Arc::clone(&self.approver));
        self.spent = spent;
        self.greet();
        if self.waits_for_approval() {
            self.turn(Ask::Continue, end, slot).await.unwrap_or_else(say);
        }
        Ok(())
    }
}

fn is_assistant_text(m: &Message) -> bool {
    matches!(m, Message::Assistant { content, .. } if !content.trim().is_empty())
}

/// Prints a command error and goes on.
fn say(e: CliError) {
    match e {
        CliError::Usage(m) => errln!("reins: error: {m}"),
        CliError::Internal(e) => errln!("reins: error: {e:#}"),
    }
}

/// The chat's observer: each step's text (unless it was streamed) on stdout, tool calls, decisions, hooks,
/// compactions and limits on stderr, as `reins run` shows them.
fn show(event: &Event, streamed: &AtomicBool) -> Result<(), ObserverError> {
    let own = event.agent.is_none();
    match &event.kind {
        EventKind::ModelStart { .. } if own => streamed.store(false, Ordering::SeqCst),
        EventKind::ModelEnd(end) if own => {
            if !streamed.swap(false, Ordering::SeqCst) {
                if let Some(t) = end.text.as_deref().filter(|t| !t.trim().is_empty()) {
                    outln!("{t}");
                    crate::output::flush_stdout();
                }
            }
        }
        // The question itself is the approver's; the start and end of a turn say nothing new here.
        EventKind::ApprovalRequested { .. } | EventKind::RunStart(_) | EventKind::RunEnd(_) if own => {}
        _ => {
            if let Some(line) = crate::render::progress_line(event) {
                errln!("{line}");
            }
        }
    }
    Ok(())
}

/// The chat's model: the text of each response on stdout (escaped) as it streams in.
struct Streaming {
    inner: Arc<dyn Model>,
    streamed: Arc<AtomicBool>,
}

#[async_trait]
impl Model for Streaming {
    fn price(&self) -> Option<reins::Price> {
        self.inner.price()
    }

    fn identity(&self) -> reins::ModelIdentity {
        self.inner.identity()
    }

    async fn generate(&self, request: &ModelRequest, cancel: &CancellationToken) -> Result<ModelResponse, ModelError> {
        let streamed = Arc::clone(&self.streamed);
        let sink = DeltaSink::new(move |d| match d {
            Delta::Text { text } if !text.is_empty() => {
                streamed.store(true, Ordering::SeqCst);
                out!("{text}");
                crate::output::flush_stdout();
            }
            Delta::Restart { attempt, reason } => errln!("\n[attempt {attempt} after: {reason}]"),
            _ => {}
        });
        let result = sink.scope(self.inner.generate(request, cancel)).await;
        if self.streamed.load(Ordering::SeqCst) {
            outln!();
            crate::output::flush_stdout();
        }
        result
    }
}

/// The token of the turn in progress, if any (what Ctrl-C cancels), and whether the approver is asking.
#[derive(Clone, Default)]
struct TurnSlot(Arc<Mutex<Option<CancellationToken>>>, Arc<AtomicBool>);

impl TurnSlot {
    fn set(&self, token: Option<CancellationToken>) {
        if let Ok(mut t) = self.0.lock() {
            *t = token;
        }
    }

    fn get(&self) -> Option<CancellationToken> {
        self.0.lock().ok().and_then(|t| t.clone())
    }

    /// True while a question of the approver waits for its answer.
    fn asking(&self) -> &AtomicBool {
        &self.1
    }
}

/// The terminal's settings when the chat began, put back however it ends (a line editor may be reading in
/// raw mode when a signal ends the chat).
#[derive(Clone)]
struct Terminal(Option<rustix::termios::Termios>);

impl Terminal {
    fn save() -> Self {
        Self(rustix::termios::tcgetattr(std::io::stdin()).ok())
    }

    fn restore(&self) {
        if let Some(t) = &self.0 {
            let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, t);
        }
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP: Ctrl-C cancels the turn in progress (before the chat started: the
/// chat); SIGTERM and SIGHUP cancel `end` (the turn in progress and the chat). A second signal while the
/// first is being handled exits at once with 128 + its number, the terminal's settings put back.
fn listen(
    end: CancellationToken,
    slot: TurnSlot,
    started: Arc<AtomicBool>,
    terminal: Terminal,
) -> Result<(), CliError> {
    let listen = |kind: SignalKind| {
        signal(kind).map_err(|e| CliError::Internal(anyhow::anyhow!("cannot listen for signals: {e}")))
    };
    let (mut int, mut term, mut hup) =
        (listen(SignalKind::interrupt())?, listen(SignalKind::terminate())?, listen(SignalKind::hangup())?);
    tokio::spawn(async move {
        loop {
            let (name, number) = tokio::select! {
                _ = int.recv() => ("SIGINT", 2),
                _ = term.recv() => ("SIGTERM", 15),
                _ = hup.recv() => ("SIGHUP", 1),
            };
            let exit_now = || {
                crate::output::flush_stdout();
                terminal.restore();
                std::process::exit(128 + number);
            };
            if end.is_cancelled() {
                exit_now();
            }
            if name == "SIGINT" && started.load(Ordering::SeqCst) {
                match slot.get() {
                    Some(t) if t.is_cancelled() => exit_now(),
                    Some(t) => {
                        errln!("\nreins: interrupted: cancelling the turn (Ctrl-C again to exit at once)");
                        t.cancel();
                    }
                    // At the prompt the line editor reads Ctrl-C as a key: this one came from elsewhere.
                    None => {}
                }
                continue;
            }
            errln!("\nreins: {name} received: ending the chat (a second signal exits at once)");
            end.cancel();
        }
    });
    Ok(())
}

/// What the line editor read.
enum Got {
    Line(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D at an empty line, or the terminal closed.
    Eof,
    Failed(String),
}

enum Msg {
    Read { prompt: String, reply: tokio::sync::oneshot::Sender<Got> },
    Remember(String),
}

/// The line editor, on a thread of its own (it blocks reading the terminal): the chat's prompt and the
/// approver's questions both read through it, one at a time.
struct Input {
    tx: std::sync::mpsc::Sender<Msg>,
}

impl Input {
    fn start() -> Result<Self, CliError> {
        let (tx, rx) = std::sync::mpsc::channel::<Msg>();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new()
            .name("reins-chat-input".into())
            .spawn(move || {
                let config = rustyline::Config::builder()
                    .max_history_size(HISTORY)
                    .and_then(|b| b.history_ignore_dups(true))
                    // No cursor-position query before each prompt: its answer is awaited 100 ms, and keys typed
                    // meanwhile (an arrow's escape sequence) were taken for it and lost. Everything printed before
                    // a prompt ends its line.
                    .map(|b| b.auto_add_history(false).check_cursor_position(false).build());
                let editor = config.and_then(rustyline::DefaultEditor::with_config);
                let mut editor = match editor {
                    Ok(e) => {
                        let _ = ready_tx.send(Ok(()));
                        e
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                while let Ok(msg) = rx.recv() {
                    match msg {
                        Msg::Remember(line) => {
                            let _ = editor.add_history_entry(line);
                        }
                        Msg::Read { prompt, reply } => {
                            let got = match editor.readline(&prompt) {
                                Ok(line) => Got::Line(line),
                                Err(rustyline::error::ReadlineError::Interrupted) => Got::Interrupted,
                                Err(rustyline::error::ReadlineError::Eof) => Got::Eof,
                                Err(e) => Got::Failed(e.to_string()),
                            };
                            let _ = reply.send(got);
                        }
                    }
                }
            })
            .map_err(|e| CliError::Internal(anyhow::anyhow!("cannot start the line editor: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self { tx }),
            Ok(Err(why)) => Err(CliError::Internal(anyhow::anyhow!("cannot start the line editor: {why}"))),
            Err(_) => Err(CliError::Internal(anyhow::anyhow!("cannot start the line editor"))),
        }
    }

    /// Reads a line after `prompt` (escaped: the prompt may name a tool).
    async fn read(&self, prompt: &str) -> Got {
        let (reply, got) = tokio::sync::oneshot::channel();
        let prompt = crate::output::escape(prompt, crate::output::Lines::Join).into_owned();
        if self.tx.send(Msg::Read { prompt, reply }).is_err() {
            return Got::Eof;
        }
        got.await.unwrap_or(Got::Eof)
    }

    /// Adds a message to the history (in memory only).
    fn remember(&self, text: &str) {
        let _ = self.tx.send(Msg::Remember(text.to_owned()));
    }
}

/// The approver's answers, read with the line editor: Ctrl-C (or Ctrl-D) at a question cancels the turn.
struct ChatAnswers {
    input: Arc<Input>,
    turn: TurnSlot,
}

#[async_trait]
impl crate::terminal_approver::Answers for ChatAnswers {
    async fn line(&self, prompt: &str) -> Option<String> {
        self.turn.asking().store(true, Ordering::SeqCst);
        let got = self.input.read(prompt).await;
        self.turn.asking().store(false, Ordering::SeqCst);
        match got {
            Got::Line(l) => Some(l.trim().to_owned()),
            Got::Interrupted | Got::Eof | Got::Failed(_) => {
                let t = self.turn.get()?;
                errln!("reins: interrupted: cancelling the turn");
                t.cancel();
                // The driver waits for this answer and for the turn's cancellation together: it takes the
                // cancellation (the turn ends `aborted`, not waiting for an approval) and drops this wait.
                std::future::pending().await
            }
        }
    }
}
