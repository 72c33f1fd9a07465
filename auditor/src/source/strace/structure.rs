//! The structure of strace's rendering of a call: its brackets and commas outside quoted
//! strings, which finding the call's end and splitting its arguments follow. Found a block
//! of 16 bytes at a time: a poll of 1024 fds makes a line of 24 KB, most of it read only
//! to find where its array ends.

/// Bytes looked at together: one SSE2 register (two joined into one mask make the
/// compiler split the mask into bits and join them again, at thrice the cost).
const BLOCK: usize = 16;

/// The brackets and commas of `text` that stand outside quoted strings, with their byte
/// offsets.
pub fn delimiters(text: &str) -> Delimiters<'_> {
    // Every delimiter is ASCII: scan bytes (a UTF-8 continuation byte never equals one).
    Delimiters {
        bytes: text.as_bytes(),
        block: 0,
        mask: 0,
        next: 0,
    }
}

/// See [`delimiters`].
pub struct Delimiters<'a> {
    bytes: &'a [u8],
    /// The offset of the block `mask` marks.
    block: usize,
    /// The block's structure bytes not yet returned.
    mask: u32,
    /// The first byte of the next block.
    next: usize,
}

impl Iterator for Delimiters<'_> {
    type Item = (usize, u8);

    #[inline]
    fn next(&mut self) -> Option<(usize, u8)> {
        loop {
            if self.mask == 0 {
                let rest = self
                    .bytes
                    .get(self.next..)
                    .filter(|rest| !rest.is_empty())?;
                let (brackets, commas) = block_masks(rest);
                self.mask = brackets | commas;
                self.block = self.next;
                self.next += BLOCK;
                continue;
            }
            let at = self.block + self.mask.trailing_zeros() as usize;
            self.mask &= self.mask - 1;
            let byte = self.bytes[at];
            if byte != b'"' {
                return Some((at, byte));
            }
            // A string: what is in it is no structure; the blocks go on after it.
            self.mask = 0;
            self.next = string_end(self.bytes, at + 1);
        }
    }
}

/// The offset just past the `"` that ends a string whose contents start at `at` (past the
/// end if it does not end); a backslash escapes the byte after it.
fn string_end(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && bytes[at] != b'"' {
        at += if bytes[at] == b'\\' { 2 } else { 1 };
    }
    at + 1
}

/// Byte offset of the `)` that closes a list already open `depth` deep, skipping strings
/// and nested brackets; None if the text ends first (or another bracket closes it).
pub fn closing(text: &str, mut depth: usize) -> Option<usize> {
    // The loop of `Delimiters` with its state in registers, and without the commas.
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(rest) = bytes.get(start..).filter(|rest| !rest.is_empty()) {
        let mut mask = match rest.first_chunk::<BLOCK>() {
            Some(block) => {
                // A block with no string in it whose closing brackets are fewer than the
                // depth cannot close the list: its brackets change the depth by their
                // counts, without a step per bracket (a pollfd array has two a entry).
                let (opens, closes, quotes) = bracket_kinds(block);
                let closed = ones(closes);
                if quotes == 0 && closed < depth {
                    depth = depth + ones(opens) - closed;
                    start += BLOCK;
                    continue;
                }
                opens | closes | quotes
            }
            None => block_masks(rest).0,
        };
        let mut next = start + BLOCK;
        while mask != 0 {
            let at = start + mask.trailing_zeros() as usize;
            mask &= mask - 1;
            match bytes[at] {
                b'"' => {
                    next = string_end(bytes, at + 1);
                    break;
                }
                b'(' | b'[' | b'{' => depth += 1,
                byte => {
                    depth -= 1;
                    if depth == 0 {
                        return (byte == b')').then_some(at);
                    }
                }
            }
        }
        start = next;
    }
    None
}

/// The structure of the block at the start of `rest` (all of it if shorter): bit `i` of
/// the first mask set where byte `i` is a bracket or a `"`, of the second where it is a
/// comma.
#[inline(always)]
fn block_masks(rest: &[u8]) -> (u32, u32) {
    match rest.first_chunk::<BLOCK>() {
        Some(block) => (brackets(block), commas(block)),
        None => {
            // The last bytes, then zeros, which are no structure.
            let mut block = [0; BLOCK];
            let length = rest.len().min(BLOCK);
            block[..length].copy_from_slice(&rest[..length]);
            (brackets(&block), commas(&block))
        }
    }
}

/// Bit `i` set where `block[i]` is one of `bytes`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn any_of(block: &[u8; BLOCK], bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_setzero_si128,
    };
    // SAFETY: an unaligned load of the 16 bytes of `block`; SSE2 is part of every x86-64
    // the compiler targets.
    unsafe {
        let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
        let mut hits = _mm_setzero_si128();
        for &byte in bytes {
            hits = _mm_or_si128(hits, _mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8)));
        }
        _mm_movemask_epi8(hits) as u16 as u32
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn any_of(block: &[u8; BLOCK], bytes: &[u8]) -> u32 {
    any_of_bytewise(block, bytes)
}

/// [`any_of`] a byte at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn any_of_bytewise(block: &[u8; BLOCK], bytes: &[u8]) -> u32 {
    let mut mask = 0;
    for (i, byte) in block.iter().enumerate() {
        mask |= u32::from(bytes.contains(byte)) << i;
    }
    mask
}

/// What [`closing`] stops at: brackets and the `"` that starts a string.
const BRACKETS: &[u8] = b"()[]{}\"";

#[inline(always)]
fn brackets(block: &[u8; BLOCK]) -> u32 {
    any_of(block, BRACKETS)
}

