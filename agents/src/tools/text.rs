//! Text-file helpers shared by `Read`, `Write` and `Edit`: binary detection, decoding
//! that remembers the encoding, encoding back byte-exact, line splitting, the
//! read-before-write check, and the messages for missing or unreadable files.

use std::io;
use std::path::Path;

use super::{Session, ToolError};

/// How much of a file is looked at for NUL bytes to call it binary.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Files larger than this are not loaded by the file tools.
pub const MAX_TEXT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The encodings the file tools read and write back unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEncoding {
    /// UTF-8 without a byte order mark (also what undecodable files are read as).
    Utf8,
    /// UTF-8 with a byte order mark.
    Utf8Bom,
    /// UTF-16 little-endian with a byte order mark.
    Utf16Le,
    /// UTF-16 big-endian with a byte order mark.
    Utf16Be,
}

impl TextEncoding {
    pub fn label(self) -> &'static str {
        match self {
            Self::Utf8 => "UTF-8",
            Self::Utf8Bom => "UTF-8 with BOM",
            Self::Utf16Le => "UTF-16LE with BOM",
            Self::Utf16Be => "UTF-16BE with BOM",
        }
    }

    pub fn bom(self) -> &'static [u8] {
        match self {
            Self::Utf8 => &[],
            Self::Utf8Bom => &[0xEF, 0xBB, 0xBF],
            Self::Utf16Le => &[0xFF, 0xFE],
            Self::Utf16Be => &[0xFE, 0xFF],
        }
    }

    /// The encoding a file's bytes announce with their byte order mark (UTF-8 without
    /// one).
    pub fn sniff(bytes: &[u8]) -> Self {
        match encoding_rs::Encoding::for_bom(bytes) {
            Some((enc, _)) if enc == encoding_rs::UTF_16LE => Self::Utf16Le,
            Some((enc, _)) if enc == encoding_rs::UTF_16BE => Self::Utf16Be,
            Some((enc, _)) if enc == encoding_rs::UTF_8 => Self::Utf8Bom,
            _ => Self::Utf8,
        }
    }

    fn is_utf16(self) -> bool {
        matches!(self, Self::Utf16Le | Self::Utf16Be)
    }
}

/// A file's text, and how it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The text, without the byte order mark.
    pub text: String,
    pub encoding: TextEncoding,
    /// Some bytes could not be decoded and were replaced by U+FFFD, so encoding the text
    /// back would not give the same bytes.
    pub lossy: bool,
}

/// Whether `bytes` look binary: a NUL byte in the first [`BINARY_SNIFF_BYTES`], unless
/// the file starts with a UTF-16 byte order mark (UTF-16 text is full of NULs).
pub fn is_binary(bytes: &[u8]) -> bool {
    if TextEncoding::sniff(bytes).is_utf16() {
        return false;
    }
    bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// Decodes UTF-8 (a BOM is stripped), UTF-16 LE/BE with a BOM, and anything else as
/// lossy UTF-8.
pub fn decode(bytes: &[u8]) -> Decoded {
    let encoding = TextEncoding::sniff(bytes);
    let body = &bytes[encoding.bom().len()..];
    let (text, lossy) = match encoding {
        TextEncoding::Utf8 | TextEncoding::Utf8Bom => match std::str::from_utf8(body) {
            Ok(s) => (s.to_owned(), false),
            Err(_) => (String::from_utf8_lossy(body).into_owned(), true),
        },
        TextEncoding::Utf16Le | TextEncoding::Utf16Be => {
            let enc = if encoding == TextEncoding::Utf16Le { encoding_rs::UTF_16LE } else { encoding_rs::UTF_16BE };
            match enc.decode_without_bom_handling_and_without_replacement(body) {
                Some(s) => (s.into_owned(), false),
                None => (enc.decode_without_bom_handling(body).0.into_owned(), true),
            }
        }
    };
    Decoded { text, encoding, lossy }
}

/// `text` stored in `encoding`, byte order mark included. A leading U+FEFF in `text` is
/// dropped when the encoding writes its own mark, so the mark is never doubled.
pub fn encode(text: &str, encoding: TextEncoding) -> Vec<u8> {
    let text = if encoding == TextEncoding::Utf8 { text } else { text.strip_prefix('\u{FEFF}').unwrap_or(text) };
    let mut out = Vec::with_capacity(encoding.bom().len() + text.len() * if encoding.is_utf16() { 2 } else { 1 });
    out.extend_from_slice(encoding.bom());
    match encoding {
        TextEncoding::Utf8 | TextEncoding::Utf8Bom => out.extend_from_slice(text.as_bytes()),
        TextEncoding::Utf16Le => text.encode_utf16().for_each(|u| out.extend_from_slice(&u.to_le_bytes())),
        TextEncoding::Utf16Be => text.encode_utf16().for_each(|u| out.extend_from_slice(&u.to_be_bytes())),
    }
    out
}

/// The lines of `text` without their terminators (`\n` or `\r\n`). A final line
/// terminator does not start another line, so `"a\nb\n"` has two lines and `""` none.
pub fn split_lines(text: &str) -> Vec<&str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Vec::new();
    }
    body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect()
}

/// Whether `text` mostly ends its lines with CRLF.
pub fn uses_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count() - crlf;
    crlf > 0 && crlf >= lf
}

