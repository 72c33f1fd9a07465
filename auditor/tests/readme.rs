//! The README and docs/ against what they describe. docs/sites.md's table of sites is
//! generated from the catalogue (how many sites in which files, how many a log measures; a
//! row per site: id, function, condition, hint and since when, what one evaluation is),
//! between its `sites:begin` and `sites:end` markers: the test fails when the catalogue
//! changed and the page did not (the README and the guide leave the counts to it).
//! `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme` writes it. The README's
//! answer is what its command prints; the README stays a landing page.

use std::path::Path;

use auditor_common::catalogue::{Decided, Hint, SITES};

const BEGIN: &str = "<!-- sites:begin (generated: AUDITOR_WRITE_README=1 cargo test -p auditor --test readme) -->\n";
const END: &str = "<!-- sites:end -->\n";

/// The sentence and the table, from the catalogue.
fn generated() -> String {
    let mut files: Vec<&str> = Vec::new();
    for site in SITES {
        if !files.contains(&site.file) {
            files.push(site.file);
        }
    }
    let (last, first) = files.split_last().expect("sites in files");
    // A log shows arguments and return values, not the task's fd table.
    let from_a_log = SITES
        .iter()
        .filter(|site| site.decided != Decided::TaskState)
        .count();
    let sentence = format!(
        "The catalogue has {} sites across {} and {last}, all measured by the probe, \
         {from_a_log} of them from a strace log too (the other {} need the task's fd \
         table, which a log does not show; `auditor sites` lists them with their \
         conditions, hints, units, the syscalls counted and where the probe decides each):",
        SITES.len(),
        first.join(", "),
        SITES.len() - from_a_log
    );
    let mut table = format!(
        "{}\n\n| site | kernel function | taken when | mainline hint | counted per |\n\
         |---|---|---|---|---|\n",
        textwrap::fill(&sentence, 90)
    );
    for site in SITES {
        let hint = match site.hint {
            Hint::None => "none".to_string(),
            hint => format!("`{}` ({})", hint.name(), site.hint_since),
        };
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {hint} | {} |\n",
            site.id,
            site.function,
            site.condition.replace('|', "\\|"),
            site.unit.name()
        ));
    }
    // The sites whose branch older releases lack, by the release that brought it.
    let mut since: Vec<&str> = SITES
        .iter()
        .map(|site| site.branch_since)
        .filter(|since| !since.is_empty())
        .collect();
    since.sort_by_key(|release| {
        std::cmp::Reverse(auditor_common::catalogue::parse_release(release))
    });
    since.dedup();
    let lacking_in_6_1 = SITES.iter().filter(|site| !site.branch_in((6, 1))).count();
    let sentence = format!(
        "Sites whose branch an older kernel lacks ({lacking_in_6_1} in 6.1), by the release \
         that brought it (a report of such a kernel marks them):"
    );
    table.push_str(&format!("\n{}\n\n", textwrap::fill(&sentence, 90)));
    for release in since {
        let ids: Vec<String> = SITES
            .iter()
            .filter(|site| site.branch_since == release)
            .map(|site| format!("`{}`", site.id))
            .collect();
        table.push_str(&format!("- {release}: {}.\n", ids.join(", ")));
    }
    table.push_str(
        "\nSites whose arm no workload can drive (the tests drive every other site both ways, \
         and check that the workload's cases do):\n\n",
    );
    for site in SITES.iter().filter(|site| !site.one_armed.is_empty()) {
        table.push_str(&format!("- `{}`: {}.\n", site.id, site.one_armed));
    }
    table.push_str("\nSyscalls that allocate fds and are not followed (their allocations are missing from\nthe fd sites' counts):\n\n");
    for (syscalls, why) in auditor_common::syscalls::NOT_FOLLOWED {
        table.push_str(&format!("- {syscalls}: {why}.\n"));
    }
    table
}

