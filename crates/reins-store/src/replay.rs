//! Replay: a recorded session re-run offline as a regression test.
