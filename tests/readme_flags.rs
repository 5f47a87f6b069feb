//! The README's flag table stays true to the code: every flag that `watchgate <command>
//! --help` lists appears in the README's table for that command, and the table names no
//! flag the binary does not have. `watchgate load` has one table of the flags every
//! scenario takes and one per scenario with its own: each scenario's `--help` must list
//! exactly the union of the two.

use std::collections::BTreeSet;
use std::process::Command;

const COMMANDS: [&str; 3] = ["serve", "sim", "demo"];

/// The scenarios of `watchgate load`.
const LOAD_SCENARIOS: [&str; 9] = [
    "watch-fanout",
    "kubelets",
    "informers",
    "lists",
    "mixed",
    "soak",
    "cold-herd",
    "quiet-large",
    "restart",
];

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_watchgate"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run watchgate --help");
    assert!(out.status.success(), "watchgate {args:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags in a `--help` text (`--foo`, `--foo-bar`), without --help/--version.
fn flags_in_help(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            // Option lines look like `-p, --port <PORT>` or `--address <ADDRESS>`.
            let at = l.find("--")?;
            if at > 4 {
                return None;
            }
            let flag: String = l[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (flag.len() > 2).then_some(flag)
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// The flags in the README table that follows the heading for `command`.
fn flags_in_readme(readme: &str, command: &str) -> BTreeSet<String> {
    let heading = format!("### `watchgate {command}`");
    let start = readme
        .find(&heading)
        .unwrap_or_else(|| panic!("README.md has no {heading:?} section"));
    readme[start + heading.len()..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cell = l.split('|').nth(1)?.trim().trim_matches('`');
            (cell.starts_with("--") && cell[2..].starts_with(|c: char| c.is_ascii_alphabetic()))
                .then(|| cell.split_whitespace().next().unwrap().to_string())
        })
        .collect()
}

#[test]
fn readme_flag_tables_match_help() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for command in COMMANDS {
        let help = help(&[command]);
        let want = flags_in_help(&help);
        if command == "serve" {
            // Guards the parser itself: serve always has flags.
            assert!(want.contains("--port"), "no flags parsed from:\n{help}");
        }
        let have = flags_in_readme(&readme, command);
        assert_eq!(
            have, want,
            "README.md's table for `watchgate {command}` differs from its --help (fix: `cargo build && scripts/flags-table --write`):\n{help}"
        );
    }
}

#[test]
fn readme_load_flag_tables_match_help() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    // Every scenario of `watchgate load --help` is one of these (a new one needs a table).
    let listed = help(&["load"]);
    let commands = listed
        .split("Commands:")
        .nth(1)
        .expect("watchgate load --help lists its scenarios");
    let scenarios: Vec<&str> = commands
        .lines()
        .skip(1)
        .map_while(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert_eq!(scenarios, LOAD_SCENARIOS, "from:\n{listed}");

    let common = flags_in_readme(&readme, "load");
    assert!(common.contains("--server"), "no common flags parsed");
    for scenario in LOAD_SCENARIOS {
        let help = help(&["load", scenario]);
        let want = flags_in_help(&help);
        let own = flags_in_readme(&readme, &format!("load {scenario}"));
        assert!(
            own.is_disjoint(&common),
            "README.md's table for `watchgate load {scenario}` repeats common flags: {:?}",
            own.intersection(&common).collect::<Vec<_>>()
        );
        let have: BTreeSet<String> = common.union(&own).cloned().collect();
        assert_eq!(
            have, want,
            "README.md's tables for `watchgate load` and `watchgate load {scenario}` differ from its --help (fix: `cargo build && scripts/flags-table --write`):\n{help}"
        );
    }
}
