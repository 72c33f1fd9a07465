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
    target::{self, Caller},
    thread::{self, RECORD_WORDS},
};

/// A family's record of a call in flight.
pub trait Call: Copy {
    const KIND: Kind;
    /// Counts what the call may reach when there is no room to follow it to its exit:
    /// without its return value, each branch the return decides is undecided.
    fn unfollowed(&self);
}

/// Leaves `call` for this thread's exit program, with the slot of its process's row
/// (`rows::Counted`), in the state `target::current` found for the thread (made here if
/// it had none): the record, where the entry may complete it before it returns. Counts
/// the call as unfollowed (None) when there is no memory for it.
#[inline(always)]
pub fn stash<C: Call>(call: &C, caller: &Caller) -> Option<*mut C> {
    const {
        assert!(core::mem::size_of::<C>() <= RECORD_WORDS * 8);
        assert!(core::mem::align_of::<C>() <= 8);
    }
    let state = if caller.thread.is_null() {
        thread::of(caller.task, true)
    } else {
        caller.thread
    };
    if state.is_null() {
        call.unfollowed();
        return None;
    }
    // SAFETY: the thread's own storage, valid for this program run; only this thread's
    // programs use it, one at a time. The record fits (checked above).
    unsafe {
        (*state).kind = C::KIND;
        (*state).slot = caller.process.slot;
        let record = core::ptr::addr_of_mut!((*state).record).cast::<C>();
        record.write(*call);
        Some(record)
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

/// What this thread's entry program left, if it followed a call of `C`'s family, and the
/// slot it left with it; the record is taken (a second exit finds none).
#[inline(always)]
pub fn take<C: Call>() -> Option<(C, u32)> {
    if !may_hold() {
        return None;
    }
    take_handed_over()
}

/// [`take`] in a shared program, whose caller found [`may_hold`] for the same call.
#[inline(always)]
pub fn take_handed_over<C: Call>() -> Option<(C, u32)> {
    if target::empty_programs() || target::stopped() {
        return None;
    }
    let state = thread::current(false);
    if state.is_null() {
        return None;
    }
    // SAFETY: as in `stash`; the tag says the record is a `C`.
    unsafe {
        if (*state).kind != C::KIND {
            return None;
        }
        (*state).kind = Kind::None;
        let call = core::ptr::addr_of!((*state).record).cast::<C>().read();
        Some((call, (*state).slot))
    }
}
