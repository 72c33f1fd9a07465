//! Decoding strace's rendering of arguments into the model's call records
//! (`auditor_common`'s `SelectCall`, `PollCall`, ...): pollfd arrays (with revents from the
//! decoded return), timeouts, signal masks, dup's fds and flags. What strace did not print
//! (an address instead of a value, an array cut with `...`) is decoded as unknown, never
//! guessed.

use auditor_common::{
    Syscall,
    addfd::{self, AddFdCall, NotifAddFd},
    dup::DupCall,
    epoll::{EpollCtlCall, EpollWaitCall},
    errno, fd,
    open::{self, OpenHow},
    poll::{EntryScan, PollCall, PollFd},
    prelude::{Prelude, SIGSET_SIZE, Timeout},
    select::SelectCall,
    syscalls::{self, Family},
};

use super::{line, records::Record, structure};

/// Why a call's line cannot be decoded into a call record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Undecodable {
    #[error("it has no {0} argument")]
    Missing(&'static str),
    #[error("its {what} `{text}` is not a number in range")]
    Number { what: &'static str, text: String },
    #[error("its nfds is {nfds} but {printed} pollfd entries are printed")]
    Nfds { nfds: u32, printed: usize },
    #[error("the revents printed after its return cannot be read")]
    Revents,
    #[error("it did not return in the log, and {0}")]
    NoReturn(&'static str),
}

/// Argument `what`, which must be there.
fn arg<'a>(arg: Option<&'a str>, what: &'static str) -> Result<&'a str, Undecodable> {
    arg.ok_or(Undecodable::Missing(what))
}

/// Argument `what` as a number.
fn number<T: std::str::FromStr>(text: Option<&str>, what: &'static str) -> Result<T, Undecodable> {
    let text = arg(text, what)?;
    text.parse().map_err(|_| Undecodable::Number {
        what,
        text: text.to_string(),
    })
}

/// A call the log shows no end of (its task was killed inside it, or strace detached) is
/// taken as waiting in the kernel when its `timeout` let it wait: it then passed the checks
/// that fail at once and scanned its fds once, with results (revents) the log does not
/// show. A call that could not wait may not have run at all.
fn could_wait(timeout: Timeout) -> Result<(), Undecodable> {
    match timeout {
        Timeout::Zero | Timeout::Invalid => Err(Undecodable::NoReturn(
            "its timeout let it not wait: whether the kernel ran it is unknown",
        )),
        Timeout::Unreadable => Err(Undecodable::NoReturn("its timeout is unreadable")),
        _ => Ok(()),
    }
}

/// The top-level, comma-separated parts of an argument list (brackets and strings kept).
pub fn split_args(args: &str) -> impl Iterator<Item = &str> {
    let mut delimiters = structure::delimiters(args);
    let (mut depth, mut start) = (0usize, Some(0));
    std::iter::from_fn(move || {
        let from = start?;
        for (at, byte) in delimiters.by_ref() {
            match byte {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                _ if depth == 0 => {
                    start = Some(at + 1);
                    return Some(args[from..at].trim_ascii());
                }
                _ => {}
            }
        }
        start = None;
        let last = args.get(from..).unwrap_or("").trim_ascii();
        (!last.is_empty()).then_some(last)
    })
}

/// The first `N` arguments (None past the last).
fn first_args<const N: usize>(args: &str) -> [Option<&str>; N] {
    let mut parts = split_args(args);
    std::array::from_fn(|_| parts.next())
}

/// The kernel's return value: strace prints `-1 EINVAL` for -EINVAL and `? ERESTARTNOHAND`
/// for the restart codes; None if the return is unknown.
pub fn kernel_return(record: &Record<&str>) -> Option<i64> {
    match (record.ret, record.errno) {
        (Some(value), None) => Some(value),
        (_, Some(name)) => errno_value(name).map(|e| -e),
        (None, None) => None,
    }
}

fn errno_value(name: &str) -> Option<i64> {
    Some(match name {
        "EPERM" => errno::EPERM,
        "ENOENT" => errno::ENOENT,
        "EACCES" => errno::EACCES,
        "ESRCH" => errno::ESRCH,
        "EINTR" => errno::EINTR,
        "EBADF" => errno::EBADF,
        "EBUSY" => errno::EBUSY,
        "ENFILE" => errno::ENFILE,
        "ENAMETOOLONG" => errno::ENAMETOOLONG,
        "ENOMEM" => errno::ENOMEM,
        "EFAULT" => errno::EFAULT,
        "EINVAL" => errno::EINVAL,
        "ENOSPC" => errno::ENOSPC,
        "EMFILE" => errno::EMFILE,
        "ERESTARTSYS" => errno::ERESTARTSYS,
        "ERESTARTNOINTR" => errno::ERESTARTNOINTR,
        "ERESTARTNOHAND" => errno::ERESTARTNOHAND,
        "ERESTART_RESTARTBLOCK" => errno::ERESTART_RESTARTBLOCK,
        // Any other failure: none of the branches tells it from another errno.
        _ => 4095,
    })
}

/// `{key1=value, key2=value}` → the value of `key`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let inner = text.trim_ascii().strip_prefix('{')?.strip_suffix('}')?;
    split_args(inner).find_map(|part| part.strip_prefix(key)?.strip_prefix('='))
}

/// The names in a `flags=A|B|C` argument or field (clone, clone3); none if it has none.
pub fn flags(args: &str) -> impl Iterator<Item = &str> {
    let value = memchr::memmem::find(args.as_bytes(), b"flags=").map_or("", |at| &args[at + 6..]);
    let end = value
        .bytes()
        .position(|b| matches!(b, b',' | b'}' | b')'))
        .unwrap_or(value.len());
    value[..end].split('|').map(str::trim_ascii)
}

/// An fd as strace prints it, `3` or `3</dev/null>`.
pub fn fd(text: &str) -> Option<i32> {
    let end = text.bytes().position(|b| b == b'<').unwrap_or(text.len());
    line::integer(text[..end].trim_ascii())
}

/// `{tv_sec=0, tv_nsec=0}` (or tv_usec, for `timeval`), `NULL`, or an address.
fn timeout(text: &str, timeval: bool) -> Timeout {
    if text == "NULL" {
        return Timeout::Infinite;
    }
    let sec = field(text, "tv_sec").and_then(|v| v.parse::<i64>().ok());
    let fraction = field(text, if timeval { "tv_usec" } else { "tv_nsec" })
        .and_then(|v| v.parse::<i64>().ok());
    match (sec, fraction) {
        (Some(sec), Some(fraction)) if timeval => Timeout::from_timeval(sec, fraction),
        (Some(sec), Some(fraction)) => Timeout::from_timespec(sec, fraction),
        _ => Timeout::Unreadable,
    }
}

/// A signal mask argument: `NULL`, `[SIGINT]`/`~[...]` (read), or an address (unknown).
fn sigmask(set: &str, size: Option<u64>) -> Prelude {
    let readable = set.starts_with('[') || set.starts_with("~[");
    let address = if set == "NULL" { 0 } else { 1 };
    match size {
        Some(size) => Prelude::sigmask(address, size, readable),
        None if address == 0 => Prelude::Passes,
        None => Prelude::Unknown,
    }
}

/// `[{fd=3, events=POLLIN}, {fd=-1}]`; None if it is an address or was cut short.
fn pollfds(text: &str) -> Option<Vec<PollFd>> {
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    // An entry `...` (the array was cut short) has no fd: the whole array is None.
    split_args(inner)
        .map(|entry| {
            Some(PollFd {
                fd: fd(field(entry, "fd")?)?,
                events: 0,
                revents: 0,
            })
        })
        .collect()
}

/// A pollfd array at the start of `args` printed as `strace -v` prints a plain one, every
/// entry `{fd=N}` or `{fd=N, events=NAMES}` and `, ` between them, followed by the next
/// argument's comma: its entries, and the arguments after it. None for any other shape
/// (a path after the fd, a comment, an array cut short): [`pollfds`] decides those, and
/// gives the same entries for every array this accepts.
fn plain_pollfds(args: &str) -> Option<(Vec<PollFd>, &str)> {
    let bytes = args.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    // Some 22 bytes an entry: one allocation for most arrays.
    let mut entries = Vec::with_capacity(args.len() / 20);
    let mut at = 1;
    // The last entry's events and its `}`: programs mostly poll every fd for the same
    // events, and a name compared whole costs less than one read a byte at a time.
    let mut last_events = Window::default();
    if bytes.get(at) != Some(&b']') {
        loop {
            if !bytes[at..].starts_with(b"{fd=") {
                return None;
            }
            let (fd, end) = plain_fd(bytes, at + 4)?;
            at = end;
            if bytes[at..].starts_with(b", events=") {
                at += 9;
                if let Some(length) = last_events.starts(bytes, at) {
                    at += length - 1;
                } else {
                    let start = at;
                    at = flag_names_end(bytes, at);
                    last_events = Window::of(bytes.get(start..=at).unwrap_or(&[]));
                }
            }
            if bytes.get(at) != Some(&b'}') {
                return None;
            }
            at += 1;
            entries.push(PollFd {
                fd,
                events: 0,
                revents: 0,
            });
            match bytes.get(at..at + 2)? {
                b", " => at += 2,
                [b']', _] => break,
                _ => return None,
            }
        }
    }
    // Past the `]`: the next argument's comma.
    let rest = args.get(at + 1..)?.strip_prefix(',')?;
    Some((entries, rest))
}

/// Up to 16 bytes, compared with the text at an offset in two loads rather than a call of
/// `memcmp` (what `starts_with` of a slice of unknown length becomes).
#[derive(Default)]
struct Window {
    bytes: u128,
    mask: u128,
    length: usize,
}

impl Window {
    /// `text` if it is 1 to 16 bytes long; else the empty window, which starts nothing.
    fn of(text: &[u8]) -> Window {
        let mut padded = [0; 16];
        match padded.get_mut(..text.len()) {
            Some(head) if !text.is_empty() => {
                head.copy_from_slice(text);
                Window {
                    bytes: u128::from_le_bytes(padded),
                    mask: u128::MAX >> (8 * (16 - text.len())),
                    length: text.len(),
                }
            }
            _ => Window::default(),
        }
    }

    /// The window's length if `text` holds it at `at`.
    #[inline(always)]
    fn starts(&self, text: &[u8], at: usize) -> Option<usize> {
        let window = text.get(at..)?.first_chunk::<16>()?;
        (self.length > 0 && u128::from_le_bytes(*window) & self.mask == self.bytes)
            .then_some(self.length)
    }
}

/// The offset past the flag names at `at`, `POLLIN|POLLPRI` as strace prints them plainly
/// (an unknown bit's `0x8000 /* POLL??? */` stops at its space).
fn flag_names_end(bytes: &[u8], at: usize) -> usize {
    at + bytes[at..]
        .iter()
        .take_while(|&&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'|')
        .count()
}

/// The fd printed plainly at `at` (`-` and at most 10 digits) and the offset past it; None
/// for anything else, which the general parse decides.
#[inline(always)]
fn plain_fd(bytes: &[u8], mut at: usize) -> Option<(i32, usize)> {
    let negative = bytes.get(at) == Some(&b'-');
    at += usize::from(negative);
    let start = at;
    let mut value: i64 = 0;
    while let Some(digit) = bytes.get(at).map(|b| b.wrapping_sub(b'0')) {
        if digit > 9 {
            break;
        }
        value = value * 10 + i64::from(digit);
        at += 1;
        if at - start > 10 {
            return None;
        }
    }
    if at == start {
        return None;
    }
    let fd = i32::try_from(if negative { -value } else { value }).ok()?;
    Some((fd, at))
}

/// The revents strace prints after the return: `([{fd=3, revents=POLLNVAL}, ...])`,
/// only for the entries with any, in array order. strace cuts a long list with `...`:
/// returns how many leading entries' revents are known.
fn apply_revents(entries: &mut [PollFd], detail: &str) -> Option<usize> {
    // The array strace prints first in parentheses; ppoll adds `, left {...}` after it.
    let open = detail.find("([")? + 1;
    let returned = plain_returned(&detail[open..]).or_else(|| returned(&detail[open..]))?;
    let mut returned = returned.into_iter().peekable();
    let mut known = entries.len();
    for (index, entry) in entries.iter_mut().enumerate() {
        let Some(&next) = returned.peek() else {
            break;
        };
        match next {
            // The list was cut here: the rest is unknown.
            Returned::Cut => {
                known = index;
                break;
            }
            Returned::Entry { fd, not_open } if fd == Some(entry.fd) => {
                entry.revents = if not_open {
                    auditor_common::poll::POLLNVAL
                } else {
                    1
                };
                returned.next();
            }
            Returned::Entry { .. } => {}
        }
    }
    Some(known)
}

/// An entry of the revents list: its fd (None: not a number) and whether its revents hold
/// POLLNVAL; or the `...` strace cut the list with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Returned {
    Entry { fd: Option<i32>, not_open: bool },
    Cut,
}

