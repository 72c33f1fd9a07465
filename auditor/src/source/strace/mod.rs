//! The strace source: turns strace output into syscall records. So far the line parser
//! ([`line`]); decoding arguments and replaying records through the readiness core come
//! next (issue 4).

pub mod line;
pub mod records;
