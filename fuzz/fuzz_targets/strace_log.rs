//! Any bytes as a strace log: parsing, stitching, decoding and replaying never panic, and
//! the replay's tally can always be made.
#![no_main]

use auditor::source::strace::replay::Replay;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut replay = Replay::default();
    replay.ingest("fuzz", data, None);
    let _ = replay.tally();
    let _ = replay.notes();
});
