//! Workloads: small programs that issue an exactly known sequence of syscalls, and the
//! counts each site must show for them. The bundled `auditor-workload` binary runs them;
//! `auditor trace` with no target runs [`DEFAULT`]; tests use them to check exact counts.
//!
//! A workload is a list of steps, `kind:FIELD:…`. How each kind is written and what it
//! does is declared once, in its family's `FORMS` (`steps/`) and [`PLACES`]: parsing
//! checks a step's fields against its form and names them from it, and [`grammar`] makes
//! the list `auditor-workload --help` prints and docs/guide.md shows (checked by a test).
//!
//! The fds it uses are laid out by [`Layout`], the same for every run of the same steps.

pub mod cases;
mod drive;
mod expected;
mod run;
pub mod steps;

use std::{fmt, str::FromStr};

use thiserror::Error;

pub use drive::{expected, expected_on_table, run};
pub use expected::{DEFAULT_NR_OPEN, Expected, Prepared};
pub use run::RunError;
use steps::{
    Family, Form, alloc::Alloc, chmod::Chmod, close::Close, dup::Dup, epoll::Epoll, poll::Poll,
    select::Select, task::Task,
};

/// The default workload: the microbenchmarks of the patches that added the two hints —
/// select of 1000 fds and poll of 1024 fds, zero timeout, through both syscalls of each
/// family — plus calls that take the rare arms: select with n = -1, and pollfd entries
/// with fd = -1 (1 in 16).
pub const DEFAULT: &str = "select:1000:1000 pselect6:1000:1000 select:10:-1 pselect6:10:-1 \
                           poll:1000:1024:0 ppoll:1000:1024:0 poll:100:1024:64";

/// Named workloads `--workload` accepts besides a step list.
pub fn named(name: &str) -> Option<&'static str> {
    match name {
        "default" => Some(DEFAULT),
        _ => None,
    }
}

/// One step of a workload: a family's (see [`steps`]), or one that says where the steps
/// after it run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Select(Select),
    Poll(Poll),
    Epoll(Epoll),
    Close(Close),
    Alloc(Alloc),
    Dup(Dup),
    Chmod(Chmod),
    Task(Task),
    /// The steps after it run in a child process, which the parent waits for.
    Fork,
    /// The steps after it run in a new thread, which the main thread joins.
    Thread,
    /// The steps after it run in a new thread, and the main thread exits by itself.
    LeaderExit,
}

/// `$body` for the family step in `$step` (bound to `$family`), None for a step that says
/// where the rest runs.
macro_rules! in_family {
    ($step:expr, $family:ident => $body:expr) => {
        match $step {
            Step::Select($family) => Some($body),
            Step::Poll($family) => Some($body),
            Step::Epoll($family) => Some($body),
            Step::Close($family) => Some($body),
            Step::Alloc($family) => Some($body),
            Step::Dup($family) => Some($body),
            Step::Chmod($family) => Some($body),
            Step::Task($family) => Some($body),
            Step::Fork | Step::Thread | Step::LeaderExit => None,
        }
    };
}
use in_family;

/// Each family's parser, as a step of the workload.
type Parser = fn(&str, &Fields) -> Result<Option<Step>, StepError>;

const FAMILIES: [Parser; 8] = [
    |kind, f| Ok(Select::parse(kind, f)?.map(Step::Select)),
    |kind, f| Ok(Poll::parse(kind, f)?.map(Step::Poll)),
    |kind, f| Ok(Epoll::parse(kind, f)?.map(Step::Epoll)),
    |kind, f| Ok(Close::parse(kind, f)?.map(Step::Close)),
    |kind, f| Ok(Alloc::parse(kind, f)?.map(Step::Alloc)),
    |kind, f| Ok(Dup::parse(kind, f)?.map(Step::Dup)),
    |kind, f| Ok(Chmod::parse(kind, f)?.map(Step::Chmod)),
    |kind, f| Ok(Task::parse(kind, f)?.map(Step::Task)),
];

#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad workload step `{step}`: {why} (`auditor-workload --help` lists the steps)")]
pub struct StepError {
    step: String,
    why: String,
}

/// The `:`-separated fields of one step, read in order, named by its [`Form`].
struct Fields<'a> {
    step: &'a str,
    fields: Vec<&'a str>,
    names: Vec<&'static str>,
}

