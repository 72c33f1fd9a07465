//! Who takes a rare arm: call stacks, one model for both sources. strace `-k` prints each
//! call's frames; the probe (`auditor trace --stacks`) copies the top of a rare call's user
//! stack, which [`unwind`] walks with DWARF call-frame information and [`symbolize`] names.
//! Either way a stack is a list of [`Frame`]s, and the code behind a call is its
//! [`caller`]: the first frame outside the C library and the dynamic loader.

pub mod collect;
pub mod symbolize;
pub mod unwind;

use auditor_common::{SITE_COUNT, Site, stacks};

use auditor_common::catalogue::{self, Hint};

/// One frame of a call stack, as strace `-k` prints it:
/// `/usr/lib/x86_64-linux-gnu/libglib-2.0.so.0(g_main_context_poll+0x2b1) [0x56f21]`.
#[derive(
    Clone,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct Frame {
    /// The executable or library, as the process mapped it (a path); empty when the
    /// address is in no file's mapping (JIT code, the vDSO, a stack that could not be
    /// unwound further).
    pub object: String,
    /// The function, when symbols (ELF, DWARF or a separate debug file) name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// The address's offset into the object file (strace's `[0x…]`); for a frame in no
    /// file, the address itself.
    pub file_offset: u64,
}

impl Frame {
    /// A frame line of `strace -k` after its ` > `; None for one strace could not read
    /// (`unexpected_backtracing_error`).
    pub fn from_strace(line: &str) -> Option<Frame> {
        let (object, rest) = line.split_once('(')?;
        let (inside, after) = rest.rsplit_once(')')?;
        let symbol = &inside[..inside.find('+').unwrap_or(inside.len())];
        let offset = after.trim().strip_prefix("[0x")?.strip_suffix(']')?;
        Some(Frame {
            object: object.to_string(),
            symbol: (!symbol.is_empty()).then(|| symbol.to_string()),
            file_offset: u64::from_str_radix(offset, 16).ok()?,
        })
    }

    /// The object's file name, without its directory.
    pub fn file_name(&self) -> &str {
        self.object.rsplit('/').next().unwrap_or(&self.object)
    }

    /// Whether the frame is a syscall wrapper's: in the C library or the dynamic loader.
    fn in_wrapper(&self) -> bool {
        let wrapper = ["libc.so", "libc-", "ld-linux", "libpthread"];
        wrapper.iter().any(|w| self.file_name().starts_with(w))
    }

    /// `libglib-2.0.so.0(g_main_context_poll)`; without a symbol, `nc(+0x4f21)`.
    pub fn name(&self) -> String {
        let file = match self.file_name() {
            "" => "?",
            file => file,
        };
        match &self.symbol {
            Some(symbol) => format!("{file}({symbol})"),
            None => format!("{file}(+{:#x})", self.file_offset),
        }
    }
}

/// The code that made a call: the first frame outside the C library and the dynamic
/// loader, by name; None when every frame is in them.
pub fn caller(frames: &[Frame]) -> Option<String> {
    frames.iter().find(|f| !f.in_wrapper()).map(Frame::name)
}

/// Which arms of each site take a stack under the probe: the arm the hint (as proposed,
/// else the catalogue's) calls rare; both arms of an unhinted site, whose rare arm is the
/// minority, known only at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arms(pub [u32; SITE_COUNT]);

impl Arms {
    /// The arms to take stacks of, with `hint_of` the hint judged at each site.
    pub fn of(hint_of: impl Fn(Site) -> Option<Hint>) -> Arms {
        let mut arms = [0; SITE_COUNT];
        for info in catalogue::SITES {
            arms[info.site as usize] = match hint_of(info.site) {
                Some(Hint::Likely) => stacks::arms::NOT_TAKEN,
                Some(Hint::Unlikely) => stacks::arms::TAKEN,
                Some(Hint::None) => stacks::arms::TAKEN | stacks::arms::NOT_TAKEN,
                // A site the report leaves out takes none.
                None => 0,
            };
        }
        Arms(arms)
    }

    /// The catalogue's hints.
    pub fn catalogue() -> Arms {
        Arms::of(|site| Some(site.info().hint))
    }
}

/// How the probe samples stacks, for the report.
pub fn sampling_note() -> String {
    format!(
        "Stacks (--stacks): every call of a rare arm takes one until {} per process and \
         site, then one in {}; at most {} MiB of stack a second per CPU, {} KiB each \
         (from the stack pointer's page up), unwound with DWARF call-frame information.",
        stacks::EVERY_CALL_UNTIL,
        stacks::THEN_ONE_IN,
        stacks::BYTES_PER_CPU_SECOND >> 20,
        stacks::STACK_BYTES >> 10
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_frames_read_whole_and_name_their_code() {
        let frame = Frame::from_strace(
            "/usr/lib/x86_64-linux-gnu/libglib-2.0.so.0(g_main_context_poll+0x2b1) [0x56f21]",
        )
        .unwrap();
        assert_eq!(frame.symbol.as_deref(), Some("g_main_context_poll"));
        assert_eq!(frame.file_offset, 0x56f21);
        assert_eq!(frame.name(), "libglib-2.0.so.0(g_main_context_poll)");
        let bare = Frame::from_strace("/usr/bin/nc() [0x4f21]").unwrap();
        assert_eq!(bare.name(), "nc(+0x4f21)");
        assert_eq!(
            Frame::from_strace("unexpected_backtracing_error [0x1]"),
            None
        );
        let libc = Frame::from_strace("/usr/lib/x86_64-linux-gnu/libc.so.6(poll+0x10) [0xfc230]");
        assert_eq!(
            caller(&[libc.clone().unwrap(), frame, bare]).as_deref(),
            Some("libglib-2.0.so.0(g_main_context_poll)")
        );
        assert_eq!(caller(&[libc.unwrap()]), None);
    }

    #[test]
    fn hinted_sites_take_stacks_of_their_rare_arm_and_unhinted_of_both() {
        let arms = Arms::catalogue();
        for info in catalogue::SITES {
            let expected = match info.hint {
                Hint::Unlikely => stacks::arms::TAKEN,
                Hint::Likely => stacks::arms::NOT_TAKEN,
                Hint::None => 3,
            };
            assert_eq!(arms.0[info.site as usize], expected, "{}", info.id);
        }
        let proposed = Arms::of(|_| Some(Hint::Likely));
        assert!(proposed.0.iter().all(|&a| a == stacks::arms::NOT_TAKEN));
        // Sites the report leaves out take no stacks.
        let one = Arms::of(|site| (site == Site::PollFdNegative).then_some(Hint::Unlikely));
        assert_eq!(one.0.iter().filter(|&&a| a != 0).count(), 1);
    }
}