/// The bits set in a block's mask, from a table: the baseline x86-64 the compiler targets
/// has no popcount instruction, and its stand-in costs more than two loads.
#[inline(always)]
fn ones(mask: u32) -> usize {
    const _: () = assert!(BLOCK == 16, "a mask has two bytes");
    const BYTE_ONES: [u8; 256] = {
        let mut table = [0; 256];
        let mut byte = 0;
        while byte < 256 {
            table[byte] = (byte as u8).count_ones() as u8;
            byte += 1;
        }
        table
    };
    usize::from(BYTE_ONES[(mask & 0xff) as usize])
        + usize::from(BYTE_ONES[(mask >> 8 & 0xff) as usize])
}

/// The block's opening brackets, closing brackets and `"`s, as three masks ([`brackets`]
/// is their union).
#[inline(always)]
fn bracket_kinds(block: &[u8; BLOCK]) -> (u32, u32, u32) {
    (
        any_of(block, b"([{"),
        any_of(block, b")]}"),
        any_of(block, b"\""),
    )
}

#[inline(always)]
fn commas(block: &[u8; BLOCK]) -> u32 {
    any_of(block, b",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structure a byte at a time, as the strace source found it before blocks.
    fn delimiters_bytewise(text: &str) -> Vec<(usize, u8)> {
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let byte = bytes[i];
            if byte == b'"' {
                i = string_end(bytes, i + 1);
                continue;
            }
            if b"([{)]},".contains(&byte) {
                found.push((i, byte));
            }
            i += 1;
        }
        found
    }

    /// What `closing(text, 1)` finds, from the text's delimiters a byte at a time: the
    /// first bracket where depth 1 reaches 0, if it is a `)`.
    fn closing_bytewise(delimiters: &[(usize, u8)]) -> Option<usize> {
        let mut depth = 1usize;
        let reference = delimiters.iter().find_map(|&(at, byte)| {
            match byte {
                b'(' | b'[' | b'{' => depth += 1,
                b',' => {}
                _ => depth -= 1,
            }
            (depth == 0).then_some((at, byte))
        });
        reference.and_then(|(at, byte)| (byte == b')').then_some(at))
    }

    #[test]
    fn masks_mark_brackets_commas_and_quotes_alone() {
        for byte in 0..=u8::MAX {
            for at in [0, 5, 15] {
                let mut block = [b'a'; BLOCK];
                block[at] = byte;
                let bit = |set: &[u8]| if set.contains(&byte) { 1 << at } else { 0 };
                let expected = (bit(b"()[]{}\""), bit(b","));
                assert_eq!((brackets(&block), commas(&block)), expected, "{byte:#x}");
                let bytewise = (
                    any_of_bytewise(&block, BRACKETS),
                    any_of_bytewise(&block, b","),
                );
                assert_eq!(bytewise, expected, "{byte:#x} at {at}");
                let kinds = (bit(b"([{"), bit(b")]}"), bit(b"\""));
                assert_eq!(bracket_kinds(&block), kinds, "{byte:#x} at {at}");
                assert_eq!(block_masks(&block[..at + 1]), expected, "{byte:#x} at {at}");
            }
        }
    }

    #[test]
    fn blocks_find_what_a_byte_at_a_time_finds() {
        // Texts of brackets, commas, strings, escapes, letters and a two-byte character,
        // from a fixed-seed generator: every block boundary against every kind of byte.
        let alphabet = ["(", "[", "{", ")", "]", "}", ",", "\"", "\\", " ", "é"];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut closed_late = 0;
        for length in 0..200 {
            for _ in 0..50 {
                let text: String = (0..length)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        // Mostly letters, so that texts often close past a block.
                        alphabet.get((state % 40) as usize).copied().unwrap_or("a")
                    })
                    .collect();
                let expected = delimiters_bytewise(&text);
                assert_eq!(delimiters(&text).collect::<Vec<_>>(), expected, "{text:?}");
                let at = closing(&text, 1);
                closed_late += usize::from(at.is_some_and(|at| at >= BLOCK));
                assert_eq!(at, closing_bytewise(&expected), "{text:?}");
            }
        }
        assert!(
            closed_late > 100,
            "only {closed_late} texts closed past the first block"
        );
    }

    /// `closing` on deep lists, where whole blocks are passed by their bracket counts: each
    /// text opens brackets more often than it closes them until it closes them all, with
    /// strings and letters between; the close is found where a byte at a time finds it.
    #[test]
    fn closing_passes_deep_blocks_where_a_byte_at_a_time_closes() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut random = |range: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % range
        };
        let (mut passed_deep, mut found) = (0, 0);
        for _ in 0..3000 {
            let mut text = String::new();
            let mut depth = 1usize;
            let opening = 3 + random(6);
            while depth > 0 && text.len() < 600 {
                let piece = match random(16) {
                    0..=3 if random(10) < opening => {
                        depth += 1;
                        ["(", "[", "{"][random(3) as usize]
                    }
                    0..=5 => {
                        depth -= 1;
                        [")", "]", "}", ")"][random(4) as usize]
                    }
                    6 => "\"a)]\\\"}\"",
                    7 => ", ",
                    _ => "fd=3",
                };
                text.push_str(piece);
            }
            text.push_str(" = 0");
            let at = closing(&text, 1);
            assert_eq!(
                at,
                closing_bytewise(&delimiters_bytewise(&text)),
                "{text:?}"
            );
            found += usize::from(at.is_some());
            passed_deep += usize::from(at.is_some_and(|at| at > 4 * BLOCK));
        }
        assert!(
            found > 300 && passed_deep > 100,
            "{found} closed, {passed_deep} deep"
        );
    }
}
