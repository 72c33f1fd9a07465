//! `--stacks`: the user stack of a call that took a site's rare arm, sampled and sent to
//! the user side, which unwinds it with DWARF call-frame information (Debian's code has
//! no frame pointers to walk here) and symbolizes it.
//!
//! Without `--stacks` the verifier prunes all of it (read-only globals). With it, each
//! recorded site's counts are noted in per-CPU memory and tested there; a call that went a
//! rare way is sampled per process and set of rare sites (`stacks::sampled`) and within a
//! per-CPU byte budget per second; every rare call that takes no stack is counted by why,
//! so the report can say how many of the rare calls it has stacks of.

use auditor_common::{
    Counts, ProcessKey, SITE_COUNT, Site, maps,
    stacks::{
        self, Budget, MappingEvent, PAGE, RareSites, STACK_PAGES, SampleKey, SiteBits, StackSample,
        kind, stat,
    },
    syscalls::pt_regs,
};
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    cty::c_void,
    helpers::generated::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
    },
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};

use crate::{
    arg,
    args::Registers,
    in_flight::{self, Call, Kind},
    target::{self, global},
    task::Task,
};

/// Per site, the arms that take a stack (`stacks::arms`); all 0 without `--stacks`.
#[unsafe(no_mangle)]
static STACK_ARMS: [u32; SITE_COUNT] = [0; SITE_COUNT];

/// 1 with `--stacks`.
#[unsafe(no_mangle)]
static STACKS_ON: u32 = 0;

#[map]
static STACKS: RingBuf = RingBuf::with_byte_size(stacks::RING_BYTES, 0);

#[map]
static STACK_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Rare calls seen per process and set of rare sites, for sampling. Updated without atomics: two threads
/// of a process racing may sample one call more or less, never miscount (what is counted
/// is in `COUNTS`; what was sampled is what arrives).
#[map]
static SAMPLED: HashMap<SampleKey, u64> =
    HashMap::with_max_entries(maps::SAMPLED_CAPACITY, BPF_F_NO_PREALLOC);

#[map]
static BUDGET: PerCpuArray<Budget> = PerCpuArray::with_max_entries(1, 0);

/// The rare sites of the call being counted on this CPU (programs attached through perf
/// run with preemption off, so a call's sites are never mixed with another's).
#[map]
static RARE_SITES: PerCpuArray<RareSites> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's record of the call about to be counted, with `--stacks` (null without: the
/// verifier prunes the rest): no site evaluated yet (the counts of a site are written over
/// at its first evaluation, so they need no clearing).
#[inline(always)]
pub fn begin_call() -> *mut RareSites {
    if global(&STACKS_ON) == 0 {
        return core::ptr::null_mut();
    }
    let Some(sites) = RARE_SITES.get_ptr_mut(0) else {
        return core::ptr::null_mut();
    };
    // SAFETY: this CPU's entry, not shared within a program run (see `RARE_SITES`).
    // Volatile: the two stores otherwise became a call of `memset` on every counted call.
    unsafe {
        core::ptr::write_volatile(&raw mut (*sites).sites, 0);
        core::ptr::write_volatile(&raw mut (*sites).evaluated, 0);
    }
    sites
}

/// Adds one evaluation's `counts` at `site` to the call's (`so_far`: the site's counts in
/// the row, these included): if the call's evaluations there went the way `--stacks` asks
/// for, the site is noted in `sites`, and the call's stack is taken at the end of the
/// program run ([`take_if_rare`]).
///
/// The call's counts are tested as read back from map memory, and what the test found is
/// written there: the verifier tracks neither, so the states after either outcome are one
/// (tested where they were computed, or noted on the stack, each combination of a
/// handler's outcomes would be verified apart: seconds of loading).
#[inline(always)]
pub fn note(sites: *mut RareSites, site: Site, counts: &Counts, so_far: &Counts) {
    let arms = global(&STACK_ARMS[site as usize]);
    if sites.is_null() || arms == 0 {
        return;
    }
    // SAFETY: this CPU's entry, not shared within a program run (see `RARE_SITES`).
    let sites = unsafe { &mut *sites };
    let Some(slot) = sites.counts.get_mut(site as usize) else {
        return;
    };
    let bit = stacks::site_bit(site);
    // SAFETY: a valid, aligned map value (read as the verifier cannot track it).
    if unsafe { core::ptr::read_volatile(&sites.evaluated) } & bit == 0 {
        *slot = *counts;
        sites.evaluated |= bit;
    } else {
        slot.add(counts);
    }
    // SAFETY: a valid, aligned map value just written.
    let call = unsafe { core::ptr::read_volatile(slot) };
    if stacks::wanted(arms, &call, so_far) {
        sites.sites |= bit;
    }
}

