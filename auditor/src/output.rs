//! Outputs written as a database writes them: a named file is checked before the session
//! (so that a bad path fails before hours of counting, not after), written whole into a new
//! temporary file beside it, synced, and renamed over it; on any failure the file is as it
//! was. Nothing is written through a link or into a FIFO or device someone planted where a
//! file was named, and never over one of the inputs. Streams are written only when named as
//! such: `-` or `/dev/stdout`, `/dev/stderr`, `/dev/null`, `/dev/fd/N` (a shell's process
//! substitution).

use std::{
    io::Write,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _},
    },
    path::{Path, PathBuf},
};

/// Where an output goes.
#[derive(Debug)]
pub enum Output {
    Stdout,
    Stderr,
    /// `/dev/null`: written and dropped.
    Discard,
    /// `/dev/fd/N` or `/proc/self/fd/N`: a descriptor the user handed over.
    Descriptor(i32),
    /// A file, replaced whole once its text is written.
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{what} {path}: {why}")]
    Refused {
        what: &'static str,
        path: String,
        why: String,
    },
    #[error("cannot write the {what} to {path}: {why}{kept}")]
    Write {
        what: &'static str,
        path: String,
        why: std::io::Error,
        /// What became of the file that was there.
        kept: &'static str,
    },
    #[error("cannot draw the SVG for {path}: {why}")]
    Draw { path: String, why: String },
}

impl OutputError {
    /// Whether the reader of a pipe went away (`auditor … | head`): not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, OutputError::Write { why, .. } if why.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// The name of a descriptor the user hands over: `/dev/fd/N`, `/proc/self/fd/N`.
fn descriptor_named(path: &Path) -> Option<i32> {
    let text = path.to_str()?;
    let number = text
        .strip_prefix("/dev/fd/")
        .or_else(|| text.strip_prefix("/proc/self/fd/"))?;
    number.parse().ok().filter(|&fd| fd >= 0)
}

/// The file's identity, to tell an output that is one of the inputs under another name.
fn identity(metadata: &std::fs::Metadata) -> (u64, u64) {
    (metadata.dev(), metadata.ino())
}

impl Output {
    /// The output `path` names, checked now: `what` it is for the messages (`-o`,
    /// `--svg`), `inputs` the files the command reads (never written over).
    pub fn named(
        path: &Path,
        what: &'static str,
        inputs: &[PathBuf],
    ) -> Result<Output, OutputError> {
        let refused = |why: String| OutputError::Refused {
            what,
            path: path.display().to_string(),
            why,
        };
        match path.to_str() {
            Some("-" | "/dev/stdout") => return Ok(Output::Stdout),
            Some("/dev/stderr") => return Ok(Output::Stderr),
            Some("/dev/null") => return Ok(Output::Discard),
            _ => {}
        }
        if let Some(fd) = descriptor_named(path) {
            // SAFETY: F_GETFD only asks whether the descriptor is open.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                return Err(refused(format!("descriptor {fd} is not open")));
            }
            return Ok(Output::Descriptor(fd));
        }
        match std::fs::symlink_metadata(path) {
            Ok(metadata) => {
                let kind = metadata.file_type();
                let not_a_file = if kind.is_symlink() {
                    Some(
                        "is a symbolic link, and no output is written through one (name its target)",
                    )
                } else if kind.is_dir() {
                    Some("is a directory")
                } else if kind.is_fifo() || kind.is_socket() {
                    Some(
                        "is a FIFO or socket, and no output is written into one unless named \
                          as a stream (`-` for stdout, then redirect it)",
                    )
                } else if kind.is_char_device() || kind.is_block_device() {
                    Some(
                        "is a device, and no output is written into one unless named as a \
                          stream (`-` for stdout, /dev/null)",
                    )
                } else {
                    None
                };
                if let Some(why) = not_a_file {
                    return Err(refused(why.into()));
                }
                for input in inputs {
                    if std::fs::metadata(input)
                        .is_ok_and(|read| identity(&read) == identity(&metadata))
                    {
                        return Err(refused(format!(
                            "is also an input ({}): writing it would destroy what is read",
                            input.display()
                        )));
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(refused(error.to_string())),
        }
        // The directory must take a new file: made and removed now, so that the end of a
        // long session does not find out.
        let directory = directory_of(path);
        temporary_beside(path).map_err(|why| {
            // tempfile names the file it tried; the directory is what the user gave.
            let why = why.to_string();
            let why = why.split(" at path ").next().unwrap_or_default();
            refused(format!(
                "cannot create files in {}: {why}",
                directory.display()
            ))
        })?;
        Ok(Output::File(path.to_path_buf()))
    }

    /// Writes what `write` makes to this output; a file is replaced only once all of it is
    /// written and synced.
    pub fn write_with(
        &self,
        what: &'static str,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), OutputError> {
        let failed = |path: String, kept: &'static str| {
            move |why: std::io::Error| OutputError::Write {
                what,
                path,
                why,
                kept,
            }
        };
        // Buffered: serde and the tables write a few bytes at a time, and stderr is
        // unbuffered.
        let buffered = |out: &mut dyn Write| {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
            write(&mut out)?;
            out.flush()
        };
        match self {
            Output::Stdout => {
                buffered(&mut std::io::stdout().lock()).map_err(failed("stdout".into(), ""))
            }
            Output::Stderr => {
                buffered(&mut std::io::stderr().lock()).map_err(failed("stderr".into(), ""))
            }
            Output::Discard => {
                buffered(&mut std::io::sink()).map_err(failed("/dev/null".into(), ""))
            }
            Output::Descriptor(fd) => {
                let name = format!("/dev/fd/{fd}");
                // A duplicate, so that the user's descriptor stays open for them.
                // SAFETY: F_DUPFD_CLOEXEC of a descriptor checked open; the new one is ours.
                let duplicate = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 0) };
                if duplicate < 0 {
                    return Err(failed(name, "")(std::io::Error::last_os_error()));
                }
                // SAFETY: `duplicate` was just made and nothing else owns it.
                let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(duplicate) });
                buffered(&mut file).map_err(failed(name, ""))
            }
            Output::File(path) => {
                let name = path.display().to_string();
                let kept = if path.exists() {
                    " (the file there is as it was)"
                } else {
                    ""
                };
                let mut file = temporary_beside(path).map_err(failed(name.clone(), kept))?;
                buffered(file.as_file_mut())
                    .and_then(|()| file.as_file().sync_all())
                    .map_err(failed(name.clone(), kept))?;
                // The rename replaces whatever is at `path` now, a link itself included,
                // never what a link points to.
                file.persist(path)
                    .map_err(|error| failed(name.clone(), kept)(error.error))?;
                // The rename itself is durable once the directory is.
                if let Ok(directory) = std::fs::File::open(directory_of(path)) {
                    let _ = directory.sync_all();
                }
                Ok(())
            }
        }
    }

    /// The descriptor a terminal width is measured on, for the streams.
    pub fn terminal_fd(&self) -> Option<i32> {
        match self {
            Output::Stdout => Some(std::io::stdout().as_raw_fd()),
            Output::Stderr => Some(std::io::stderr().as_raw_fd()),
            Output::Descriptor(fd) => Some(*fd),
            Output::Discard | Output::File(_) => None,
        }
    }
}

