//! Reading hints from a kernel source tree (`auditor sites --kernel-src DIR`): each site's
//! function is found in its file, and the first condition in it written as one of the
//! site's fragments tells which hint that tree carries there.

use std::path::Path;

use serde::Serialize;

use auditor_common::catalogue::{Hint, SiteInfo};

/// What a tree says about one site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TreeHint {
    /// The branch was found at `file:line` with this hint (for the site's taken arm).
    Found {
        hint: Hint,
        line: usize,
    },
    NotFound {
        why: String,
    },
}

/// Text with every run of white space folded to one space, and the source line of every
/// byte kept, so fragments match however a release wraps or indents them.
struct Folded {
    text: String,
    lines: Vec<usize>,
}

fn fold(source: &str, first_line: usize) -> Folded {
    let mut text = String::new();
    let mut lines = Vec::new();
    let mut line = first_line;
    let mut in_space = false;
    for c in source.chars() {
        if c.is_whitespace() {
            if !in_space {
                text.push(' ');
                lines.push(line);
            }
            in_space = true;
        } else {
            text.push(c);
            lines.extend(std::iter::repeat_n(line, c.len_utf8()));
            in_space = false;
        }
        if c == '\n' {
            line += 1;
        }
    }
    Folded { text, lines }
}

/// Byte offset of the bracket that closes the one at `open`.
fn matching(text: &str, open: usize, (left, right): (u8, u8)) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in text.as_bytes().iter().enumerate().skip(open) {
        if b == left {
            depth += 1;
        } else if b == right {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

fn is_identifier(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The body of `function`'s definition in `text` (between its braces) and the line where
/// it starts. `sys_NAME` is looked for as `SYSCALL_DEFINEn(NAME, ...)`.
fn function_body<'a>(text: &'a str, function: &str) -> Option<(&'a str, usize)> {
    let syscall = function.strip_prefix("sys_");
    let bytes = text.as_bytes();
    let mut from = 0;
    loop {
        let (start, open) = match syscall {
            Some(name) => {
                let at = from + text[from..].find("SYSCALL_DEFINE")?;
                let open = at + text[at..].find('(')?;
                let rest = text[open + 1..].trim_start();
                let matches = rest
                    .strip_prefix(name)
                    .is_some_and(|r| r.trim_start().starts_with(','));
                (at, matches.then_some(open))
            }
            None => {
                let at = from + text[from..].find(function)?;
                let before_ok = at == 0 || !is_identifier(bytes[at - 1]);
                let after = text[at + function.len()..].trim_start();
                let open = at + function.len() + (text.len() - at - function.len() - after.len());
                (at, (before_ok && after.starts_with('(')).then_some(open))
            }
        };
        from = start + 1;
        let Some(open) = open else { continue };
        let close = matching(text, open, (b'(', b')'))?;
        let after = text[close + 1..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let brace = text.len() - after.len();
        let end = matching(text, brace, (b'{', b'}'))?;
        let line = text[..brace].matches('\n').count() + 1;
        return Some((&text[brace..=end], line));
    }
}

/// The hint whose parentheses enclose byte `position` of `text`, innermost first.
fn hint_around(text: &str, position: usize) -> Hint {
    let bytes = text.as_bytes();
    let mut best: Option<(usize, Hint)> = None;
    for (at, _) in text[..position].match_indices("likely(") {
        let unlikely = at >= 2 && &text[at - 2..at] == "un";
        let start = if unlikely { at - 2 } else { at };
        if start > 0 && is_identifier(bytes[start - 1]) {
            continue;
        }
        let open = at + "likely".len();
        if matching(text, open, (b'(', b')')).is_some_and(|close| close > position) {
            let hint = if unlikely {
                Hint::Unlikely
            } else {
                Hint::Likely
            };
            if best.is_none_or(|(b, _)| at > b) {
                best = Some((at, hint));
            }
        }
    }
    best.map_or(Hint::None, |(_, hint)| hint)
}

/// The hint `tree` carries for `site`.
pub fn tree_hint(tree: &Path, site: &SiteInfo) -> TreeHint {
    let path = tree.join(site.file);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            return TreeHint::NotFound {
                why: format!("cannot read {}: {error}", path.display()),
            };
        }
    };
    let Some((body, first_line)) = function_body(&text, site.function) else {
        return TreeHint::NotFound {
            why: format!("no definition of {} in {}", site.function, site.file),
        };
    };
    let body = fold(body, first_line);
    let found = site.source.iter().find_map(|fragment| {
        let wanted = fold(fragment.text, 0).text;
        let at = body.text.find(&wanted)?;
        let hint = hint_around(&body.text, at);
        let hint = if fragment.negated {
            hint.opposite()
        } else {
            hint
        };
        Some(TreeHint::Found {
            hint,
            line: body.lines[at],
        })
    });
    found.unwrap_or_else(|| TreeHint::NotFound {
        why: format!(
            "no condition written as {} in {}",
            site.source
                .iter()
                .map(|f| format!("`{}`", f.text))
                .collect::<Vec<_>>()
                .join(" or "),
            site.function
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use auditor_common::Site;
    use auditor_common::catalogue::SITES;

    /// A small tree written for the test: one release's style per function.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("fs")).unwrap();
        std::fs::write(
            dir.path().join("fs/select.c"),
            "static int max_select_fd(unsigned long n, fd_set_bits *fds);\n\
             int core_sys_select(int n, fd_set __user *inp,\n\
             \t\t\tfd_set __user *outp)\n\
             {\n\
             \tret = -EINVAL;\n\
             \tif (unlikely(n < 0))\n\
             \t\tgoto out_nofds;\n\
             \tif (n > max_fds)\n\
             \t\tn = max_fds;\n\
             }\n\
             static inline unsigned int do_pollfd(struct pollfd *pollfd)\n\
             {\n\
             \tif (fd >= 0) {\n\
             \t\tstruct fd f = fdget(fd);\n\
             \t}\n\
             }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("fs/file.c"),
            "static int alloc_fd(unsigned start, unsigned end, unsigned flags)\n{\n\
             repeat:\n\
             \tif (likely(fd <\n\t\t   fdt->max_fds))\n\t\tfd = find_next_fd(fdt, fd);\n\
             \tif (unlikely(fd >= end))\n\t\tgoto out;\n\
             \tif (fd >= fdt->max_fds) {\n\t}\n}\n\
             static inline struct fd __fget_light(unsigned int fd, fmode_t mask)\n{\n\
             \tif (likely(atomic_read_acquire(&files->count) == 1)) {\n\t}\n}\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("fs")).unwrap();
        std::fs::write(
            dir.path().join("fs/open.c"),
            "SYSCALL_DEFINE1(close, unsigned int, fd)\n{\n\tif (likely(retval == 0))\n\t\treturn 0;\n}\n",
        )
        .unwrap();
        dir
    }

    fn hint(tree: &Path, site: Site) -> TreeHint {
        tree_hint(tree, site.info())
    }

    #[test]
    fn hints_are_read_where_the_tree_writes_them() {
        let dir = tree();
        let expected = [
            (Site::SelectNNegative, Hint::Unlikely, 6),
            (Site::SelectNClamped, Hint::None, 8),
            // `fd >= 0` states the other arm: no hint either way.
            (Site::PollFdNegative, Hint::None, 13),
            // A condition wrapped over two lines.
            (Site::FdBelowMax, Hint::Likely, 4),
            (Site::FdEmfile, Hint::Unlikely, 7),
            (Site::FdTableFull, Hint::None, 9),
            // likely(count == 1) is unlikely for the shared-table arm.
            (Site::FgetTableShared, Hint::Unlikely, 14),
            (Site::CloseOk, Hint::Likely, 3),
        ];
        for (site, hint_written, line) in expected {
            assert_eq!(
                hint(dir.path(), site),
                TreeHint::Found {
                    hint: hint_written,
                    line
                },
                "{site:?}"
            );
        }
    }

    #[test]
    fn what_is_missing_is_said() {
        let dir = tree();
        let tree = dir.path();
        // The declaration (with a `;`) is not the definition.
        assert!(
            matches!(hint(tree, Site::SelectFdNotOpen), TreeHint::NotFound { why } if why.contains("no definition of max_select_fd"))
        );
        assert!(
            matches!(hint(tree, Site::PollFdNotOpen), TreeHint::NotFound { why } if why.contains("no condition written as"))
        );
        assert!(
            matches!(hint(tree, Site::EpollBadArgs), TreeHint::NotFound { why } if why.contains("cannot read"))
        );
        for site in SITES {
            // Every site can be looked for without a panic.
            let _ = tree_hint(tree, site);
        }
    }

    #[test]
    fn only_whole_hint_calls_count() {
        assert_eq!(hint_around("if (unlikely(x)) y", 13), Hint::Unlikely);
        assert_eq!(hint_around("if (likely(a) && b)", 17), Hint::None);
        assert_eq!(hint_around("if (my_likely(a))", 14), Hint::None);
    }
}
