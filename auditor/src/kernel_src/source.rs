//! One C file of a kernel tree, read for its hints: comments and literals blanked (so
//! nothing in them is taken for code), the definitions (functions, `SYSCALL_DEFINEn`,
//! `#define` macros) found with their extents, and every `likely(` / `unlikely(` call.

use std::ops::Range;

use auditor_common::catalogue::Hint;

/// A file's text with comments and string and character literals turned into spaces
/// (lines and byte offsets kept), its definitions and its hint calls.
pub struct SourceFile {
    pub text: String,
    pub definitions: Vec<Definition>,
    pub hints: Vec<HintCall>,
    /// The offset each line starts at, so that a line is found in log time.
    line_starts: Vec<usize>,
}

/// A function or macro definition: its name and the bytes of its body.
#[derive(Debug, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    pub body: Range<usize>,
}

/// One `likely(...)` or `unlikely(...)` in the code.
#[derive(Debug, PartialEq, Eq)]
pub struct HintCall {
    pub hint: Hint,
    /// Offset of the call's name.
    pub at: usize,
    /// Offsets of its parentheses.
    pub open: usize,
    pub close: usize,
}

impl SourceFile {
    pub fn parse(source: &str) -> SourceFile {
        let text = blank_comments_and_literals(source);
        let definitions = definitions(&text);
        let hints = hint_calls(&text);
        let line_starts = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', text.as_bytes()).map(|at| at + 1))
            .collect();
        SourceFile {
            text,
            definitions,
            hints,
            line_starts,
        }
    }

    /// The line (from 1) of byte `offset`.
    pub fn line(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= offset)
    }

    /// The definition whose body holds `offset`.
    pub fn enclosing(&self, offset: usize) -> Option<&Definition> {
        self.definitions
            .iter()
            .find(|definition| definition.body.contains(&offset))
    }

    pub fn definition(&self, name: &str) -> Option<&Definition> {
        self.definitions
            .iter()
            .find(|definition| definition.name == name)
    }

    /// The hint call that states the code at `code`: the last one starting inside it, else
    /// the innermost one around its start.
    pub fn hint_at(&self, code: Range<usize>) -> Option<&HintCall> {
        self.hints
            .iter()
            .rfind(|call| code.contains(&call.at))
            .or_else(|| {
                self.hints
                    .iter()
                    .filter(|call| call.open < code.start && code.start < call.close)
                    .max_by_key(|call| call.open)
            })
    }

    /// The condition a hint call states, white space folded.
    pub fn condition(&self, call: &HintCall) -> String {
        fold(&self.text[call.open + 1..call.close]).text
    }
}

fn blank_comments_and_literals(source: &str) -> String {
    #[derive(PartialEq)]
    enum State {
        Code,
        LineComment,
        BlockComment,
        Literal(u8),
    }
    let bytes = source.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut state = State::Code;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        let blank = |b: u8| if b == b'\n' { b'\n' } else { b' ' };
        match state {
            State::Code => match (b, next) {
                (b'/', Some(b'/')) => {
                    state = State::LineComment;
                    out.extend([b' ', b' ']);
                    i += 2;
                    continue;
                }
                (b'/', Some(b'*')) => {
                    state = State::BlockComment;
                    out.extend([b' ', b' ']);
                    i += 2;
                    continue;
                }
                (b'"' | b'\'', _) => {
                    state = State::Literal(b);
                    out.push(b' ');
                }
                _ => out.push(b),
            },
            State::LineComment => {
                if b == b'\n' {
                    state = State::Code;
                }
                out.push(blank(b));
            }
            State::BlockComment => {
                if b == b'*' && next == Some(b'/') {
                    state = State::Code;
                    out.extend([b' ', b' ']);
                    i += 2;
                    continue;
                }
                out.push(blank(b));
            }
            State::Literal(quote) => {
                if b == b'\\' && next.is_some() {
                    out.push(b' ');
                    out.push(blank(next.unwrap_or(b' ')));
                    i += 2;
                    continue;
                }
                if b == quote || b == b'\n' {
                    state = State::Code;
                }
                out.push(blank(b));
            }
        }
        i += 1;
    }
    // Only ASCII bytes were replaced, by ASCII: what was UTF-8 still is.
    String::from_utf8(out).unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into())
}

