//! How a report is shown: the options every report-writing command takes, validated once
//! before a session starts (the CLI only parses them), and what they do to a report and to
//! its rendering.

use std::path::PathBuf;

use auditor_common::{Site, catalogue::Hint};

use super::{
    Columns, Format, Layout, Proposal, Report, Sort,
    groups::{self, GroupBy},
    svg,
};
use crate::{
    kernel_src::{NotATree, TreeHints},
    output::{Output, OutputError},
};

/// The options of a report, as given.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Hints to judge instead of the catalogue's (`--propose`).
    pub proposals: Vec<Proposal>,
    /// Only these sites (`--site`); all when empty.
    pub sites: Vec<Site>,
    pub format: Format,
    /// Rows per process too.
    pub per_process: bool,
    /// Verdicts per program, host or source too.
    pub group_by: Option<GroupBy>,
    /// Also draw the report into this SVG file.
    pub svg: Option<PathBuf>,
    /// Every column in the tables, whatever the width they go to.
    pub wide: bool,
    /// The order of the sites; by default, the catalogue's, and by share against the hint
    /// in the annotated view and the SVG.
    pub sort: Option<Sort>,
    /// A kernel tree whose hints are judged instead of the catalogue's (`--kernel-src`).
    pub kernel_src: Option<PathBuf>,
    /// What that tree says of every site: read by [`Options::validated`], before a session.
    pub tree: Option<TreeHints>,
    /// What the report says was traced, instead of the command line (`--label`).
    pub label: Option<String>,
    /// Which groups' rows are shown (`--min-evaluations`, `--top`; with `group_by`).
    pub group_limits: groups::Limits,
    /// When the verdicts of the table and annotated formats are coloured (`--color`).
    pub colour: super::colour::Colour,
}

/// Options that contradict each other.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("--propose gives {site} two hints, {first} and {second}: give one")]
    TwoProposals {
        site: &'static str,
        first: &'static str,
        second: &'static str,
    },
    #[error("--propose {site}={hint}: --site leaves {site} out of the report")]
    ProposalNotShown {
        site: &'static str,
        hint: &'static str,
    },
    /// The SVG cannot be drawn here (no font): said before the session, not after it.
    #[error("--svg: {0}")]
    Svg(String),
    #[error("{0} limits the rows of --group-by: give --group-by too")]
    LimitWithoutGroups(&'static str),
    #[error("--top 0 would show no group: give at least 1")]
    TopZero,
    #[error("--kernel-src: {0}")]
    Tree(#[from] NotATree),
}

impl OptionsError {
    /// Whether the command line itself is wrong (exit status 2), not the machine (no
    /// font for the SVG).
    pub fn is_usage(&self) -> bool {
        !matches!(self, OptionsError::Svg(_))
    }
}

/// How wide the place a report goes to is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// A terminal of this many columns.
    Terminal(u16),
    /// A file or a pipe: no width to fit.
    Unbounded,
}

impl Width {
    /// How wide `out` is: a terminal's columns, else unbounded.
    pub fn of(out: &Output) -> Width {
        out.terminal_fd().map_or(Width::Unbounded, |fd| {
            // SAFETY: the stream or the descriptor the user named, open for the call.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            terminal_size::terminal_size_of(fd)
                .map_or(Width::Unbounded, |(columns, _)| Width::Terminal(columns.0))
        })
    }

    /// The columns to fit, on a terminal.
    pub fn columns(self) -> Option<usize> {
        match self {
            Width::Terminal(columns) => Some(usize::from(columns)),
            Width::Unbounded => None,
        }
    }
}

impl Options {
    /// The options, if they agree with each other, with the tree read.
    pub fn validated(mut self) -> Result<Options, OptionsError> {
        if let Some(root) = &self.kernel_src
            && self.tree.is_none()
        {
            self.tree = Some(TreeHints::read(root)?);
        }
        if self.group_by.is_none() {
            if self.group_limits.min_evaluations > 0 {
                return Err(OptionsError::LimitWithoutGroups("--min-evaluations"));
            }
            if self.group_limits.top.is_some() {
                return Err(OptionsError::LimitWithoutGroups("--top"));
            }
        }
        if self.group_limits.top == Some(0) {
            return Err(OptionsError::TopZero);
        }
        if self.svg.is_some() {
            svg::can_draw().map_err(|why| OptionsError::Svg(why.to_string()))?;
        }
        for (index, proposal) in self.proposals.iter().enumerate() {
            let site = proposal.site.info().id;
            if let Some(other) = self.proposals[..index]
                .iter()
                .find(|p| p.site == proposal.site && p.hint != proposal.hint)
            {
                return Err(OptionsError::TwoProposals {
                    site,
                    first: other.hint.name(),
                    second: proposal.hint.name(),
                });
            }
            if !self.sites.is_empty() && !self.sites.contains(&proposal.site) {
                return Err(OptionsError::ProposalNotShown {
                    site,
                    hint: proposal.hint.name(),
                });
            }
        }
        Ok(self)
    }

    /// Whether the report shows `site` (`--site` keeps some only).
    pub fn shows(&self, site: Site) -> bool {
        self.sites.is_empty() || self.sites.contains(&site)
    }

