//! The syscall table: every syscall the auditor follows, declared once with what follows
//! it — the probe's programs on its `syscalls:sys_enter_*` / `sys_exit_*` tracepoints,
//! whether the strace source decodes its lines, whether it allocates fds through
//! `alloc_fd`. The loader's attach list, strace's `-e trace=` list and the allocating set
//! are derived from it.

/// How a syscall is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallInfo {
    pub syscall: Syscall,
    /// Its name, as strace prints it and as its tracepoints are named.
    pub name: &'static str,
    /// The probe has a program `NAME_enter` on `syscalls:sys_enter_NAME`.
    pub enter: bool,
    /// The probe has a program `NAME_exit` on `syscalls:sys_exit_NAME`.
    pub exit: bool,
    /// The strace source decodes its lines (it is in `-e trace=`).
    pub logged: bool,
    /// It allocates fds through `alloc_fd` (counted at the `fd.*` sites).
    pub allocates: bool,
}

impl SyscallInfo {
    /// Followed by nothing: what each row of the table starts from.
    const NONE: SyscallInfo = SyscallInfo {
        syscall: Syscall::Select,
        name: "",
        enter: false,
        exit: false,
        logged: false,
        allocates: false,
    };
}

/// Declares the table: `Variant = "name" { field: value, ... }`, fields of [`SyscallInfo`]
/// left out are false.
macro_rules! syscalls {
    ($($variant:ident = $name:literal { $($field:ident: $value:expr),* $(,)? }),* $(,)?) => {
        /// A followed syscall; the discriminant indexes the probe's per-syscall counters.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Syscall {
            $($variant),*
        }

        /// Number of followed syscalls.
        pub const SYSCALL_COUNT: usize = [$($name),*].len();

        /// The table, in [`Syscall`] order.
        pub const SYSCALLS: [SyscallInfo; SYSCALL_COUNT] = [$(SyscallInfo {
            syscall: Syscall::$variant,
            name: $name,
            $($field: $value,)*
            ..SyscallInfo::NONE
        }),*];

        impl Syscall {
            /// Every followed syscall, in table order.
            pub const ALL: [Syscall; SYSCALL_COUNT] = [$(Syscall::$variant),*];
        }
    };
}

syscalls! {
    Select = "select" { enter: true, exit: true, logged: true },
    Pselect6 = "pselect6" { enter: true, exit: true, logged: true },
    Poll = "poll" { enter: true, exit: true, logged: true },
    Ppoll = "ppoll" { enter: true, exit: true, logged: true },
    EpollWait = "epoll_wait" { enter: true, exit: true, logged: true },
    EpollPwait = "epoll_pwait" { enter: true, exit: true, logged: true },
    EpollPwait2 = "epoll_pwait2" { enter: true, exit: true, logged: true },
    Close = "close" { exit: true, logged: true },
    Read = "read" { enter: true },
    Write = "write" { enter: true },
    Recvmsg = "recvmsg" { enter: true },
    Sendmsg = "sendmsg" { enter: true },
    Open = "open" { enter: true, exit: true, allocates: true },
    Openat = "openat" { enter: true, exit: true, allocates: true },
    Openat2 = "openat2" { enter: true, exit: true, allocates: true },
    Creat = "creat" { enter: true, exit: true, allocates: true },
    Dup = "dup" { enter: true, exit: true, allocates: true },
    // Only F_DUPFD and F_DUPFD_CLOEXEC allocate.
    Fcntl = "fcntl" { enter: true, exit: true, allocates: true },
    Eventfd2 = "eventfd2" { enter: true, exit: true, allocates: true },
    EpollCreate1 = "epoll_create1" { enter: true, exit: true, allocates: true },
    Socket = "socket" { enter: true, exit: true, allocates: true },
    Accept = "accept" { enter: true, exit: true, allocates: true },
    Accept4 = "accept4" { enter: true, exit: true, allocates: true },
    Pipe = "pipe" { enter: true, exit: true, allocates: true },
    Pipe2 = "pipe2" { enter: true, exit: true, allocates: true },
    Socketpair = "socketpair" { enter: true, exit: true, allocates: true },
    Dup2 = "dup2" { enter: true, logged: true },
    Dup3 = "dup3" { enter: true, logged: true },
}

