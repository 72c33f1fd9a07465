//! Reading hints from a kernel source tree. A site (or any catalogued branch) is anchored
//! on its code: the first condition written as one of its fragments, in its function, or
//! anywhere in its file when a release moved the code; the hint call around that condition
//! (or, for a call of a helper such as `fd_empty()`, the one the helper returns) is the
//! tree's hint. `auditor sites --kernel-src` shows it per site; `auditor hints` lists every
//! hint of the followed files and what the auditor knows of each.

mod hints;

mod source;
mod unmeasured;

use std::{collections::BTreeMap, path::Path};

use serde::Serialize;

use auditor_common::{
    Site,
    catalogue::{Fragment, Hint, SITES, SiteInfo},
};

pub use hints::{HintRow, HintStatus, Hints, Missing, hints};
use source::{SourceFile, fold};

/// What a tree says about one site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TreeHint {
    /// The branch was found with this hint (for the site's taken arm), written at
    /// `file:line` (the helper's line when a helper carries it), in `function`.
    Found {
        hint: Hint,
        file: String,
        line: usize,
        function: String,
    },
    NotFound {
        why: String,
    },
}

impl TreeHint {
    /// The hint found, when the branch was.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            TreeHint::Found { hint, .. } => Some(*hint),
            TreeHint::NotFound { .. } => None,
        }
    }
}

/// Where a branch is, in the words of a tree: its file, the function it is in (in the
/// releases the auditor was written against) and how releases write its condition.
#[derive(Clone, Copy)]
pub(crate) struct Anchor<'a> {
    pub file: &'a str,
    pub function: &'a str,
    pub fragments: &'a [Fragment],
}

impl<'a> From<&'a SiteInfo> for Anchor<'a> {
    fn from(site: &'a SiteInfo) -> Anchor<'a> {
        Anchor {
            file: site.file,
            function: site.function,
            fragments: site.source,
        }
    }
}

/// A branch found in a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    /// The hint for the branch's arm (negated fragments turned around).
    pub hint: Hint,
    /// The hint call itself, when there is one: file and offset of its name.
    pub call: Option<(String, usize)>,
    pub file: String,
    pub line: usize,
    pub function: String,
}

/// A kernel tree's files, each read once.
pub struct Tree<'a> {
    root: &'a Path,
    files: BTreeMap<String, Result<SourceFile, String>>,
}

impl<'a> Tree<'a> {
    pub fn new(root: &'a Path) -> Tree<'a> {
        Tree {
            root,
            files: BTreeMap::new(),
        }
    }

    /// Reads `file` and the files a helper may be defined in.
    fn load(&mut self, file: &str) {
        for file in std::iter::once(file).chain(hints::FOLLOWED) {
            self.read(file);
        }
    }

    fn read(&mut self, file: &str) {
        if !self.files.contains_key(file) {
            let path = self.root.join(file);
            let read = std::fs::read_to_string(&path)
                .map(|text| SourceFile::parse(&text))
                .map_err(|error| format!("cannot read {}: {error}", path.display()));
            self.files.insert(file.to_string(), read);
        }
    }

    fn file(&self, file: &str) -> Result<&SourceFile, String> {
        match self.files.get(file) {
            Some(read) => read.as_ref().map_err(Clone::clone),
            None => Err(format!("{file} was not read")),
        }
    }

    /// The hint `self` carries for `site`.
    pub fn site_hint(&mut self, site: &SiteInfo) -> TreeHint {
        self.load(site.file);
        match self.locate(site.into()) {
            Ok(found) => TreeHint::Found {
                hint: found.hint,
                file: found.file,
                line: found.line,
                function: found.function,
            },
            Err(why) => TreeHint::NotFound { why },
        }
    }

    /// Finds `anchor`'s branch (its file loaded): in its function first, else anywhere in
    /// its file.
    pub(crate) fn locate(&self, anchor: Anchor) -> Result<Located, String> {
        let source = self.file(anchor.file)?;
        let function = source.definition(anchor.function).map(|d| d.body.clone());
        let in_function = function
            .clone()
            .and_then(|body| find(source, anchor, body, |_| true));
        let (start, end, negated) = in_function
            .or_else(|| {
                // Elsewhere in the file, only a hint that no other branch claims in its own
                // function: one that moved with its code, not the same words in another
                // test.
                let claimed: Vec<usize> = anchors()
                    .filter(|other| other.file == anchor.file)
                    .filter_map(|other| {
                        let body = source.definition(other.function)?.body.clone();
                        let (start, end, _) = find(source, other, body, |_| true)?;
                        Some(source.hint_at(start..end)?.at)
                    })
                    .collect();
                find(source, anchor, 0..source.text.len(), |call| {
                    call.is_some_and(|call| !claimed.contains(&call.at))
                })
            })
            .ok_or_else(|| match function {
                None => format!("no definition of {} in {}", anchor.function, anchor.file),
                Some(_) => format!(
                    "no condition written as {} in {}",
                    anchor
                        .fragments
                        .iter()
                        .map(|f| format!("`{}`", f.text))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    anchor.file
                ),
            })?;
        let function = source
            .enclosing(start)
            .map_or_else(|| "(file scope)".to_string(), |d| d.name.clone());
        let (hint, call, line) = match source.hint_at(start..end) {
            Some(call) => (
                call.hint,
                Some((anchor.file.to_string(), call.at)),
                source.line(call.at),
            ),
            None => match self.helper_hint(anchor.file, &source.text[start..end]) {
                Some((file, helper, call)) => {
                    (call.hint, Some((file, call.at)), helper.line(call.at))
                }
                None => (Hint::None, None, source.line(start)),
            },
        };
        Ok(Located {
            hint: if negated { hint.opposite() } else { hint },
            file: call
                .as_ref()
                .map_or_else(|| anchor.file.to_string(), |(file, _)| file.clone()),
            call,
            line,
            function,
        })
    }

    /// For a condition that calls a helper (`fd_empty(f)`): the hint the helper's one
    /// statement, `return likely(...)` or `return unlikely(...)`, carries — looked for in
    /// `file`, then in the other followed files.
    fn helper_hint(
        &self,
        file: &str,
        condition: &str,
    ) -> Option<(String, &SourceFile, &source::HintCall)> {
        let name_len = condition
            .bytes()
            .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_')
            .count();
        if name_len == 0 || !condition[name_len..].trim_start().starts_with('(') {
            return None;
        }
        let name = &condition[..name_len];
        std::iter::once(file)
            .chain(hints::FOLLOWED)
            .find_map(|candidate| {
                let source = self.file(candidate).ok()?;
                let body = &source.definition(name)?.body;
                let statement = fold(&source.text[body.clone()]).text;
                let returned = statement.strip_prefix("{ return ")?.strip_suffix("; }")?;
                let call = source.hint_at(body.clone())?;
                (returned.starts_with("likely(") || returned.starts_with("unlikely("))
                    .then(|| (candidate.to_string(), source, call))
            })
    }
}

/// Every branch the auditor anchors in trees: the catalogue's sites and the classified
/// hints.
fn anchors() -> impl Iterator<Item = Anchor<'static>> {
    SITES
        .iter()
        .map(|&site| Anchor::from(site))
        .chain(unmeasured::UNMEASURED.iter().map(Anchor::from))
}

