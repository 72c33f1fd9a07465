//! The commands the README and docs/ show, as a program would be given them: every
//! `auditor …` and `cargo xtask …` in their `sh` blocks and after a `$ ` prompt, split as a
//! shell splits them, cut at a pipe, a redirection, `&&`, `;` or a comment. The auditor's
//! CLI tests parse each `auditor` command with its parser, xtask's each of its own, so a
//! page never shows a command the program refuses. Shared with xtask through `#[path]`.

use std::path::{Path, PathBuf};

/// One command a page shows: where, and its words after the program's name.
#[derive(Debug)]
pub struct DocCommand {
    /// `docs/guide.md:42`.
    pub place: String,
    pub words: Vec<String>,
}

/// The pages: the README and every Markdown file of docs/ (not the generated manuals).
pub fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The commands of `program` (`auditor`, or `cargo xtask`) on every page under `root`.
pub fn commands(root: &Path, program: &str) -> Vec<DocCommand> {
    let mut all = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root).unwrap().display().to_string();
        let mut in_sh = false;
        let mut in_block = false;
        for (index, line) in text.lines().enumerate() {
            if let Some(info) = line.strip_prefix("```") {
                in_block = !in_block;
                in_sh = in_block && info.trim() == "sh";
                continue;
            }
            let shown = match line.strip_prefix("$ ") {
                Some(prompted) if in_block => prompted,
                _ if in_sh => line,
                _ => continue,
            };
            for words in in_line(shown, program) {
                all.push(DocCommand {
                    place: format!("{name}:{}", index + 1),
                    words,
                });
            }
        }
    }
    all
}

/// Each command of `program` under `root` that `parse` (given the words with the
/// program's name first) refuses, with its place and why; none, when the pages agree with
/// the program.
pub fn refused<E: std::fmt::Display>(
    root: &Path,
    program: &str,
    parse: impl Fn(Vec<String>) -> Result<(), E>,
) -> Vec<String> {
    let commands = commands(root, program);
    assert!(
        commands.len() > 10,
        "{} commands of {program}",
        commands.len()
    );
    commands
        .iter()
        .filter_map(|command| {
            let words = std::iter::once(program.to_string())
                .chain(command.words.clone())
                .collect();
            parse(words).err().map(|why| {
                format!(
                    "{}: {program} {}\n{why}",
                    command.place,
                    command.words.join(" ")
                )
            })
        })
        .collect()
}

/// The words after each `program` in a shell `line`.
fn in_line(line: &str, program: &str) -> Vec<Vec<String>> {
    // A comment: ` #` outside quotes is near enough for these pages.
    let line = line.split(" # ").next().unwrap_or_default();
    let Ok(words) = shell_words::split(line) else {
        return vec![vec![format!("(not shell words: {line})")]];
    };
    let head: Vec<&str> = program.split(' ').collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < words.len() {
        // `>(auditor ingest -)`: a process substitution starts the program too.
        let word = words[index]
            .trim_start_matches(">(")
            .trim_start_matches("<(");
        // Where a shell (or sudo, or ssh on another host) runs a program, not an argument
        // (`man auditor`, `cargo test -p auditor`).
        let runs_here = index == 0
            || word != words[index]
            || ["|", "&&", ";", "||", "sudo"].contains(&words[index - 1].as_str())
            || (index >= 2 && words[index - 2] == "ssh");
        let starts = runs_here
            && word == head[0]
            && head[1..]
                .iter()
                .enumerate()
                .all(|(k, part)| words.get(index + 1 + k).is_some_and(|w| w == part));
        if !starts {
            index += 1;
            continue;
        }
        let mut args = Vec::new();
        index += head.len();
        while let Some(word) = words.get(index) {
            if ["|", "&&", ";", "<", ">", "2>", "||"].contains(&word.as_str()) {
                break;
            }
            if let Some(last) = word.strip_suffix(')') {
                if !last.is_empty() {
                    args.push(last.to_string());
                }
                break;
            }
            args.push(word.clone());
            index += 1;
        }
        found.push(args);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_cut_where_a_shell_cuts_them() {
        assert_eq!(
            in_line(
                "strace -f -o >(auditor ingest -) CMD && auditor report a.json | less",
                "auditor"
            ),
            [vec!["ingest", "-"], vec!["report", "a.json"]]
        );
        assert!(in_line("man auditor && cargo test -p auditor", "auditor").is_empty());
        assert_eq!(
            in_line("ssh host auditor sites | auditor report -", "auditor"),
            [vec!["sites"], vec!["report", "-"]]
        );
        assert_eq!(
            in_line("cargo xtask run     # builds, audits", "cargo xtask"),
            [vec!["run"]]
        );
        assert_eq!(
            in_line(
                r#"auditor trace --workload "poll:1:2 select:1:-1" < in"#,
                "auditor"
            ),
            [vec!["trace", "--workload", "poll:1:2 select:1:-1"]]
        );
    }
}
