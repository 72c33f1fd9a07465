//! The strace source: strace output → lines ([`line`], found by their [`structure`]) → syscall records, interrupted
//! calls stitched ([`records`]) → the model's call records ([`decode`]) → a tally
//! ([`replay`]). It needs no privileges; it cannot see task state (the fd table), so the
//! sites that need it are not measured from a log.

pub mod decode;
pub mod line;
pub mod records;
pub mod replay;
pub mod run;
pub mod structure;
