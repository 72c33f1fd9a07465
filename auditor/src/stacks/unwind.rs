//! Unwinding a copied user stack: the process's mappings (`/proc/PID/maps`, read when
//! [`super::collect`] says), the call-frame information of each mapped object
//! (`.eh_frame`, `.debug_frame`), and framehop walking the copy from the registers the
//! probe saved.

use std::{collections::HashMap, ops::Deref, sync::Arc};

use framehop::{
    ExplicitModuleSectionInfo, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use object::{Object as _, ObjectSection as _, ObjectSegment as _};

use super::Frame;

/// Frames kept per stack, at most: the caller is near the top.
pub const MAX_FRAMES: usize = 128;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset into the file of `start`.
    pub offset: u64,
    pub executable: bool,
    /// The file mapped, or `[stack]`, `[vdso]`…, or empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// The lines of a `/proc/PID/maps` that can be read (the kernel writes them; none fail).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
            let (_device, _inode) = (fields.next()?, fields.next()?);
            let path = fields.next().unwrap_or("").trim_start();
            let (start, end) = range.split_once('-')?;
            let hex = |text: &str| u64::from_str_radix(text, 16).ok();
            Some(Mapping {
                start: hex(start)?,
                end: hex(end)?,
                offset: hex(offset)?,
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                path: path.strip_suffix(" (deleted)").unwrap_or(path).to_string(),
            })
        })
        .collect()
}

/// The mappings of live process `pid`; None once it has exited (a zombie's are empty).
pub fn read_maps(pid: u32) -> Option<Vec<Mapping>> {
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?);
    (!maps.is_empty()).then_some(maps)
}

/// A range of a mapped object file: section data framehop reads in place.
#[derive(Clone)]
pub struct Bytes {
    file: Arc<memmap2::Mmap>,
    range: std::ops::Range<usize>,
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.file[self.range.clone()]
    }
}

/// What unwinding needs of one object file, read once per file.
struct ObjectFile {
    /// Loadable segments: (file offset, file size, virtual address).
    segments: Vec<(u64, u64, u64)>,
    text_svma: Option<std::ops::Range<u64>>,
    got_svma: Option<std::ops::Range<u64>>,
    eh_frame: Option<(std::ops::Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
}

impl ObjectFile {
    fn open(path: &str) -> Option<ObjectFile> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: a read-only private mapping; an object a process has mapped is not
        // rewritten in place (package updates replace files).
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.ok()?);
        let elf = object::File::parse(&map[..]).ok()?;
        let section = |name: &str| {
            let section = elf.section_by_name(name)?;
            let svma = section.address()..section.address() + section.size();
            let bytes = section.file_range().map(|(offset, size)| Bytes {
                file: map.clone(),
                range: offset as usize..(offset + size) as usize,
            });
            Some((svma, bytes))
        };
        let with_data = |name: &str| section(name).and_then(|(svma, bytes)| Some((svma, bytes?)));
        Some(ObjectFile {
            segments: elf
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect(),
            text_svma: section(".text").map(|(svma, _)| svma),
            got_svma: section(".got").map(|(svma, _)| svma),
            eh_frame: with_data(".eh_frame"),
            eh_frame_hdr: with_data(".eh_frame_hdr"),
            debug_frame: with_data(".debug_frame").map(|(_, bytes)| bytes),
        })
    }

    /// The load bias of a mapping of this file: its address minus the virtual address the
    /// file gives the same byte.
    fn bias(&self, mapping: &Mapping) -> Option<u64> {
        let (offset, _, vaddr) = self
            .segments
            .iter()
            .find(|(offset, size, _)| (*offset..offset + size.max(&1)).contains(&mapping.offset))?;
        Some(
            mapping
                .start
                .wrapping_sub(vaddr + (mapping.offset - offset)),
        )
    }

    fn section_info(&self) -> ExplicitModuleSectionInfo<Bytes> {
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(svma, _)| svma.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, bytes)| bytes.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(svma, _)| svma.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, bytes)| bytes.clone()),
            debug_frame: self.debug_frame.clone(),
            // Mach-O's and the code itself (only needed inside prologues, which a
            // syscall's stack is not in).
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }
}

/// Object files by path, each read once for every process that maps it (None: it could
/// not be read).
#[derive(Default)]
pub struct Objects(HashMap<String, Option<Arc<ObjectFile>>>);

