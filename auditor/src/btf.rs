//! Field offsets of the running kernel's structs, from its BTF (/sys/kernel/btf/vmlinux),
//! for the probe's reads of task state (`current->files->fdt->max_fds` and the like).
//!
//! Only what the lookups need is read: the type section's records, their names and, for
//! structs and unions, their members (anonymous members are searched through), for enums
//! their enumerators' names (what the running kernel's `enum bpf_func_id` holds says which
//! BPF helpers it has).

use std::collections::HashMap;

use thiserror::Error;

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("not BTF data: {0}")]
    Format(String),
    #[error("struct {0} is not in the kernel's BTF")]
    NoStruct(String),
    #[error("struct {0} has no member {1}")]
    NoMember(String, String),
}

const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_ENUM64: u32 = 19;

struct Member {
    name: u32,
    type_id: u32,
    /// Offset in bits.
    bits: u32,
}

struct Type {
    name: u32,
    kind: u32,
    /// The referenced type for modifiers and typedefs.
    target: u32,
    /// Struct and union members; for an enum, its enumerators (names only).
    members: Vec<Member>,
}

/// The types of one BTF blob.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
    structs: HashMap<String, u32>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    data.get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| BtfError::Format(format!("truncated at byte {at}")))
}

/// Bytes of kind-specific data after a type record (kinds from include/uapi/linux/btf.h).
fn extra_bytes(kind: u32, vlen: usize) -> Result<usize, BtfError> {
    Ok(match kind {
        2 | 7..=12 | 16 | 18 => 0,
        1 | 14 | 17 => 4,
        3 => 12,
        4 | 5 | 15 | 19 => 12 * vlen,
        6 | 13 => 8 * vlen,
        _ => return Err(BtfError::Format(format!("unknown kind {kind}"))),
    })
}

