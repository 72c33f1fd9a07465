//! tracefs: making sure it is mounted (tracepoints attach through it), and reading the
//! layout of event records from its `format` files.

use std::path::Path;

use crate::Error;

pub const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Mounts tracefs at its usual place when it is not there; fails with
/// [`Error::TracefsUnreadable`] when it is there but this user cannot read it.
pub fn ensure_mounted() -> Result<(), Error> {
    match std::fs::metadata(Path::new(MOUNT_POINT).join("events")) {
        Ok(events) if events.is_dir() => return Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(Error::TracefsUnreadable(error.to_string()));
        }
        _ => {}
    }
    nix::mount::mount(
        Some("tracefs"),
        MOUNT_POINT,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|errno| Error::Tracefs(errno.desc().to_string()))
}

/// Whether the running kernel has the tracepoint `category:event` (a syscall added after
/// its release has none).
pub fn has_event(category: &str, event: &str) -> bool {
    Path::new(MOUNT_POINT)
        .join("events")
        .join(category)
        .join(event)
        .is_dir()
}

/// Offset of `field` in the records of `category:event` on the running kernel.
pub fn field_offset(category: &str, event: &str, field: &str) -> Result<usize, Error> {
    let path = Path::new(MOUNT_POINT)
        .join("events")
        .join(category)
        .join(event)
        .join("format");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::TraceFormat {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    parse_field_offset(&text, field).ok_or_else(|| Error::TraceFormat {
        path: path.display().to_string(),
        why: format!("no field `{field}` with an offset"),
    })
}

/// Finds `offset:N` on the line declaring `field` in a tracefs `format` file, e.g.
/// `field:pid_t child_pid;<TAB>offset:20;<TAB>size:4;<TAB>signed:1;`.
pub fn parse_field_offset(format: &str, field: &str) -> Option<usize> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let declaration = parts.next()?.strip_prefix("field:")?;
        let name = declaration.rsplit([' ', '*']).next()?;
        if name != field {
            return None;
        }
        parts.find_map(|part| part.strip_prefix("offset:")?.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // sched_process_fork on 6.18 (strings moved to __data_loc) and on 6.1.
    const FORK_618: &str = "name: sched_process_fork\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
    const FORK_61: &str = "\tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";

    #[test]
    fn offsets_follow_the_kernel() {
        assert_eq!(parse_field_offset(FORK_618, "child_pid"), Some(20));
        assert_eq!(parse_field_offset(FORK_618, "parent_pid"), Some(12));
        assert_eq!(parse_field_offset(FORK_61, "child_pid"), Some(44));
        assert_eq!(parse_field_offset(FORK_61, "pid"), None);
        assert_eq!(
            parse_field_offset("\tfield:struct pollfd * ufds;\toffset:16;\tsize:8;", "ufds"),
            Some(16)
        );
    }
}
