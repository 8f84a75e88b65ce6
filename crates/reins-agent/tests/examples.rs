//! The crate's examples run as written (`real_provider` needs a key: it is built by `cargo test`, not run). Each is
//! compiled into this test as it is, with `println!` captured, and what it prints is compared.

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

mod agent_file {
    include!("../examples/agent_file.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

#[test]
fn an_agent_file_with_a_tool_of_your_own() {
    OUT.with(|out| out.borrow_mut().clear());
    if let Err(e) = agent_file::run() {
        panic!("the example failed: {e}");
    }
    assert_eq!(OUT.with(|out| out.borrow().clone()), "completed: 3 words.\n");
}