/// The first place in `scope` of `source` where one of `anchor`'s fragments is written
/// and `accept` takes the hint call stating it (or its absence): start, end, negated.
fn find(
    source: &SourceFile,
    anchor: Anchor,
    scope: std::ops::Range<usize>,
    accept: impl Fn(Option<&source::HintCall>) -> bool,
) -> Option<(usize, usize, bool)> {
    let folded = fold(&source.text[scope.clone()]);
    anchor.fragments.iter().find_map(|fragment| {
        let wanted = fold(fragment.text).text;
        folded.text.match_indices(&wanted).find_map(|(at, _)| {
            let start = scope.start + folded.offsets[at];
            let end = scope.start + folded.offsets[at + wanted.len() - 1] + 1;
            accept(source.hint_at(start..end)).then_some((start, end, fragment.negated))
        })
    })
}

/// The hint `tree` carries for `site`.
pub fn tree_hint(tree: &Path, site: &SiteInfo) -> TreeHint {
    Tree::new(tree).site_hint(site)
}

/// A kernel tree given to judge a report by (`--kernel-src`): where it is, its release,
/// and what it says about every site, read once before a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeHints {
    pub tree: KernelTree,
    /// Every site's hint in the tree, in catalogue order.
    pub sites: Vec<(Site, TreeHint)>,
}

/// A kernel source tree, as a report names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct KernelTree {
    /// The directory, as given.
    pub path: String,
    /// The release its top Makefile states (`7.2.0`), when it states one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

impl KernelTree {
    /// `target/kernel-src/linux-source-7.2 (7.2.0)`.
    pub fn name(&self) -> String {
        match &self.release {
            Some(release) => format!("{} (Linux {release})", self.path),
            None => self.path.clone(),
        }
    }
}

/// Why a directory cannot be read as a kernel tree.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0} is not a kernel source tree (it has no fs/ directory)")]
pub struct NotATree(pub String);

/// Refuses a directory that is not a kernel tree.
pub fn check_tree(root: &Path) -> Result<(), NotATree> {
    if root.join("fs").is_dir() {
        Ok(())
    } else {
        Err(NotATree(root.display().to_string()))
    }
}

impl TreeHints {
    /// What the tree at `root` says about every site.
    pub fn read(root: &Path) -> Result<TreeHints, NotATree> {
        check_tree(root)?;
        let mut tree = Tree::new(root);
        let sites = SITES
            .iter()
            .map(|info| (info.site, tree.site_hint(info)))
            .collect();
        Ok(TreeHints {
            tree: KernelTree {
                path: root.display().to_string(),
                release: std::fs::read_to_string(root.join("Makefile"))
                    .ok()
                    .and_then(|text| makefile_release(&text)),
            },
            sites,
        })
    }

