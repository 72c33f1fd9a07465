//! One line of strace output, split into its parts: who (pid), what (a call, the start
//! or the end of an interrupted one, a signal, an exit) and, for calls, the name, the
//! argument text and the return value. Arguments stay text: decoding them is per syscall.

use thiserror::Error;

use super::structure::closing;

/// A parsed line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// The thread id from `[pid N]` or a leading `N` (`-f` with `-o`), if printed.
    pub pid: Option<u32>,
    /// The thread's command name, `N<comm>` (`-Y`), if printed.
    pub comm: Option<&'a str>,
    pub event: Event<'a>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// `name(args) = ret`.
    Call {
        name: &'a str,
        args: &'a str,
        ret: Return<'a>,
    },
    /// `name(args <unfinished ...>`: another thread's line came before the return; with
    /// `<detached ...>`, strace stopped tracing the thread inside the call.
    Unfinished {
        name: &'a str,
        args: &'a str,
        detached: bool,
    },
    /// `<... name resumed>args) = ret`: the rest of an unfinished call.
    Resumed {
        name: &'a str,
        args: &'a str,
        ret: Return<'a>,
    },
    /// `--- SIGCHLD {...} ---`.
    Signal(&'a str),
    /// `+++ exited with 0 +++`, `+++ killed by SIGKILL +++`.
    Exit(&'a str),
    /// ` > /lib/libc.so.6(poll+0x10) [0xfc230]`: a frame of the stack of the call before
    /// (`-k`).
    Frame(&'a str),
}

/// What a call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Return<'a> {
    /// The value; None for `?` (no return seen: exit, or a task killed inside the call).
    pub value: Option<i64>,
    /// The errno name of a failure (`EINTR`), or of `? ERESTARTNOHAND`.
    pub errno: Option<&'a str>,
    /// Whatever follows: strace's decoding of what the call wrote, the duration.
    pub detail: &'a str,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum LineError {
    #[error("no syscall name before `(`")]
    NoCall,
    #[error("the argument list does not close")]
    Unclosed,
    #[error("no ` = ` return value after the arguments")]
    NoReturn,
    #[error("return value `{0}` is not a number")]
    BadReturn(String),
    #[error("the line is empty")]
    Empty,
    #[error("pid `{0}` is out of range (pids are 32-bit)")]
    BadPid(String),
}

/// The index of the first byte at or after `at` that is not ASCII white space.
fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    // strace pads a call to put its ` = ` in column 40: skip runs of spaces a word at a time.
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    while let Some(word) = bytes.get(at..at + 8)
        && u64::from_ne_bytes(word.try_into().expect("8 bytes")) == SPACES
    {
        at += 8;
    }
    while at < bytes.len() && bytes[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The index of the first byte at or after `at` for which `stop` holds, or the end.
fn scan(bytes: &[u8], mut at: usize, stop: impl Fn(u8) -> bool) -> usize {
    while at < bytes.len() && !stop(bytes[at]) {
        at += 1;
    }
    at
}

/// A decimal integer (`-` allowed): what `text.parse()` gives, without its generic cost
/// on the short numbers every line has.
pub fn integer<T: TryFrom<i64> + std::str::FromStr>(text: &str) -> Option<T> {
    let (negative, digits) = match text.as_bytes() {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    // Up to 18 digits cannot overflow an i64; anything else takes the general path.
    if digits.is_empty() || digits.len() > 18 {
        return text.parse().ok();
    }
    let mut value: i64 = 0;
    for &byte in digits {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return text.parse().ok();
        }
        value = value * 10 + i64::from(digit);
    }
    T::try_from(if negative { -value } else { value }).ok()
}

/// `N` or `N<comm>` (-Y): the pid and the command name.
fn pid_and_comm(text: &str) -> Result<(Option<u32>, Option<&str>), LineError> {
    let (pid, comm) = match text.split_once('<') {
        Some((pid, comm)) => (pid, comm.strip_suffix('>')),
        None => (text, None),
    };
    let pid = integer(pid).ok_or_else(|| LineError::BadPid(pid.to_string()))?;
    Ok((Some(pid), comm))
}

/// The `>` of `<comm> ` that starts at `at` (a command name may hold `>` itself).
fn comm_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr::memchr(b'>', &bytes[at..])?;
        if bytes.get(at + 1) == Some(&b' ') {
            return Some(at);
        }
        at += 1;
    }
}