    /// The hint judged at `site`: the proposed one, else the tree's, else the catalogue's.
    pub fn hint(&self, site: Site) -> Hint {
        self.proposals
            .iter()
            .find(|p| p.site == site)
            .map(|p| p.hint)
            .or_else(|| self.tree.as_ref()?.hint(site))
            .unwrap_or(site.info().hint)
    }

    /// The order of the sites in `format` (and in the SVG, as in the annotated view).
    pub fn order(&self, format: Format) -> Sort {
        self.sort.unwrap_or(match format {
            Format::Annotated => Sort::Miss,
            _ => Sort::Catalogue,
        })
    }

    /// `report` as these options show it: the tree's and the proposed hints judged, sites
    /// kept and put in order, groups made.
    pub fn shape(&self, report: Report) -> Report {
        let report = match &self.tree {
            Some(tree) => report.with_tree(tree),
            None => report,
        };
        report
            .with_proposals(&self.proposals)
            .only(&self.sites)
            .sorted(self.order(self.format))
            .grouped_within(self.group_by, self.group_limits)
            .labelled(self.label.as_deref())
    }

    /// The layout for a destination `width` wide: every column in a file or a pipe, as
    /// many as fit on a terminal, the conditions below the tables in Markdown (a commit
    /// message); every column wherever with `--wide`.
    pub fn layout(&self, width: Width) -> Layout {
        let columns = match (self.wide, self.format, width) {
            (true, _, _) => Columns::Every,
            (_, Format::Markdown, _) => Columns::ConditionsBelow,
            (_, _, Width::Terminal(columns)) => Columns::Terminal(usize::from(columns)),
            (_, _, Width::Unbounded) => Columns::Every,
        };
        Layout {
            per_process: self.per_process,
            columns,
        }
    }

    /// Writes `report`, shaped, to `out`, then its picture to `svg` when asked: the report
    /// first, so that a picture that fails never costs the counts.
    pub fn write(
        &self,
        report: Report,
        out: &Output,
        svg: Option<&Output>,
    ) -> Result<(), OutputError> {
        let report = self.shape(report);
        let width = Width::of(out);
        let coloured = matches!(self.format, Format::Table | Format::Annotated)
            && self.colour.enabled(out.terminal_fd().is_some_and(|fd| {
                // SAFETY: as above.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                std::io::IsTerminal::is_terminal(&fd)
            }));
        let layout = self.layout(width);
        let written = out.write_with("report", |out| {
            if coloured {
                let mut plain = Vec::new();
                report.render(self.format, layout, &mut plain)?;
                let text = super::colour::verdicts(&String::from_utf8_lossy(&plain));
                out.write_all(text.as_bytes())
            } else {
                report.render(self.format, layout, out)
            }
        });
        let drawn = svg.map_or(Ok(()), |svg| {
            let text = svg::render(&report, self.order(Format::Annotated)).map_err(|why| {
                OutputError::Draw {
                    path: match svg {
                        Output::File(path) => path.display().to_string(),
                        other => format!("{other:?}"),
                    },
                    why: why.to_string(),
                }
            })?;
            svg.write_with("SVG", |out| out.write_all(text.as_bytes()))
        });
        written.and(drawn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(text: &str) -> Proposal {
        text.parse().unwrap()
    }

    #[test]
    fn contradictions_are_refused() {
        let options = Options {
            proposals: vec![
                proposal("poll.fd_not_open=unlikely"),
                proposal("poll.fd_not_open=likely"),
            ],
            ..Options::default()
        };
        assert_eq!(
            options.validated().unwrap_err().to_string(),
            "--propose gives poll.fd_not_open two hints, unlikely and likely: give one"
        );
        let options = Options {
            proposals: vec![proposal("close.ok=unlikely")],
            sites: vec![Site::PollFdNegative],
            ..Options::default()
        };
        assert!(matches!(
            options.validated(),
            Err(OptionsError::ProposalNotShown {
                site: "close.ok",
                ..
            })
        ));
        let options = Options {
            proposals: vec![proposal("close.ok=unlikely"), proposal("close.ok=unlikely")],
            sites: vec![Site::CloseOk],
            ..Options::default()
        }
        .validated()
        .unwrap();
        assert_eq!(options.hint(Site::CloseOk), Hint::Unlikely);
        assert_eq!(options.hint(Site::PollFdNegative), Hint::Unlikely);
        assert_eq!(options.hint(Site::FdBelowMax), Hint::Likely);
    }

    #[test]
    fn layouts_fit_where_the_report_goes() {
        let table = Options::default();
        assert_eq!(
            table.layout(Width::Terminal(80)).columns,
            Columns::Terminal(80)
        );
        assert_eq!(table.layout(Width::Unbounded).columns, Columns::Every);
        let markdown = Options {
            format: Format::Markdown,
            ..Options::default()
        };
        assert_eq!(
            markdown.layout(Width::Unbounded).columns,
            Columns::ConditionsBelow
        );
        let wide = Options {
            format: Format::Markdown,
            wide: true,
            per_process: true,
            ..Options::default()
        };
        assert_eq!(
            wide.layout(Width::Terminal(40)),
            Layout {
                per_process: true,
                columns: Columns::Every,
            }
        );
    }
}
