//! The user memory one call's arguments point to, read in one helper call where it lies
//! close together: a read of user memory costs some 80 ns here whatever its size, so a
//! select with a timeout and three sets, four reads, costs one. Programs keep their sets
//! and timeout as locals side by side (CPython's `select.select` keeps three `fd_set`s and
//! a timeval; glibc's `select` passes them on to `pselect6` with its own timespec a frame
//! below), so one span usually holds all of them; where it does not, or cannot be read
//! whole, each is read alone, and what is counted is the same. The span is map memory, and
//! a read into map memory costs some 45 ns more than one onto the stack: a span pays where
//! it saves a read, never for one read alone ([`read`]).

use aya_ebpf::{
    cty::c_void,
    helpers::{bpf_probe_read_user, generated},
    macros::map,
    maps::PerCpuArray,
};

/// The longest span read at once: three sets of 1024 fds and a timeout with room between
/// them. Copying the bytes between costs less than a second read.
pub const BYTES: usize = 1024;
const WORDS: usize = BYTES / 8;

/// The span read by this program run (`len` 0: none), in per-CPU map memory: too large for
/// the stack, and programs on syscall tracepoints run with preemption off, so no other
/// program run shares it.
#[repr(C)]
struct Span {
    /// The address of `words[0]`, a multiple of 8.
    base: u64,
    /// Bytes read from `base`.
    len: u64,
    /// A kernel address in `words`, as a number (see [`address`]).
    copy: u64,
    words: [u64; WORDS],
}

#[map]
static SPAN: PerCpuArray<Span> = PerCpuArray::with_max_entries(1, 0);

/// Proof that this program run read the span ([`read`]): what an earlier run left, of
/// another call and maybe another process, is never used.
pub struct Spanned(());

/// Reads the user memory from the lowest of `ranges` (address, bytes; a null address is
/// none) to the end of the highest, when two or more are passed and it is no more than
/// [`BYTES`] long and readable whole; else this run has no span, and every read through
/// [`Spanned`] reads alone (one range alone costs less read alone, onto the stack or
/// straight into its walk's buffer, than through the span's map memory).
#[inline(always)]
pub fn read(ranges: &[(u64, u64)]) -> Spanned {
    read_span(ranges);
    Spanned(())
}

#[inline(always)]
fn read_span(ranges: &[(u64, u64)]) {
    let Some(span) = SPAN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's span; see `Span`.
    let span = unsafe { &mut *span };
    span.len = 0;
    let (mut low, mut high, mut passed) = (u64::MAX, 0, 0u32);
    for &(address, bytes) in ranges {
        if address == 0 || bytes == 0 {
            continue;
        }
        let Some(end) = address.checked_add(bytes) else {
            return;
        };
        low = low.min(address);
        high = high.max(end);
        passed += 1;
    }
    if passed < 2 {
        return;
    }
    let base = low & !7;
    // The length goes through map memory, which the verifier does not track: the ways
    // through the loop above then differ in no value it must keep apart, and it walks
    // the rest once, not once per way. Bounded again on what it reads back.
    // SAFETY: this CPU's span.
    let len = unsafe {
        core::ptr::write_volatile(&mut span.len, high - base);
        core::ptr::read_volatile(&span.len)
    };
    span.len = 0;
    if len > BYTES as u64 {
        return;
    }
    // SAFETY: `words` is BYTES long and len <= BYTES; the helper checks the address.
    let read = unsafe {
        generated::bpf_probe_read_user(
            span.words.as_mut_ptr().cast(),
            len as u32,
            base as *const c_void,
        )
    };
    if read == 0 {
        span.base = base;
        span.len = len;
    }
}

/// The index in the span of the `count` words at `address`, if the span holds them all
/// (and `address` is a multiple of 8, as a long's or a timeout's is).
#[inline(always)]
fn index(span: &Span, address: u64, count: u64) -> Option<usize> {
    if address & 7 != 0 || address < span.base {
        return None;
    }
    let offset = address - span.base;
    let end = offset.checked_add(count * 8)?;
    (end <= span.len).then_some((offset / 8) as usize)
}

/// Word `i` of the span, for `i` below [`WORDS`] (checked by the caller): masked so that
/// the verifier sees the bound on the register it adds to the map pointer, where the
/// compiler would fold the caller's test into another.
#[inline(always)]
fn word(span: &Span, i: usize) -> u64 {
    const _: () = assert!(WORDS.is_power_of_two());
    span.words[i & (WORDS - 1)]
}

impl Spanned {
    /// The `N` words at `address`, from the span if it holds them, else read alone.
    #[inline(always)]
    pub fn user_words<const N: usize>(&self, address: u64) -> Option<[u64; N]> {
        if let Some(span) = SPAN.get_ptr(0) {
            // SAFETY: this CPU's span; see `Span`.
            let span = unsafe { &*span };
            if let Some(first) = index(span, address, N as u64) {
                let mut words = [0; N];
                for (i, to) in words.iter_mut().enumerate() {
                    *to = word(span, first + i);
                }
                return Some(words);
            }
        }
        // SAFETY: bpf_probe_read_user checks the address; a fault is an Err.
        unsafe { bpf_probe_read_user(address as *const [u64; N]) }.ok()
    }
}

/// The kernel address of the span's copy of the `count` words at user `address`, if the
/// span holds them all: a source for `bpf_probe_read_kernel` where the user memory would
/// be read again. Only in a run that holds a [`Spanned`], and for this run only. Passed as
/// a number through map memory (which the verifier allows a program loaded with
/// CAP_PERFMON, as the probe is), so that a reader calls one helper or the other with the
/// same registers, and the verifier walks what follows once.
#[inline(always)]
pub fn address(_: &Spanned, address: u64, count: usize) -> Option<u64> {
    let span = SPAN.get_ptr_mut(0)?;
    // SAFETY: this CPU's span; see `Span`.
    let span = unsafe { &mut *span };
    let first = index(span, address, count as u64)?;
    // Masked as in `word`: index keeps it below WORDS.
    let copy = core::ptr::addr_of!(span.words[first & (WORDS - 1)]);
    // SAFETY: a field of this CPU's span: the pointer leaves it as a number.
    unsafe {
        core::ptr::write_volatile(core::ptr::addr_of_mut!(span.copy).cast(), copy);
        Some(core::ptr::read_volatile(&span.copy))
    }
}
