# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_auditor_global_optspecs
    string join \n h/help V/version
end

function __fish_auditor_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_auditor_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_auditor_using_subcommand
    set -l cmd (__fish_auditor_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c auditor -n "__fish_auditor_needs_command" -s h -l help -d 'Print help'
complete -c auditor -n "__fish_auditor_needs_command" -s V -l version -d 'Print version'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "trace" -d 'Count catalogued kernel branches with the eBPF probe (needs root) and judge each hint'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "sites" -d 'List the catalogue of branch sites: where each is, its hint, what it counts'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "hints" -d 'Every likely()/unlikely() in the files of the readiness and fd paths of a kernel tree, with its status: measured (by which site), not yet, or not decidable (why)'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "strace" -d 'Count by running strace on a command or processes: no privileges needed'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "ingest" -d 'Count from strace logs (`strace -f -o LOG CMD`; `-ff` files too), no privileges needed'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "report" -d 'Render saved JSON reports again (`--format json -o FILE`), merging several: counts add exactly and the verdicts are judged again on the sums'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "generate" -d 'Write the manual pages (into DIR) or a shell\'s completions (to stdout), from this command line\'s own definition'
complete -c auditor -n "__fish_auditor_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -s p -l pid -d 'Trace this running process (threads included); repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l comm -d 'Trace processes with this name, as `ps` and `pgrep` show it (the name of the process\'s main thread), with all their threads; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l thread-comm -d 'Trace the threads that carry this name themselves (as `ps -L` shows it); repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l workload -d 'Run a bundled workload: `default`, or steps such as "poll:100:1024:64 select:10:-1" (`auditor-workload --help` lists them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l duration -d 'Stop after this long (e.g. 30s, 500ms, 1h30m); a started command gets SIGTERM' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l propose -d 'Judge this hint instead of the catalogue\'s, as a patch would change it, e.g. `select.fd_not_open=unlikely`; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l site -d 'Show only this site (e.g. poll.fd_negative); repeatable. For a commit message' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l format -d 'Output format: `annotated` is the shape of the kernel\'s branch profiler (trace_stat/branch_annotated): correct, incorrect, % incorrect, function, file:line' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply: plain ASCII, at most 72 columns'
annotated\t'As the kernel\'s branch profiler shows it (trace_stat/branch_annotated)'"
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l kernel-src -d 'Judge the hints this kernel source tree carries instead of the catalogue\'s, and show each site\'s file:line in it' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l sort -d 'The order of the sites: by default the catalogue\'s, and the largest share against the hint first in `--format annotated` and the SVG' -r -f -a "catalogue\t'By kernel file, in catalogue order within a file'
miss\t'The largest share of evaluations against the hint first (branch_annotated\'s)'
evaluations\t'The most evaluations first'
line\t'By file and line (the tree\'s, with --kernel-src)'"
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l group-by -d 'Give a verdict per program too (its processes and threads together, named as `ps` shows them), or per host or source of merged reports; the pooled verdict\'s notes say when one group decides it' -r -f -a "program\t'Per process name, as `ps` shows it'
host\t'Per host a run was taken on (of merged reports)'
source\t'Per source that counted (of merged reports)'"
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l min-evaluations -d 'With --group-by: leave out a group\'s rows of fewer evaluations than N (a note says how many; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l top -d 'With --group-by: show only the K groups with the most evaluations (a note says how many more there were; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l color -d 'Colour the verdicts: on a terminal (`auto`, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l label -d 'Say TEXT for what was traced, instead of the command line (which can hold key paths or user@host), in every format' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l svg -d 'Also draw the report as a picture into FILE (SVG): per site, the rare arm\'s share with its 95% interval on a log axis, the 10% bar marked' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand trace" -s o -l output -d 'Write the report to FILE: checked before the session starts, replaced whole when it ends (never written through a link, into a FIFO or device, or over an input); `-` is stdout. Without it, the report goes to stderr when a command is started (its output keeps stdout), else to stdout' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l program-runs -d 'Write each probe program\'s runs and run time in the session (the kernel\'s BPF run statistics, on for the session) to FILE as JSON (the probe bench\'s per-program view)' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l metrics -d 'Serve the live counts for Prometheus at http://ADDRESS/metrics (OpenMetrics text): `ADDRESS:PORT`, or `PORT` for 127.0.0.1. The report still comes at the end' -r
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l all -d 'Trace every process on the system but the auditor'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l per-process -d 'Also show counts per process (pid, command name)'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l wide -d 'Keep every column in the tables. Without it, each site\'s condition goes below its table in Markdown and on a terminal too narrow for every column'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l stacks -d 'Take the user stack of calls that go a site\'s rare way (against its hint, or the `--propose`d one; both ways at an unhinted site), sampled, and name the code behind them: the first frame outside the C library, with counts; whole stacks in JSON'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -l empty-programs -d 'Attach the probe\'s programs with nothing to do (the benchmark\'s floor)'
complete -c auditor -n "__fish_auditor_using_subcommand trace" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand sites" -l kernel-src -d 'A kernel source tree: show the hint it carries at each site, and where it differs from the catalogue or the site cannot be found' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand sites" -l format -d 'Output format' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply'"
complete -c auditor -n "__fish_auditor_using_subcommand sites" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand hints" -l kernel-src -d 'The kernel source tree (fs/ and include/ are read)' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand hints" -l format -d 'Output format' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply'"
complete -c auditor -n "__fish_auditor_using_subcommand hints" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand strace" -s p -l pid -d 'Attach to this running process; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l duration -d 'Stop after this long (e.g. 30s, 500ms, 1h30m): a started command gets SIGTERM, strace detaches from -p processes' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l propose -d 'Judge this hint instead of the catalogue\'s, as a patch would change it, e.g. `select.fd_not_open=unlikely`; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l site -d 'Show only this site (e.g. poll.fd_negative); repeatable. For a commit message' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l format -d 'Output format: `annotated` is the shape of the kernel\'s branch profiler (trace_stat/branch_annotated): correct, incorrect, % incorrect, function, file:line' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply: plain ASCII, at most 72 columns'
annotated\t'As the kernel\'s branch profiler shows it (trace_stat/branch_annotated)'"
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l kernel-src -d 'Judge the hints this kernel source tree carries instead of the catalogue\'s, and show each site\'s file:line in it' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l sort -d 'The order of the sites: by default the catalogue\'s, and the largest share against the hint first in `--format annotated` and the SVG' -r -f -a "catalogue\t'By kernel file, in catalogue order within a file'
miss\t'The largest share of evaluations against the hint first (branch_annotated\'s)'
evaluations\t'The most evaluations first'
line\t'By file and line (the tree\'s, with --kernel-src)'"
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l group-by -d 'Give a verdict per program too (its processes and threads together, named as `ps` shows them), or per host or source of merged reports; the pooled verdict\'s notes say when one group decides it' -r -f -a "program\t'Per process name, as `ps` shows it'
host\t'Per host a run was taken on (of merged reports)'
source\t'Per source that counted (of merged reports)'"
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l min-evaluations -d 'With --group-by: leave out a group\'s rows of fewer evaluations than N (a note says how many; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l top -d 'With --group-by: show only the K groups with the most evaluations (a note says how many more there were; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l color -d 'Colour the verdicts: on a terminal (`auto`, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l label -d 'Say TEXT for what was traced, instead of the command line (which can hold key paths or user@host), in every format' -r
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l svg -d 'Also draw the report as a picture into FILE (SVG): per site, the rare arm\'s share with its 95% interval on a log axis, the 10% bar marked' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand strace" -s o -l output -d 'Write the report to FILE: checked before the session starts, replaced whole when it ends (never written through a link, into a FIFO or device, or over an input); `-` is stdout. Without it, the report goes to stderr when a command is started (its output keeps stdout), else to stdout' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l stacks -d 'Record each call\'s stack (strace -k) and name the code that took each rare arm (strace runs slower)'
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l per-process -d 'Also show counts per process (pid, command name)'
complete -c auditor -n "__fish_auditor_using_subcommand strace" -l wide -d 'Keep every column in the tables. Without it, each site\'s condition goes below its table in Markdown and on a terminal too narrow for every column'
complete -c auditor -n "__fish_auditor_using_subcommand strace" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l propose -d 'Judge this hint instead of the catalogue\'s, as a patch would change it, e.g. `select.fd_not_open=unlikely`; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l site -d 'Show only this site (e.g. poll.fd_negative); repeatable. For a commit message' -r
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l format -d 'Output format: `annotated` is the shape of the kernel\'s branch profiler (trace_stat/branch_annotated): correct, incorrect, % incorrect, function, file:line' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply: plain ASCII, at most 72 columns'
annotated\t'As the kernel\'s branch profiler shows it (trace_stat/branch_annotated)'"
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l kernel-src -d 'Judge the hints this kernel source tree carries instead of the catalogue\'s, and show each site\'s file:line in it' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l sort -d 'The order of the sites: by default the catalogue\'s, and the largest share against the hint first in `--format annotated` and the SVG' -r -f -a "catalogue\t'By kernel file, in catalogue order within a file'
miss\t'The largest share of evaluations against the hint first (branch_annotated\'s)'
evaluations\t'The most evaluations first'
line\t'By file and line (the tree\'s, with --kernel-src)'"
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l group-by -d 'Give a verdict per program too (its processes and threads together, named as `ps` shows them), or per host or source of merged reports; the pooled verdict\'s notes say when one group decides it' -r -f -a "program\t'Per process name, as `ps` shows it'
host\t'Per host a run was taken on (of merged reports)'
source\t'Per source that counted (of merged reports)'"
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l min-evaluations -d 'With --group-by: leave out a group\'s rows of fewer evaluations than N (a note says how many; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l top -d 'With --group-by: show only the K groups with the most evaluations (a note says how many more there were; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l color -d 'Colour the verdicts: on a terminal (`auto`, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l label -d 'Say TEXT for what was traced, instead of the command line (which can hold key paths or user@host), in every format' -r
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l svg -d 'Also draw the report as a picture into FILE (SVG): per site, the rare arm\'s share with its 95% interval on a log axis, the 10% bar marked' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -s o -l output -d 'Write the report to FILE: checked before the session starts, replaced whole when it ends (never written through a link, into a FIFO or device, or over an input); `-` is stdout. Without it, the report goes to stderr when a command is started (its output keeps stdout), else to stdout' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l per-process -d 'Also show counts per process (pid, command name)'
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -l wide -d 'Keep every column in the tables. Without it, each site\'s condition goes below its table in Markdown and on a terminal too narrow for every column'
complete -c auditor -n "__fish_auditor_using_subcommand ingest" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand report" -l propose -d 'Judge this hint instead of the catalogue\'s, as a patch would change it, e.g. `select.fd_not_open=unlikely`; repeatable' -r
complete -c auditor -n "__fish_auditor_using_subcommand report" -l site -d 'Show only this site (e.g. poll.fd_negative); repeatable. For a commit message' -r
complete -c auditor -n "__fish_auditor_using_subcommand report" -l format -d 'Output format: `annotated` is the shape of the kernel\'s branch profiler (trace_stat/branch_annotated): correct, incorrect, % incorrect, function, file:line' -r -f -a "table\t''
markdown\t''
json\t''
text\t'For a mail reply: plain ASCII, at most 72 columns'
annotated\t'As the kernel\'s branch profiler shows it (trace_stat/branch_annotated)'"
complete -c auditor -n "__fish_auditor_using_subcommand report" -l kernel-src -d 'Judge the hints this kernel source tree carries instead of the catalogue\'s, and show each site\'s file:line in it' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand report" -l sort -d 'The order of the sites: by default the catalogue\'s, and the largest share against the hint first in `--format annotated` and the SVG' -r -f -a "catalogue\t'By kernel file, in catalogue order within a file'
miss\t'The largest share of evaluations against the hint first (branch_annotated\'s)'
evaluations\t'The most evaluations first'
line\t'By file and line (the tree\'s, with --kernel-src)'"
complete -c auditor -n "__fish_auditor_using_subcommand report" -l group-by -d 'Give a verdict per program too (its processes and threads together, named as `ps` shows them), or per host or source of merged reports; the pooled verdict\'s notes say when one group decides it' -r -f -a "program\t'Per process name, as `ps` shows it'
host\t'Per host a run was taken on (of merged reports)'
source\t'Per source that counted (of merged reports)'"
complete -c auditor -n "__fish_auditor_using_subcommand report" -l min-evaluations -d 'With --group-by: leave out a group\'s rows of fewer evaluations than N (a note says how many; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand report" -l top -d 'With --group-by: show only the K groups with the most evaluations (a note says how many more there were; the pooled rows count them)' -r
complete -c auditor -n "__fish_auditor_using_subcommand report" -l color -d 'Colour the verdicts: on a terminal (`auto`, unless NO_COLOR is set), always, never' -r -f -a "auto\t''
always\t''
never\t''"
complete -c auditor -n "__fish_auditor_using_subcommand report" -l label -d 'Say TEXT for what was traced, instead of the command line (which can hold key paths or user@host), in every format' -r
complete -c auditor -n "__fish_auditor_using_subcommand report" -l svg -d 'Also draw the report as a picture into FILE (SVG): per site, the rare arm\'s share with its 95% interval on a log axis, the 10% bar marked' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand report" -s o -l output -d 'Write the report to FILE: checked before the session starts, replaced whole when it ends (never written through a link, into a FIFO or device, or over an input); `-` is stdout. Without it, the report goes to stderr when a command is started (its output keeps stdout), else to stdout' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand report" -l force -d 'Merge reports of another catalogue version or kernel release than the first\'s too (the notes say which)'
complete -c auditor -n "__fish_auditor_using_subcommand report" -l per-process -d 'Also show counts per process (pid, command name)'
complete -c auditor -n "__fish_auditor_using_subcommand report" -l wide -d 'Keep every column in the tables. Without it, each site\'s condition goes below its table in Markdown and on a terminal too narrow for every column'
complete -c auditor -n "__fish_auditor_using_subcommand report" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand generate" -l out -d 'Where the manual pages go (`man`)' -r -F
complete -c auditor -n "__fish_auditor_using_subcommand generate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "trace" -d 'Count catalogued kernel branches with the eBPF probe (needs root) and judge each hint'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "sites" -d 'List the catalogue of branch sites: where each is, its hint, what it counts'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "hints" -d 'Every likely()/unlikely() in the files of the readiness and fd paths of a kernel tree, with its status: measured (by which site), not yet, or not decidable (why)'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "strace" -d 'Count by running strace on a command or processes: no privileges needed'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "ingest" -d 'Count from strace logs (`strace -f -o LOG CMD`; `-ff` files too), no privileges needed'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "report" -d 'Render saved JSON reports again (`--format json -o FILE`), merging several: counts add exactly and the verdicts are judged again on the sums'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "generate" -d 'Write the manual pages (into DIR) or a shell\'s completions (to stdout), from this command line\'s own definition'
complete -c auditor -n "__fish_auditor_using_subcommand help; and not __fish_seen_subcommand_from trace sites hints strace ingest report generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