/// The revents list that starts at `list`'s `[`, however printed; None if it does not end.
fn returned(list: &str) -> Option<Vec<Returned>> {
    let mut depth = 0;
    let close = list.char_indices().find_map(|(i, c)| {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(i)
    })?;
    let entries = split_args(&list[1..close]).map(|entry| {
        if entry == "..." {
            return Returned::Cut;
        }
        Returned::Entry {
            fd: field(entry, "fd").and_then(fd),
            not_open: is_not_open(field(entry, "revents").unwrap_or("")),
        }
    });
    Some(entries.collect())
}

/// Whether the revents names hold POLLNVAL.
fn is_not_open(revents: &str) -> bool {
    revents.split('|').any(|flag| flag == "POLLNVAL")
}

/// The revents list at the start of `list` as strace prints a plain one, every entry
/// `{fd=N, revents=NAMES}`, `, ` between them and maybe a last `...`, in one pass; None for
/// any other shape, which [`returned`] reads, to the same entries for every list this
/// reads.
fn plain_returned(list: &str) -> Option<Vec<Returned>> {
    let bytes = list.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    let mut returned = Vec::new();
    let mut at = 1;
    if bytes.get(at) == Some(&b']') {
        return Some(returned);
    }
    loop {
        if bytes[at..].starts_with(b"...]") {
            returned.push(Returned::Cut);
            return Some(returned);
        }
        if !bytes[at..].starts_with(b"{fd=") {
            return None;
        }
        let (fd, end) = plain_fd(bytes, at + 4)?;
        at = end;
        if !bytes[at..].starts_with(b", revents=") {
            return None;
        }
        at += 10;
        let names = at;
        at = flag_names_end(bytes, at);
        if bytes.get(at) != Some(&b'}') {
            return None;
        }
        returned.push(Returned::Entry {
            fd: Some(fd),
            not_open: is_not_open(&list[names..at]),
        });
        at += 1;
        match bytes.get(at)? {
            b',' if bytes.get(at + 1) == Some(&b' ') => at += 2,
            b']' => return Some(returned),
            _ => return None,
        }
    }
}

