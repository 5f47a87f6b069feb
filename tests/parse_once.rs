//! "Parsed once" as a rule of the source (issue 28 item 3): the stack's parse layer builds
//! `request::Parsed` (path, query, options, the typed resourceVersion, watch, timeout,
//! long-running, the Accept header's negotiated forms), and nothing after it may parse the
//! request again. `tests/stack.rs` counts the parses of whole requests; this test finds
//! the ways a layer could re-read a part of one (the query, the Accept header, the
//! resourceVersion string, the source header) anywhere in the gateway's code.

use std::path::{Path, PathBuf};

/// Files allowed to parse: the parser itself, the negotiation it calls, the simulator and
/// the load kit (other programs, with their own requests), and the admin listener (not the
/// API stack; its `?verbose` and `?exclude` are its own).
const EXEMPT: &[&str] = &[
    "src/request.rs",
    "src/negotiate.rs",
    "src/error_response.rs",
    "src/sim/",
    "src/load/",
    "src/server/admin.rs",
];

/// What re-parsing looks like, and what to read instead.
const FORBIDDEN: &[(&str, &str)] = &[
    ("request::parse(", "Parsed::api"),
    ("parse_path(", "Parsed::api.path"),
    ("list_options(", "Parsed::options"),
    ("parse_resource_version(", "ListOptions::rv"),
    ("parse_accept(", "Parsed::accept"),
    (
        "form_urlencoded::parse(",
        "Parsed::api.query or a field of Parsed",
    ),
    (".query()", "Parsed::api.query or a field of Parsed"),
    ("get(header::ACCEPT)", "Parsed::accept"),
    ("get(http::header::ACCEPT)", "Parsed::accept"),
    ("x-watchgate-source", "proxy::headers::Source"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `code` calls one of the string-taking negotiation functions (the `Accept`
/// methods of the same names are what a handler calls).
fn calls_free_negotiate(code: &str) -> bool {
    ["negotiate(", "negotiate_stream(", "negotiate_error("]
        .iter()
        .any(|f| {
            code.match_indices(f).any(|(at, _)| {
                let head = &code[..at];
                // A path: only `negotiate::` is the negotiation (`gzip::negotiate_stream`
                // is not).
                if head.ends_with("::") {
                    return head.ends_with("negotiate::");
                }
                let before = head.chars().next_back();
                !before.is_some_and(|c| c == '.' || c == '_' || c.is_alphanumeric())
                    && !head.ends_with("fn ")
            })
        })
}

#[test]
fn nothing_after_the_parse_layer_parses_the_request_again() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if EXEMPT.iter().any(|e| rel.starts_with(e)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may build requests however they like.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap();
            for (pattern, instead) in FORBIDDEN {
                // `Source` is the header's one reader and writer.
                let owner = *pattern == "x-watchgate-source" && rel == "src/proxy/headers.rs";
                if line.contains(pattern) && !owner {
                    found.push(format!("{rel}:{}: `{pattern}`: read {instead}", n + 1));
                }
            }
            if calls_free_negotiate(line) {
                found.push(format!(
                    "{rel}:{}: negotiates the Accept string: read Parsed::accept",
                    n + 1
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the request is parsed again after the parse layer:\n{}",
        found.join("\n")
    );
}