fn is_identifier(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier that ends at `end` (exclusive), skipping white space before `end`.
fn identifier_before(text: &str, end: usize) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut stop = end;
    while stop > 0 && bytes[stop - 1].is_ascii_whitespace() {
        stop -= 1;
    }
    let mut start = stop;
    while start > 0 && is_identifier(bytes[start - 1]) {
        start -= 1;
    }
    (start < stop).then(|| &text[start..stop])
}

/// The name a definition whose parameter list opens at `open` goes by: `sys_NAME` for
/// `SYSCALL_DEFINEn(NAME, ...)`.
fn defined_name(text: &str, open: usize) -> Option<String> {
    let mut open = open;
    let mut name = identifier_before(text, open)?;
    // Lock annotations between the parameters and the body: `f(...) __acquires(lock) {`.
    while ["__acquires", "__releases", "__must_hold"].contains(&name) {
        let head = text[..open - name.len()].trim_end();
        if !head.ends_with(')') {
            return None;
        }
        open = matching_backwards(text, head.len() - 1)?;
        name = identifier_before(text, open)?;
    }
    let syscall = name
        .strip_prefix("SYSCALL_DEFINE")
        .map(|_| "sys_")
        .or_else(|| {
            name.strip_prefix("COMPAT_SYSCALL_DEFINE")
                .map(|_| "compat_sys_")
        });
    match syscall {
        Some(prefix) => {
            let rest = text[open + 1..].trim_start();
            let end = rest.bytes().position(|b| !is_identifier(b))?;
            Some(format!("{prefix}{}", &rest[..end]))
        }
        None => Some(name.to_string()),
    }
}