/// A property of a table row that a derived set selects by.
#[derive(Clone, Copy)]
enum Property {
    Allocates,
    Logged,
}

impl Property {
    const fn of(self, info: &SyscallInfo) -> bool {
        match self {
            Property::Allocates => info.allocates,
            Property::Logged => info.logged,
        }
    }

    /// How many syscalls of the table have it.
    const fn count(self) -> usize {
        let (mut index, mut count) = (0, 0);
        while index < SYSCALL_COUNT {
            if self.of(&SYSCALLS[index]) {
                count += 1;
            }
            index += 1;
        }
        count
    }

    /// The syscalls of the table that have it, in table order (`N` of them).
    const fn select<const N: usize>(self) -> [Syscall; N] {
        let mut out = [Syscall::Select; N];
        let (mut index, mut found) = (0, 0);
        while index < SYSCALL_COUNT {
            if self.of(&SYSCALLS[index]) {
                out[found] = SYSCALLS[index].syscall;
                found += 1;
            }
            index += 1;
        }
        out
    }
}

/// The syscalls whose `alloc_fd` calls the probe follows.
pub const ALLOCATING: [Syscall; Property::Allocates.count()] = Property::Allocates.select();

/// The syscalls the strace source decodes.
pub const LOGGED: [Syscall; Property::Logged.count()] = Property::Logged.select();

impl Syscall {
    pub const fn info(self) -> &'static SyscallInfo {
        &SYSCALLS[self as usize]
    }

    pub const fn name(self) -> &'static str {
        self.info().name
    }

    /// The syscall named `name`, if followed. Constant time: a strace log asks once per line.
    pub fn from_name(name: &str) -> Option<Syscall> {
        let mut slot = name_slot(name.as_bytes());
        loop {
            let syscall = Syscall::ALL[NAME_TABLE[slot]? as usize];
            // Bytes compared inline: the names are short, a memcmp call costs more.
            let known = syscall.name().as_bytes();
            if known.len() == name.len() && known.iter().zip(name.as_bytes()).all(|(a, b)| a == b) {
                return Some(syscall);
            }
            slot = (slot + 1) % NAME_SLOTS;
        }
    }
}

const NAME_SLOTS: usize = 2 * SYSCALL_COUNT;

/// Where a name starts looking in [`NAME_TABLE`] (its length and first and last bytes).
const fn name_slot(name: &[u8]) -> usize {
    match name {
        [] => 0,
        [first, ..] => {
            let last = name[name.len() - 1];
            (name.len() * 31 + *first as usize * 7 + last as usize) % NAME_SLOTS
        }
    }
}

/// The followed syscalls' names, open-addressed by [`name_slot`]: the index into
/// [`Syscall::ALL`] of the name in each slot; half the slots stay empty, so probes end.
static NAME_TABLE: [Option<u8>; NAME_SLOTS] = {
    let mut table = [None; NAME_SLOTS];
    let mut index = 0;
    while index < SYSCALL_COUNT {
        let mut slot = name_slot(Syscall::ALL[index].name().as_bytes());
        while table[slot].is_some() {
            slot = (slot + 1) % NAME_SLOTS;
        }
        table[slot] = Some(index as u8);
        index += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscalls_are_found_by_name_and_nothing_else_is() {
        for syscall in Syscall::ALL {
            assert_eq!(Syscall::from_name(syscall.name()), Some(syscall));
            assert_eq!(syscall.info().syscall, syscall);
        }
        for other in [
            "",
            "c",
            "clos",
            "closed",
            "epoll_ctl",
            "select2",
            "openat3",
            "Close",
        ] {
            assert_eq!(Syscall::from_name(other), None, "{other}");
        }
    }

    #[test]
    fn derived_sets() {
        assert_eq!(ALLOCATING.len(), 14);
        assert!(ALLOCATING.contains(&Syscall::Socketpair));
        assert!(!ALLOCATING.contains(&Syscall::Dup2));
        assert!(LOGGED.contains(&Syscall::Dup3));
        assert!(!LOGGED.contains(&Syscall::Read));
        // Every followed syscall has a program, or nothing would follow it.
        assert!(SYSCALLS.iter().all(|info| info.enter || info.exit));
    }
}