/// The directory a file `path` goes in.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A new file beside `path` (created exclusively, never through a link), with the
/// permissions a newly created file gets (0666 less the umask), removed when dropped.
fn temporary_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(directory_of(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(output: &Output, text: &str) -> Result<(), OutputError> {
        output.write_with("report", |out| out.write_all(text.as_bytes()))
    }

    #[test]
    fn a_file_is_replaced_whole_or_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, "before").unwrap();
        let output = Output::named(&path, "-o", &[]).unwrap();
        // A failure midway leaves the file as it was, and no temporary file behind.
        let error = output
            .write_with("report", |out| {
                out.write_all(b"half")?;
                Err(std::io::Error::other("disk full"))
            })
            .unwrap_err();
        assert!(error.to_string().contains("as it was"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        written(&output, "after").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn links_fifos_devices_and_inputs_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let fifo = dir.path().join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let input = dir.path().join("in.json");
        std::fs::write(&input, "{}").unwrap();
        let hard = dir.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        for (path, says) in [
            (&link, "symbolic link"),
            (&fifo, "FIFO"),
            (&PathBuf::from("/dev/full"), "device"),
            (&dir.path().to_path_buf(), "directory"),
            (&input, "also an input"),
            (&hard, "also an input"),
            (&dir.path().join("none/x.json"), "cannot create files in"),
        ] {
            let error = Output::named(path, "-o", std::slice::from_ref(&input)).unwrap_err();
            assert!(error.to_string().contains(says), "{path:?}: {error}");
        }
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's");
    }

    #[test]
    fn a_link_planted_after_the_check_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").unwrap();
        let path = dir.path().join("report.json");
        let output = Output::named(&path, "-o", &[]).unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        written(&output, "report").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "report");
    }

    #[test]
    fn streams_are_written_when_named_as_such() {
        assert!(matches!(
            Output::named(Path::new("-"), "-o", &[]),
            Ok(Output::Stdout)
        ));
        assert!(matches!(
            Output::named(Path::new("/dev/stdout"), "-o", &[]),
            Ok(Output::Stdout)
        ));
        assert!(matches!(
            Output::named(Path::new("/dev/null"), "-o", &[]),
            Ok(Output::Discard)
        ));
        let (read, write) = nix::unistd::pipe().unwrap();
        let named = PathBuf::from(format!("/dev/fd/{}", write.as_raw_fd()));
        let output = Output::named(&named, "-o", &[]).unwrap();
        written(&output, "through a pipe").unwrap();
        drop(write);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut text).unwrap();
        assert_eq!(text, "through a pipe");
        assert!(Output::named(Path::new("/dev/fd/999999"), "-o", &[]).is_err());
    }
}
