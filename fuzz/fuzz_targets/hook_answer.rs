//! Bytes → a command hook's answer (`reins::hook::parse_answer`) for each event: never a panic; an error always
//! names the event; an accepted answer is one of that event's decisions, with its required parts. The same
//! checks run on stable as property tests in `crates/reins/src/hook.rs`. Run with
//! `cargo +nightly fuzz run hook_answer`.
#![no_main]

use reins::hook::{HookAnswer, HookEvent, PostTool, PreTool, StopAnswer, parse_answer};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for event in [HookEvent::PreTool, HookEvent::PostTool, HookEvent::Stop] {
        match parse_answer(event, data) {
            Err(e) => assert!(e.0.starts_with(&format!("invalid {} answer: ", event.as_str())), "{e}"),
            Ok(HookAnswer::PreTool(a)) => {
                assert_eq!(event, HookEvent::PreTool);
                match a {
                    PreTool::Deny(r) | PreTool::Ask(r) => assert!(!r.trim().is_empty()),
                    PreTool::Rewrite(v) => assert!(v.is_object()),
                    PreTool::Allow => {}
                }
            }
            Ok(HookAnswer::PostTool(a)) => {
                assert_eq!(event, HookEvent::PostTool);
                if let PostTool::Redact(s) = a {
                    assert!(!s.is_empty() && s.iter().all(|x| !x.is_empty()));
                }
            }
            Ok(HookAnswer::Stop(a)) => {
                assert_eq!(event, HookEvent::Stop);
                if let StopAnswer::Refuse(f) = a {
                    assert!(!f.trim().is_empty());
                }
            }
        }
    }
});
