//! The crate's examples (`cargo run -p reins --example NAME`) run as written: each is compiled into this test as it
//! is, with `println!` captured, and what it prints is compared. The README and the book show them whole
//! (`crates/reins-cli/tests/docs.rs` checks that they are these files).

use std::cell::RefCell;

thread_local! {
    /// What the example printed (its `main` runs on the test's thread: `#[tokio::main]` blocks on it here).
    static OUT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Takes the place of `println!` in the examples below.
macro_rules! println {
    ($($arg:tt)*) => {
        crate::OUT.with(|out| {
            let mut out = out.borrow_mut();
            out.push_str(&format!($($arg)*));
            out.push('\n');
        })
    };
}

mod hello {
    include!("../examples/hello.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

mod core_example {
    include!("../examples/core.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

mod structured {
    include!("../examples/structured.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

mod approvals {
    include!("../examples/approvals.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

mod subagents {
    include!("../examples/subagents.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

/// Runs an example's `main` and gives what it printed.
fn printed(run: fn() -> Result<(), Box<dyn std::error::Error>>) -> String {
    OUT.with(|out| out.borrow_mut().clear());
    if let Err(e) = run() {
        panic!("the example failed: {e}");
    }
    OUT.with(|out| out.borrow().clone())
}

#[test]
fn hello_runs_its_typed_tool() {
    assert_eq!(printed(hello::run), "completed: 2 + 3 = 5\n");
}

#[test]
fn core_runs_a_tool_and_refuses_an_unknown_one() {
    assert_eq!(printed(core_example::run), "completed: Said hi; the other tool does not exist.\n");
}

#[test]
fn structured_gets_a_valid_answer_after_a_refused_one() {
    assert_eq!(printed(structured::run), "Paris is the capital of France (2100000 people); 2 steps, completed\n");
}

#[test]
fn approvals_runs_the_approved_call_and_not_the_denied_one() {
    assert_eq!(
        printed(approvals::run),
        "1: deleted \"tmp/cache.bin\"\n2: denied by the approver: only files in tmp/ may go\n\
         completed: Deleted tmp/cache.bin; src/main.rs was not mine to delete.\n"
    );
}

#[test]
fn subagents_answers_through_the_sub_agent_and_rolls_up_its_spend() {
    assert_eq!(
        printed(subagents::run),
        "completed: The parser (src/parse.rs) has no tests: I would start there.\n\
         reader: 1 run(s), 1 step(s)\ntokens in all: 497\n"
    );
}
