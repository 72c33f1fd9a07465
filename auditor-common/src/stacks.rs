//! What the probe hands the user side with `--stacks`: the user stack of a call that took
//! a site's rare arm (its registers and the top of its stack, copied, to be unwound in user
//! space with DWARF call-frame information), the sampling that bounds how many are taken,
//! and the counters of what was taken and what was not.

use crate::{COMM_LEN, Counts, SITE_COUNT};

/// Bits of a site's `STACK_ARMS` entry: which arms take a stack.
pub mod arms {
    /// A call that took the branch.
    pub const TAKEN: u32 = 1;
    /// A call that did not.
    pub const NOT_TAKEN: u32 = 2;
}

/// Whether a call's `counts` at a site whose `STACK_ARMS` entry is `arms` take a stack;
/// `so_far` are the site's counts so far (this process's, on this CPU, this call's
/// included). A site asked for both arms (unhinted: its rare arm is its minority, known
/// only at the end) takes the arm that is the minority so far.
pub const fn wanted(arms: u32, counts: &Counts, so_far: &Counts) -> bool {
    let both = arms & arms::TAKEN != 0 && arms & arms::NOT_TAKEN != 0;
    let taken = counts.taken > 0 && (!both || so_far.taken <= so_far.not_taken);
    let not_taken = counts.not_taken > 0 && (!both || so_far.not_taken <= so_far.taken);
    (arms & arms::TAKEN != 0 && taken) || (arms & arms::NOT_TAKEN != 0 && not_taken)
}

/// Pages of user stack copied per sample, from the page that holds the stack pointer up:
/// 12 to 16 KiB above the stack pointer (perf's `--call-graph dwarf` copies 8 KiB).
pub const STACK_PAGES: usize = 4;
pub const PAGE: usize = 4096;
pub const STACK_BYTES: usize = STACK_PAGES * PAGE;

/// Every call of a rare arm takes a stack until this many per process and set of rare
/// sites...
pub const EVERY_CALL_UNTIL: u64 = 64;
/// ... and then one in this many.
pub const THEN_ONE_IN: u64 = 64;
/// Stack bytes copied per CPU per second, at most (about 1000 samples).
pub const BYTES_PER_CPU_SECOND: u64 = 16 << 20;
/// The ring buffer the samples travel in (a power of two pages).
pub const RING_BYTES: u32 = 8 << 20;

/// Whether the `seen`-th (from 0) such call takes a stack.
pub const fn sampled(seen: u64) -> bool {
    seen < EVERY_CALL_UNTIL || (seen - EVERY_CALL_UNTIL) % THEN_ONE_IN == THEN_ONE_IN - 1
}

/// The kind of a ring-buffer record: its first u32.
pub mod kind {
    /// A [`StackSample`].
    pub const SAMPLE: u32 = 1;
    /// A [`MappingEvent`]: the process exec'd; what it had mapped is gone.
    pub const EXEC: u32 = 2;
    /// A [`MappingEvent`]: the process mapped code (the dynamic loader loading a library,
    /// dlopen, a JIT's anonymous code) or made memory executable (mprotect): the user side
    /// reads its mappings again while it runs.
    pub const MAP_CODE: u32 = 3;
    /// A [`MappingEvent`]: the process unmapped memory. Most unmaps are of data, so the
    /// user side reads its mappings again only when a stack of it comes, and names no
    /// frame after what was mapped before.
    pub const UNMAP: u32 = 4;
}

/// A set of sites, a bit each (`1 << site`).
pub type SiteBits = u64;

/// The bit of `site` in a [`SiteBits`]; the catalogue fits in one (checked at build).
pub const fn site_bit(site: crate::Site) -> SiteBits {
    const { assert!(SITE_COUNT <= SiteBits::BITS as usize) };
    1 << site as u32
}