/// A page of the repository (`README.md`, `docs/guide.md`).
fn page(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

/// A page's path, its text, and where the generated text between `begin` and `end` lies.
fn generated_block(
    name: &str,
    begin: &str,
    end: &str,
) -> (std::path::PathBuf, String, usize, usize) {
    let path = page(name);
    let readme = std::fs::read_to_string(&path).unwrap();
    let start = readme
        .find(begin)
        .unwrap_or_else(|| panic!("the README has no {begin}"))
        + begin.len();
    let stop = readme[start..]
        .find(end)
        .unwrap_or_else(|| panic!("the README has no {end}"))
        + start;
    (path, readme, start, stop)
}

/// The text between `begin` and `end` in page `name` is `text`, or, with
/// AUDITOR_WRITE_README set, becomes it. The page's text between them, if checked.
fn generated_text(name: &str, begin: &str, end: &str, text: &str) -> Option<String> {
    let (path, page, start, stop) = generated_block(name, begin, end);
    if std::env::var_os("AUDITOR_WRITE_README").is_some() {
        let written = format!("{}{text}{}", &page[..start], &page[stop..]);
        std::fs::write(&path, written).unwrap();
        return None;
    }
    assert_eq!(
        page[start..stop],
        *text,
        "{} is stale: run `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme`",
        path.display()
    );
    Some(page[start..stop].to_string())
}

#[test]
fn the_sites_page_lists_the_catalogue() {
    let Some(table) = generated_text("docs/sites.md", BEGIN, END, &generated()) else {
        return;
    };
    // Every row is one of the catalogue's, once.
    for site in SITES {
        assert_eq!(
            table.matches(&format!("| `{}` |", site.id)).count(),
            1,
            "{}",
            site.id
        );
    }
}

const STEPS_BEGIN: &str = "<!-- steps:begin (generated: AUDITOR_WRITE_README=1 cargo test -p auditor --test readme) -->\n";
const STEPS_END: &str = "<!-- steps:end -->\n";

/// The guide's list of workload steps is the one the steps' forms make.
#[test]
fn the_guides_workload_steps_are_the_forms() {
    let steps = auditor::workload::grammar();
    generated_text("docs/guide.md", STEPS_BEGIN, STEPS_END, &steps);
}

/// The PromQL the guide gives for the share against the hint is the one
/// `tests/metrics.rs` checks against a Prometheus server.
#[test]
fn the_guides_promql_is_the_tested_one() {
    let path = page("docs/guide.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let tests =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/metrics.rs"))
            .unwrap();
    let start = readme.find("```promql\n").expect("a promql block") + "```promql\n".len();
    let block = &readme[start..start + readme[start..].find("\n```").unwrap()];
    assert!(
        tests.contains(block),
        "the README's PromQL is not the tested one:\n{block}"
    );
}

const MEMORY_BEGIN: &str = "<!-- memory:begin (generated as root: AUDITOR_WRITE_README=1 cargo test -p auditor --test readme -- --ignored) -->\n";
const MEMORY_END: &str = "<!-- memory:end -->\n";

/// The memory the kernel accounts to the probe's maps once loaded, without and with
/// `--stacks`.
fn measured_memory() -> [auditor::source::ebpf::MapMemory; 2] {
    use auditor::source::ebpf::{Filter, Probe};
    [
        None,
        Some(auditor::stacks::Arms::of(|site| Some(site.info().hint))),
    ]
    .map(|stacks| {
        let filter = Filter {
            stacks,
            ..Filter::default()
        };
        let mut probe = Probe::attach(&filter, &|| false).unwrap();
        let memory = probe.map_memory().unwrap();
        probe.detach().unwrap();
        memory
    })
}

/// The README's paragraph on the memory of a session, from measured figures.
fn memory_paragraph(cpus: usize, [plain, stacks]: [auditor::source::ebpf::MapMemory; 2]) -> String {
    let mb = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1e6);
    let text = format!(
        "Memory fixed for a session, as the kernel accounts it to the probe's {} maps once \
         loaded (their `memlock`), on a machine of {cpus} CPUs: {} in maps of one copy and {} \
         in per-CPU maps without `--stacks`; {} and {} with it (its ring buffer of {} MiB and \
         its sampling tables are made only then). Each traced process past the first {} \
         (whose rows are preallocated, with the spill's) adds its row of counts, {} bytes \
         per CPU, as it first makes a counted call, and each of its threads {} bytes in the \
         thread's own storage (its process as last decided, and its call in flight), which \
         the kernel frees with the thread.",
        plain.maps,
        mb(plain.shared),
        mb(plain.per_cpu_maps),
        mb(stacks.shared),
        mb(stacks.per_cpu_maps),
        auditor_common::stacks::RING_BYTES >> 20,
        auditor_common::slots::FIRST_ROWS,
        std::mem::size_of::<auditor_common::SiteCounts>(),
        auditor_common::maps::THREAD_STATE_BYTES,
    );
    // Never wrapped at a hyphen: "per-CPU" stays one word.
    let options = textwrap::Options::new(90).word_splitter(textwrap::WordSplitter::NoHyphenation);
    format!("{}\n", textwrap::fill(&text, options))
}

