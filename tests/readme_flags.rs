//! The README's flag table stays true to the code: every flag that `watchgate <command>
//! --help` lists appears in the README's table for that command, and the table names no
//! flag the binary does not have.

use std::collections::BTreeSet;
use std::process::Command;

const COMMANDS: [&str; 3] = ["serve", "sim", "demo"];

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
        let out = Command::new(env!("CARGO_BIN_EXE_watchgate"))
            .args([command, "--help"])
            .output()
            .expect("run watchgate --help");
        assert!(out.status.success(), "watchgate {command} --help failed");
        let help = String::from_utf8(out.stdout).unwrap();
        let want = flags_in_help(&help);
        if command == "serve" {
            // Guards the parser itself: serve always has flags.
            assert!(want.contains("--port"), "no flags parsed from:\n{help}");
        }
        let have = flags_in_readme(&readme, command);
        assert_eq!(
            have, want,
            "README.md's table for `watchgate {command}` differs from its --help:\n{help}"
        );
    }
}