/// Splits `[pid N] `, `N ` or `N<comm> ` (-Y) and timestamps (-t, -tt, -ttt, -r) off the
/// front of a line.
fn prefix(line: &str) -> Result<(Option<u32>, Option<&str>, &str), LineError> {
    let bytes = line.as_bytes();
    let mut at = skip_space(bytes, 0);
    let (mut pid, mut comm) = (None, None);
    if bytes[at..].starts_with(b"[pid ") {
        let number = at + b"[pid ".len();
        if let Some(close) = memchr::memchr(b']', &bytes[number..]) {
            (pid, comm) = pid_and_comm(line[number..number + close].trim_ascii())?;
            at = skip_space(bytes, number + close + 1);
        }
    } else {
        // A pid is whole digits followed by white space or `<comm>`; a timestamp has
        // `.` or `:` in it.
        let digits = scan(bytes, at, |b| !b.is_ascii_digit());
        if digits > at {
            let next = match bytes.get(digits) {
                Some(b' ') => Some(digits),
                Some(b'<') => comm_end(bytes, digits).map(|end| end + 1),
                _ => None,
            };
            if let Some(next) = next {
                (pid, comm) = pid_and_comm(&line[at..next])?;
                at = skip_space(bytes, next);
            }
        }
    }
    // One timestamp, when present: digits with `:` and `.` only.
    let is_time = |b: u8| b.is_ascii_digit() || b == b'.' || b == b':';
    if bytes.get(at).is_some_and(|&b| is_time(b)) {
        let token = scan(bytes, at, |b| b == b' ');
        let timestamp = &bytes[at..token];
        if timestamp.iter().any(|&b| b == b'.' || b == b':')
            && timestamp.iter().all(|&b| is_time(b))
        {
            at = skip_space(bytes, token);
        }
    }
    Ok((pid, comm, &line[at..]))
}

/// ` = value [ERRNO] [detail]` after a call's arguments.
fn return_value(text: &str) -> Result<Return<'_>, LineError> {
    let bytes = text.as_bytes();
    let equals = skip_space(bytes, 0);
    if bytes.get(equals) != Some(&b'=') {
        return Err(LineError::NoReturn);
    }
    // A returned fd may carry its path with no space before it (-y): `3</etc/passwd>`.
    let start = skip_space(bytes, equals + 1);
    let end = scan(bytes, start, |b| b == b' ' || b == b'<');
    let token = &text[start..end];
    let value = if token == "?" {
        None
    } else if let Some(hex) = token.strip_prefix("0x") {
        Some(u64::from_str_radix(hex, 16).map_err(|_| LineError::BadReturn(token.into()))? as i64)
    } else {
        Some(integer(token).ok_or_else(|| LineError::BadReturn(token.into()))?)
    };
    let rest = skip_space(bytes, end);
    let word_end = scan(bytes, rest, |b| b == b' ');
    let word = &bytes[rest..word_end];
    let is_errno = word.len() > 1
        && word[0] == b'E'
        && word
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    let (errno, detail) = if is_errno {
        (Some(&text[rest..word_end]), &text[word_end..])
    } else {
        (None, &text[rest..])
    };
    Ok(Return {
        value,
        errno,
        detail: detail.trim_ascii(),
    })
}