/// At the end of a call's program run: its stack, if it went a rare way somewhere.
#[inline(always)]
pub fn take_if_rare(sites: *const RareSites, process: &ProcessKey) {
    // SAFETY: this CPU's entry, not shared within a program run (see `RARE_SITES`).
    if !sites.is_null() && unsafe { core::ptr::read_volatile(&(*sites).sites) } != 0 {
        take(process);
    }
}

/// Tells the user side that `pid`'s mappings changed (`kind::EXEC`, `kind::MAP_CODE`),
/// with `--stacks`.
pub fn mappings_changed(kind: u32, pid: u32) {
    if global(&STACKS_ON) == 0 {
        return;
    }
    if let Some(mut entry) = STACKS.reserve::<MappingEvent>(0) {
        entry.write(MappingEvent { kind, pid });
        entry.submit(0);
    } else {
        count(stat::RING_FULL);
    }
}

/// A traced thread's call that changes its process's mappings (an mmap of code, an
/// mprotect that makes memory executable, an munmap), to tell of at its exit.
#[repr(C)]
#[derive(Clone, Copy)]
struct MappingCall {
    pid: u32,
    /// A `stacks::kind`.
    kind: u32,
}

impl Call for MappingCall {
    const KIND: Kind = Kind::Mapping;

    /// Told at once: the user side reads the mappings before the change, which it may
    /// miss, rather than never.
    fn unfollowed(&self) {
        mappings_changed(self.kind, self.pid);
    }
}

/// Notes a traced thread's call of `kind` that changes its process's mappings, when
/// `changes`.
fn mapping_enter(changes: bool, kind: u32) -> u32 {
    if global(&STACKS_ON) == 0 || !changes {
        return 0;
    }
    if let Some(caller) = target::current() {
        in_flight::stash(
            &MappingCall {
                pid: caller.process.key.pid,
                kind,
            },
            &caller,
        );
    }
    0
}

/// ... and the mappings have changed: tells the user side, which reads them while the
/// process still runs (it may have exited by the time its stacks come).
fn mapping_exit() -> u32 {
    if global(&STACKS_ON) == 0 {
        return 0;
    }
    if let Some((call, _)) = in_flight::take::<MappingCall>() {
        mappings_changed(call.kind, call.pid);
    }
    0
}

/// A traced process maps code: the loader loading a library, dlopen, a JIT.
#[tracepoint(category = "syscalls", name = "sys_enter_mmap")]
pub fn mmap_enter(ctx: TracePointContext) -> u32 {
    mapping_enter(
        arg!(&ctx, Mmap, "prot") & stacks::PROT_EXEC != 0,
        kind::MAP_CODE,
    )
}

#[tracepoint(category = "syscalls", name = "sys_exit_mmap")]
pub fn mmap_exit(_ctx: TracePointContext) -> u32 {
    mapping_exit()
}

/// A traced process makes memory executable (a JIT).
#[tracepoint(category = "syscalls", name = "sys_enter_mprotect")]
pub fn mprotect_enter(ctx: TracePointContext) -> u32 {
    mapping_enter(
        arg!(&ctx, Mprotect, "prot") & stacks::PROT_EXEC != 0,
        kind::MAP_CODE,
    )
}

#[tracepoint(category = "syscalls", name = "sys_exit_mprotect")]
pub fn mprotect_exit(_ctx: TracePointContext) -> u32 {
    mapping_exit()
}

/// A traced process unmaps memory (code among it, maybe).
#[tracepoint(category = "syscalls", name = "sys_enter_munmap")]
pub fn munmap_enter(_ctx: TracePointContext) -> u32 {
    mapping_enter(true, kind::UNMAP)
}

#[tracepoint(category = "syscalls", name = "sys_exit_munmap")]
pub fn munmap_exit(_ctx: TracePointContext) -> u32 {
    mapping_exit()
}