    /// What the tree says about `site`.
    pub fn site(&self, site: Site) -> Option<&TreeHint> {
        self.sites.iter().find(|(s, _)| *s == site).map(|(_, h)| h)
    }

    /// The hint the tree carries at `site`, when it was found there.
    pub fn hint(&self, site: Site) -> Option<Hint> {
        self.site(site)?.hint()
    }
}

/// `VERSION = 7`, `PATCHLEVEL = 2`, `SUBLEVEL = 0` of a top Makefile: `7.2.0`.
fn makefile_release(makefile: &str) -> Option<String> {
    let field = |name: &str| {
        makefile.lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let parts = [field("VERSION")?, field("PATCHLEVEL")?, field("SUBLEVEL")?];
    parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .then(|| parts.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let TreeHint::Found {
                hint: found,
                line: found_line,
                function,
                ..
            } = hint(dir.path(), site)
            else {
                panic!("{site:?} not found");
            };
            assert_eq!((found, found_line), (hint_written, line), "{site:?}");
            assert_eq!(function, site.info().function, "{site:?}");
        }
    }

    #[test]
    fn a_tree_read_for_a_report() {
        let dir = tree();
        std::fs::write(
            dir.path().join("Makefile"),
            "# SPDX\nVERSION = 7\nPATCHLEVEL = 2\nSUBLEVEL = 0\nEXTRAVERSION =\n",
        )
        .unwrap();
        let hints = TreeHints::read(dir.path()).unwrap();
        assert_eq!(hints.tree.release.as_deref(), Some("7.2.0"));
        assert_eq!(hints.sites.len(), SITES.len());
        assert_eq!(hints.hint(Site::PollFdNegative), Some(Hint::None));
        assert_eq!(hints.hint(Site::CloseOk), Some(Hint::Likely));
        assert_eq!(hints.hint(Site::EpollBadArgs), None);
        assert!(hints.tree.name().ends_with("(Linux 7.2.0)"));
        // No Makefile, or one without a release: the path alone.
        std::fs::write(dir.path().join("Makefile"), "VERSION = 7\n").unwrap();
        assert_eq!(TreeHints::read(dir.path()).unwrap().tree.release, None);
        let empty = tempfile::tempdir().unwrap();
        assert!(
            TreeHints::read(empty.path())
                .unwrap_err()
                .to_string()
                .ends_with("is not a kernel source tree (it has no fs/ directory)")
        );
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
        let file = SourceFile::parse("if (unlikely(x)) y; if (likely(a) && b); if (my_likely(c));");
        let hint = |at: usize| file.hint_at(at..at + 1).map(|call| call.hint);
        assert_eq!(hint(13), Some(Hint::Unlikely));
        assert_eq!(hint(37), None);
        assert_eq!(hint(55), None);
    }

    #[test]
    fn code_that_moved_and_hints_in_helpers_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("fs")).unwrap();
        std::fs::create_dir_all(root.join("include/linux")).unwrap();
        std::fs::write(
            root.join("include/linux/file.h"),
            "static inline bool fd_empty(struct fd f)\n{\n\treturn unlikely(!f.word);\n}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("fs/select.c"),
            "static inline __poll_t do_pollfd(struct pollfd *pollfd)\n{\n\
             \tif (unlikely(fd < 0))\n\t\treturn 0;\n\tCLASS(fd, f)(fd);\n\
             \tif (fd_empty(f))\n\t\treturn EPOLLNVAL;\n}\n",
        )
        .unwrap();
        // The epoll test moved out of do_epoll_wait into a helper of its own, hint and all;
        // the same words unhinted elsewhere are not taken for it.
        std::fs::write(
            root.join("fs/eventpoll.c"),
            "static int ep_other(int maxevents)\n{\n\treturn maxevents <= 0;\n}\n\
             static int ep_check_params(struct file *file, int maxevents)\n{\n\
             \tif (unlikely(maxevents <= 0 || maxevents > EP_MAX_EVENTS))\n\t\treturn -EINVAL;\n}\n",
        )
        .unwrap();
        let mut tree = Tree::new(root);
        assert_eq!(
            tree.site_hint(Site::PollFdNotOpen.info()),
            TreeHint::Found {
                hint: Hint::Unlikely,
                file: "include/linux/file.h".to_string(),
                line: 3,
                function: "do_pollfd".to_string(),
            }
        );
        assert_eq!(
            tree.site_hint(Site::EpollBadArgs.info()),
            TreeHint::Found {
                hint: Hint::Unlikely,
                file: "fs/eventpoll.c".to_string(),
                line: 7,
                function: "ep_check_params".to_string(),
            }
        );
        std::fs::write(
            root.join("fs/eventpoll.c"),
            "static int ep_other(int maxevents)\n{\n\treturn maxevents <= 0;\n}\n",
        )
        .unwrap();
        assert!(matches!(
            Tree::new(root).site_hint(Site::EpollBadArgs.info()),
            TreeHint::NotFound { why } if why.contains("no definition of do_epoll_wait")
        ));
    }
}