impl Btf {
    pub fn from_sys_fs() -> std::io::Result<Btf> {
        let data = std::fs::read(VMLINUX)?;
        Btf::parse(&data).map_err(std::io::Error::other)
    }

    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        if data.get(..2) != Some(&[0x9f, 0xeb]) {
            return Err(BtfError::Format(
                "bad magic (only little-endian BTF is read)".into(),
            ));
        }
        let header_len = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let section = |off: usize, len: usize| {
            data.get(header_len + off..header_len + off + len)
                .ok_or_else(|| BtfError::Format("section out of bounds".into()))
        };
        let type_data = section(type_off, type_len)?;
        let strings = section(str_off, str_len)?.to_vec();
        // Type ids start at 1; id 0 is void.
        let mut types = vec![Type {
            name: 0,
            kind: 0,
            target: 0,
            members: Vec::new(),
        }];
        let mut at = 0;
        while at < type_data.len() {
            let name = u32_at(type_data, at)?;
            let info = u32_at(type_data, at + 4)?;
            let target = u32_at(type_data, at + 8)?;
            let (kind, vlen, bitfields) = (
                (info >> 24) & 0x1f,
                (info & 0xffff) as usize,
                info >> 31 == 1,
            );
            at += 12;
            let mut members = Vec::new();
            if kind == KIND_ENUM || kind == KIND_ENUM64 {
                let size = if kind == KIND_ENUM { 8 } else { 12 };
                for i in 0..vlen {
                    members.push(Member {
                        name: u32_at(type_data, at + size * i)?,
                        type_id: 0,
                        bits: 0,
                    });
                }
            } else if kind == KIND_STRUCT || kind == KIND_UNION {
                for i in 0..vlen {
                    let base = at + 12 * i;
                    let offset = u32_at(type_data, base + 8)?;
                    members.push(Member {
                        name: u32_at(type_data, base)?,
                        type_id: u32_at(type_data, base + 4)?,
                        bits: if bitfields {
                            offset & 0xff_ffff
                        } else {
                            offset
                        },
                    });
                }
            }
            at += extra_bytes(kind, vlen)?;
            types.push(Type {
                name,
                kind,
                target,
                members,
            });
        }
        let mut btf = Btf {
            types,
            strings,
            structs: HashMap::new(),
        };
        for (id, ty) in btf.types.iter().enumerate() {
            if ty.kind == KIND_STRUCT && ty.name != 0 {
                btf.structs
                    .entry(btf.string(ty.name).to_string())
                    .or_insert(id as u32);
            }
        }
        Ok(btf)
    }

    fn string(&self, offset: u32) -> &str {
        let start = offset as usize;
        let end = self.strings[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(self.strings.len(), |n| start + n);
        std::str::from_utf8(&self.strings[start..end]).unwrap_or("")
    }

    /// Offset in bytes of `member` in `struct name`, looking into anonymous members.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self
            .structs
            .get(name)
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))?;
        self.find(id, member)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember(name.to_string(), member.to_string()))
    }

    /// Whether an enum named `name` has the enumerator `value`.
    pub fn has_enumerator(&self, name: &str, value: &str) -> bool {
        self.types.iter().any(|ty| {
            matches!(ty.kind, KIND_ENUM | KIND_ENUM64)
                && self.string(ty.name) == name
                && ty.members.iter().any(|m| self.string(m.name) == value)
        })
    }

    fn find(&self, id: u32, member: &str) -> Option<u32> {
        let ty = self.types.get(id as usize)?;
        ty.members.iter().find_map(|m| {
            if m.name != 0 {
                return (self.string(m.name) == member).then_some(m.bits);
            }
            // An anonymous struct or union: its members are the parent's.
            let inner = self.resolve(m.type_id);
            self.find(inner, member).map(|bits| m.bits + bits)
        })
    }

    /// Skips typedefs and modifiers (const, volatile, restrict, type tags).
    fn resolve(&self, mut id: u32) -> u32 {
        while let Some(ty) = self.types.get(id as usize) {
            if matches!(ty.kind, 8..=11 | 18) {
                id = ty.target;
            } else {
                break;
            }
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BTF with: 1 int; 2 struct inner { int b @4 }; 3 enum bpf_func_id { BPF_FUNC_loop };
    /// 4 struct outer { int a @0; anonymous struct inner @8 }.
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0inner\0b\0outer\0a\0bpf_func_id\0BPF_FUNC_loop\0".to_vec();
        let (int, inner, b, outer, a, func_id, func_loop) = (1u32, 5, 11, 13, 19, 21, 33);
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| types.extend(w.to_le_bytes()));
        push(&[int, 1 << 24, 4, 32]);
        push(&[inner, (4 << 24) | 1, 8, b, 1, 32]);
        push(&[func_id, (6 << 24) | 1, 4, func_loop, 181]);
        push(&[outer, (4 << 24) | 2, 16, a, 1, 0, 0, 2, 64]);
        let mut data = Vec::new();
        for w in [
            0xeb9f_u32 | (1 << 16),
            24,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            data.extend(w.to_le_bytes());
        }
        data[0..2].copy_from_slice(&[0x9f, 0xeb]);
        data[2] = 1;
        data.extend(&types);
        data.extend(&strings);
        data
    }

    #[test]
    fn members_and_anonymous_members() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(btf.member_offset("outer", "a"), Ok(0));
        assert_eq!(btf.member_offset("outer", "b"), Ok(12));
        assert_eq!(btf.member_offset("inner", "b"), Ok(4));
        assert_eq!(
            btf.member_offset("outer", "c"),
            Err(BtfError::NoMember("outer".into(), "c".into()))
        );
        assert_eq!(
            btf.member_offset("nope", "a"),
            Err(BtfError::NoStruct("nope".into()))
        );
        assert!(matches!(Btf::parse(b"garbage"), Err(BtfError::Format(_))));
    }

    #[test]
    fn enumerators() {
        let btf = Btf::parse(&sample()).unwrap();
        assert!(btf.has_enumerator("bpf_func_id", "BPF_FUNC_loop"));
        assert!(!btf.has_enumerator("bpf_func_id", "BPF_FUNC_task_pt_regs"));
        assert!(!btf.has_enumerator("outer", "a"));
        // The struct after the enum is still found: the enum's records were skipped whole.
        assert_eq!(btf.member_offset("outer", "b"), Ok(12));
    }

    #[test]
    fn the_running_kernel() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: {VMLINUX} is not readable here");
            return;
        };
        // files_struct starts with its reference count.
        assert_eq!(btf.member_offset("files_struct", "count"), Ok(0));
        for (name, member) in [
            ("task_struct", "files"),
            ("task_struct", "signal"),
            ("files_struct", "next_fd"),
            ("files_struct", "fdt"),
            ("fdtable", "max_fds"),
            ("fdtable", "open_fds"),
            ("signal_struct", "rlim"),
        ] {
            assert!(btf.member_offset(name, member).is_ok(), "{name}.{member}");
        }
        assert!(btf.has_enumerator("bpf_func_id", "BPF_FUNC_map_lookup_elem"));
    }

    /// The probe reads a task's user registers at offsets fixed in `pt_regs` (its stack's
    /// and a syscall's arguments at exit): they are the kernel's.
    #[test]
    fn the_registers_the_probe_reads_are_where_the_running_kernel_keeps_them() {
        use auditor_common::syscalls::pt_regs;
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("skipping: {VMLINUX} is not readable here");
            return;
        };
        for (member, offset) in [
            ("bp", pt_regs::BP),
            ("r10", pt_regs::R10),
            ("r9", pt_regs::R9),
            ("r8", pt_regs::R8),
            ("dx", pt_regs::DX),
            ("si", pt_regs::SI),
            ("di", pt_regs::DI),
            ("ip", pt_regs::IP),
            ("sp", pt_regs::SP),
        ] {
            assert_eq!(btf.member_offset("pt_regs", member), Ok(offset), "{member}");
        }
    }
}