/// poll and ppoll: the call, and its entries as the scan left them (None: not printed).
pub fn poll(record: &Record<&str>) -> Result<(PollCall, Option<EntryScan>), Undecodable> {
    // The array read in one pass where strace printed it plainly: a long one is most of
    // the line, and the general split reads it three times over.
    let (plain, [fds, nfds, time, mask, size]) = match plain_pollfds(record.args) {
        Some((entries, rest)) => {
            let [nfds, time, mask, size] = first_args(rest);
            (Some(entries), [None, nfds, time, mask, size])
        }
        None => (None, first_args(record.args)),
    };
    let nfds = number(nfds, "nfds")?;
    let (timeout, prelude) = if record.name == "poll" {
        let millis: i32 = number(time, "timeout")?;
        (Timeout::from_millis(millis), Prelude::Passes)
    } else {
        let timeout = timeout(arg(time, "timeout")?, false);
        let size = size.and_then(|s| s.parse().ok());
        (
            timeout,
            timeout.prelude().and(sigmask(arg(mask, "sigmask")?, size)),
        )
    };
    // None: waiting when the log ends.
    let ret = match kernel_return(record) {
        Some(ret) => Some(ret),
        None => could_wait(timeout).map(|()| None)?,
    };
    let mut entries = match plain {
        Some(entries) => Some(entries),
        None => pollfds(arg(fds, "fds")?),
    };
    let mut revents_known = 0;
    if let Some(entries) = entries.as_mut() {
        if entries.len() != nfds as usize {
            return Err(Undecodable::Nfds {
                nfds,
                printed: entries.len(),
            });
        }
        revents_known = match ret {
            Some(n) if n > 0 => {
                apply_revents(entries, record.detail).ok_or(Undecodable::Revents)?
            }
            Some(_) => entries.len(),
            // Waiting: the scan's results are not in the log.
            None => 0,
        };
    }
    let scan = entries.map(|entries| {
        let mut scan = EntryScan::default();
        for (index, entry) in entries.into_iter().enumerate() {
            if index < revents_known {
                scan.push(entry);
            } else {
                scan.push_without_revents(entry.fd);
            }
        }
        scan
    });
    let call = PollCall {
        nfds,
        prelude,
        timeout,
        ret: ret.unwrap_or(0),
    };
    Ok((call, scan))
}

/// select and pselect6.
pub fn select(record: &Record<&str>) -> Result<SelectCall, Undecodable> {
    // The fd_sets do not matter: without the table's max_fds, the n the walk uses is
    // unknown (see `auditor_common::select::select`).
    let [n, _, _, _, time, pack] = first_args(record.args);
    let n: i32 = number(n, "n")?;
    let timeval = record.name == "select";
    let timeout = timeout(arg(time, "timeout")?, timeval);
    let prelude = if timeval {
        timeout.prelude()
    } else {
        // pselect6's sixth argument: `{sigmask, size}` as a pair, NULL, or an address.
        let pack = arg(pack, "sigmask")?;
        let mask = if pack == "NULL" {
            Prelude::Passes
        } else if let Some(inner) = pack.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            let [set, size] = first_args(inner);
            let size = size.and_then(|s| s.parse().ok()).unwrap_or(SIGSET_SIZE);
            sigmask(arg(set, "sigmask")?, Some(size))
        } else {
            Prelude::Unknown
        };
        mask.and(timeout.prelude())
    };
    // Waiting when the log ends: as if it had timed out (see `could_wait`).
    let ret = match kernel_return(record) {
        Some(ret) => ret,
        None => could_wait(timeout).map(|()| 0)?,
    };
    Ok(SelectCall {
        n,
        prelude,
        timeout,
        max_fds: None,
        ret,
    })
}

/// epoll_wait, epoll_pwait, epoll_pwait2. strace prints the events it returned, not the
/// buffer's address: a printed array means the buffer was writable user memory.
pub fn epoll_wait(record: &Record<&str>) -> Result<EpollWaitCall, Undecodable> {
    let Some(ret) = kernel_return(record) else {
        return Err(Undecodable::NoReturn(
            "strace prints its arguments after the epoll fd only at its return",
        ));
    };
    let [_, events, maxevents, time, mask, size] = first_args(record.args);
    let maxevents = number(maxevents, "maxevents")?;
    let events = match arg(events, "events")? {
        address if address.starts_with("0x") => {
            u64::from_str_radix(&address[2..], 16).map_err(|_| Undecodable::Number {
                what: "events address",
                text: address.to_string(),
            })?
        }
        _ => 0x1000,
    };
    let timeout = match record.name {
        "epoll_pwait2" => timeout(arg(time, "timeout")?, false),
        _ => Timeout::from_millis(number(time, "timeout")?),
    };
    let mask = match record.name {
        "epoll_wait" => Prelude::Passes,
        _ => sigmask(arg(mask, "sigmask")?, size.and_then(|s| s.parse().ok())),
    };
    Ok(EpollWaitCall {
        maxevents,
        events,
        prelude: timeout.prelude().and(mask),
        timeout,
        ret,
    })
}

/// close: its fd (perhaps with its path, -y: close has one argument, so the fd is read
/// where the arguments begin, without splitting them) and its return.
pub fn close(record: &Record<&str>) -> Result<(i32, i64), Undecodable> {
    let fd = fd(record.args).ok_or_else(|| Undecodable::Number {
        what: "fd",
        text: record.args.to_string(),
    })?;
    let ret = kernel_return(record).ok_or(Undecodable::NoReturn(
        "whether close succeeded is only in its return",
    ))?;
    Ok((fd, ret))
}

