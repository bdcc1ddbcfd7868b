//! Making model text safe to post: `@mentions` neutralised (a word joiner after the
//! `@`, so nobody is notified), also when the `@` is written as an HTML entity
//! (`&#64;`, `&#x40;`, `&commat;`: decoded first, then neutralised); HTML comments and
//! other markup declarations escaped (`<!--`, `-->`, `<!`, `<?`), so text can neither
//! hide itself nor close or forge orch's hidden markers; bodies cut under GitHub's limit
//! with a note; and code fences longer than any backtick run inside them.

/// GitHub's limit on a comment, review, issue or pull-request body, in characters.
pub const MAX_BODY: usize = 65_536;

/// The invisible character put after `@`.
const WORD_JOINER: char = '\u{2060}';

/// Model text made safe to post: mentions neutralised, comment delimiters escaped.
pub fn text(input: &str) -> String {
    let decoded = decode_at(input);
    let escaped = decoded.replace("-->", "--&gt;").replace("<!", "&lt;!").replace("<?", "&lt;?");
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

/// `input` with every HTML entity that stands for `@` replaced by `@`: decimal
/// (`&#64;`, `&#064;`), hexadecimal (`&#x40;`, `&#X0040;`) and `&commat;`, any case, with
/// or without the closing `;`.
fn decode_at(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match at_entity(rest) {
            Some(len) => {
                out.push('@');
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of the entity for `@` that `s` (starting at `&`) begins with, if any.
fn at_entity(s: &str) -> Option<usize> {
    let semicolon = |len: usize| if s[len..].starts_with(';') { len + 1 } else { len };
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    if lower.starts_with("&commat") {
        return Some(semicolon(7));
    }
    let (digits_at, radix) = if lower.starts_with("&#x") {
        (3, 16)
    } else if lower.starts_with("&#") {
        (2, 10)
    } else {
        return None;
    };
    let digits =
        s[digits_at..].bytes().take_while(|b| b.is_ascii_hexdigit() && (radix == 16 || b.is_ascii_digit())).count();
    let value = u32::from_str_radix(s.get(digits_at..digits_at + digits)?, radix).ok()?;
    (value == 0x40).then(|| semicolon(digits_at + digits))
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
    fn mentions_written_as_entities_are_neutralised() {
        for written in [
            "&#64;octocat",
            "&#064;octocat",
            "&#x40;octocat",
            "&#X0040;octocat",
            "&commat;octocat",
            "&COMMAT;octocat",
            "&#64octocat",
        ] {
            let out = text(&format!("ping {written} now"));
            assert_eq!(out, "ping @\u{2060}octocat now", "{written}");
        }
        // Other entities and plain ampersands stay as written.
        assert_eq!(text("a &amp; b &#65; &#x41; &lt;b&gt; R&D"), "a &amp; b &#65; &#x41; &lt;b&gt; R&D");
        assert_eq!(text("mail a&#64;b.com"), "mail a@b.com");
    }

    #[test]
    fn html_comments_and_declarations_cannot_hide_text() {
        let out = text("seen <!-- hidden --> <!-->x <!---> <!DOCTYPE x> <?php ?> <![CDATA[ y ]]>");
        for live in ["<!", "<?", "-->"] {
            assert!(!out.contains(live), "{live} in {out}");
        }
        assert!(out.contains("&lt;!-- hidden --&gt;"), "{out}");
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