/// The sites a call went the rare way at, with its evaluations of each: kept per CPU
/// while the call is counted, then copied into its sample.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RareSites {
    /// Bit `1 << site` for each site the call went the rare way at.
    pub sites: SiteBits,
    /// Bit `1 << site` for each site (that takes stacks) the call evaluated so far.
    pub evaluated: SiteBits,
    /// The call's evaluations, indexed by `Site`; meaningful where `sites` has the bit
    /// (written over at a site's first evaluation in a call).
    pub counts: [Counts; SITE_COUNT],
}

/// One call's stack, taken when it went a site's rare way.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackSample {
    /// `kind::SAMPLE`.
    pub kind: u32,
    pub pid: u32,
    pub tid: u32,
    pub _pad: u32,
    /// The name the process's counts go under.
    pub comm: [u8; COMM_LEN],
    /// The sites and the call's evaluations of them.
    pub rare: RareSites,
    /// User registers at the syscall: instruction, stack and frame pointers.
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// User address of `stack[0]`: the start of the stack pointer's page.
    pub stack_base: u64,
    /// Bytes of `stack` read (whole pages; 0 when the stack could not be read).
    pub stack_len: u64,
    pub stack: [u8; STACK_BYTES],
}

/// A traced process's mappings changed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MappingEvent {
    /// `kind::EXEC`, `kind::MAP_CODE` or `kind::UNMAP`.
    pub kind: u32,
    pub pid: u32,
}

/// `PROT_EXEC` of mmap's and mprotect's `prot`.
pub const PROT_EXEC: u64 = 4;

/// The key of the count of rare calls seen, for sampling: per process and set of sites
/// the calls went the rare way at (a bit per site).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    pub pid: u32,
    pub _pad: u32,
    pub sites: SiteBits,
}

/// Indexes of the probe's per-CPU stack counters (`maps::STACK_STATS`).
pub mod stat {
    /// Samples sent.
    pub const TAKEN: u32 = 0;
    /// Rare calls sampling let go by.
    pub const NOT_SAMPLED: u32 = 1;
    /// Rare calls over the byte cap.
    pub const OVER_BUDGET: u32 = 2;
    /// Rare calls that found the ring buffer full (the user side fell behind).
    pub const RING_FULL: u32 = 3;
    /// Rare calls with no room to keep their sampling count.
    pub const NO_ROOM: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// This CPU's byte budget for the current second.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Budget {
    pub second_start_ns: u64,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_sampled_until_the_limit_then_one_in_n() {
        let sampled_of = |calls: u64| (0..calls).filter(|&seen| sampled(seen)).count() as u64;
        assert_eq!(sampled_of(EVERY_CALL_UNTIL), EVERY_CALL_UNTIL);
        assert_eq!(
            sampled_of(EVERY_CALL_UNTIL + THEN_ONE_IN - 1),
            EVERY_CALL_UNTIL
        );
        assert_eq!(
            sampled_of(EVERY_CALL_UNTIL + 10 * THEN_ONE_IN),
            EVERY_CALL_UNTIL + 10
        );
    }

    #[test]
    fn a_stack_is_wanted_only_for_the_arms_asked_for() {
        let taken = Counts::new(1, 5, 0);
        let not_taken = Counts::new(0, 5, 2);
        let so_far = Counts::new(100, 100, 0);
        assert!(wanted(arms::TAKEN, &taken, &so_far) && !wanted(arms::TAKEN, &not_taken, &so_far));
        assert!(wanted(arms::NOT_TAKEN, &not_taken, &so_far));
        assert!(!wanted(0, &taken, &so_far));
        assert!(!wanted(arms::TAKEN, &Counts::new(0, 0, 9), &so_far));
        // Both arms asked for: the minority so far.
        let both = arms::TAKEN | arms::NOT_TAKEN;
        let one = Counts::new(1, 0, 0);
        assert!(wanted(both, &one, &Counts::new(3, 7, 0)));
        assert!(!wanted(both, &one, &Counts::new(8, 7, 0)));
        assert!(wanted(both, &Counts::new(0, 1, 0), &Counts::new(8, 7, 0)));
    }
}