/// The numbers of a paragraph, in order.
fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|word| word.trim_end_matches('.').parse().ok())
        .collect()
}

/// The README's memory figures are the maps' as the kernel accounts them (within 10%, for
/// other kernels and CPU counts: the per-CPU part is compared per CPU).
#[test]
#[ignore = "loads the probe: needs root and tracefs (`cargo xtask test`)"]
fn the_readmes_memory_is_the_maps_as_loaded() {
    let (path, readme, start, end) = generated_block("docs/guide.md", MEMORY_BEGIN, MEMORY_END);
    // As the kernel sizes per-CPU maps: the possible CPUs.
    let cpus = aya::util::nr_cpus().unwrap();
    let measured = memory_paragraph(cpus, measured_memory());
    if std::env::var_os("AUDITOR_WRITE_README").is_some() {
        let written = format!("{}{measured}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, written).unwrap();
        return;
    }
    let (said, now) = (numbers(&readme[start..end]), numbers(&measured));
    assert_eq!(
        said.len(),
        now.len(),
        "{}\nagainst\n{measured}",
        &readme[start..end]
    );
    // [maps, cpus, shared, per-CPU, shared with stacks, per-CPU with stacks, MiB, first
    // rows, row, thread]
    let (said_cpus, now_cpus) = (said[1], now[1]);
    for (index, (said, now)) in said.iter().zip(&now).enumerate() {
        let (said, now) = match index {
            1 => continue,
            3 | 5 => (said / said_cpus, now / now_cpus),
            _ => (*said, *now),
        };
        assert!(
            (said - now).abs() <= 0.1 * now.max(0.1),
            "figure {index} of the README's memory is {said}, measured {now}: run \
             `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme -- --ignored` as root\n{measured}"
        );
    }
}

const ANSWER_BEGIN: &str = "<!-- answer:begin (checked: cargo test -p auditor --test readme) -->\n";
const ANSWER_END: &str = "<!-- answer:end -->\n";

/// `text` without its first paragraph's machine: the kernel release and host a strace
/// log's report names are the ones it was read on.
fn without_machine(text: &str) -> String {
    text.lines()
        .map(|line| match line.find(" on Linux ") {
            Some(at) => format!("{} on Linux ...", &line[..at]),
            None if line.contains(" on ") && line.ends_with(", counted by strace.") => {
                "... counted by strace.".to_string()
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The README's answer to a thread's question is what its command prints, run here from
/// the repository's root on the fixtures it names.
#[test]
fn the_readmes_answer_is_what_its_command_prints() {
    let (path, readme, start, end) = generated_block("README.md", ANSWER_BEGIN, ANSWER_END);
    let block = &readme[start..end];
    let body = block
        .strip_prefix("```\n")
        .and_then(|b| b.strip_suffix("```\n"))
        .expect("the answer is a code block");
    let (command, printed) = body.split_once('\n').unwrap();
    let command = command
        .strip_prefix("$ auditor ")
        .expect("an auditor command");
    let args = shell_words::split(command).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_auditor"))
        .args(&args)
        .current_dir(page(""))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let now = String::from_utf8(output.stdout).unwrap();
    if std::env::var_os("AUDITOR_WRITE_README").is_some() {
        let block = format!("```\n$ auditor {command}\n{now}```\n");
        let written = format!("{}{block}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, written).unwrap();
        return;
    }
    assert_eq!(
        without_machine(printed),
        without_machine(&now),
        "{} is stale: run `AUDITOR_WRITE_README=1 cargo test -p auditor --test readme`",
        path.display()
    );
}

/// The README is a landing page: at most 15 KB, the rest in docs/, each page it links
/// there.
#[test]
fn the_readme_lands_and_links_what_is_there() {
    let readme = std::fs::read_to_string(page("README.md")).unwrap();
    assert!(
        readme.len() <= 15_000,
        "the README is {} bytes",
        readme.len()
    );
    let mut rest = readme.as_str();
    let mut linked = 0;
    while let Some(at) = rest.find("](") {
        let target = &rest[at + 2..];
        let target = &target[..target.find(')').unwrap()];
        rest = &rest[at + 2..];
        if target.starts_with("http") {
            continue;
        }
        let file = target.split('#').next().unwrap();
        assert!(
            page(file).is_file(),
            "the README links {target}, which is not there"
        );
        linked += 1;
    }
    assert!(linked >= 5, "{linked} links");
}