/// Every function body at the top level and every `#define`, in file order.
fn definitions(text: &str) -> Vec<Definition> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut top_open = 0;
    let mut i = 0;
    let mut line_start = true;
    while i < bytes.len() {
        let b = bytes[i];
        if line_start && b == b'#' {
            // A directive runs to the first line end not escaped by a backslash.
            let mut end = i;
            while end < bytes.len() && !(bytes[end] == b'\n' && bytes[end - 1] != b'\\') {
                end += 1;
            }
            let directive = &text[i + 1..end];
            if let Some(rest) = directive.trim_start().strip_prefix("define") {
                let rest = rest.trim_start();
                let name_len = rest.bytes().take_while(|&b| is_identifier(b)).count();
                if name_len > 0 {
                    found.push(Definition {
                        name: rest[..name_len].to_string(),
                        body: i..end,
                    });
                }
            }
            i = end;
            continue;
        }
        if !b.is_ascii_whitespace() {
            line_start = false;
        }
        match b {
            b'\n' => line_start = true,
            b'{' => {
                if depth == 0 {
                    top_open = i;
                }
                depth += 1;
            }
            b'}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let head = text[..top_open].trim_end();
                    if head.ends_with(')')
                        && let Some(open) = matching_backwards(text, head.len() - 1)
                        && let Some(name) = defined_name(text, open)
                    {
                        found.push(Definition {
                            name,
                            body: top_open..i + 1,
                        });
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Offset of the `(` that the `)` at `close` closes.
fn matching_backwards(text: &str, close: usize) -> Option<usize> {
    let mut depth = 0usize;
    for i in (0..=close).rev() {
        match text.as_bytes()[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The `)` that closes each `(` of `text`, found in one pass: (open, close) pairs in the
/// order of their opens. A `(` never closed has none.
fn parenthesis_pairs(text: &str) -> Vec<(usize, usize)> {
    let mut open = Vec::new();
    let mut pairs = Vec::new();
    for (at, b) in text.bytes().enumerate() {
        match b {
            b'(' => open.push(at),
            b')' => {
                if let Some(start) = open.pop() {
                    pairs.push((start, at));
                }
            }
            _ => {}
        }
    }
    pairs.sort_unstable();
    pairs
}

fn hint_calls(text: &str) -> Vec<HintCall> {
    let bytes = text.as_bytes();
    // Each call's `)` looked up, not searched for: a file of many (or unclosed) calls is
    // read in linear time.
    let pairs = parenthesis_pairs(text);
    let matching = |open: usize| {
        pairs
            .binary_search_by_key(&open, |&(start, _)| start)
            .ok()
            .map(|index| pairs[index].1)
    };
    text.match_indices("likely(")
        .filter_map(|(at, _)| {
            let unlikely = at >= 2 && &text[at - 2..at] == "un";
            let start = if unlikely { at - 2 } else { at };
            if start > 0 && is_identifier(bytes[start - 1]) {
                return None;
            }
            let open = at + "likely".len();
            let close = matching(open)?;
            Some(HintCall {
                hint: if unlikely {
                    Hint::Unlikely
                } else {
                    Hint::Likely
                },
                at: start,
                open,
                close,
            })
        })
        .collect()
}

/// Text with every run of white space folded to one space, and the offset in the
/// original of every byte kept, so fragments match however a release wraps them.
pub struct Folded {
    pub text: String,
    pub offsets: Vec<usize>,
}

pub fn fold(source: &str) -> Folded {
    let mut text = String::new();
    let mut offsets = Vec::new();
    let mut in_space = false;
    for (offset, c) in source.char_indices() {
        if c.is_whitespace() {
            if !in_space {
                text.push(' ');
                offsets.push(offset);
            }
            in_space = true;
        } else {
            text.push(c);
            offsets.extend((0..c.len_utf8()).map(|i| offset + i));
            in_space = false;
        }
    }
    let trimmed = text.trim().len();
    if text.starts_with(' ') {
        text.remove(0);
        offsets.remove(0);
    }
    text.truncate(trimmed);
    offsets.truncate(trimmed);
    Folded { text, offsets }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/* likely(comment) */\n\
        static inline bool fd_empty(struct fd f)\n{\n\treturn unlikely(!f.word);\n}\n\
        #define ADD(x) \\\n\t({ if (likely(!x)) \\\n\t\tx; })\n\
        struct s { int a; };\n\
        static int expand_files(struct files_struct *files, unsigned int nr)\n\
        \t__releases(files->file_lock)\n\t__acquires(files->file_lock)\n{\n}\n\
        SYSCALL_DEFINE2(dup2, unsigned int, oldfd,\n\t\tunsigned int, newfd)\n{\n\
        \tchar c = '{';\n\tif (unlikely(newfd ==\n\t\t oldfd)) {\n\t}\n}\n";

    /// A file of 200 000 hints, nested, unclosed and on lines of their own, is read in
    /// linear time (a search per hint from the start of the file, or to its end for an
    /// unclosed one, did not end), each with its line and condition.
    #[test]
    fn a_file_of_many_hints_is_read_whole() {
        let mut text = String::from("int f(void)\n{\n");
        for i in 0..100_000 {
            text.push_str(&format!("\tif (unlikely(likely(x == {i})))\n"));
        }
        text.push_str("}\n");
        // Unclosed at the end: the rest of the file is searched for the close of none.
        text.push_str(&"unlikely(".repeat(100_000));
        let file = SourceFile::parse(&text);
        // An unclosed call states no condition, so it is no hint.
        assert_eq!(file.hints.len(), 200_000);
        let last_closed = &file.hints[199_999];
        assert_eq!(file.line(last_closed.at), 2 + 100_000);
        assert_eq!(file.condition(last_closed), "x == 99999");
        assert_eq!(file.enclosing(last_closed.at).unwrap().name, "f");
    }

    #[test]
    fn definitions_and_hints_are_found_in_code_only() {
        let file = SourceFile::parse(FILE);
        let names: Vec<&str> = file.definitions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["fd_empty", "ADD", "expand_files", "sys_dup2"]);
        let found: Vec<(Hint, usize, Option<&str>, String)> = file
            .hints
            .iter()
            .map(|call| {
                (
                    call.hint,
                    file.line(call.at),
                    file.enclosing(call.at).map(|d| d.name.as_str()),
                    file.condition(call),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                (Hint::Unlikely, 4, Some("fd_empty"), "!f.word".to_string()),
                (Hint::Likely, 7, Some("ADD"), "!x".to_string()),
                (
                    Hint::Unlikely,
                    19,
                    Some("sys_dup2"),
                    "newfd == oldfd".to_string()
                ),
            ]
        );
    }

    #[test]
    fn folding_keeps_offsets() {
        let folded = fold("  a \n\t b");
        assert_eq!(folded.text, "a b");
        assert_eq!(folded.offsets, [2, 3, 7]);
    }
}
