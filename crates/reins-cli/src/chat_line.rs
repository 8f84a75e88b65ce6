//! A line typed into `reins chat`: a message for the model, or a `/command`.

/// What the person typed.
#[derive(Debug, PartialEq, Eq)]
pub enum Said<'a> {
    /// Only blanks.
    Nothing,
    /// A message for the model, as typed (`//text` is `/text`).
    Message(&'a str),
    /// `/WORD REST` (REST trimmed).
    Command(&'a str, &'a str),
}

/// Reads a message: `/WORD ARGS` is a command, `//text` the message `/text`, anything else a message.
pub fn parse(text: &str) -> Said<'_> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Said::Nothing;
    }
    match trimmed.strip_prefix('/') {
        Some(escaped) if escaped.starts_with('/') => Said::Message(&text.trim_start()[1..]),
        Some(command) => {
            let (word, rest) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
            Said::Command(word, rest.trim())
        }
        None => Said::Message(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_messages_and_escapes() {
        assert_eq!(parse("  "), Said::Nothing);
        assert_eq!(parse("/exit"), Said::Command("exit", ""));
        assert_eq!(parse(" /resume  abc-1 \n"), Said::Command("resume", "abc-1"));
        assert_eq!(parse("//etc/passwd is a path"), Said::Message("/etc/passwd is a path"));
        assert_eq!(parse("hello /exit"), Said::Message("hello /exit"));
        assert_eq!(parse("two\nlines"), Said::Message("two\nlines"));
    }
}