/// What a log shows of a call that allocates one fd: whether it asked for one (signalfd
/// and signalfd4 only with ufd -1), whether its arguments refuse it before the allocation
/// (an open's name "" through 6.18, accept4's flags), and the return value.
pub struct Allocation {
    pub allocates: bool,
    pub refused: bool,
    pub ret: i64,
}

/// The fcntl commands that ask for an fd, as strace names them.
const FCNTL_COMMANDS: [(&str, u64); 2] = [
    ("F_DUPFD", syscalls::F_DUPFD),
    ("F_DUPFD_CLOEXEC", syscalls::F_DUPFD_CLOEXEC),
];

/// seccomp's `SECCOMP_FILTER_FLAG_*` (include/uapi/linux/seccomp.h).
const SECCOMP_FILTER_FLAGS: [(&str, u64); 6] = [
    ("SECCOMP_FILTER_FLAG_TSYNC", 1),
    ("SECCOMP_FILTER_FLAG_LOG", 2),
    ("SECCOMP_FILTER_FLAG_SPEC_ALLOW", 4),
    (
        "SECCOMP_FILTER_FLAG_NEW_LISTENER",
        syscalls::SECCOMP_FILTER_FLAG_NEW_LISTENER,
    ),
    ("SECCOMP_FILTER_FLAG_TSYNC_ESRCH", 16),
    ("SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV", 32),
];

/// accept4's flags as strace names them (x86_64).
const SOCK_FLAGS: [(&str, u64); 2] = [("SOCK_CLOEXEC", 0o2_000_000), ("SOCK_NONBLOCK", 0o4000)];

pub fn allocation(record: &Record<&str>, syscall: Syscall) -> Result<Allocation, Undecodable> {
    let ret = kernel_return(record).ok_or(Undecodable::NoReturn(
        "how an allocation ended is only in the return value",
    ))?;
    // An empty name refuses an open only where it is read before the fd.
    let name_first = crate::kernel::open_flag_set().name_before_fd();
    let (refused, allocates) = match syscall {
        _ if syscall.info().family == Family::Open => {
            // creat names it `pathname`.
            let position = syscall
                .find_arg("filename")
                .or(syscall.find_arg("pathname"));
            let name = position.and_then(|position| split_args(record.args).nth(position));
            (name_first && name == Some("\"\""), true)
        }
        _ if let Some(name) = syscall.info().asks.argument() => {
            let asks = syscall.info().asks;
            let text = arg(split_args(record.args).nth(syscall.arg(name)), name)?;
            let value = match asks {
                syscalls::Asks::NewListenerFlag => {
                    Some(named_flags(Some(text), name, &SECCOMP_FILTER_FLAGS)?)
                }
                _ => parse_int(text),
            };
            let asks_for_one = match value {
                // As the record holds it: an int's bits in the low four bytes.
                Some(value) => asks.asks(value),
                None => match FCNTL_COMMANDS.iter().find(|(command, _)| *command == text) {
                    Some(&(_, value)) => asks.asks(value),
                    // Every other command strace names (F_GETFD, F_SETFL, …) asks for none.
                    None if text.starts_with("F_") && syscall == Syscall::Fcntl => false,
                    None => {
                        return Err(Undecodable::Number {
                            what: name,
                            text: text.to_string(),
                        });
                    }
                },
            };
            (false, asks_for_one)
        }
        Syscall::Accept4 => {
            let [_, _, _, flags] = first_args(record.args);
            let flags = named_flags(flags, "flags", &SOCK_FLAGS)?;
            (fd::accept_flags_refused(flags), true)
        }
        _ => (false, true),
    };
    Ok(Allocation {
        allocates,
        refused,
        ret,
    })
}

/// epoll_ctl(epfd, EPOLL_CTL_ADD, fd, {events=..., data=...}): the operation and the
/// return value (None if the log shows none).
pub fn epoll_ctl(record: &Record<&str>) -> Result<EpollCtlCall, Undecodable> {
    let [_, op] = first_args(record.args);
    let op = arg(op, "op")?;
    let op = match op {
        "EPOLL_CTL_ADD" => 1,
        "EPOLL_CTL_DEL" => 2,
        "EPOLL_CTL_MOD" => 3,
        number => line::integer::<i32>(number).ok_or_else(|| Undecodable::Number {
            what: "op",
            text: number.to_string(),
        })?,
    };
    Ok(EpollCtlCall {
        op,
        ret: kernel_return(record),
    })
}

/// The `AT_*` flags strace names (include/uapi/linux/fcntl.h; 0x200 is AT_EACCESS or
/// AT_REMOVEDIR, by the syscall).
const AT_FLAGS: [(&str, u64); 7] = [
    ("AT_SYMLINK_NOFOLLOW", 0x100),
    ("AT_EACCESS", 0x200),
    ("AT_REMOVEDIR", 0x200),
    ("AT_SYMLINK_FOLLOW", 0x400),
    ("AT_NO_AUTOMOUNT", 0x800),
    ("AT_EMPTY_PATH", 0x1000),
    ("AT_RECURSIVE", 0x8000),
];

/// The flags `do_fchmodat` gets: the `flags` argument of a syscall that takes one
/// (fchmodat2), else 0 (chmod, fchmodat).
pub fn fchmodat_flags(record: &Record<&str>, syscall: Syscall) -> Result<u32, Undecodable> {
    match syscall.find_arg("flags") {
        Some(position) => {
            let flags = split_args(record.args).nth(position);
            Ok(named_flags(flags, "flags", &AT_FLAGS)? as u32)
        }
        None => Ok(0),
    }
}

/// An fd argument of dup2 or dup3 (`3`, `3</dev/null>`), as the `unsigned int` the
/// kernel takes.
fn unsigned_fd(text: Option<&str>, what: &'static str) -> Result<u32, Undecodable> {
    let text = arg(text, what)?;
    fd(text)
        .map(|fd| fd as u32)
        .ok_or_else(|| Undecodable::Number {
            what,
            text: text.to_string(),
        })
}

/// The open flags strace names (x86_64, asm-generic), with `O_SYNC` and `O_TMPFILE` as
/// the pairs of bits they are; dup3 accepts only O_CLOEXEC, so naming any other refuses
/// the call.
const OPEN_FLAGS: [(&str, u64); 24] = [
    ("O_CLOEXEC", open::O_CLOEXEC),
    ("O_RDONLY", 0),
    ("O_WRONLY", 0o1),
    ("O_RDWR", 0o2),
    ("O_CREAT", 0o100),
    ("O_EXCL", 0o200),
    ("O_NOCTTY", 0o400),
    ("O_TRUNC", 0o1000),
    ("O_APPEND", 0o2000),
    ("O_NONBLOCK", 0o4000),
    ("O_NDELAY", 0o4000),
    ("O_DSYNC", 0o10000),
    ("FASYNC", 0o20000),
    ("O_ASYNC", 0o20000),
    ("O_DIRECT", 0o40000),
    ("O_LARGEFILE", 0o100000),
    ("O_DIRECTORY", 0o200000),
    ("O_NOFOLLOW", 0o400000),
    ("O_NOATIME", 0o1000000),
    ("O_SYNC", 0o4010000),
    ("__O_SYNC", 0o4000000),
    ("O_PATH", 0o10000000),
    ("O_TMPFILE", 0o20200000),
    ("__O_TMPFILE", 0o20000000),
];

