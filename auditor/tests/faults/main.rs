//! Fault injection: what a hostile local user, a full disk or a file at the edge of a count
//! does to a session, each case with what must hold — nothing already counted lost, no one
//! let in where they were not, and an error that names what went wrong.
//!
//! - `exporter`: hostile clients of `--metrics` (bodies, stalls, clients that never read,
//!   thousands of idle connections) against a root session.
//! - `outputs`: outputs on a full disk, through planted links and FIFOs, over inputs, and a
//!   session killed before it wrote.
//! - `merges`: saved reports at the top of u64, overlapping in part, with no runs.
//! - `rows`: a fork burst, every process's row checked.

#[allow(dead_code, reason = "each test crate uses part of the helpers")]
#[path = "../common/mod.rs"]
mod common;

mod exporter;
mod merges;
mod outputs;
mod rows;
