//! Writes the probe's family programs from the syscall table (`auditor_common::SYSCALLS`):
//! for every row whose `enter` or `exit` is `Program::Derived`, one line in the list its
//! family's module expands into tracepoint programs (`OUT_DIR/programs/MODULE.rs`). A
//! syscall added to a family gets its programs from its row alone. Rebuilds the probe when
//! bpf-linker changes too (a new LLVM may emit different code).

use std::{collections::BTreeMap, env, fmt::Write as _, fs, path::PathBuf};

use auditor_common::syscalls::{Family, Program, SYSCALLS, SyscallInfo};

/// The module and the macro that hold a family's program at one end of its calls.
fn family_program(info: &SyscallInfo, end: &str) -> (&'static str, &'static str) {
    match (info.family, end) {
        (Family::Lookup(_), "enter") => ("fget", "lookup_enters"),
        (Family::Allocate, "enter") => ("alloc", "allocation_enters"),
        (Family::Chmod, "enter") => ("chmod", "chmod_enters"),
        (Family::CopyTable, "exit") => ("copy", "copy_exits"),
        (family, end) => panic!(
            "the syscall table derives {}'s {end} program, which {family:?} has none of",
            info.name
        ),
    }
}

fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
    println!("cargo:rerun-if-changed=../auditor-common/src");
    // module -> macro -> `function => "event": Variant` lines.
    let mut lists: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
    for module in ["alloc", "chmod", "copy", "fget"] {
        lists.entry(module).or_default();
    }
    for info in &SYSCALLS {
        for (end, program) in [("enter", info.enter), ("exit", info.exit)] {
            if program != Program::Derived {
                continue;
            }
            let (module, list) = family_program(info, end);
            let lines = lists.entry(module).or_default().entry(list).or_default();
            let name = info.name;
            let _ = writeln!(
                lines,
                "    {name}_{end} => \"sys_{end}_{name}\": {:?},",
                info.syscall
            );
        }
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("programs");
    fs::create_dir_all(&out).expect("OUT_DIR/programs");
    for (module, macros) in lists {
        let mut text = String::from("// Written by build.rs from the syscall table.\n");
        for (list, lines) in macros {
            let _ = write!(text, "{list}! {{\n{lines}}}\n");
        }
        fs::write(out.join(format!("{module}.rs")), text).expect("a program list");
    }
}