impl Fields<'_> {
    fn error(&self, why: impl Into<String>) -> StepError {
        StepError {
            step: self.step.to_string(),
            why: why.into(),
        }
    }

    /// Field `index` as a number, `default` where an optional one is left out.
    fn number<T: FromStr>(&self, index: usize, default: Option<T>) -> Result<T, StepError> {
        let name = self.names.get(index).copied().unwrap_or("a field");
        match (self.fields.get(index), default) {
            (Some(text), _) => text
                .parse()
                .map_err(|_| self.error(format!("{name} `{text}` is not a number in range"))),
            (None, Some(default)) => Ok(default),
            (None, None) => Err(self.error(format!("{name} is missing"))),
        }
    }
}

/// The steps that say where the steps after them run.
const PLACES: &[Form] = &[
    Form {
        kinds: &["fork"],
        fields: "",
        does: "the steps after it run in a child process, which the parent waits for",
    },
    Form {
        kinds: &["thread"],
        fields: "",
        does: "the steps after it run in a new thread, which the main thread joins",
    },
    Form {
        kinds: &["leader-exit"],
        fields: "",
        does: "the steps after it run in a new thread, and the main thread exits by itself \
               (the process lives on in that thread, and ends when it does); the fd table is \
               shared until the main thread is gone: a `wait` right after it makes that certain",
    },
];

/// Every form a step is written in: the families' and [`PLACES`].
pub fn forms() -> impl Iterator<Item = &'static Form> {
    steps::FORMS.into_iter().flatten().chain(PLACES)
}

/// The steps, a line each (`kind:FIELDS: what it does`), for `--help` and the guide.
pub fn grammar() -> String {
    forms()
        .map(|form| format!("- {}: {}.\n", form.written(), form.does))
        .collect()
}

impl FromStr for Step {
    type Err = StepError;

    fn from_str(text: &str) -> Result<Step, StepError> {
        let mut parts = text.split(':');
        let kind = parts.next().unwrap_or_default();
        let fields: Vec<&str> = parts.collect();
        let unnamed = Fields {
            step: text,
            fields: fields.clone(),
            names: Vec::new(),
        };
        let form = forms()
            .find(|form| form.kinds.contains(&kind))
            .ok_or_else(|| unnamed.error("unknown step"))?;
        let (names, required) = form.names();
        let f = Fields { names, ..unnamed };
        if let Some(missing) = f
            .names
            .get(f.fields.len())
            .filter(|_| f.fields.len() < required)
        {
            return Err(f.error(format!("{missing} is missing")));
        }
        if f.fields.len() > f.names.len() {
            return Err(f.error("too many fields"));
        }
        for parse in FAMILIES {
            if let Some(step) = parse(kind, &f)? {
                return Ok(step);
            }
        }
        match kind {
            "fork" => Ok(Step::Fork),
            "thread" => Ok(Step::Thread),
            "leader-exit" => Ok(Step::LeaderExit),
            _ => unreachable!("a form no family parses: {kind}"),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Fork => f.write_str("fork"),
            Step::Thread => f.write_str("thread"),
            Step::LeaderExit => f.write_str("leader-exit"),
            step => in_family!(step, family => family.fmt(f)).unwrap_or(Ok(())),
        }
    }
}

/// The fds a workload holds: 3..=`highest_pool_fd` on /dev/null, then, when a step waits
/// on epoll, an eventfd and an epoll fd just above them; fds 0-2 are inherited and any
/// other inherited fd is closed. The search for a free fd then starts right above them
/// (`next_fd` is `not_open()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub highest_pool_fd: i32,
    pub epoll: bool,
}

impl Layout {
    pub fn of(steps: &[Step]) -> Layout {
        let needed = steps.iter().map(|step| match step {
            Step::Select(select) => select.fds_named(),
            _ => 0,
        });
        Layout {
            // Poll entries cycle through at least 62 fds.
            highest_pool_fd: needed.max().unwrap_or(0).max(64),
            epoll: steps
                .iter()
                .any(|s| matches!(s, Step::Epoll(epoll) if epoll.needs_epoll_fd())),
        }
    }

    pub fn highest_fd(&self) -> i32 {
        self.highest_pool_fd + if self.epoll { 2 } else { 0 }
    }

    /// The first fd number that is not open.
    pub fn not_open(&self) -> i32 {
        self.highest_fd() + 1
    }

    /// `max_fds` of the fd table: it starts at 64 and grows to the smallest power of two
    /// above the highest fd.
    pub fn max_fds(&self) -> u32 {
        (self.highest_fd() as u32 + 1).next_power_of_two().max(64)
    }
}

/// Parses a workload: a name from [`named`] or steps separated by white space.
pub fn parse(spec: &str) -> Result<Vec<Step>, StepError> {
    named(spec)
        .unwrap_or(spec)
        .split_whitespace()
        .map(str::parse)
        .collect()
}

