//! What the probe needs of the running kernel beyond syscall tracepoints: the BPF helpers
//! it calls, each with the first release that has it, checked against the kernel's own
//! `enum bpf_func_id` (its BTF) before anything is loaded, so that an older kernel is
//! refused in one sentence that names what is missing, not by a verifier log.

use crate::btf::Btf;

/// A BPF helper the probe calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Helper {
    /// As the C API names it.
    pub name: &'static str,
    /// Its enumerator in `enum bpf_func_id`.
    pub func_id: &'static str,
    /// The first mainline release that has it, as (major, minor).
    pub since: (u32, u32),
}

/// The helpers the probe calls that not every supported-looking kernel has, oldest first.
/// The newest of them sets the oldest release the probe loads on.
pub const HELPERS: [Helper; 5] = [
    Helper {
        name: "bpf_probe_read_user",
        func_id: "BPF_FUNC_probe_read_user",
        since: (5, 5),
    },
    Helper {
        name: "bpf_ringbuf_reserve",
        func_id: "BPF_FUNC_ringbuf_reserve",
        since: (5, 8),
    },
    Helper {
        name: "bpf_get_current_task_btf",
        func_id: "BPF_FUNC_get_current_task_btf",
        since: (5, 11),
    },
    Helper {
        name: "bpf_task_pt_regs",
        func_id: "BPF_FUNC_task_pt_regs",
        since: (5, 15),
    },
    Helper {
        name: "bpf_loop",
        func_id: "BPF_FUNC_loop",
        since: (5, 17),
    },
];

/// The oldest release the probe loads on: the newest helper's.
pub const MINIMUM_RELEASE: (u32, u32) = HELPERS[HELPERS.len() - 1].since;

/// The running kernel's release, as `uname -r` prints it.
pub fn release() -> String {
    nix::sys::utsname::uname()
        .map(|name| name.release().to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub use auditor_common::catalogue::parse_release;

/// The flags this machine's kernel's `build_open_flags()` knows: what the probe and the
/// strace source decide opens by (a log from another kernel is read as if from this one).
pub fn open_flag_set() -> auditor_common::open::FlagSet {
    static SET: std::sync::LazyLock<auditor_common::open::FlagSet> =
        std::sync::LazyLock::new(|| {
            // An unreadable release is taken as the newest.
            auditor_common::open::FlagSet::of(parse_release(&release()).unwrap_or((u32::MAX, 0)))
        });
    *SET
}

/// The helpers the running kernel lacks: those its BTF's `enum bpf_func_id` does not
/// name, or, without BTF, those newer than its release number says.
pub fn missing_helpers(btf: Option<&Btf>, release: &str) -> Vec<Helper> {
    HELPERS
        .into_iter()
        .filter(|helper| match btf {
            Some(btf) => !btf.has_enumerator("bpf_func_id", helper.func_id),
            None => parse_release(release).is_some_and(|running| running < helper.since),
        })
        .collect()
}

/// The sentence that refuses a kernel lacking `missing` (not empty).
pub fn refusal(release: &str, missing: &[Helper]) -> String {
    let names: Vec<String> = missing
        .iter()
        .map(|h| format!("{} (Linux {}.{})", h.name, h.since.0, h.since.1))
        .collect();
    format!(
        "this kernel ({release}) lacks the BPF helper{} {} that the probe calls: it loads on \
         Linux {}.{} and later. `auditor strace` counts the same sites from strace's log on any \
         kernel.",
        if missing.len() == 1 { "" } else { "s" },
        names.join(", "),
        MINIMUM_RELEASE.0,
        MINIMUM_RELEASE.1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases() {
        assert_eq!(parse_release("6.1.0-47-amd64"), Some((6, 1)));
        assert_eq!(parse_release("6.12.95+deb12-amd64"), Some((6, 12)));
        assert_eq!(parse_release("5.10.0-32-amd64"), Some((5, 10)));
        assert_eq!(parse_release("7.2"), Some((7, 2)));
        assert_eq!(parse_release("garbage"), None);
    }

    #[test]
    fn helpers_are_oldest_first() {
        assert!(HELPERS.windows(2).all(|w| w[0].since <= w[1].since));
        assert_eq!(MINIMUM_RELEASE, (5, 17));
    }

    #[test]
    fn without_btf_the_release_decides() {
        assert!(missing_helpers(None, "6.1.0-47-amd64").is_empty());
        let missing = missing_helpers(None, "5.10.0-32-amd64");
        let names: Vec<_> = missing.iter().map(|h| h.name).collect();
        assert_eq!(
            names,
            ["bpf_get_current_task_btf", "bpf_task_pt_regs", "bpf_loop"]
        );
        let refusal = refusal("5.10.0-32-amd64", &missing);
        assert_eq!(
            refusal,
            "this kernel (5.10.0-32-amd64) lacks the BPF helpers bpf_get_current_task_btf \
             (Linux 5.11), bpf_task_pt_regs (Linux 5.15), bpf_loop (Linux 5.17) that the probe \
             calls: it loads on Linux 5.17 and later. `auditor strace` counts the same sites \
             from strace's log on any kernel."
        );
        assert!(!refusal.contains('\n'));
    }

    #[test]
    fn the_running_kernel_has_every_helper() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: {} is not readable here", crate::btf::VMLINUX);
            return;
        };
        let release = release();
        // The tests run on kernels the probe loads on (the machine's, and the VM matrix's).
        assert_eq!(missing_helpers(Some(&btf), &release), [], "{release}");
    }
}
