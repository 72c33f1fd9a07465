//! The checks an open makes before the path walk (fs/open.c, 7.2): `sys_openat2`'s size
//! tests and `do_sys_openat2`'s `unlikely(err)` on `build_open_flags()`, decided from the
//! arguments (and openat2's `struct open_how`, read as the kernel copies it).

use crate::{
    Evaluation,
    catalogue::{Recorder, unlikely},
};

// include/uapi/asm-generic/fcntl.h (x86_64).
pub const O_WRONLY: u64 = 1 << 0;
pub const O_RDWR: u64 = 1 << 1;
pub const O_CREAT: u64 = 1 << 6;
pub const O_TRUNC: u64 = 1 << 9;
pub const O_LARGEFILE: u64 = 1 << 15;
pub const O_DIRECTORY: u64 = 1 << 16;
pub const O_NOFOLLOW: u64 = 1 << 17;
pub const O_CLOEXEC: u64 = 1 << 19;
pub const O_PATH: u64 = 1 << 21;
pub const O_TMPFILE_BIT: u64 = 1 << 22;
pub const O_EMPTYPATH: u64 = 1 << 26;
/// include/uapi/linux/openat2.h: openat2 only, in the upper half of `how.flags`.
pub const OPENAT2_REGULAR: u64 = 1 << 32;

/// include/linux/fcntl.h: every flag open and openat keep (the others are dropped).
pub const VALID_OPEN_FLAGS: u64 = O_WRONLY | O_RDWR | ((1 << 23) - O_CREAT) | O_EMPTYPATH;
pub const VALID_OPENAT2_FLAGS: u64 = VALID_OPEN_FLAGS | OPENAT2_REGULAR;

/// The flags `build_open_flags()` knows, which depend on the release, as the trees of
/// 6.1, 6.12 and 7.2 and the machine's 6.18 show: bit 26 is `__FMODE_NONOTIFY`, stripped
/// from openat2's flags unchecked through 6.12, refused by 6.18, and 7.2's O_EMPTYPATH;
/// openat2's OPENAT2_REGULAR (bit 32) came in 7.2 too. Releases between are taken as the
/// next one known (6.13 to 6.17 as 6.18, 6.19 to 7.1 as 7.2). As u32 for the probe's
/// load-time global.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagSet {
    /// Through 6.12: bit 26 stripped before the test, OPENAT2_REGULAR refused.
    NonotifyStripped = 0,
    /// 6.18: bit 26 and OPENAT2_REGULAR refused.
    Before = 1,
    /// 7.2: O_EMPTYPATH and OPENAT2_REGULAR taken.
    EmptyPath = 2,
}

/// Bit 26 before 7.2: `__FMODE_NONOTIFY`, which build_open_flags() strips through 6.12.
const FMODE_NONOTIFY: u64 = O_EMPTYPATH;

impl FlagSet {
    /// The newest release that strips bit 26, and the newest without O_EMPTYPATH.
    pub const LAST_STRIPPED: (u32, u32) = (6, 12);
    pub const LAST_BEFORE: (u32, u32) = (6, 18);

    /// Whether the kernel reads an open's name before it allocates the fd (so that an
    /// empty name's ENOENT comes first): through 6.18 (getname(), then
    /// get_unused_fd_flags()). From 6.19, `FD_ADD()` allocates first and fails after: the
    /// name, an error or not, goes to do_file_open() inside it. The same releases as the
    /// flags' sets (6.19 to 7.1 taken as 7.2).
    pub const fn name_before_fd(self) -> bool {
        !matches!(self, FlagSet::EmptyPath)
    }

    /// The set of a kernel of `release` (major, minor).
    pub const fn of(release: (u32, u32)) -> FlagSet {
        if !later(release, Self::LAST_STRIPPED) {
            FlagSet::NonotifyStripped
        } else if !later(release, Self::LAST_BEFORE) {
            FlagSet::Before
        } else {
            FlagSet::EmptyPath
        }
    }

