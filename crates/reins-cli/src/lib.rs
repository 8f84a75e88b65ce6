//! The parsers of what the `reins` command reads from people and the environment, apart from the binary
//! (`src/main.rs`, which uses them) so that the fuzz targets in `fuzz/` can reach them: a line typed into
//! `reins chat` ([`chat_line`]), the lines of its history file ([`history_lines`]) and the `--otlp` flag with the
//! standard OpenTelemetry variables ([`otel_env`]).

#![warn(missing_docs)]
// No function over 100 lines (the workspace's clippy.toml; test code may have longer ones).
#![warn(clippy::too_many_lines)]
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod chat_line;
pub mod history_lines;
pub mod otel_env;
