//! Text that comes from traced programs and logs (process names, file names, symbols),
//! made safe to print: control characters (which could move the cursor or retitle a
//! terminal) and bidirectional overrides are shown as escapes, and Markdown cells keep
//! their column structure.

use std::borrow::Cow;

/// A command line as a shell takes it back: each argument quoted where it must be
/// (`sh -c 'nc -l 9 & nc 127.0.0.1 9'`), bytes that are not UTF-8 replaced.
pub fn shell_quoted(argv: &[std::ffi::OsString]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    shell_words::join(words)
}

/// Whether `c` must not reach a terminal as it is.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with each character `escape` picks written as a Rust-style escape.
fn escaped_where(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// `text` with each control character written as a Rust-style escape (`\n`, `\u{1b}`).
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escaped_where(text, unsafe_char)
}

/// `text` in printable ASCII: anything else (controls, any non-ASCII) as an escape.
pub fn escape_ascii(text: &str) -> Cow<'_, str> {
    escaped_where(text, |c| c != ' ' && !c.is_ascii_graphic())
}

/// [`escape_text`], with `|` escaped so that a Markdown table cell stays one cell.
pub fn escape_markdown_cell(text: &str) -> String {
    escape_text(text).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(escape_text("sshd"), "sshd");
        assert_eq!(
            escape_text("x\u{1b}]0;owned\u{7}\n\u{9b}2J"),
            "x\\u{1b}]0;owned\\u{7}\\n\\u{9b}2J"
        );
        assert_eq!(escape_text("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(
            escape_text("Chrome_IOThread ünïcode"),
            "Chrome_IOThread ünïcode"
        );
    }

    #[test]
    fn markdown_cells_keep_their_columns() {
        assert_eq!(escape_markdown_cell("a|b\u{1b}"), "a\\|b\\u{1b}");
    }
}
