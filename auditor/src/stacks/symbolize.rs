//! Names the frames of unwound stacks with blazesym: the function each file offset lies
//! in, from the object's ELF symbols, its DWARF, or a separate debug file (a debug link or
//! the build id, under /usr/lib/debug). Offsets into files, not addresses: a process that
//! has exited is symbolized as well as a live one.

use std::collections::{BTreeMap, BTreeSet};

use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Elf, source::Source};

use super::Frame;

/// Fills in the symbol of every frame that symbols name.
pub fn symbolize<'a>(frames: impl IntoIterator<Item = &'a mut Frame>) {
    let mut frames: Vec<&mut Frame> = frames.into_iter().collect();
    let mut offsets: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for frame in frames.iter().filter(|f| f.object.starts_with('/')) {
        offsets
            .entry(frame.object.clone())
            .or_default()
            .insert(frame.file_offset);
    }
    let symbolizer = Symbolizer::new();
    let mut names: BTreeMap<(String, u64), String> = BTreeMap::new();
    for (object, offsets) in offsets {
        let offsets: Vec<u64> = offsets.into_iter().collect();
        let source = Source::Elf(Elf::new(&object));
        // An object that cannot be read is named by its offsets.
        let Ok(symbols) = symbolizer.symbolize(&source, Input::FileOffset(&offsets)) else {
            continue;
        };
        for (offset, symbol) in offsets.iter().zip(symbols) {
            if let Symbolized::Sym(symbol) = symbol {
                names.insert((object.clone(), *offset), symbol.name.into_owned());
            }
        }
    }
    for frame in frames.iter_mut() {
        let key = (std::mem::take(&mut frame.object), frame.file_offset);
        frame.symbol = names.get(&key).cloned();
        frame.object = key.0;
    }
}
