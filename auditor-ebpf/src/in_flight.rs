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
    task::Task,
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

/// Whether this `task` may have a call in flight: false for a task of a process surely
/// not counted (`target::may_count`), found with one load, before any read of the
/// thread's state.
#[inline(always)]
pub fn may_hold(task: Task) -> bool {
    !target::empty_programs() && target::may_count(task)
}

/// What this thread's entry program left, if it followed a call of `C`'s family, and the
/// slot it left with it; the record is taken (a second exit finds none).
#[inline(always)]
pub fn take<C: Call>() -> Option<(C, u32)> {
    let task = Task::current();
    if !may_hold(task) {
        return None;
    }
    take_of(task)
}

/// [`take`] of the current `task`, in a program that found [`may_hold`] for it: the task
/// is asked for once a program run (a helper call: see "What a helper call costs" in
/// docs/benchmarks.md).
#[inline(always)]
pub fn take_of<C: Call>(task: Task) -> Option<(C, u32)> {
    if target::empty_programs() || target::stopped() {
        return None;
    }
    let state = thread::of(task, false);
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
