//! Debian's kernel releases the project knows, each with the suite that carries it,
//! declared once: the kernel matrix boots their images, `cargo xtask kernel-src` fetches
//! their sources, the oracle builds the newest.

use anyhow::Context as _;

/// A kernel release and the Debian suite whose `linux-image-amd64` and
/// `linux-source-VERSION` are that release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub version: &'static str,
    pub suite: &'static str,
    /// Whether the probe loads there (else the auditor must refuse it in one line).
    pub supported: bool,
}

/// The kernels the matrix knows, oldest first.
pub const RELEASES: [Release; 4] = [
    Release {
        version: "5.10",
        suite: "bullseye",
        supported: false,
    },
    Release {
        version: "6.1",
        suite: "bookworm",
        supported: true,
    },
    Release {
        version: "6.12",
        suite: "bookworm-backports",
        supported: true,
    },
    Release {
        version: "7.2",
        suite: "sid",
        supported: true,
    },
];

pub fn release(version: &str) -> anyhow::Result<Release> {
    RELEASES
        .into_iter()
        .find(|release| release.version == version)
        .with_context(|| {
            let known: Vec<_> = RELEASES.iter().map(|r| r.version).collect();
            format!(
                "no Debian kernel package known for {version}: known are {}",
                known.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_known_by_version() {
        assert_eq!(release("6.1").unwrap().suite, "bookworm");
        assert_eq!(release("6.12").unwrap().suite, "bookworm-backports");
        assert!(release("4.19").is_err());
    }
}
