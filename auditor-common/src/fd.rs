//! fd allocation and lookup (fs/file.c): the branches of `alloc_fd`, `find_next_fd` and
//! `__fget_light`, as predicates over the task's fd table.

/// Fds per word of the open-fd bitmap.
pub const BITS_PER_LONG: u32 = 64;

/// `alloc_fd`: `if (likely(fd < fdt->max_fds))` — search the table (else it must grow).
pub const fn below_max(fd: u32, max_fds: u32) -> bool {
    fd < max_fds
}

/// `find_next_fd`: a free fd exists from `start` to the end of start's 64-fd word
/// (`open_word` is that word of `open_fds`).
pub const fn fast_path(open_word: u64, start: u32) -> bool {
    let free_from_start = !open_word >> (start % BITS_PER_LONG);
    free_from_start != 0
}

/// `alloc_fd`: `if (unlikely(fd >= fdt->max_fds))` — the table grows (`expand_files`).
pub const fn table_full(fd: u32, max_fds: u32) -> bool {
    fd >= max_fds
}

/// `alloc_fd`: `if (unlikely(fd >= end))` — EMFILE (`end` is usually RLIMIT_NOFILE).
pub const fn emfile(fd: u32, end: u64) -> bool {
    fd as u64 >= end
}

/// `__fget_light`: the fd table is shared (`files->count > 1`), so the lookup takes a
/// reference (the slow arm; the fast arm is hinted likely).
pub const fn table_shared(files_count: u32) -> bool {
    files_count > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_bounds() {
        for max_fds in [64, 128, 256] {
            assert!(below_max(max_fds - 1, max_fds));
            assert!(!below_max(max_fds, max_fds));
            assert!(table_full(max_fds, max_fds));
            assert!(!table_full(max_fds - 1, max_fds));
        }
        assert!(emfile(1024, 1024));
        assert!(!emfile(1023, 1024));
        assert!(!table_shared(1));
        assert!(table_shared(2));
    }

    #[test]
    fn fast_path_within_a_word() {
        // Word 0 with fds 0-2 open: start 0 finds 3.
        assert!(fast_path(0b111, 0));
        // A full word: no free fd from any start inside it.
        assert!(!fast_path(u64::MAX, 0));
        assert!(!fast_path(u64::MAX, 63));
        // Free only below start: the fast path fails.
        assert!(!fast_path(!1u64, 1));
        // Free at the word's last bit, start at it.
        assert!(fast_path(u64::MAX >> 1, 63));
        // Word 1: start 70 (bit 6), bits 6.. open but 63 free.
        assert!(fast_path(!(1u64 << 63), 70));
    }
}