/// openat2's `resolve` names (include/uapi/linux/openat2.h).
const RESOLVE_FLAGS: [(&str, u64); 6] = [
    ("RESOLVE_NO_XDEV", 0x01),
    ("RESOLVE_NO_MAGICLINKS", 0x02),
    ("RESOLVE_NO_SYMLINKS", 0x04),
    ("RESOLVE_BENEATH", 0x08),
    ("RESOLVE_IN_ROOT", 0x10),
    ("RESOLVE_CACHED", 0x20),
];

/// Flags as strace prints them, `A|B|0x100`, by the names of `table`.
fn named_flags(
    text: Option<&str>,
    what: &'static str,
    table: &[(&str, u64)],
) -> Result<u64, Undecodable> {
    let text = arg(text, what)?;
    // Bits strace has no name for come with a comment: `0x1 /* SOCK_??? */`.
    let text = text.split_once(" /*").map_or(text, |(bits, _)| bits);
    text.split('|').try_fold(0, |flags, flag| {
        let named = table.iter().find(|(name, _)| *name == flag);
        let bits = match named {
            Some(&(_, bits)) => Some(bits),
            None => parse_int(flag),
        };
        bits.map(|bits| flags | bits)
            .ok_or_else(|| Undecodable::Number {
                what,
                text: text.to_string(),
            })
    })
}

/// A mode (`0644`), or 0 when strace prints none (open without O_CREAT or O_TMPFILE).
fn mode(text: Option<&str>) -> Result<u64, Undecodable> {
    text.map_or(Ok(0), |text| {
        parse_int(text).ok_or_else(|| Undecodable::Number {
            what: "mode",
            text: text.to_string(),
        })
    })
}

/// What fs/open.c's checks before the path walk read of an open.
pub enum OpenArgs {
    /// open, openat, creat: the flags and mode as passed (creat's flags filled in).
    Open { flags: u64, mode: u64 },
    /// openat2: the size and the struct (None: strace printed only its address).
    Openat2 { size: u64, how: Option<OpenHow> },
}

/// open(path, flags[, mode]), openat(dfd, path, flags[, mode]), creat(path, mode) and
/// openat2(dfd, path, {flags=.., mode=.., resolve=..}, size).
pub fn open(record: &Record<&str>, syscall: Syscall) -> Result<OpenArgs, Undecodable> {
    let [_, second, third, fourth] = first_args(record.args);
    Ok(match syscall {
        Syscall::Open => OpenArgs::Open {
            flags: named_flags(second, "flags", &OPEN_FLAGS)?,
            mode: mode(third)?,
        },
        Syscall::Creat => OpenArgs::Open {
            flags: open::CREAT_FLAGS,
            mode: mode(second)?,
        },
        Syscall::Openat2 => {
            let size = arg(fourth, "usize")?;
            let size = parse_int(size).ok_or_else(|| Undecodable::Number {
                what: "usize",
                text: size.to_string(),
            })?;
            let how = arg(third, "how")?;
            let how = match how.starts_with('{') {
                true => Some(OpenHow {
                    flags: named_flags(field(how, "flags"), "flags", &OPEN_FLAGS)?,
                    mode: mode(field(how, "mode"))?,
                    resolve: match field(how, "resolve") {
                        Some(resolve) => named_flags(Some(resolve), "resolve", &RESOLVE_FLAGS)?,
                        None => 0,
                    },
                }),
                false => None,
            };
            OpenArgs::Openat2 { size, how }
        }
        _ => OpenArgs::Open {
            flags: named_flags(third, "flags", &OPEN_FLAGS)?,
            mode: mode(fourth)?,
        },
    })
}

/// dup2(oldfd, newfd) and dup3(oldfd, newfd, flags) (`0`, `O_CLOEXEC`, `O_CLOEXEC|0x4`,
/// ...): the model's call, flags 0 for the syscall that takes none.
pub fn replace(record: &Record<&str>, syscall: Syscall) -> Result<DupCall, Undecodable> {
    let [old, new, flags_text] = first_args(record.args);
    let flags = match syscall.find_arg("flags") {
        // An int, as dup3 takes it.
        Some(_) => named_flags(flags_text, "flags", &OPEN_FLAGS)? as u32,
        None => 0,
    };
    Ok(DupCall {
        oldfd: unsigned_fd(old, "oldfd")?,
        newfd: unsigned_fd(new, "newfd")?,
        flags,
        ret: kernel_return(record),
    })
}

/// `SECCOMP_ADDFD_FLAG_*` (include/uapi/linux/seccomp.h).
const ADDFD_FLAGS: [(&str, u64); 2] = [
    (
        "SECCOMP_ADDFD_FLAG_SETFD",
        addfd::SECCOMP_ADDFD_FLAG_SETFD as u64,
    ),
    (
        "SECCOMP_ADDFD_FLAG_SEND",
        addfd::SECCOMP_ADDFD_FLAG_SEND as u64,
    ),
];

/// An ioctl command as strace prints it: by name, as `_IOC(_IOC_WRITE, 0x21, 0x3, 0x20)`
/// when it knows no name (another size of a known struct), or as a number.
fn ioctl_command(text: &str) -> Option<u64> {
    if text == "SECCOMP_IOCTL_NOTIF_ADDFD" {
        return Some(u64::from(addfd::SECCOMP_IOCTL_NOTIF_ADDFD));
    }
    let Some(inner) = text.strip_prefix("_IOC(").and_then(|t| t.strip_suffix(')')) else {
        return parse_int(text);
    };
    let [dir, kind, nr, size] = first_args(inner);
    let dir = dir?.split('|').try_fold(0, |dir, name| match name {
        "_IOC_NONE" => Some(dir),
        "_IOC_WRITE" => Some(dir | 1),
        "_IOC_READ" => Some(dir | 2),
        _ => None,
    })?;
    let [kind, nr, size] = [kind?, nr?, size?].map(parse_int);
    Some(dir << 30 | size? << 16 | kind? << 8 | nr?)
}

/// `ioctl(fd, SECCOMP_IOCTL_NOTIF_ADDFD, {id=…, flags=SECCOMP_ADDFD_FLAG_SETFD, srcfd=3,
/// newfd=100, newfd_flags=0})`: the model's call (its argument None where strace shows an
/// address: it could not read it). None for every other ioctl, which reaches no site.
pub fn addfd(record: &Record<&str>) -> Option<Result<AddFdCall, Undecodable>> {
    let [_, cmd, argument] = first_args(record.args);
    if !addfd::is_addfd(ioctl_command(cmd?)?) {
        return None;
    }
    let argument = match argument {
        Some(text) if text.starts_with('{') => text,
        _ => {
            return Some(Ok(AddFdCall {
                addfd: None,
                ret: kernel_return(record),
            }));
        }
    };
    let decoded = (|| {
        let flags = named_flags(field(argument, "flags"), "flags", &ADDFD_FLAGS)?;
        let newfd_flags = named_flags(field(argument, "newfd_flags"), "newfd_flags", &OPEN_FLAGS)?;
        Ok(AddFdCall {
            addfd: Some(NotifAddFd {
                id: 0,
                flags: flags as u32,
                srcfd: unsigned_fd(field(argument, "srcfd"), "srcfd")?,
                newfd: number(field(argument, "newfd"), "newfd")?,
                newfd_flags: newfd_flags as u32,
            }),
            ret: kernel_return(record),
        })
    })();
    Some(decoded)
}

