//! Sources of observations. Each one fills a [`crate::tally::Tally`]; none formats output.

pub mod ebpf;
pub mod strace;
