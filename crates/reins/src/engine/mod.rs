//! The run engine: a sans-I/O state machine and the async driver that performs its I/O.

pub mod driver;
pub mod perform;
pub mod state;
