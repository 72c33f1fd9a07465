//! A guest under QEMU: one of Debian's kernels, an initramfs of busybox and the modules
//! that mount the host's root file system read-only over virtio 9p, a script run there
//! as root in a chroot of it (with its own /tmp, /proc, /sys, /dev and loopback), its
//! output on a serial port of its own, files it writes to /tmp/out kept in `WORK/out` on
//! the host, and a timeout after which it is killed.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::kernel::Kernel;

/// The line the guest's init writes last, with the script's exit status.
const EXIT_MARK: &str = "auditor-vm-exit: ";

/// /init of the initramfs: mounts the host's root, runs /script.sh in it, powers off.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /usr/bin /sbin /usr/sbin /proc /sys /dev /host
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for module in $(cat /modules/order); do insmod "/modules/$module" || echo "insmod $module failed"; done
if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose host /host; then
  for dir in tmp run var/tmp; do mount -t tmpfs tmpfs "/host/$dir"; done
  mount -t proc proc /host/proc
  mount -t sysfs sys /host/sys
  mount -t devtmpfs dev /host/dev
  mkdir -p /host/dev/pts /host/dev/shm
  mount -t devpts devpts /host/dev/pts
  mount -t tmpfs tmpfs /host/dev/shm
  mkdir -p /host/tmp/out
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out /host/tmp/out || echo "no out share"
  cp /script.sh /host/tmp/auditor-vm-script.sh
  ip link set lo up
  chroot /host /bin/sh /tmp/auditor-vm-script.sh > /dev/ttyS1 2>&1
  echo "auditor-vm-exit: $?" > /dev/ttyS1
else
  echo "auditor-vm-exit: no 9p mount of the host" > /dev/ttyS1
fi
poweroff -f
"#;

/// How a guest ended.
pub enum Outcome {
    /// The script ran to its end with this status.
    Exited(i32),
    /// The guest did not finish in time and was killed.
    TimedOut,
    /// The guest ended without the script's status (a panic, a failed mount: see the console).
    Crashed(String),
}

pub struct Run {
    pub outcome: Outcome,
    /// The script's output.
    pub output: String,
    pub console: PathBuf,
}

/// The accelerator QEMU uses; KVM only where a guest boots with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    fn arg(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            // One host thread for both vCPUs: with a thread each, a 7.2 guest took an int3
            // oops in trace_syscall_exit while its tracepoints were patched (code one vCPU
            // rewrote, another ran stale), once in three runs.
            Accel::Tcg => "tcg,thread=single",
        }
    }
}

/// Writes the initramfs for `kernel` running `script` into `work/initramfs.cpio.gz`.
fn initramfs(kernel: &Kernel, script: &str, work: &Path) -> anyhow::Result<PathBuf> {
    let tree = work.join("initramfs");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(tree.join("bin"))?;
    std::fs::create_dir_all(tree.join("modules"))?;
    let busybox =
        which::which("busybox").context("busybox is missing (apt-get install busybox-static)")?;
    std::fs::copy(busybox, tree.join("bin/busybox"))?;
    let mut order = String::new();
    for module in &kernel.modules {
        let name = module.file_name().context("a module file name")?;
        std::fs::copy(module, tree.join("modules").join(name))?;
        order.push_str(&format!("{}\n", name.to_string_lossy()));
    }
    std::fs::write(tree.join("modules/order"), order)?;
    std::fs::write(tree.join("script.sh"), script)?;
    write_executable(&tree.join("init"), INIT)?;
    let image = work.join("initramfs.cpio.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg("find . | cpio -o -H newc --quiet | gzip -1 > \"$0\"")
        .arg(&image)
        .current_dir(&tree)
        .status()
        .context("cannot run cpio (apt-get install cpio)")?;
    if !status.success() {
        bail!("making the initramfs in {} failed", tree.display());
    }
    Ok(image)
}

fn write_executable(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// Boots `kernel` with `script`, in `work` (its files: the console log and the output),
/// killing it after `timeout`.
pub fn boot(
    kernel: &Kernel,
    script: &str,
    work: &Path,
    accel: Accel,
    timeout: Duration,
) -> anyhow::Result<Run> {
    std::fs::create_dir_all(work)?;
    let image = initramfs(kernel, script, work)?;
    let console = work.join("console.log");
    let output = work.join("output.log");
    let _ = std::fs::remove_file(&output);
    let out = work.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let start = Instant::now();
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            accel.arg(),
            "-cpu",
            "max",
            "-smp",
            "2",
            "-m",
            "4G",
        ])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&image)
        .args(["-append", "console=ttyS0 panic=-1 loglevel=4"])
        .args(["-display", "none", "-no-reboot", "-nic", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", output.display()))
        .args([
            "-virtfs",
            "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        ])
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=out,security_model=none,multidevs=remap",
            out.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run qemu-system-x86_64 (apt-get install qemu-system-x86)")?;
    let timed_out = loop {
        if child.try_wait()?.is_some() {
            break false;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read(&output)
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\r', ""))
        .unwrap_or_default();
    let outcome = if timed_out {
        Outcome::TimedOut
    } else {
        match text
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix(EXIT_MARK))
        {
            Some(status) => match status.trim().parse() {
                Ok(status) => Outcome::Exited(status),
                Err(_) => Outcome::Crashed(status.to_string()),
            },
            None => Outcome::Crashed(match first_oops(&console) {
                Some(oops) => format!("the guest's kernel died: {oops}"),
                None => "the guest ended without the script's status".into(),
            }),
        }
    };
    let output = text
        .lines()
        .filter(|line| !line.starts_with(EXIT_MARK))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Run {
        outcome,
        output,
        console,
    })
}

/// The first line of a kernel oops or panic in the console log, with the function it hit.
fn first_oops(console: &Path) -> Option<String> {
    let log = std::fs::read(console).ok()?;
    let log = String::from_utf8_lossy(&log);
    let lines: Vec<&str> = log.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("Oops") || l.contains("BUG:") || l.contains("Kernel panic"))?;
    let rip = lines[at..].iter().find(|l| l.contains("RIP: 0010:"));
    Some(
        [Some(lines[at]), rip.copied()]
            .into_iter()
            .flatten()
            .map(|l| l.split_once("] ").map_or(l, |(_, text)| text).trim())
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// KVM where a guest boots with it within a few seconds, else TCG: KVM_CREATE_VM may
/// succeed where a guest then hangs (no nested virtualisation), so only a boot tells.
pub fn choose_accel(kernel: &Kernel, work: &Path) -> anyhow::Result<Accel> {
    if !Path::new("/dev/kvm").exists() {
        return Ok(Accel::Tcg);
    }
    let run = boot(
        kernel,
        "true\n",
        &work.join("kvm-check"),
        Accel::Kvm,
        Duration::from_secs(20),
    )?;
    Ok(match run.outcome {
        Outcome::Exited(0) => Accel::Kvm,
        _ => Accel::Tcg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oops_is_named_with_where_it_hit() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console.log");
        std::fs::write(
            &console,
            "[    1.0] booting\n[  258.165964] Oops: int3: 0000 [#1] SMP NOPTI\n\
             [  258.166838] CPU: 1 UID: 0\n[  258.167407] RIP: 0010:trace_syscall_exit+0xa/0x90\n",
        )
        .unwrap();
        assert_eq!(
            first_oops(&console).as_deref(),
            Some("Oops: int3: 0000 [#1] SMP NOPTI, RIP: 0010:trace_syscall_exit+0xa/0x90")
        );
        std::fs::write(&console, "[    1.0] booting\n").unwrap();
        assert_eq!(first_oops(&console), None);
    }
}
