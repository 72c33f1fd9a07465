//! The Debian packages the tests run beyond the crates, declared once: `cargo xtask test`
//! installs each one that is missing before it runs them (as root; without root it names
//! them and skips, and counts, the tests below), and a test that needs one asks for it by
//! [`require`], which fails naming the package when it is not there. xtask reads this file
//! too (`#[path]`), and its test checks that every package a test names is listed here.

/// A Debian package the tests need.
pub struct Package {
    /// Debian's name of it.
    pub name: &'static str,
    /// A file it installs: there, the package is taken as installed (the tests look for
    /// this file, not for dpkg's record).
    pub provides: &'static str,
    /// What the tests do with it.
    pub used_for: &'static str,
    /// The tests that cannot run without it, as libtest names them (exact `--skip` filters).
    pub tests: &'static [&'static str],
}

/// Every package a test needs. Those of the machine's image (strace, gcc, util-linux,
/// bsdutils) are listed too: a machine without them gets them the same way. A test named
/// here calls [`require`] first, and one that calls it is named here (xtask's test checks
/// both).
pub const PACKAGES: &[Package] = &[
    Package {
        name: "prometheus",
        provides: "/usr/bin/prometheus",
        used_for: "a real Prometheus server, started by the test and not as a service, scrapes the exporter",
        tests: &["prometheus_sums_are_the_reports_counts"],
    },
    Package {
        name: "fonts-dejavu-core",
        provides: "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        used_for: "the SVG's labels are laid out with a TrueType font",
        tests: &[
            "report::tests::the_svg_of_hostile_names_is_valid_xml",
            "report::tests::the_svg_is_one_page_with_rows_labelled",
            "the_picture_has_a_mark_per_site_and_renders",
            "outputs::planted_links_and_fifos_are_refused_at_once",
            "outputs::a_bad_svg_path_is_refused_before_anything_is_read_or_written",
            "outputs::a_full_disk_leaves_the_previous_report_and_never_costs_the_report_its_svg",
        ],
    },
    Package {
        name: "python3",
        provides: "/usr/bin/python3",
        used_for: "a process already waiting in poll when the probe attaches to it",
        tests: &["a_poll_waiting_when_the_session_attaches_is_counted_whole"],
    },
    Package {
        name: "strace",
        provides: "/usr/bin/strace",
        used_for: "the strace source's tests record logs with it and run it",
        tests: &[
            "a_dup2_of_a_closed_fd_is_unreadable_from_a_log",
            "a_workload_log_gives_the_exact_counts",
            "auditor_strace_attaches_to_a_pid",
            "every_case_is_counted_exactly_from_strace",
            "auditor_strace_runs_strace_and_counts_the_same",
            "auditor_strace_with_stacks_names_the_code_that_took_the_rare_arm",
            "dup_sites_both_ways_from_a_log",
            "epoll_ctl_sites_from_a_log",
            "errors_before_and_after_the_allocation_from_a_log",
            "fchmodat_flags_from_a_log",
            "fd_prepare_sites_both_ways_from_a_log",
            "open_checks_both_ways_from_a_log",
            "a_signal_to_the_auditor_alone_ends_the_command_and_the_session",
            "a_signal_to_the_auditor_alone_detaches_from_pids_and_reports",
            "a_duration_ends_a_started_command_with_its_status",
            "a_duration_ends_an_strace_session",
            "exit_statuses_say_whether_strace_ran_the_command",
            "the_report_does_not_share_the_commands_stdout",
            "per_process_rows_name_the_executable",
            "strace_names_the_same_function",
            "outputs::a_full_or_closed_stderr_is_an_exit_not_a_panic",
        ],
    },
    Package {
        name: "gcc",
        provides: "/usr/bin/gcc",
        used_for: "the stack tests compile small C programs that poll",
        tests: &[
            "a_jit_in_the_place_of_a_file_is_not_named_after_it",
            "strace_names_the_same_function",
            "the_probe_names_the_function_behind_the_rare_arm",
        ],
    },
    Package {
        name: "util-linux",
        provides: "/usr/bin/setpriv",
        used_for: "tests drop root with setpriv",
        tests: &[
            "without_privileges_it_says_what_is_missing",
            "a_tracefs_this_user_cannot_read_is_named_as_such",
        ],
    },
    Package {
        name: "bsdutils",
        provides: "/usr/bin/script",
        used_for: "a test gives the auditor a terminal with script",
        tests: &[
            "the_status_line_keeps_off_a_commands_terminal",
            "every_command_fits_80_120_and_200_columns",
        ],
    },
];

/// The listed package `name`.
pub fn package(name: &str) -> &'static Package {
    PACKAGES
        .iter()
        .find(|package| package.name == name)
        .unwrap_or_else(|| {
            panic!("{name} is not in auditor/tests/common/packages.rs: add it there")
        })
}

/// Whether the listed package is on this machine.
pub fn is_installed(package: &Package) -> bool {
    std::path::Path::new(package.provides).exists()
}

/// Fails the calling test when the listed package `name` is not installed.
pub fn require(name: &str) {
    let package = package(name);
    assert!(
        is_installed(package),
        "Debian's {name} is not installed ({} is missing; {}): `cargo xtask test` installs it as root",
        package.provides,
        package.used_for
    );
}
