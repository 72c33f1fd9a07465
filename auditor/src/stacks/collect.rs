//! The user side of `auditor trace --stacks`: a thread reads the probe's ring buffer as
//! samples come and unwinds each at once against its process's mappings. They are read
//! while the process runs: when the probe says it exec'd or mapped code from a file (the
//! loader loading its libraries, dlopen) and when its first stack comes; what was read
//! last stays, so the stacks of a process that exited are still unwound. At the end the frames are symbolized and handed over as counts per
//! (site, stack).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    os::fd::AsFd as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use auditor_common::{
    Counts, Site,
    stacks::{MappingEvent, StackSample, kind, stat},
};
use aya::maps::{MapData, RingBuf};
use framehop::x86_64::CacheX86_64;

use super::{
    Frame, symbolize,
    unwind::{Image, Objects, Registers, read_maps},
};

/// What the samples of a session came to.
#[derive(Debug, Default)]
pub struct Collected {
    /// Evaluations per (site, stack) of the calls that took a stack.
    pub stacks: BTreeMap<(Site, Vec<Frame>), Counts>,
    /// Samples received.
    pub samples: u64,
    /// Samples of processes whose mappings could not be read (gone before their first
    /// stack was read): not unwound.
    pub unmapped: u64,
    /// Samples whose stack could not be copied: unwound from the registers alone.
    pub without_stack: u64,
    /// Records the auditor could not read (a size that matches no record kind).
    pub malformed: u64,
}

impl Collected {
    /// What the report says of the stacks: how they were sampled, and how many rare calls
    /// took none, by why. `probe` holds the probe's `stacks::stat` counters.
    pub fn note(&self, probe: &[u64; stat::COUNT as usize]) -> String {
        let mut note = super::sampling_note();
        note.push_str(&format!(" {} taken", probe[stat::TAKEN as usize]));
        let mut none = Vec::new();
        let mut why = |count: u64, why: &str| {
            if count > 0 {
                none.push(format!("{count} {why}"));
            }
        };
        why(probe[stat::NOT_SAMPLED as usize], "let go by sampling");
        why(probe[stat::OVER_BUDGET as usize], "over the byte cap");
        why(
            probe[stat::RING_FULL as usize],
            "lost to a full ring buffer",
        );
        why(
            probe[stat::NO_ROOM as usize],
            "with no room for their sampling count",
        );
        why(
            self.unmapped,
            "of processes gone before their mappings could be read",
        );
        why(self.malformed, "in records the auditor could not read");
        if !none.is_empty() {
            note.push_str(&format!("; rare calls without one: {}", none.join(", ")));
        }
        if self.without_stack > 0 {
            note.push_str(&format!(
                "; {} whose stack could not be copied (named from the registers alone)",
                self.without_stack
            ));
        }
        note.push('.');
        note
    }
}

/// The reading thread, until [`Collector::finish`].
pub struct Collector {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Collected>,
}

impl Collector {
    /// Starts reading `ring`.
    pub fn start(ring: RingBuf<MapData>) -> Collector {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || read(ring, &stopping));
        Collector { stop, thread }
    }

    /// Reads what is left in the ring (call it once the probe has stopped counting) and
    /// returns the symbolized stacks.
    pub fn finish(self) -> Collected {
        self.stop.store(true, Ordering::Release);
        let mut collected = self.thread.join().unwrap_or_default();
        let mut stacks: Vec<((Site, Vec<Frame>), Counts)> =
            std::mem::take(&mut collected.stacks).into_iter().collect();
        symbolize::symbolize(
            stacks
                .iter_mut()
                .flat_map(|((_, frames), _)| frames.iter_mut()),
        );
        for (key, counts) in stacks {
            collected.stacks.entry(key).or_default().add(&counts);
        }
        collected
    }
}

