//! Raw input: reading a file up to a size cap, and checking bytes before YAML sees them.
//!
//! Everything orch parses goes through here first: the size cap (a clear error naming
//! the file and the cap, and `/dev/zero` is never read past it), UTF-8 (the exact line
//! and column of the first bad byte), and control characters (NUL and the rest of C0,
//! DEL and C1, which YAML does not allow in a file), each at its exact position.

// A `Diagnostic` is the error of a whole file, made once per load: its size does not matter.
#![allow(clippy::result_large_err)]

use std::io::Read;
use std::path::Path;

use crate::diagnostic::{Diagnostic, Location};

/// Reads at most `max_bytes` (plus one, to tell that the file is larger) from `path`;
/// `what` names the file in the error ("the workflow file").
pub(crate) fn read_capped(path: &Path, max_bytes: usize, what: &str) -> Result<Vec<u8>, Diagnostic> {
    let name = path.display().to_string();
    let cannot_read = |e: std::io::Error| {
        Diagnostic::new(
            format!("cannot read {what}: {e}"),
            Location { file: name.clone(), line: 1, column: 1, len: 1, source_line: String::new() },
            "check the path, and that the file is readable text",
        )
    };
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(cannot_read(std::io::Error::other("it is a directory")));
    }
    let limit = u64::try_from(max_bytes).unwrap_or(u64::MAX).saturating_add(1);
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).map_err(cannot_read)?;
    Ok(bytes)
}

/// Checks `bytes` (the contents of `name`) and returns them as text: at most
/// `max_bytes`, valid UTF-8, no control characters other than tab, line feed and
/// carriage return.
pub(crate) fn decode<'b>(name: &str, bytes: &'b [u8], max_bytes: usize) -> Result<&'b str, Diagnostic> {
    check_size(name, bytes, max_bytes)?;
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.valid_up_to();
            let byte = bytes.get(at).copied().unwrap_or_default();
            let location = location_of(name, bytes, at);
            return Err(Diagnostic::new(
                format!(
                    "{name} is not valid UTF-8 text: the byte 0x{byte:02X} at line {}, column {} does not start a \
                     UTF-8 character",
                    location.line, location.column
                ),
                location,
                "save the file as UTF-8 (is it Latin-1, UTF-16 or a binary file?)",
            ));
        }
    };
    check_text(name, text)?;
    Ok(text)
}

/// The size cap alone, for text that is already in memory.
pub(crate) fn check_size(name: &str, bytes: &[u8], max_bytes: usize) -> Result<(), Diagnostic> {
    if bytes.len() <= max_bytes {
        return Ok(());
    }
    Err(Diagnostic::new(
        format!("{name} is larger than the cap of {} for files orch reads", human_size(max_bytes)),
        location_of(name, bytes, 0),
        "split the file, or shorten it: workflow and settings files are meant to be small; a file this large is \
         usually the wrong file",
    ))
}

/// Refuses the control characters YAML does not allow in a file, at their position.
pub(crate) fn check_text(name: &str, text: &str) -> Result<(), Diagnostic> {
    let Some((at, c)) = text.char_indices().find(|&(_, c)| is_forbidden_control(c)) else { return Ok(()) };
    let location = location_of(name, text.as_bytes(), at);
    let (message, hint) = if c == '\0' {
        (
            format!("{name} contains a NUL byte (line {}, column {})", location.line, location.column),
            "a text file has no NUL bytes: is this a binary or UTF-16 file? Save it as UTF-8 text",
        )
    } else {
        (
            format!(
                "{name} contains the control character U+{:04X} (line {}, column {})",
                u32::from(c),
                location.line,
                location.column
            ),
            "remove it; YAML allows only tab, line feed and carriage return among control characters (write one \
             inside a double-quoted string as an escape, e.g. \"\\x07\", if you really need it)",
        )
    };
    Err(Diagnostic::new(message, location, hint))
}

/// Control characters a YAML file may not contain (it may contain tab, LF, CR and NEL).
pub(crate) fn is_forbidden_control(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\u{85}')
}

/// The 1-based line and column (in characters) of byte `at`, with that line's text;
/// bytes that are not UTF-8 and control characters are shown as U+FFFD there.
fn location_of(name: &str, bytes: &[u8], at: usize) -> Location {
    let at = at.min(bytes.len());
    let before = &bytes[..at];
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + String::from_utf8_lossy(&before[line_start..]).chars().count();
    let rest = &bytes[line_start..];
    let line_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len()).min(400);
    let source_line: String = String::from_utf8_lossy(&rest[..line_end])
        .trim_end_matches('\r')
        .chars()
        .map(|c| if c.is_control() && c != '\t' { '\u{FFFD}' } else { c })
        .collect();
    let source_line = if source_line.is_empty() { "\u{FFFD}".to_string() } else { source_line };
    Location { file: name.to_string(), line, column, len: 1, source_line }
}

fn human_size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_byte_is_placed_exactly() {
        let bytes = b"a: 1\nb: 2\nc: 3\nd: 4\ne: x\xffy\n";
        let err = decode("wf.yaml", bytes, 1 << 20).unwrap_err();
        assert_eq!((err.location.line, err.location.column), (5, 5));
        assert!(err.message.contains("0xFF"), "{}", err.message);
        assert_eq!(err.location.source_line, "e: x\u{FFFD}y");
    }

    #[test]
    fn nul_is_named_and_placed() {
        let err = decode("wf.yaml", b"a: 1\nb: \0\n", 1 << 20).unwrap_err();
        assert_eq!((err.location.line, err.location.column), (2, 4));
        assert!(err.message.contains("NUL"));
        assert!(!err.hint.contains("tab"));
    }

    #[test]
    fn the_cap_is_exact() {
        assert!(decode("f", &[b'a'; 10], 10).is_ok());
        let err = decode("f", &[b'a'; 11], 10).unwrap_err();
        assert!(err.message.contains("10 bytes"), "{}", err.message);
    }

    #[test]
    fn reading_stops_at_the_cap() {
        let bytes = read_capped(Path::new("/dev/zero"), 4096, "the file").unwrap();
        assert_eq!(bytes.len(), 4097);
    }
}
