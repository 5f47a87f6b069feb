//! The target's own cost over the run: CPU seconds and resident memory, read from its
//! Prometheus `/metrics` (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! the standard process collector names) or, for a process on this machine, from
//! `/proc/<pid>`. Either may be missing; the report then says "n/a" instead of guessing.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio_util::sync::CancellationToken;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub rss_bytes: Option<f64>,
    /// `watchgate_watchers` summed over resources, when the target exports it.
    pub watchers: Option<f64>,
}

/// Where to read from.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub metrics_url: Option<String>,
    pub pid: Option<u32>,
}

/// The value of an unlabelled (or summed labelled) sample in Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name value` or `name{labels} value`, not `name_suffix ...`.
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let value = rest.rsplit(' ').find(|s| !s.is_empty())?;
        if let Ok(v) = value.parse::<f64>() {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// CPU seconds and RSS of a local process (utime+stime in clock ticks of 1/100 s, the
/// Linux USER_HZ on every mainstream architecture).
pub fn proc_sample(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(((utime + stime) / 100.0, rss_kb * 1024.0))
}

impl Probe {
    pub fn is_set(&self) -> bool {
        self.metrics_url.is_some() || self.pid.is_some()
    }

    pub async fn sample(&self) -> Sample {
        let mut s = Sample::default();
        if let Some(url) = &self.metrics_url {
            if let Some(text) = fetch(url).await {
                s.cpu_seconds = metric(&text, "process_cpu_seconds_total");
                s.rss_bytes = metric(&text, "process_resident_memory_bytes");
                s.watchers = metric(&text, "watchgate_watchers");
            }
        }
        if let Some(pid) = self.pid {
            if let Some((cpu, rss)) = proc_sample(pid) {
                // /proc is exact and local; it wins over the exporter's figures.
                s.cpu_seconds = Some(cpu);
                s.rss_bytes = Some(rss);
            }
        }
        s
    }

    /// `watchgate_upstream_requests_total` of a watchgate target (all codes), when
    /// `--metrics-url` is given: what the target asked its upstream.
    pub async fn upstream_requests(&self) -> Option<f64> {
        let text = fetch(self.metrics_url.as_deref()?).await?;
        metric(&text, "watchgate_upstream_requests_total")
    }

    /// Samples every second until `stop`; returns every sample (for peaks).
    pub async fn watch(self, stop: CancellationToken) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => out.push(self.sample().await),
            }
        }
        out
    }
}

async fn fetch(url: &str) -> Option<String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let uri: http::Uri = url.parse().ok()?;
    let resp = tokio::time::timeout(Duration::from_secs(5), client.get(uri))
        .await
        .ok()?
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(body.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prometheus_text() {
        let text = "# HELP process_cpu_seconds_total x\n\
                    process_cpu_seconds_total 12.5\n\
                    process_resident_memory_bytes 1.048576e+06\n\
                    watchgate_watchers{group=\"\",resource=\"pods\"} 3\n\
                    watchgate_watchers{group=\"apps\",resource=\"deployments\"} 2\n\
                    watchgate_watchers_lagging{group=\"\",resource=\"pods\"} 9\n";
        assert_eq!(metric(text, "process_cpu_seconds_total"), Some(12.5));
        assert_eq!(
            metric(text, "process_resident_memory_bytes"),
            Some(1_048_576.0)
        );
        assert_eq!(metric(text, "watchgate_watchers"), Some(5.0));
        assert_eq!(metric(text, "process_open_fds"), None);
    }

    #[test]
    fn reads_this_process() {
        let (cpu, rss) = proc_sample(std::process::id()).expect("linux /proc");
        assert!(cpu >= 0.0 && rss > 0.0);
    }
}