/// Checks that `path` was read in this session and that `bytes`, its current content,
/// are still what was read. `given` is the path as the model wrote it; `tool` names the
/// call to retry.
pub fn check_fresh(session: &Session, path: &Path, bytes: &[u8], given: &str, tool: &str) -> Result<(), ToolError> {
    match session.last_read(path) {
        None => Err(ToolError(format!(
            "{given} already exists and you have not read it in this session, so the {tool} was refused: orch \
             never changes a file you have not seen. Read it first (Read with file_path \"{}\"; any offset or \
             limit will do), then send the same {tool} call again.",
            path.display()
        ))),
        Some(stamp) if !stamp.matches(bytes) => Err(ToolError(format!(
            "{given} has changed on disk since you last read it (by a command, a hook or another process). \
             Read it again to see its current content, then retry the {tool}."
        ))),
        Some(_) => Ok(()),
    }
}

/// The message for an I/O failure on `path` other than "not found".
pub fn io_error_message(action: &str, path: &Path, err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "permission denied when trying to {action} {}; it may be outside what this agent's sandbox allows",
            path.display()
        ),
        _ => format!("could not {action} {}: {err}", path.display()),
    }
}

/// The message for a missing file: names it, and cheaply suggests a similarly named
/// entry of the same directory.
pub async fn missing_file_message(given: &str, path: &Path) -> String {
    let mut msg = format!("File does not exist: {}", path.display());
    if Path::new(given) != path {
        msg.push_str(&format!(" (given as {given:?})"));
    }
    msg.push('.');
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        match similar_entry(dir, &name.to_string_lossy()).await {
            Some(Suggestion::Entry(entry)) => {
                msg.push_str(&format!(" Did you mean {}?", dir.join(entry).display()));
            }
            Some(Suggestion::NoDirectory) => {
                msg.push_str(&format!(" Its directory {} does not exist either.", dir.display()));
            }
            None => msg.push_str(" Use Glob to search for it."),
        }
    }
    msg
}

enum Suggestion {
    Entry(String),
    NoDirectory,
}

/// How many directory entries the suggestion looks at, at most.
const SUGGESTION_SCAN_LIMIT: usize = 2000;

async fn similar_entry(dir: &Path, name: &str) -> Option<Suggestion> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Suggestion::NoDirectory),
        Err(_) => return None,
    };
    let wanted = name.to_lowercase();
    let wanted_stem = stem(&wanted);
    let budget = (wanted.chars().count() / 4).clamp(1, 3);
    let mut best: Option<(usize, String)> = None;
    let mut scanned = 0;
    while let Ok(Some(entry)) = entries.next_entry().await {
        scanned += 1;
        if scanned > SUGGESTION_SCAN_LIMIT {
            break;
        }
        let candidate = entry.file_name().to_string_lossy().into_owned();
        let lower = candidate.to_lowercase();
        let score = if lower == wanted {
            0
        } else if stem(&lower) == wanted_stem {
            1
        } else {
            // Close, but not by replacing the whole stem ("a.txt" is no suggestion for "b.txt").
            match edit_distance(&lower, &wanted) {
                d if d <= budget && d < wanted_stem.chars().count() => d + 1,
                _ => continue,
            }
        };
        if best.as_ref().is_none_or(|(s, c)| score < *s || (score == *s && candidate < *c)) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, c)| Suggestion::Entry(c))
}

fn stem(name: &str) -> &str {
    match name.rfind('.') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    }
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_encoding_byte_exact() {
        let cases: Vec<Vec<u8>> = vec![
            b"plain\nascii\n".to_vec(),
            b"\xEF\xBB\xBFwith bom\r\n".to_vec(),
            encode("h\u{e9}llo \u{1F600}\n", TextEncoding::Utf16Le),
            encode("h\u{e9}llo \u{1F600}\n", TextEncoding::Utf16Be),
        ];
        for bytes in cases {
            let d = decode(&bytes);
            assert!(!d.lossy);
            assert!(!d.text.starts_with('\u{FEFF}'));
            assert_eq!(encode(&d.text, d.encoding), bytes);
        }
        assert_eq!(encode("x", TextEncoding::Utf16Le), vec![0xFF, 0xFE, b'x', 0]);
        assert_eq!(encode("x", TextEncoding::Utf16Be), vec![0xFE, 0xFF, 0, b'x']);
        assert_eq!(encode("\u{FEFF}x", TextEncoding::Utf8Bom), b"\xEF\xBB\xBFx".to_vec());
    }

    #[test]
    fn detects_binary_and_lossy() {
        assert!(is_binary(b"ab\0cd"));
        assert!(!is_binary(&encode("text", TextEncoding::Utf16Le)));
        assert!(!is_binary(b"text"));
        let d = decode(b"caf\xE9\n");
        assert!(d.lossy && d.text.contains('\u{FFFD}'));
        assert!(decode(&[0xFF, 0xFE, b'a']).lossy);
    }

    #[test]
    fn splits_lines_like_cat() {
        assert!(split_lines("").is_empty());
        assert_eq!(split_lines("a\r\nb\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\nb"), vec!["a", "b"]);
        assert_eq!(split_lines("\n"), vec![""]);
        assert!(uses_crlf("a\r\nb\r\nc\n") && !uses_crlf("a\nb\r\nc\n") && !uses_crlf("abc"));
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("notes.txt", "note.txt"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
