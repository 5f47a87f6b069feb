//! Running the Python scripts in `tests/python/` with the venv's Python client.

use std::time::Duration;

use tokio::process::Command;

use super::process::{self, Output, Spawned};
use super::tools;

fn command(script: &str, args: &[&str]) -> Command {
    let path = tools::python_scripts().join(script);
    assert!(path.is_file(), "no such script: {}", path.display());
    let mut cmd = Command::new(tools::python());
    cmd.arg(path)
        .args(args)
        // Lines must reach the test as they are printed, not when a buffer fills.
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// Runs `tests/python/<script>` with `args` to completion; panics after `timeout`.
pub async fn run(script: &str, args: &[&str], timeout: Duration) -> Output {
    process::run(command(script, args), None, timeout).await
}

/// Starts `tests/python/<script>` and reads its stdout line by line.
pub fn spawn(script: &str, args: &[&str]) -> Spawned {
    Spawned::start(command(script, args))
}