/// The command line that runs workload `spec` with the bundled `auditor-workload`, which
/// is installed beside the `auditor` binary.
pub fn command(spec: &str) -> Result<Vec<std::ffi::OsString>, crate::Error> {
    let steps = parse(spec).map_err(|e| crate::Error::Spawn {
        command: format!("workload {spec}"),
        why: e.to_string(),
    })?;
    let binary = std::env::current_exe()?.with_file_name("auditor-workload");
    if !binary.is_file() {
        return Err(crate::Error::Spawn {
            command: binary.display().to_string(),
            why: "the bundled workload binary is not beside the auditor binary (build the \
                  whole package: `cargo xtask build`)"
                .into(),
        });
    }
    let mut argv = vec![binary.into_os_string()];
    argv.extend(steps.iter().map(|s| s.to_string().into()));
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip() {
        let text = "select:3:-1 pselect6:2:9:5 select:1:5000:0:100 select-sparse:2:300 select-efault:1:4 select-ebadf:2 poll:1:8:2 \
                    ppoll:2:40:1:3 poll:1:4:0:0:-1 poll-efault:1:7 poll-einval:2 \
                    epoll_wait:2:8 epoll_pwait:1:0:-1 epoll_pwait2:3:4:10 epoll-ebadf:1 epoll_ctl:2 epoll-paths:3 \
                    close:3:1 open:2 open-enoent:1 open-emfile:2 open-badflags:1 openat2:2:24 openat2-badmode:1 accept-eagain:2 pipe:2 socketpair:1 dup:3 dupfd:2:100 dupfd-emfile:1:2000 close-fd:70 opath:2 read-closed:1 read:2 dup2:3:1 dup3:4:1:2 dup2-closed:2 dup2-emfile:1:2000000 chmod:2 fchmodat2:3:1 memfd_create:2 signalfd4:1 inotify_init:1 fork thread wait \
                    sleep:5";
        let steps = parse(text).unwrap();
        let written: Vec<String> = steps.iter().map(Step::to_string).collect();
        assert_eq!(
            written.join(" "),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        let default: Vec<String> = parse(DEFAULT)
            .unwrap()
            .iter()
            .map(Step::to_string)
            .collect();
        assert_eq!(
            default.join(" "),
            DEFAULT.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    /// Every kind a form declares is parsed by its family, with the fields the form names:
    /// a family that did not parse a declared kind would reach the `unreachable!`, and a
    /// kind no form declares is unknown.
    #[test]
    fn the_forms_are_what_the_families_parse() {
        for form in forms() {
            let (names, required) = form.names();
            for kind in form.kinds {
                let step = |count: usize| {
                    std::iter::once(kind.to_string())
                        .chain(std::iter::repeat_n("1".to_string(), count))
                        .collect::<Vec<_>>()
                        .join(":")
                };
                // The values may be refused (a form says nothing of their range), never
                // the kind or the count of fields.
                if let Err(error) = step(required).parse::<Step>() {
                    let why = error.to_string();
                    assert!(
                        !why.contains("unknown step") && !why.contains("missing"),
                        "{why}"
                    );
                }
                let too_many = step(names.len() + 1).parse::<Step>().unwrap_err();
                assert!(too_many.to_string().contains("too many fields"), "{kind}");
                if required > 0 {
                    let missing = step(required - 1).parse::<Step>().unwrap_err();
                    let name = names[required - 1];
                    assert!(
                        missing.to_string().contains(&format!("{name} is missing")),
                        "{missing}"
                    );
                }
            }
        }
        let kinds: Vec<&str> = forms()
            .flat_map(|form| form.kinds.iter().copied())
            .collect();
        let mut unique = kinds.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), kinds.len(), "a kind has two forms");
        assert!(grammar().contains(
            "- `poll:CALLS:NFDS:NEGATIVE[:NOTOPEN[:TIMEOUT_MS]]`, `ppoll:…`: calls of NFDS"
        ));
    }

    #[test]
    fn bad_steps_are_named() {
        let error = parse("poll:1:2:3").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`poll:1:2:3`: NEGATIVE and NOTOPEN"),
            "{error}"
        );
        let error = parse("select:x:1").unwrap_err();
        assert!(error.to_string().contains("CALLS `x`"), "{error}");
        assert!(
            parse("spin:1")
                .unwrap_err()
                .to_string()
                .contains("unknown step")
        );
        assert!(
            parse("fork:1")
                .unwrap_err()
                .to_string()
                .contains("too many fields")
        );
        assert!(
            parse("close:1")
                .unwrap_err()
                .to_string()
                .contains("BAD is missing")
        );
    }
}
