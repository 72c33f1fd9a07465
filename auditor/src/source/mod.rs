//! Sources of observations. Each one hands over an [`Observation`](crate::observation::Observation)
//! — a tally and what the source says of its own view; none formats output.

pub mod ebpf;
pub mod strace;