/// Unwinding state across samples.
#[derive(Default)]
struct Unwinding {
    /// The last mappings read of each process that has sent a stack or mapped code: kept
    /// after it exits, to unwind the stacks that come after.
    images: HashMap<u32, Image>,
    /// Processes whose mappings changed since they were read (code mapped): read again
    /// at once.
    changed: HashSet<u32>,
    /// Processes that unmapped memory since they were read: read again when a stack of
    /// theirs comes, and if they are gone by then, no frame of theirs is named after what
    /// they had mapped before.
    unmapped_since: HashSet<u32>,

    objects: Objects,
    cache: CacheX86_64,
    collected: Collected,
}

fn read(mut ring: RingBuf<MapData>, stop: &AtomicBool) -> Collected {
    // Mappings are read as the probe tells of them, before a short-lived process exits:
    // the lowest real-time priority wakes this thread at once on a CPU the traced
    // programs keep busy. Without the privilege it runs as it is.
    let lowest = libc::sched_param { sched_priority: 1 };
    // SAFETY: 0 is the calling thread; the parameter is a valid struct.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &lowest) };
    let mut state = Unwinding::default();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        while let Some(record) = ring.next() {
            state.record(&record);
        }
        // Read while the processes run: a stack may come after its process exited.
        state.read_changed();
        if stopping {
            return state.collected;
        }
        let mut fds = [nix::poll::PollFd::new(
            ring.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        // Woken by the first record after the ring was read empty; the timeout only
        // bounds how long a stop waits.
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16));
    }
}

