//! Fitting text to a terminal: how wide a rendering is, the first of a table's narrowing
//! steps whose rendering fits, and paragraphs wrapped at words (never inside a word at a
//! hyphen, so that `6.1.0-31-amd64` stays whole).

/// The widest line of `text`, in columns.
pub fn widest(text: &str) -> usize {
    text.lines()
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0)
}

/// The rendering of the first step in `0..=last` that fits `width`, else that of `last`
/// (which a renderer squeezes to fit).
pub fn first_fitting(width: usize, last: usize, render: impl Fn(usize) -> String) -> String {
    for step in 0..last {
        let text = render(step);
        if widest(&text) <= width {
            return text;
        }
    }
    render(last)
}

/// `text` wrapped at words to `width`, each line after the first indented by `indent`; a
/// word longer than a line is broken, a hyphenated one only there.
pub fn wrapped(text: &str, width: usize, indent: &str) -> String {
    let options = textwrap::Options::new(width)
        .subsequent_indent(indent)
        .word_splitter(textwrap::WordSplitter::NoHyphenation)
        .break_words(true);
    textwrap::fill(text, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_not_split_at_its_hyphens() {
        let text = "Traced: ssh, for 1.0 s, on Linux 6.1.0-31-amd64 on build-host";
        let lines = wrapped(text, 40, "  ");
        assert!(lines.contains("6.1.0-31-amd64"), "{lines}");
        assert!(widest(&lines) <= 40, "{lines}");
    }

    #[test]
    fn the_first_step_that_fits_is_rendered() {
        let render = |step: usize| "x".repeat(100 - 10 * step);
        assert_eq!(first_fitting(75, 5, render).len(), 70);
        assert_eq!(first_fitting(10, 5, render).len(), 50);
        assert_eq!(first_fitting(200, 5, render).len(), 100);
    }
}