    pub const fn from_u32(value: u32) -> FlagSet {
        match value {
            0 => FlagSet::NonotifyStripped,
            1 => FlagSet::Before,
            _ => FlagSet::EmptyPath,
        }
    }

    /// The bits of 7.2's sets these releases do not take.
    const fn newer_bits(self) -> u64 {
        match self {
            FlagSet::NonotifyStripped | FlagSet::Before => O_EMPTYPATH | OPENAT2_REGULAR,
            FlagSet::EmptyPath => 0,
        }
    }

    /// What build_open_flags() strips from the flags before testing them.
    const fn stripped(self) -> u64 {
        match self {
            FlagSet::NonotifyStripped => FMODE_NONOTIFY | O_CLOEXEC,
            FlagSet::Before | FlagSet::EmptyPath => O_CLOEXEC,
        }
    }

    /// What open and openat keep.
    pub const fn open(self) -> u64 {
        VALID_OPEN_FLAGS & !self.newer_bits()
    }

    /// What openat2 accepts.
    pub const fn openat2(self) -> u64 {
        VALID_OPENAT2_FLAGS & !self.newer_bits()
    }

    /// What O_PATH keeps.
    const fn path(self) -> u64 {
        O_PATH_FLAGS & !self.newer_bits()
    }
}

/// Whether release `a` is later than `b`.
const fn later(a: (u32, u32), b: (u32, u32)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 > b.1)
}

/// RESOLVE_NO_XDEV .. RESOLVE_CACHED.
pub const VALID_RESOLVE_FLAGS: u64 = 0x3f;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;
pub const RESOLVE_CACHED: u64 = 0x20;
/// fs/open.c: what O_PATH keeps.
const O_PATH_FLAGS: u64 = O_DIRECTORY | O_NOFOLLOW | O_PATH | O_CLOEXEC | O_EMPTYPATH;
/// S_IALLUGO: the permission and set-id bits of a mode.
const S_IALLUGO: u64 = 0o7777;

/// include/linux/fcntl.h: the first published `struct open_how`, and the page size that
/// bounds what openat2 copies.
pub const OPEN_HOW_SIZE_VER0: u64 = 24;
pub const PAGE_SIZE: u64 = 4096;

/// `struct open_how` as user space passes it to openat2 (and as `build_open_how()` makes
/// it for open, openat and creat).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenHow {
    pub flags: u64,
    pub mode: u64,
    pub resolve: u64,
}

/// `WILL_CREATE()`.
const fn will_create(flags: u64) -> bool {
    flags & (O_CREAT | O_TMPFILE_BIT) != 0
}

/// `build_open_how()`: what open, openat and creat pass on (their flags an int, their
/// mode a umode_t; force_o_largefile() on 64-bit).
pub const fn build_open_how(flags: u64, mode: u64, set: FlagSet) -> OpenHow {
    let mut flags = (flags as u32 as u64 | O_LARGEFILE) & set.open();
    if flags & O_PATH != 0 {
        flags &= set.path();
    }
    let mode = if will_create(flags) {
        mode as u16 as u64 & S_IALLUGO
    } else {
        0
    };
    OpenHow {
        flags,
        mode,
        resolve: 0,
    }
}

/// creat(path, mode) is open(path, O_CREAT | O_WRONLY | O_TRUNC, mode).
pub const CREAT_FLAGS: u64 = O_CREAT | O_WRONLY | O_TRUNC;

/// `build_open_flags()` returns an error for `how` on a kernel of flag `set`: -EINVAL, or
/// -EAGAIN for RESOLVE_CACHED with a create, a truncate or a tmpfile, its last test.
pub const fn open_flags_refused(how: &OpenHow, set: FlagSet) -> bool {
    let flags = how.flags & !set.stripped();
    let writes = matches!(flags & 0o3, 1..=3);
    flags & !set.openat2() != 0
        || how.resolve & !VALID_RESOLVE_FLAGS != 0
        || (how.resolve & RESOLVE_BENEATH != 0 && how.resolve & RESOLVE_IN_ROOT != 0)
        || (will_create(flags) && how.mode & !S_IALLUGO != 0)
        || (!will_create(flags) && how.mode != 0)
        || flags & (O_DIRECTORY | O_CREAT) == O_DIRECTORY | O_CREAT
        || (flags & O_TMPFILE_BIT != 0 && (flags & O_DIRECTORY == 0 || !writes))
        || flags & (O_DIRECTORY | OPENAT2_REGULAR) == O_DIRECTORY | OPENAT2_REGULAR
        || (flags & O_PATH != 0 && flags & !set.path() != 0)
        || (how.resolve & RESOLVE_CACHED != 0 && flags & (O_TRUNC | O_CREAT | O_TMPFILE_BIT) != 0)
}