/// `0x80000`, `0200000` or `524288`.
fn parse_int(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if text.len() > 1
        && let Some(octal) = text.strip_prefix('0')
    {
        u64::from_str_radix(octal, 8).ok()
    } else {
        text.parse::<i64>().ok().map(|n| n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::strace::records::{Item, items};

    fn record(line: &str) -> Record<&'static str> {
        match items(line.as_bytes(), None).pop() {
            Some(Item::Record(record)) => Box::leak(Box::new(record)).borrowed(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plain_pollfds_agree_with_the_general_parse() {
        let plain = [
            "[]",
            "[{fd=3}]",
            "[{fd=-1}, {fd=3, events=POLLIN|POLLPRI}]",
            "[{fd=3, events=0}, {fd=2147483647, events=POLLIN|POLL_X1}]",
            // The last entry's events again, longer, shorter, and empty.
            "[{fd=3, events=POLLIN}, {fd=4, events=POLLIN}, {fd=5, events=POLLIN|POLLPRI}, \
             {fd=6, events=POLLIN}, {fd=7, events=POLL}, {fd=8, events=}, {fd=9, events=}]",
            "[{fd=-0}, {fd=0000000003}, {fd=-2147483648}]",
        ];
        let other = [
            "[{fd=5</dev/null>, events=POLLIN}]",
            "[{fd=3, events=POLLIN|0x8000 /* POLL??? */}]",
            "[{fd=3, events=POLLIN}, ...]",
            "[{fd=}]",
            "[{fd=-}]",
            "[{fd=99999999999999999999}]",
            "[{fd=2147483648}]",
            "[{fd=00000000003}]",
            "[{fd=3, events=POLLIN}, {fd=4, events=POLLIN /* x */}]",
            "[{fd=3, events=POLLIN}, {fd=4, events=POLLIN}x]",
            "[{fd=3,events=POLLIN}]",
            "[{fd=3, revents=POLLIN}]",
            "[ {fd=3}]",
            "0x7ffd1234",
        ];
        for array in plain.iter().chain(&other) {
            let args = format!("{array}, 1, 0");
            let general = pollfds(split_args(&args).next().unwrap());
            match plain_pollfds(&args) {
                Some((entries, rest)) => {
                    assert!(plain.contains(array), "{array} read as plain");
                    assert_eq!(Some(entries), general, "{array}");
                    assert_eq!(rest, " 1, 0", "{array}");
                }
                None => assert!(other.contains(array), "{array} not read as plain"),
            }
        }
        // The array as the last argument: left to the general parse.
        assert_eq!(plain_pollfds("[{fd=3}]"), None);
        // Long arrays, where an entry's events are compared whole with the last entry's:
        // names that repeat, extend, shorten or end the last one, and a name of 16 bytes
        // with its `}` (longer than a window).
        let names = [
            "POLLIN",
            "POLLIN|POLLOUT",
            "POLLIN|POLLPRI",
            "POLL",
            "",
            "POLLIN|POLLRDNORM",
        ];
        let mut state: u64 = 0x853c_49e6_748f_ea9b;
        for _ in 0..500 {
            let entries: Vec<String> = (0..40)
                .map(|fd| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    match names.get((state % 8) as usize) {
                        Some(name) => format!("{{fd={fd}, events={name}}}"),
                        None => format!("{{fd={}}}", fd as i64 - 20),
                    }
                })
                .collect();
            let args = format!("[{}], 40, 0", entries.join(", "));
            let general = pollfds(split_args(&args).next().unwrap());
            let (plain, rest) = plain_pollfds(&args).expect("a plain array");
            assert_eq!((Some(plain), rest), (general, " 40, 0"), "{args}");
        }
        // A name that starts like the last one but runs on is no plain name.
        let args = "[{fd=3, events=POLLIN}, {fd=4, events=POLLIN}, {fd=5, events=POLLIN} x}], 3, 0";
        assert_eq!(plain_pollfds(args), None);
    }

    #[test]
    fn plain_revents_agree_with_the_general_parse() {
        let plain = [
            "[]",
            "[{fd=3, revents=POLLIN}]",
            "[{fd=3, revents=POLLNVAL}, {fd=-1, revents=POLLIN|POLLNVAL}, ...]",
            "[{fd=3, revents=POLLIN|POLLOUT}, {fd=4, revents=POLLNVALX}, {fd=5, revents=}]",
            "[...]",
        ];
        let other = [
            "[{fd=5</dev/null>, revents=POLLNVAL}]",
            "[{fd=3, revents=POLLIN|0x8000 /* POLL??? */}]",
            "[{fd=3}]",
            "[{fd=3, revents=POLLIN}, ..., {fd=4, revents=POLLIN}]",
            "[{fd=99999999999, revents=POLLNVAL}]",
            "[{fd=3, revents=POLLIN},{fd=4, revents=POLLIN}]",
            "[{fd=3, revents=POLLIN}",
            "[{revents=POLLNVAL, fd=3}]",
        ];
        for list in plain.iter().chain(&other) {
            let detail = format!("{list}), left {{tv_sec=0, tv_nsec=0}})");
            match plain_returned(&detail) {
                Some(entries) => {
                    assert!(plain.contains(list), "{list} read as plain");
                    assert_eq!(Some(entries), returned(&detail), "{list}");
                }
                None => assert!(other.contains(list), "{list} not read as plain"),
            }
        }
        // What the matching makes of them, through either reading.
        let mut entries: Vec<PollFd> = [3, 4, -1, 5]
            .map(|fd| PollFd {
                fd,
                events: 0,
                revents: 0,
            })
            .into();
        let known = apply_revents(
            &mut entries,
            " ([{fd=3, revents=POLLIN}, {fd=-1, revents=POLLNVAL}, ...])",
        );
        let revents: Vec<i16> = entries.iter().map(|e| e.revents).collect();
        assert_eq!(
            (known, revents),
            (Some(3), vec![1, 0, auditor_common::poll::POLLNVAL, 0])
        );
    }

    #[test]
    fn poll_with_revents() {
        let (call, entries) = poll(&record(
            "poll([{fd=-1}, {fd=73, events=POLLIN}, {fd=5</dev/null>, events=POLLIN}], 3, 0) = 2 ([{fd=73, revents=POLLNVAL}, {fd=5, revents=POLLIN}]) <0.000078>",
        ))
        .unwrap();
        let entries = entries.unwrap();
        assert_eq!(
            (entries.read, entries.negative, entries.not_open),
            (3, 1, 1)
        );
        assert_eq!(entries.revents_unknown, 0);
        assert_eq!((call.nfds, call.timeout, call.ret), (3, Timeout::Zero, 2));
        // A list strace cut short: revents known up to the last entry it printed.
        let (_, entries) = poll(&record(
            "poll([{fd=3, events=POLLIN}, {fd=4, events=POLLIN}, {fd=5, events=POLLIN}], 3, 0) = 3 ([{fd=3, revents=POLLIN}, ...])",
        ))
        .unwrap();
        assert_eq!(entries.unwrap().revents_unknown, 2);
    }

    #[test]
    fn ppoll_timeouts_and_unreadable_arrays() {
        let (call, _) = poll(&record(
            "ppoll([{fd=3</dev/null>, events=POLLIN}], 1, {tv_sec=0, tv_nsec=5000000}, NULL, 8) = 1 ([{fd=3, revents=POLLIN}], left {tv_sec=0, tv_nsec=4998922})",
        ))
        .unwrap();
        assert_eq!(
            (call.timeout, call.prelude),
            (Timeout::Positive, Prelude::Passes)
        );
        let (call, entries) = poll(&record("poll(0x10, 3, 0) = -1 EFAULT (Bad address)")).unwrap();
        assert_eq!((entries, call.ret), (None, -errno::EFAULT));
        // Cut short by strace: entries unknown.
        let (_, entries) = poll(&record(
            "poll([{fd=3, events=POLLIN}, ...], 40, 0) = 0 (Timeout)",
        ))
        .unwrap();
        assert_eq!(entries, None);
        let (call, _) = poll(&record("poll([{fd=3, events=POLLIN}], 1, -1) = ? ERESTART_RESTARTBLOCK (Interrupted by signal)")).unwrap();
        assert_eq!(
            (call.timeout, call.ret),
            (Timeout::Infinite, -errno::ERESTART_RESTARTBLOCK)
        );
    }

    #[test]
    fn selects() {
        let call = select(&record(
            "pselect6(5, [3</dev/null> 4</dev/null>], NULL, NULL, NULL, NULL) = 2 (in [3 4])",
        ))
        .unwrap();
        assert_eq!(
            (call.n, call.timeout, call.prelude),
            (5, Timeout::Infinite, Prelude::Passes)
        );
        let call = select(&record(
            "select(-1, 0x560058ac0bc0, NULL, NULL, {tv_sec=0, tv_usec=0}) = -1 EINVAL (Invalid argument)",
        ))
        .unwrap();
        assert_eq!(
            (call.n, call.timeout, call.ret),
            (-1, Timeout::Zero, -errno::EINVAL)
        );
        let call = select(&record(
            "select(4, NULL, NULL, NULL, 0x10) = -1 EFAULT (Bad address)",
        ))
        .unwrap();
        assert_eq!(
            (call.timeout, call.prelude),
            (Timeout::Unreadable, Prelude::Unknown)
        );
        let call = select(&record(
            "pselect6(1, [0], NULL, NULL, NULL, {[], 8}) = 0 (Timeout)",
        ))
        .unwrap();
        assert_eq!(call.prelude, Prelude::Passes);
    }

    #[test]
    fn epoll_waits() {
        let call = epoll_wait(&record(
            "epoll_wait(72<anon_inode:[eventpoll]>, [{events=EPOLLIN, data={u32=0, u64=0}}], 2, 0) = 1",
        ))
        .unwrap();
        assert_eq!(
            (call.maxevents, call.timeout, call.ret),
            (2, Timeout::Zero, 1)
        );
        let call = epoll_wait(&record(
            "epoll_pwait2(72<anon_inode:[eventpoll]>, [{events=EPOLLIN, data={u32=0, u64=0}}], 2, NULL, NULL, 8) = 1",
        ))
        .unwrap();
        assert_eq!(
            (call.timeout, call.prelude),
            (Timeout::Infinite, Prelude::Passes)
        );
        let call = epoll_wait(&record(
            "epoll_wait(-1, 0x7ffd0, 1, 0) = -1 EBADF (Bad file descriptor)",
        ))
        .unwrap();
        assert_eq!((call.events, call.ret), (0x7ffd0, -errno::EBADF));
    }

    #[test]
    fn dups() {
        let dup = |line: &str, syscall| {
            replace(&record(line), syscall).map(|call| (call.oldfd, call.newfd, call.flags))
        };
        let (dup2, dup3) = (Syscall::Dup2, Syscall::Dup3);
        assert_eq!(
            dup("dup2(3</dev/null>, 3</dev/null>) = 3", dup2),
            Ok((3, 3, 0))
        );
        let call = replace(
            &record("dup2(-1, 4) = -1 EBADF (Bad file descriptor)"),
            dup2,
        );
        assert_eq!(
            call.map(|call| (call.oldfd, call.newfd, call.ret)),
            Ok((u32::MAX, 4, Some(-errno::EBADF)))
        );
        assert_eq!(
            dup("dup3(3, 5, O_CLOEXEC) = 5", dup3),
            Ok((3, 5, auditor_common::dup::O_CLOEXEC))
        );
        assert_eq!(
            dup("dup3(3, 3, 0) = -1 EINVAL (Invalid argument)", dup3),
            Ok((3, 3, 0))
        );
        assert_eq!(
            dup(
                "dup3(3, 3, O_CLOEXEC|0x4) = -1 EINVAL (Invalid argument)",
                dup3
            ),
            Ok((3, 3, auditor_common::dup::O_CLOEXEC | 4))
        );
        assert_eq!(
            dup(
                "dup3(3, 3, O_NONBLOCK) = -1 EINVAL (Invalid argument)",
                dup3
            ),
            Ok((3, 3, 0o4000))
        );
        assert!(
            dup(
                "dup3(3, 3, O_WHATEVER) = -1 EINVAL (Invalid argument)",
                dup3
            )
            .is_err()
        );
        assert!(dup("dup3(3, 3) = -1 EINVAL (Invalid argument)", dup3).is_err());
        assert!(dup("dup2(x, 3) = 3", dup2).is_err());
    }

    #[test]
    fn signalfd_asks_for_an_fd_only_with_ufd_minus_one() {
        let asks =
            |line: &str| allocation(&record(line), Syscall::Signalfd4).map(|call| call.allocates);
        assert_eq!(asks("signalfd4(-1, [INT], 8, SFD_CLOEXEC) = 5"), Ok(true));
        assert_eq!(asks("signalfd4(5, [INT TERM], 8, 0) = 5"), Ok(false));
        assert!(asks("signalfd4(x, [INT], 8, 0) = 5").is_err());
    }

    #[test]
    fn fcntl_asks_for_an_fd_only_with_a_dup_command() {
        let asks =
            |line: &str| allocation(&record(line), Syscall::Fcntl).map(|call| call.allocates);
        assert_eq!(asks("fcntl(3, F_DUPFD, 10) = 10"), Ok(true));
        assert_eq!(asks("fcntl(3, F_DUPFD_CLOEXEC, 0) = 4"), Ok(true));
        assert_eq!(
            asks("fcntl(3, F_GETFD) = 0x1 (flags FD_CLOEXEC)"),
            Ok(false)
        );
        assert_eq!(asks("fcntl(3, 0x406, 0) = 5"), Ok(true));
        assert!(asks("fcntl(3, BOGUS, 0) = 5").is_err());
    }

    #[test]
    fn fchmodat_flags_by_name() {
        let flags = |line: &str| fchmodat_flags(&record(line), Syscall::Fchmodat2);
        assert_eq!(
            flags("fchmodat2(AT_FDCWD, \"/x\", 0644, AT_SYMLINK_NOFOLLOW|AT_EMPTY_PATH) = 0"),
            Ok(0x1100)
        );
        assert_eq!(
            flags("fchmodat2(AT_FDCWD, \"/x\", 0644, 0x4) = -1 EINVAL (Invalid argument)"),
            Ok(4)
        );
        assert!(flags("fchmodat2(AT_FDCWD, \"/x\", 0644) = 0").is_err());
        assert_eq!(
            fchmodat_flags(&record("chmod(\"/x\", 0644) = 0"), Syscall::Chmod),
            Ok(0)
        );
    }

    #[test]
    fn opens() {
        let decoded = |line: &str, syscall| match open(&record(line), syscall) {
            Ok(OpenArgs::Open { flags, mode }) => Some((flags, mode, None)),
            Ok(OpenArgs::Openat2 { size, how }) => Some((size, 0, how)),
            Err(_) => None,
        };
        assert_eq!(
            decoded(
                "openat(AT_FDCWD, \"/tmp\", O_RDONLY|O_CREAT|O_DIRECTORY, 0644) = -1 EINVAL (Invalid argument)",
                Syscall::Openat
            ),
            Some((0o200100, 0o644, None))
        );
        assert_eq!(
            decoded("open(\"/x\", O_RDWR|__O_TMPFILE, 0600) = 3", Syscall::Open),
            Some((0o20000002, 0o600, None))
        );
        assert_eq!(
            decoded("creat(\"/tmp/y\", 0600) = 6", Syscall::Creat),
            Some((open::CREAT_FLAGS, 0o600, None))
        );
        assert_eq!(
            decoded(
                "openat2(AT_FDCWD, \"/tmp\", {flags=O_RDONLY|O_DIRECTORY|0x100000000, mode=0644, resolve=RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH}, 24) = -1 EINVAL (Invalid argument)",
                Syscall::Openat2
            ),
            Some((
                24,
                0,
                Some(OpenHow {
                    flags: 0o200000 | 1 << 32,
                    mode: 0o644,
                    resolve: 0x0c
                })
            ))
        );
        assert_eq!(
            decoded(
                "openat2(AT_FDCWD, \"/dev/null\", {flags=O_RDONLY|O_CLOEXEC}, 24) = 3",
                Syscall::Openat2
            ),
            Some((
                24,
                0,
                Some(OpenHow {
                    flags: open::O_CLOEXEC,
                    mode: 0,
                    resolve: 0
                })
            ))
        );
        // strace printed only the address: the size still decides the size tests.
        assert_eq!(
            decoded(
                "openat2(AT_FDCWD, \"/tmp\", 0x7ffd30cc5a70, 12) = -1 EINVAL (Invalid argument)",
                Syscall::Openat2
            ),
            Some((12, 0, None))
        );
        assert_eq!(
            decoded("openat(AT_FDCWD, \"/x\", O_BOGUS) = 3", Syscall::Openat),
            None
        );
    }

    #[test]
    fn seccomp_addfd_and_no_other_ioctl() {
        let addfd = |line| super::addfd(&record(line));
        let setfd = |newfd, newfd_flags| NotifAddFd {
            id: 0,
            flags: addfd::SECCOMP_ADDFD_FLAG_SETFD,
            srcfd: 3,
            newfd,
            newfd_flags,
        };
        assert_eq!(
            addfd(
                "ioctl(5<anon_inode:seccomp notify>, SECCOMP_IOCTL_NOTIF_ADDFD, {id=0x601e4c4bd8d37a6c, \
                 flags=SECCOMP_ADDFD_FLAG_SETFD, srcfd=3</dev/null>, newfd=100, newfd_flags=0}) = 100"
            ),
            Some(Ok(AddFdCall {
                addfd: Some(setfd(100, 0)),
                ret: Some(100)
            }))
        );
        // A larger struct strace has no name for; O_CLOEXEC; a failure.
        let mut send = setfd(1005, open::O_CLOEXEC as u32);
        send.flags |= addfd::SECCOMP_ADDFD_FLAG_SEND;
        assert_eq!(
            addfd(
                "ioctl(5, _IOC(_IOC_WRITE, 0x21, 0x3, 0x20), {id=0x1, \
                 flags=SECCOMP_ADDFD_FLAG_SETFD|SECCOMP_ADDFD_FLAG_SEND, srcfd=3, newfd=1005, \
                 newfd_flags=O_CLOEXEC}) = -1 EMFILE (Too many open files)"
            ),
            Some(Ok(AddFdCall {
                addfd: Some(send),
                ret: Some(-errno::EMFILE)
            }))
        );
        // An address: strace could not read the struct.
        assert_eq!(
            addfd("ioctl(5, SECCOMP_IOCTL_NOTIF_ADDFD, 0x10) = -1 EFAULT (Bad address)"),
            Some(Ok(AddFdCall {
                addfd: None,
                ret: Some(-errno::EFAULT)
            }))
        );
        assert!(matches!(
            addfd(
                "ioctl(5, SECCOMP_IOCTL_NOTIF_ADDFD, {id=0x1, flags=BOGUS, srcfd=3, newfd=4, newfd_flags=0}) = 4"
            ),
            Some(Err(Undecodable::Number { what: "flags", .. }))
        ));
        for other in [
            "ioctl(1, TCGETS, 0x7ffdf2ea5e70) = -1 ENOTTY (Inappropriate ioctl for device)",
            "ioctl(5, SECCOMP_IOCTL_NOTIF_RECV, {id=0x1, pid=7, flags=0, data={nr=__NR_getppid}}) = 0",
            "ioctl(3, _IOC(_IOC_READ, 0x21, 0x3, 0x18), 0x1) = -1 ENOTTY (Inappropriate ioctl for device)",
        ] {
            assert_eq!(addfd(other), None, "{other}");
        }
    }

    #[test]
    fn splitting_keeps_nested_parts_whole() {
        assert_eq!(
            split_args("[{fd=3, e=1}, {fd=4}], 2, \"a,b\", 0").collect::<Vec<_>>(),
            ["[{fd=3, e=1}, {fd=4}]", "2", "\"a,b\"", "0"]
        );
    }
}