/// A record of the probe's as `T`, if it has `T`'s size.
fn record_as<T: Copy>(bytes: &[u8]) -> Option<T> {
    // SAFETY: `T` is one of the probe's #[repr(C)] records of integers and byte arrays,
    // valid for every bit pattern, and `bytes` holds exactly one.
    (bytes.len() == size_of::<T>()).then(|| unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

impl Unwinding {
    /// Reads `pid`'s mappings again; false (keeping what was read before) once it has
    /// exited: a zombie's maps hold no file.
    fn read_mappings(&mut self, pid: u32) -> bool {
        let maps = read_maps(pid).filter(|maps| maps.iter().any(|m| m.path.starts_with('/')));
        let Some(maps) = maps else {
            return false;
        };
        self.images.insert(pid, Image::new(maps, &mut self.objects));
        // Read after the unmap: its stacks to come are unwound with these mappings, even
        // if it is gone by then (a JIT that maps code and soon exits).
        self.unmapped_since.remove(&pid);
        true
    }

    fn read_changed(&mut self) {
        for pid in std::mem::take(&mut self.changed) {
            self.read_mappings(pid);
        }
    }

    fn record(&mut self, bytes: &[u8]) {
        let kind = bytes.first_chunk().map(|k| u32::from_ne_bytes(*k));
        match (kind, record_as::<MappingEvent>(bytes)) {
            (Some(kind::EXEC), Some(exec)) => {
                self.images.remove(&exec.pid);
                self.changed.insert(exec.pid);
            }
            (Some(kind::MAP_CODE), Some(mapped)) => {
                self.changed.insert(mapped.pid);
            }
            (Some(kind::UNMAP), Some(unmapped)) => {
                self.unmapped_since.insert(unmapped.pid);
            }
            _ => match record_as::<StackSample>(bytes) {
                Some(sample) if sample.kind == kind::SAMPLE => self.sample(&sample),
                _ => self.collected.malformed += 1,
            },
        }
    }

    fn sample(&mut self, sample: &StackSample) {
        self.collected.samples += 1;
        let pid = sample.pid;
        let sites = Site::ALL
            .into_iter()
            .filter(|&site| sample.rare.sites & auditor_common::stacks::site_bit(site) != 0);
        let stack_len = (sample.stack_len as usize).min(sample.stack.len());
        if stack_len == 0 {
            self.collected.without_stack += 1;
        }
        let registers = Registers {
            ip: sample.ip,
            sp: sample.sp,
            bp: sample.bp,
            stack_base: sample.stack_base,
            stack: &sample.stack[..stack_len],
        };
        let unmapped = self.unmapped_since.remove(&pid);
        let changed = self.changed.remove(&pid);
        if changed || unmapped || !self.images.contains_key(&pid) {
            let read = self.read_mappings(pid);
            if !read && unmapped {
                // Gone, and what it had mapped is no longer known: its addresses may be
                // another file's or a JIT's now.
                self.images.remove(&pid);
            }
        }
        // Its instruction pointer is in a mapping the process had: else it exited before
        // the mappings its stack is in were read.
        let Some(image) = self
            .images
            .get(&pid)
            .filter(|image| image.covers(registers.ip))
        else {
            self.collected.unmapped += 1;
            return;
        };
        let addresses = image.unwind(&mut self.cache, &registers);
        let frames: Vec<Frame> = addresses.iter().map(|&a| image.frame(a)).collect();
        for site in sites {
            self.collected
                .stacks
                .entry((site, frames.clone()))
                .or_default()
                .add(&sample.rare.counts[site as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The bytes of one of the probe's records.
    fn bytes_of<T: Copy>(record: &T) -> Vec<u8> {
        // SAFETY: a #[repr(C)] record of integers, read as the bytes it is made of.
        unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[inline(never)]
    fn code_of_this_test() {}

    /// A process that unmapped memory and is gone before its stack is read has its stack
    /// counted as unmapped: its addresses may be another file's or a JIT's by then, so no
    /// frame is named after what it had mapped before.
    #[test]
    fn no_frame_is_named_after_a_mapping_that_may_be_gone() {
        let mut state = Unwinding::default();
        let gone = 0x7fff_fff0; // no such process
        let maps = read_maps(std::process::id()).unwrap();
        state
            .images
            .insert(gone, Image::new(maps, &mut state.objects));
        // SAFETY: StackSample holds integers and byte arrays only: zero is a valid value.
        let mut sample: StackSample = unsafe { std::mem::zeroed() };
        sample.kind = kind::SAMPLE;
        sample.pid = gone;
        sample.rare.sites = auditor_common::stacks::site_bit(Site::PollFdNegative);
        sample.rare.counts[Site::PollFdNegative as usize] = Counts::new(1, 0, 0);
        sample.ip = code_of_this_test as *const () as u64;
        // Before any unmap: named after the file the address is in (this test binary).
        state.record(&bytes_of(&sample));
        let this = std::env::current_exe().unwrap();
        let named = |state: &Unwinding| {
            state.collected.stacks.keys().any(|(_, frames)| {
                frames
                    .first()
                    .is_some_and(|frame| Path::new(&frame.object) == this)
            })
        };
        assert!(named(&state), "{:?}", state.collected.stacks);
        // After an unmap, with the process gone: counted as unmapped.
        state.collected.stacks.clear();
        let unmap = MappingEvent {
            kind: kind::UNMAP,
            pid: gone,
        };
        state.record(&bytes_of(&unmap));
        state.record(&bytes_of(&sample));
        assert!(!named(&state), "{:?}", state.collected.stacks);
        assert_eq!(state.collected.unmapped, 1);
        assert_eq!(state.collected.samples, 2);
    }

    /// Mappings read after an unmap (code mapped in its place: a JIT) are the ones its
    /// later stacks are unwound with, though the process is gone by the time they come.
    #[test]
    fn mappings_read_after_an_unmap_unwind_the_stacks_that_come_after_it() {
        let mut state = Unwinding::default();
        let pid = std::process::id();
        for kind in [kind::UNMAP, kind::MAP_CODE] {
            state.record(&bytes_of(&MappingEvent { kind, pid }));
        }
        assert!(state.unmapped_since.contains(&pid));
        state.read_changed();
        assert!(state.images.contains_key(&pid));
        assert!(
            state.unmapped_since.is_empty(),
            "a sample would read them again, and find the process gone"
        );
    }
}