/// `do_sys_openat2()`: `if (unlikely(err))` on `build_open_flags()` (None: `how` could not
/// be read). Whether it refused the call.
#[cfg_attr(target_arch = "bpf", inline(always))]
fn do_sys_openat2<R: Recorder>(recorder: &mut R, how: Option<&OpenHow>, set: FlagSet) -> bool {
    let refused = match how {
        Some(how) => Evaluation::from_taken(open_flags_refused(how, set)),
        None => Evaluation::Undecided,
    };
    unlikely!(recorder, OpenBadFlags, refused) == Evaluation::Taken
}

/// open, openat (`flags`, `mode` as passed) and creat (`CREAT_FLAGS`): whether the checks
/// refused the call, before its fd allocation.
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn open<R: Recorder>(recorder: &mut R, flags: u64, mode: u64, set: FlagSet) -> bool {
    do_sys_openat2(recorder, Some(&build_open_how(flags, mode, set)), set)
}

/// openat2 with `size` and the struct it points to (None: unreadable). The kernel copies
/// `size` bytes: past the first 24 it refuses anything but zeros (-E2BIG), which is
/// not read here, so a larger struct leaves the flags test undecided. Whether the checks
/// refused the call, as [`open`].
#[cfg_attr(target_arch = "bpf", inline(always))]
pub fn openat2<R: Recorder>(
    recorder: &mut R,
    size: u64,
    how: Option<&OpenHow>,
    set: FlagSet,
) -> bool {
    let small = unlikely!(
        recorder,
        Openat2SizeTooSmall,
        Evaluation::from_taken(size < OPEN_HOW_SIZE_VER0)
    );
    if small == Evaluation::Taken {
        return true;
    }
    let big = unlikely!(
        recorder,
        Openat2SizeTooBig,
        Evaluation::from_taken(size > PAGE_SIZE)
    );
    if big == Evaluation::Taken {
        return true;
    }
    do_sys_openat2(recorder, how.filter(|_| size == OPEN_HOW_SIZE_VER0), set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, Site, catalogue::Counters};

    #[test]
    fn valid_flags_are_the_headers() {
        // The header's list: O_WRONLY, O_RDWR, O_CREAT (bit 6) .. __O_TMPFILE (bit 22),
        // O_EMPTYPATH (bit 26).
        let bits = [0, 1].into_iter().chain(6..=22).chain([26]);
        assert_eq!(VALID_OPEN_FLAGS, bits.fold(0, |all, bit| all | 1 << bit));
    }

    #[test]
    fn the_flags_by_release() {
        use FlagSet::*;
        assert_eq!(FlagSet::of((6, 1)), NonotifyStripped);
        assert_eq!(FlagSet::of((6, 12)), NonotifyStripped);
        assert_eq!(FlagSet::of((6, 18)), Before);
        assert_eq!(FlagSet::of((7, 2)), EmptyPath);
        let how = |flags| OpenHow {
            flags,
            mode: 0,
            resolve: 0,
        };
        // Bit 26 from openat2: ignored through 6.12, refused by 6.18, O_EMPTYPATH in 7.2.
        assert!(!open_flags_refused(&how(O_EMPTYPATH), NonotifyStripped));
        assert!(open_flags_refused(&how(O_EMPTYPATH), Before));
        assert!(!open_flags_refused(&how(O_EMPTYPATH), EmptyPath));
        // OPENAT2_REGULAR is 7.2's alone; open and openat drop bit 26 before 7.2.
        assert!(open_flags_refused(&how(OPENAT2_REGULAR), NonotifyStripped));
        assert!(open_flags_refused(&how(OPENAT2_REGULAR), Before));
        for set in [NonotifyStripped, Before] {
            assert_eq!(build_open_how(O_EMPTYPATH, 0, set).flags, O_LARGEFILE);
            assert_eq!(FlagSet::from_u32(set as u32), set);
        }
        assert_eq!(FlagSet::from_u32(EmptyPath as u32), EmptyPath);
    }

    #[test]
    fn build_open_flags_refusals() {
        let set = FlagSet::EmptyPath;
        let open =
            |flags: u64, mode: u64| open_flags_refused(&build_open_how(flags, mode, set), set);
        assert!(!open(0, 0));
        assert!(!open(O_CREAT | O_WRONLY, 0o644));
        // Unknown bits and a mode without O_CREAT are dropped for open and openat.
        assert!(!open(1 << 30 | 1 << 25, 0o777));
        assert!(open(O_CREAT | O_DIRECTORY, 0o644));
        // __O_TMPFILE needs O_DIRECTORY (O_TMPFILE is both) and write access.
        assert!(open(O_TMPFILE_BIT | O_RDWR, 0o600));
        assert!(open(O_TMPFILE_BIT | O_DIRECTORY, 0o600));
        assert!(!open(O_TMPFILE_BIT | O_DIRECTORY | O_RDWR, 0o600));
        // O_PATH keeps only its own flags for open: no error.
        assert!(!open(O_PATH | O_CREAT | O_WRONLY, 0o600));
        let how = |flags, mode, resolve| {
            open_flags_refused(
                &OpenHow {
                    flags,
                    mode,
                    resolve,
                },
                set,
            )
        };
        // openat2 checks what open drops.
        assert!(how(1 << 30, 0, 0));
        assert!(how(0, 0o644, 0));
        assert!(how(0, 0, 0x40));
        assert!(how(0, 0, RESOLVE_BENEATH | RESOLVE_IN_ROOT));
        assert!(how(O_PATH | O_WRONLY, 0, 0));
        assert!(how(O_DIRECTORY | OPENAT2_REGULAR, 0, 0));
        assert!(!how(OPENAT2_REGULAR | O_CLOEXEC, 0, 0x04));
        // RESOLVE_CACHED cannot create, truncate or make a tmpfile (-EAGAIN).
        assert!(!how(O_DIRECTORY, 0, RESOLVE_CACHED));
        assert!(how(O_CREAT | O_WRONLY, 0o600, RESOLVE_CACHED));
        assert!(how(O_TRUNC | O_WRONLY, 0, RESOLVE_CACHED));
        assert!(how(
            O_TMPFILE_BIT | O_DIRECTORY | O_RDWR,
            0o600,
            RESOLVE_CACHED
        ));
        assert!(!how(O_CREAT | O_WRONLY, 0o600, 0));
    }

    #[test]
    fn openat2_sizes_come_first() {
        let run = |size, how: Option<&OpenHow>| {
            let mut counters = Counters::default();
            let _ = openat2(&mut counters, size, how, FlagSet::EmptyPath);
            [
                counters.get(Site::Openat2SizeTooSmall),
                counters.get(Site::Openat2SizeTooBig),
                counters.get(Site::OpenBadFlags),
            ]
        };
        let (t, n, u, z) = (
            Counts::new(1, 0, 0),
            Counts::new(0, 1, 0),
            Counts::new(0, 0, 1),
            Counts::ZERO,
        );
        let fine = OpenHow::default();
        assert_eq!(run(12, Some(&fine)), [t, z, z]);
        assert_eq!(run(8192, Some(&fine)), [n, t, z]);
        assert_eq!(run(24, Some(&fine)), [n, n, n]);
        assert_eq!(run(24, None), [n, n, u]);
        // Past the first 24 bytes the copy may refuse: the flags test is undecided.
        assert_eq!(run(32, Some(&fine)), [n, n, u]);
    }
}
