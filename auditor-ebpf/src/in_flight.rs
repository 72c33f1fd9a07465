//! The call in flight of each thread: what its entry program leaves for its exit program.
//!
//! A thread is in one syscall at a time, so one record per thread holds every family's
//! call: a tag (`Kind`) and the family's own `#[repr(C)]` record, in the thread's state
//! (`thread`), where a hash map by thread id cost a lookup at every exit and a program to
//! forget exited threads.
//!
//! A family's record implements [`Call`]: its tag, and what its call counts when it
//! cannot be followed to its exit (no memory for the record), written once for all
//! families in [`stash`].

pub use crate::thread::Kind;
use crate::{
    target,
    thread::{self, RECORD_WORDS},
};

/// A family's record of a call in flight.
pub trait Call: Copy {
    const KIND: Kind;
    /// Counts what the call may reach when there is no room to follow it to its exit:
    /// without its return value, each branch the return decides is undecided.
    fn unfollowed(&self);
}

/// Leaves `call` for this thread's exit program; counts it as unfollowed when there is no
/// memory for it.
#[inline(always)]
pub fn stash<C: Call>(call: &C) {
    const {
        assert!(core::mem::size_of::<C>() <= RECORD_WORDS * 8);
        assert!(core::mem::align_of::<C>() <= 8);
    }
    let slot = thread::current(true);
    if slot.is_null() {
        call.unfollowed();
        return;
    }
    // SAFETY: the thread's own storage, valid for this program run; only this thread's
    // programs use it, one at a time. The record fits (checked above).
    unsafe {
        (*slot).kind = C::KIND;
        core::ptr::addr_of_mut!((*slot).record)
            .cast::<C>()
            .write(*call);
    }
}

/// Whether this thread may have a call in flight: false for a task of a process surely
/// not counted (`target::may_count`). A program hands over to a shared exit only then, so
/// that the exits of untraced tasks cost no tail call (and the shared exit's `take` is the
/// one read of the thread's state).
#[inline(always)]
pub fn may_hold() -> bool {
    !target::empty_programs() && target::may_count()
}

/// What this thread's entry program left, if it followed a call of `C`'s family; the
/// record is taken (a second exit finds none).
#[inline(always)]
pub fn take<C: Call>() -> Option<C> {
    if !may_hold() {
        return None;
    }
    take_handed_over()
}

/// [`take`] in a shared program, whose caller found [`may_hold`] for the same call.
#[inline(always)]
pub fn take_handed_over<C: Call>() -> Option<C> {
    if target::empty_programs() || target::stopped() {
        return None;
    }
    let slot = thread::current(false);
    if slot.is_null() {
        return None;
    }
    // SAFETY: as in `stash`; the tag says the record is a `C`.
    unsafe {
        if (*slot).kind != C::KIND {
            return None;
        }
        (*slot).kind = Kind::None;
        Some(core::ptr::addr_of!((*slot).record).cast::<C>().read())
    }
}
