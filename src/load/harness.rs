//! What every scenario's run shares (`run.rs`'s watch and list scenarios, the soak and the
//! herds): the open-files limit, the run's id, the warm-up of the target's cache, the
//! progress bar, and the final check of every stream against the writer's log. Apart from
//! `run.rs`, which dispatches to the other scenarios, so that they need not import it back.

use std::time::{Duration, Instant};

use http::Method;
use http_body_util::BodyExt;

use super::checker::{Violation, WriterLog};
use super::pool::Pool;
use super::target::Target;
use super::watcher;
use crate::selector::field::FieldSelector;
use crate::selector::label::LabelSelector;

/// Raises the soft open-files limit to the hard one: every watcher is a socket.
pub fn raise_fd_limit(wanted: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) if (n as usize) < wanted + 64 => eprintln!(
            "warning: the open-files limit is {n}, below the {wanted} sockets this run needs \
             (raise the hard limit: ulimit -Hn)"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: could not raise the open-files limit: {e}"),
    }
}

/// Starts the target's cache for pods (its first cacheable read does) and waits, bounded,
/// until lists come from the cache: watchers then start from an RV the cache has seen.
/// A target that is not a watchgate never sends the header; that ends the wait at once.
pub async fn warm_up(target: &Target, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let Ok(resp) = target
            .send(
                Method::GET,
                &format!("{path}?resourceVersion=0&limit=1"),
                None,
            )
            .await
        else {
            return;
        };
        let source = resp
            .headers()
            .get("x-watchgate-source")
            .map(|v| v.as_bytes().to_vec());
        let _ = resp.into_body().collect().await;
        match source.as_deref() {
            None | Some(b"cache") => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A short random id that names a run's objects (its pool's pods, labels), so that
/// concurrent or leftover runs do not see each other's writes.
pub fn run_id() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// Checks every watcher's stream against the writer's log (`selectors` by watcher group):
/// the first 100 violations, and how many there were in all.
pub fn check_outcomes(
    outcomes: &[watcher::Outcome],
    selectors: &[(Option<LabelSelector>, Option<FieldSelector>)],
    log: &WriterLog,
    pool: &Pool,
) -> (Vec<Violation>, u64) {
    let mut violations = Vec::new();
    let mut violation_count = 0u64;
    for o in outcomes {
        let (l, f) = &selectors[o.group];
        let v = o
            .check
            .verify(log, |r| pool.matches(r, l.as_ref(), f.as_ref()));
        violation_count += v.len() as u64 + o.check.dropped_violations();
        if violations.len() < 100 {
            violations.extend(v);
        }
    }
    violations.truncate(100);
    (violations, violation_count)
}

/// The run's progress bar on stderr (hidden with `--no-progress`), starting as "connecting".
pub fn progress_bar(hidden: bool, watchers: usize) -> indicatif::ProgressBar {
    let pb = if hidden {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(1)
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_message(format!("connecting {watchers} watchers"));
    pb.enable_steady_tick(Duration::from_millis(250));
    pb
}