/// Parses one line (without its line end).
pub fn parse(line: &str) -> Result<Line<'_>, LineError> {
    let mut end = line.len();
    while end > 0 && matches!(line.as_bytes()[end - 1], b'\r' | b'\n') {
        end -= 1;
    }
    let (pid, comm, rest) = prefix(&line[..end])?;
    if rest.is_empty() {
        return Err(LineError::Empty);
    }
    let event = if let Some(signal) = rest.strip_prefix("--- ") {
        Event::Signal(signal.trim_end_matches(" ---"))
    } else if let Some(frame) = rest.strip_prefix("> ") {
        Event::Frame(frame)
    } else if let Some(exit) = rest.strip_prefix("+++ ") {
        Event::Exit(exit.trim_end_matches(" +++"))
    } else if let Some(resumed) = rest.strip_prefix("<... ") {
        // The name is a word: the first ` resumed>` is right after it (found without a
        // substring search where it is).
        let word = scan(resumed.as_bytes(), 0, |b| {
            !(b.is_ascii_alphanumeric() || b == b'_')
        });
        let (name, args) = match resumed[word..].strip_prefix(" resumed>") {
            Some(args) => (&resumed[..word], args),
            None => resumed.split_once(" resumed>").ok_or(LineError::NoCall)?,
        };
        let close = closing(args, 1).ok_or(LineError::Unclosed)?;
        Event::Resumed {
            name,
            args: args[..close].trim_ascii(),
            ret: return_value(&args[close + 1..])?,
        }
    } else {
        let open = scan(rest.as_bytes(), 0, |b| {
            !(b.is_ascii_alphanumeric() || b == b'_')
        });
        if open == 0 || rest.as_bytes().get(open) != Some(&b'(') {
            return Err(LineError::NoCall);
        }
        let (name, args) = (&rest[..open], &rest[open + 1..]);
        let unfinished = args.ends_with('>').then(|| {
            let unfinished = args.strip_suffix("<unfinished ...>").map(|a| (a, false));
            unfinished.or_else(|| args.strip_suffix("<detached ...>").map(|a| (a, true)))
        });
        if let Some((start, detached)) = unfinished.flatten() {
            Event::Unfinished {
                name,
                args: start.trim_ascii(),
                detached,
            }
        } else if let Some(close) = closing(args, 1) {
            Event::Call {
                name,
                args: &args[..close],
                ret: return_value(&args[close + 1..])?,
            }
        } else {
            // strace -f -k sometimes ends the start of an interrupted call with another
            // call's stack frame instead of `<unfinished ...>`: `f(a, b,  > /lib/...`.
            let cut = args.find("  > ").ok_or(LineError::Unclosed)?;
            Event::Unfinished {
                name,
                args: args[..cut].trim_ascii(),
                detached: false,
            }
        }
    };
    Ok(Line { pid, comm, event })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(line: &str) -> (Option<u32>, &str, &str, Return<'_>) {
        match parse(line).unwrap() {
            Line {
                pid,
                event: Event::Call { name, args, ret },
                ..
            } => (pid, name, args, ret),
            other => panic!("not a call: {other:?}"),
        }
    }

    // Real lines, from strace 6.1 on this machine.

    #[test]
    fn plain_call() {
        let (pid, name, args, ret) = call("close(3) = 0");
        assert_eq!((pid, name, args), (None, "close", "3"));
        assert_eq!((ret.value, ret.errno, ret.detail), (Some(0), None, ""));
    }

    #[test]
    fn follow_forks_with_timestamps_durations_and_fd_paths() {
        let (pid, name, args, ret) = call(
            "9309  07:59:38.468226 poll([{fd=-1}, {fd=73, events=POLLIN}, {fd=5</dev/null>, events=POLLIN}], 3, 0) = 2 ([{fd=73, revents=POLLNVAL}, {fd=5, revents=POLLIN}]) <0.000078>",
        );
        assert_eq!((pid, name), (Some(9309), "poll"));
        assert_eq!(
            args,
            "[{fd=-1}, {fd=73, events=POLLIN}, {fd=5</dev/null>, events=POLLIN}], 3, 0"
        );
        assert_eq!(ret.value, Some(2));
        assert_eq!(
            ret.detail,
            "([{fd=73, revents=POLLNVAL}, {fd=5, revents=POLLIN}]) <0.000078>"
        );
    }

    #[test]
    fn errors_and_restarts() {
        let (_, name, _, ret) = call(
            "9309  07:59:38.468056 select(-1, 0x560058ac0bc0, NULL, NULL, {tv_sec=0, tv_usec=0}) = -1 EINVAL (Invalid argument) <0.000070>",
        );
        assert_eq!(name, "select");
        assert_eq!((ret.value, ret.errno), (Some(-1), Some("EINVAL")));
        let (_, _, _, ret) = call(
            "poll([{fd=3, events=POLLIN}], 1, -1) = ? ERESTART_RESTARTBLOCK (Interrupted by signal)",
        );
        assert_eq!(
            (ret.value, ret.errno),
            (None, Some("ERESTART_RESTARTBLOCK"))
        );
        let (_, _, _, ret) = call("9310  07:59:38.470234 exit_group(0)     = ?");
        assert_eq!((ret.value, ret.errno), (None, None));
    }

    #[test]
    fn comm_epoch_and_relative_timestamps() {
        let (pid, name, _, ret) = call(
            "9331<sh> 1796025587.902232 openat(AT_FDCWD</tmp>, \"/etc/ld.so.cache\", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>",
        );
        assert_eq!((pid, name, ret.value), (Some(9331), "openat", Some(3)));
        assert_eq!(ret.detail, "</etc/ld.so.cache>");
        let (pid, name, _, ret) = call("     0.000954 brk(NULL)                 = 0x560f3ef36000");
        assert_eq!((pid, name, ret.value), (None, "brk", Some(0x560f3ef36000)));
        let (pid, _, _, _) = call("[pid  9345] 07:59:47 close(3) = 0");
        assert_eq!(pid, Some(9345));
        // -Y: the command name, with -o and without.
        for (line, pid, comm) in [
            ("9331<sh> close(3) = 0", 9331, "sh"),
            ("[pid  6965<true>] close(3)              = 0", 6965, "true"),
            ("6970<a b> 07:59:47 close(3) = 0", 6970, "a b"),
        ] {
            let parsed = parse(line).unwrap();
            assert_eq!((parsed.pid, parsed.comm), (Some(pid), Some(comm)), "{line}");
        }
        assert_eq!(parse("close(3) = 0").unwrap().comm, None);
    }

    #[test]
    fn unfinished_and_resumed() {
        assert_eq!(
            parse("9344  07:59:47 wait4(-1,  <unfinished ...>").unwrap(),
            Line {
                pid: Some(9344),
                comm: None,
                event: Event::Unfinished {
                    name: "wait4",
                    args: "-1,",
                    detached: false,
                }
            }
        );
        assert_eq!(
            parse("18099<auditor-workloa> poll([{fd=-1}], 1, 10 <detached ...>")
                .unwrap()
                .event,
            Event::Unfinished {
                name: "poll",
                args: "[{fd=-1}], 1, 10",
                detached: true,
            }
        );
        assert_eq!(
            parse("4294967296 close(3) = 0").unwrap_err(),
            LineError::BadPid("4294967296".into())
        );
        assert_eq!(
            parse("[pid 99999999999] close(3) = 0").unwrap_err(),
            LineError::BadPid("99999999999".into())
        );
        let line =
            parse("9344  07:59:47 <... wait4 resumed>0x7ffffe37f8dc, WNOHANG, NULL) = 0").unwrap();
        let Event::Resumed { name, args, ret } = line.event else {
            panic!("{line:?}");
        };
        assert_eq!(
            (name, args, ret.value),
            ("wait4", "0x7ffffe37f8dc, WNOHANG, NULL", Some(0))
        );
    }

    #[test]
    fn a_start_cut_by_another_calls_stack_frame_is_unfinished() {
        let line = "6198<pyenv-which> rt_sigprocmask(SIG_SETMASK, [],  > /usr/lib/x86_64-linux-gnu/libc.so.6(_exit+0x29) [0xd4409]";
        assert_eq!(
            parse(line).unwrap().event,
            Event::Unfinished {
                name: "rt_sigprocmask",
                args: "SIG_SETMASK, [],",
                detached: false,
            }
        );
    }

    #[test]
    fn signals_exits_and_stack_frames() {
        assert_eq!(
            parse("9309  07:59:38.470620 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---")
                .unwrap()
                .event,
            Event::Signal("SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED}")
        );
        assert_eq!(
            parse("9310  07:59:38.470330 +++ exited with 0 +++")
                .unwrap()
                .event,
            Event::Exit("exited with 0")
        );
        assert_eq!(
            parse("+++ killed by SIGKILL +++").unwrap().event,
            Event::Exit("killed by SIGKILL")
        );
        assert_eq!(
            parse(" > /usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]")
                .unwrap()
                .event,
            Event::Frame("/usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]")
        );
    }

    #[test]
    fn strings_with_brackets_and_crlf() {
        let (_, name, args, ret) = call("write(1, \"a) b] \\\"c\", 9) = 9\r\n");
        assert_eq!(
            (name, args, ret.value),
            ("write", "1, \"a) b] \\\"c\", 9", Some(9))
        );
    }

    #[test]
    fn malformed_lines_say_why() {
        assert_eq!(parse(""), Err(LineError::Empty));
        assert_eq!(parse("garbage without parens"), Err(LineError::NoCall));
        assert_eq!(parse("poll([{fd=3}], 1, 0"), Err(LineError::Unclosed));
        assert_eq!(parse("close(3)"), Err(LineError::NoReturn));
        assert_eq!(parse("close(3) = x"), Err(LineError::BadReturn("x".into())));
    }
}