fn count(index: u32) {
    crate::failures::increment(&STACK_STATS, index);
}

/// Whether sampling takes a call of `pid` that went the rare way at `sites` (a bit per
/// site), counting it: calls are sampled per process and set of rare sites.
fn sampled(pid: u32, sites: SiteBits) -> bool {
    let key = SampleKey {
        pid,
        _pad: 0,
        sites,
    };
    let slot = match SAMPLED.get_ptr_mut(key) {
        Some(slot) => slot,
        None => {
            let _ = SAMPLED.insert(key, 0, u64::from(BPF_NOEXIST));
            match SAMPLED.get_ptr_mut(key) {
                Some(slot) => slot,
                None => {
                    count(stat::NO_ROOM);
                    return false;
                }
            }
        }
    };
    // SAFETY: a pointer into the map's value, valid for this program run.
    let seen = unsafe { *slot };
    // SAFETY: as above.
    unsafe { *slot = seen + 1 };
    if !stacks::sampled(seen) {
        count(stat::NOT_SAMPLED);
        return false;
    }
    true
}

/// Whether this CPU's budget for the current second has room for one more sample.
fn within_budget() -> bool {
    let Some(budget) = BUDGET.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's budget, not shared within a program run.
    let budget = unsafe { &mut *budget };
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if now.wrapping_sub(budget.second_start_ns) >= 1_000_000_000 {
        budget.second_start_ns = now;
        budget.bytes = 0;
    }
    let size = core::mem::size_of::<StackSample>() as u64;
    if budget.bytes + size > stacks::BYTES_PER_CPU_SECOND {
        count(stat::OVER_BUDGET);
        return false;
    }
    budget.bytes += size;
    true
}

/// Takes the calling thread's stack, for the rare sites `note` found, if sampling and
/// the budget let it: its user registers (the task's saved `pt_regs`) and the pages of its
/// stack from the stack pointer's up, as far as they can be read.
#[inline(never)]
fn take(process: &ProcessKey) {
    let Some(rare) = RARE_SITES.get_ptr(0) else {
        return;
    };
    // SAFETY: this CPU's entry (see `RARE_SITES`).
    let rare = unsafe { &*rare };
    if !sampled(process.pid, rare.sites) || !within_budget() {
        return;
    }
    let Some(mut entry) = STACKS.reserve::<StackSample>(0) else {
        count(stat::RING_FULL);
        return;
    };
    let sample = entry.as_mut_ptr();
    let registers = Registers::of(Task::current());
    let (ip, sp, bp) = (
        registers.at(pt_regs::IP),
        registers.at(pt_regs::SP),
        registers.at(pt_regs::BP),
    );
    let base = sp & !(PAGE as u64 - 1);
    // SAFETY: `sample` points to the reserved record; every field is written before it is
    // submitted, the stack bytes as far as `stack_len` says.
    unsafe {
        (*sample).kind = kind::SAMPLE;
        (*sample).pid = process.pid;
        (*sample).tid = bpf_get_current_pid_tgid() as u32;
        (*sample)._pad = 0;
        (*sample).comm = process.comm;
        // One helper call, where `copy_nonoverlapping` of its 1,240 bytes became a call of
        // `memcpy`, a loop the verifier walked byte by byte in every program: most of what
        // it walked with `--stacks`. Map memory; it cannot fail.
        let _ = bpf_probe_read_kernel(
            core::ptr::addr_of_mut!((*sample).rare).cast::<c_void>(),
            core::mem::size_of::<RareSites>() as u32,
            core::ptr::from_ref(rare).cast::<c_void>(),
        );
        (*sample).ip = ip;
        (*sample).sp = sp;
        (*sample).bp = bp;
        (*sample).stack_base = base;
        let mut len = 0;
        for page in 0..STACK_PAGES {
            let read = bpf_probe_read_user(
                core::ptr::addr_of_mut!((*sample).stack)
                    .cast::<u8>()
                    .add(page * PAGE)
                    .cast::<c_void>(),
                PAGE as u32,
                (base + (page * PAGE) as u64) as *const c_void,
            );
            if read != 0 {
                // Past the top of the stack's mapping (or a page not resident).
                break;
            }
            len += PAGE as u64;
        }
        (*sample).stack_len = len;
    }
    entry.submit(0);
    count(stat::TAKEN);
}
