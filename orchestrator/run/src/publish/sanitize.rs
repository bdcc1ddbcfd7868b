//! Making model text safe to post: `@mentions` neutralised (a word joiner after the
//! `@`, so nobody is notified), HTML comment delimiters escaped (so text cannot close
//! or forge orch's hidden markers), bodies cut under GitHub's limit with a note, and
//! code fences longer than any backtick run inside them.

/// GitHub's limit on a comment, review, issue or pull-request body, in characters.
pub const MAX_BODY: usize = 65_536;

/// The invisible character put after `@`.
const WORD_JOINER: char = '\u{2060}';

/// Model text made safe to post: mentions neutralised, comment delimiters escaped.
pub fn text(input: &str) -> String {
    let escaped = input.replace("<!--", "&lt;!--").replace("-->", "--&gt;");
    let mut out = String::with_capacity(escaped.len());
    let mut prev: Option<char> = None;
    let mut chars = escaped.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '@'
            && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '`')
            && chars.peek().is_some_and(|n| n.is_ascii_alphanumeric())
        {
            out.push(WORD_JOINER);
        }
        prev = Some(c);
    }
    out
}

/// The hidden marker `<!-- orch:<key> -->`; `key` keeps only characters that cannot end
/// the comment.
pub fn marker(key: &str) -> String {
    // Anything else becomes `-`, and runs of `-` one `-`, so no `--` (nor `-->`) is left.
    let mut clean = String::with_capacity(key.len());
    for c in key.chars() {
        let c = if c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '=' | ' ') { c } else { '-' };
        if !(c == '-' && clean.ends_with('-')) {
            clean.push(c);
        }
    }
    format!("<!-- orch:{} -->", clean.trim_matches('-'))
}

/// `body` cut to at most `limit` characters (at a line break when one is near), with a
/// note saying how much was left out; `tail` (a marker) is always kept whole.
pub fn cap(body: &str, tail: &str, limit: usize) -> String {
    let room = limit.saturating_sub(tail.chars().count() + 2);
    if body.chars().count() <= room {
        return format!("{body}\n\n{tail}");
    }
    let note_room = 160;
    let keep = room.saturating_sub(note_room);
    let mut cut: String = body.chars().take(keep).collect();
    if let Some(at) = cut.rfind('\n').filter(|&at| at + 2000 > cut.len()) {
        cut.truncate(at);
    }
    let left = body.chars().count() - cut.chars().count();
    format!(
        "{cut}\n\n_… {left} more characters were cut here (GitHub's limit); the run's report has the whole text._\n\n{tail}"
    )
}

/// A fence of backticks longer than any run of backticks in `content` (at least 3).
pub fn fence(content: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in content.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_neutralised_but_emails_stay() {
        let out = text("ping @octocat and @org/team, mail a@b.com");
        assert!(!out.contains("@octocat"));
        assert!(out.contains("@\u{2060}octocat"));
        assert!(out.contains("@\u{2060}org/team"));
        assert!(out.contains("a@b.com"));
    }

    #[test]
    fn markers_cannot_be_closed_or_forged() {
        let out = text("end --> <!-- orch:w -->");
        assert!(!out.contains("-->"));
        assert!(!out.contains("<!--"));
        assert_eq!(marker("w --> x"), "<!-- orch:w - x -->");
    }

    #[test]
    fn bodies_are_cut_with_a_note_and_keep_the_marker() {
        let body = "line\n".repeat(20_000);
        let out = cap(&body, "<!-- orch:w -->", MAX_BODY);
        assert!(out.chars().count() <= MAX_BODY);
        assert!(out.ends_with("<!-- orch:w -->"));
        assert!(out.contains("more characters were cut"));
        assert_eq!(cap("short", "<!-- m -->", MAX_BODY), "short\n\n<!-- m -->");
    }

    #[test]
    fn fences_outgrow_their_content() {
        assert_eq!(fence("a"), "```");
        assert_eq!(fence("x ```` y"), "`````");
    }
}
