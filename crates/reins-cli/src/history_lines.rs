//! The lines of `reins chat`'s history file: one JSON string a line, oldest first.

/// One entry as its line (without the newline): a JSON string.
pub fn encode(entry: &str) -> String {
    serde_json::Value::String(entry.to_owned()).to_string()
}

/// The entries of the file's bytes, oldest first: each line a JSON string; other lines are skipped. `cut`: the
/// bytes begin inside the file, so their first line is partial and skipped.
pub fn parse(bytes: &[u8], cut: bool) -> Vec<String> {
    let mut lines = bytes.split(|&b| b == b'\n');
    if cut {
        lines.next();
    }
    lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice::<String>(l).ok())
        .filter(|e| !e.trim().is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn entries_round_trip_one_line_each(entries in proptest::collection::vec("\\PC{1,30}|[a-z\\n\\t\"\\\\]{1,10}", 0..8)) {
            let entries: Vec<String> = entries.into_iter().filter(|e| !e.trim().is_empty()).collect();
            let mut bytes = Vec::new();
            for e in &entries {
                let line = encode(e);
                prop_assert!(!line.contains('\n'));
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
            }
            prop_assert_eq!(parse(&bytes, false), entries);
        }
    }
}