impl Objects {
    fn get(&mut self, path: &str) -> Option<Arc<ObjectFile>> {
        self.0
            .entry(path.to_string())
            .or_insert_with(|| ObjectFile::open(path).map(Arc::new))
            .clone()
    }
}

/// A process's address space as far as unwinding needs it.
pub struct Image {
    maps: Vec<Mapping>,
    unwinder: UnwinderX86_64<Bytes>,
}

/// The registers the probe saved and the stack it copied.
pub struct Registers<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Address of `stack[0]`.
    pub stack_base: u64,
    pub stack: &'a [u8],
}

impl Image {
    /// The image of a process with mappings `maps`, each file-backed executable object a
    /// module with its call-frame information.
    pub fn new(maps: Vec<Mapping>, objects: &mut Objects) -> Image {
        let mut unwinder = UnwinderX86_64::new();
        let mut seen = std::collections::HashSet::new();
        for mapping in maps.iter().filter(|m| m.executable && m.is_file()) {
            if !seen.insert(mapping.path.clone()) {
                continue;
            }
            let Some(object) = objects.get(&mapping.path) else {
                continue;
            };
            let Some(bias) = object.bias(mapping) else {
                continue;
            };
            // The module spans every mapping of its file.
            let of_file = maps.iter().filter(|m| m.path == mapping.path);
            let start = of_file
                .clone()
                .map(|m| m.start)
                .min()
                .unwrap_or(mapping.start);
            let end = of_file.map(|m| m.end).max().unwrap_or(mapping.end);
            unwinder.add_module(Module::new(
                mapping.path.clone(),
                start..end,
                bias,
                object.section_info(),
            ));
        }
        Image { maps, unwinder }
    }

    fn mapping(&self, address: u64) -> Option<&Mapping> {
        self.maps
            .iter()
            .find(|m| (m.start..m.end).contains(&address))
    }

    /// Whether `address` lies in a mapping the image knows.
    pub fn covers(&self, address: u64) -> bool {
        self.mapping(address).is_some()
    }

    /// The stack's code addresses, innermost first: the instruction pointer, then each
    /// return address less one (inside the call instruction, so that it names the caller).
    pub fn unwind(&self, cache: &mut CacheX86_64, registers: &Registers<'_>) -> Vec<u64> {
        let stack = registers.stack;
        let base = registers.stack_base;
        let mut read_stack = |address: u64| {
            let at = address.checked_sub(base).ok_or(())? as usize;
            let word = stack.get(at..at + 8).ok_or(())?;
            Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(registers.ip, registers.sp, registers.bp);
        let mut frames = self
            .unwinder
            .iter_frames(registers.ip, regs, cache, &mut read_stack);
        let mut addresses = Vec::new();
        // An error ends the stack where the copy or the unwind information ends.
        while let Ok(Some(frame)) = frames.next() {
            addresses.push(frame.address_for_lookup());
            if addresses.len() == MAX_FRAMES {
                break;
            }
        }
        addresses
    }

    /// The frame of a code address: its object and offset into the object's file.
    pub fn frame(&self, address: u64) -> Frame {
        match self.mapping(address).filter(|m| m.is_file()) {
            Some(m) => Frame {
                object: m.path.clone(),
                symbol: None,
                file_offset: address - m.start + m.offset,
            },
            None => Frame {
                object: String::new(),
                symbol: None,
                file_offset: address,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_read_whole() {
        let maps = parse_maps(
            "55d0c7a00000-55d0c7a04000 r--p 00000000 08:01 1318 /usr/bin/nc\n\
             55d0c7a04000-55d0c7a0d000 r-xp 00004000 08:01 1318 /usr/bin/nc\n\
             7ffd1c6f0000-7ffd1c711000 rw-p 00000000 00:00 0                          [stack]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
             7f0000002000-7f0000003000 r-xp 00001000 08:01 77 /tmp/a b (deleted)\n",
        );
        assert_eq!(maps.len(), 5);
        assert_eq!(
            maps[1],
            Mapping {
                start: 0x55d0c7a04000,
                end: 0x55d0c7a0d000,
                offset: 0x4000,
                executable: true,
                path: "/usr/bin/nc".into()
            }
        );
        assert_eq!(maps[2].path, "[stack]");
        assert_eq!(maps[3].path, "");
        assert_eq!(maps[4].path, "/tmp/a b");
    }
}
