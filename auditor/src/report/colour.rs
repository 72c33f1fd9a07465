//! Colour for the verdicts on a terminal (`--color auto|always|never`, as ripgrep has it):
//! the tables are laid out plain, then each verdict cell is coloured where it stands, so
//! no column moves. `auto` colours only a terminal, and not when `NO_COLOR` is set.

/// When the verdicts are coloured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Colour {
    /// On a terminal, unless `NO_COLOR` is set and not empty.
    #[default]
    Auto,
    Always,
    Never,
}

impl Colour {
    /// Whether output to a place that `is_terminal` (or not) is coloured.
    pub fn enabled(self, is_terminal: bool) -> bool {
        match self {
            Colour::Always => true,
            Colour::Never => false,
            Colour::Auto => {
                is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
            }
        }
    }
}

/// The SGR code of a verdict's colour, from the cell's first words.
fn code(cell: &str) -> Option<&'static str> {
    let word = cell.split([' ', ':', '(']).next()?;
    Some(match word {
        "holds" => "32",
        "candidate" => "36",
        "unclear" => "33",
        "costly" => "1;33",
        "no" if cell.starts_with("no hint") => "35",
        "wrong" => "1;31",
        _ => return None,
    })
}

/// `text` (tables in psql style, as the table and annotated formats write them) with each
/// cell of a `verdict` column coloured by its verdict.
pub fn verdicts(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    // The verdict column of the table being read, as a range of chars.
    let mut column: Option<(usize, usize)> = None;
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            column = None;
        }
        // A header is a line followed by the separator line `---+---`.
        if let Some(separator) = lines.get(index + 1)
            && separator.starts_with('-')
            && separator.contains('+')
            && separator.chars().all(|c| c == '-' || c == '+')
        {
            let mut start = 0;
            column = None;
            for cell in separator.split('+') {
                let end = start + cell.chars().count();
                let header: String = line.chars().skip(start).take(end - start).collect();
                if header.trim() == "verdict" {
                    column = Some((start, end));
                }
                start = end + 1;
            }
            out.push_str(line);
            out.push('\n');
            continue;
        }
        match column {
            Some((start, end)) if !line.starts_with('-') => {
                let chars: Vec<char> = line.chars().collect();
                let cell: String = chars.iter().skip(start).take(end - start).collect();
                match code(cell.trim()) {
                    Some(code) => {
                        let lead = cell.len() - cell.trim_start().len();
                        let word = cell.trim();
                        let before: String = chars.iter().take(start + lead).collect();
                        let after: String = chars
                            .iter()
                            .skip(start + lead + word.chars().count())
                            .collect();
                        out.push_str(&format!("{before}\x1b[{code}m{word}\x1b[0m{after}"));
                    }
                    None => out.push_str(line),
                }
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    if !text.ends_with('\n') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_cells_are_coloured_where_they_stand() {
        let table = " site | verdict            | n\n\
                     ------+--------------------+---\n \
                     a    | holds (<= 6.47%)   | 1\n \
                     b    | costly (>= 20.71%) | 2\n \
                     c    | no data            | 3\n\n\
                     - a note: holds\n";
        let coloured = verdicts(table);
        let lines: Vec<&str> = coloured.lines().collect();
        assert_eq!(lines[2], " a    | \x1b[32mholds (<= 6.47%)\x1b[0m   | 1");
        assert_eq!(lines[3], " b    | \x1b[1;33mcostly (>= 20.71%)\x1b[0m | 2");
        assert_eq!(lines[4], " c    | no data            | 3");
        // Past the table, nothing is touched; without the codes it is the same text.
        assert_eq!(lines[6], "- a note: holds");
        assert_eq!(
            coloured
                .replace("\x1b[32m", "")
                .replace("\x1b[1;33m", "")
                .replace("\x1b[0m", ""),
            table
        );
    }

    #[test]
    fn auto_is_for_terminals() {
        assert!(Colour::Always.enabled(false));
        assert!(!Colour::Never.enabled(true));
        assert!(!Colour::Auto.enabled(false));
    }
}
