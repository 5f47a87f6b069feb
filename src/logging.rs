//! Log set-up: `--log-format text|json` and klog-style `-v/--v LEVEL`, with `RUST_LOG`
//! taking precedence when set (operators who know tracing's filter syntax get all of it).
//!
//! Secrets: nothing in watchgate logs request headers, bodies or cached objects, and the
//! dependencies' trace output does not print header values; `tests/ops_logs.rs` checks,
//! at the most verbose level and in both formats, that a client's bearer token,
//! watchgate's own upstream token and a cached Secret's data never reach the logs.

use clap::{Args, ValueEnum};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    // Human-readable lines. (Plain comments: doc comments here would switch clap's
    // --help to its long layout, which scripts/flags-table does not read.)
    #[default]
    Text,
    // One JSON object per line, for log shippers.
    Json,
}

/// The logging flags, shared by every command.
#[derive(Args, Debug, Clone, Default)]
pub struct LogArgs {
    /// Log line format: text (human-readable) or json (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log verbosity, klog-style: 0-1 info, 2-4 debug for watchgate, 5 trace for watchgate,
    /// 6+ trace for everything. RUST_LOG, when set, takes precedence.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "LEVEL",
        default_value_t = 0,
        global = true
    )]
    pub verbosity: u8,
}

/// The tracing filter directive for a klog verbosity. Dependencies stay at info until the
/// highest levels: their debug output drowns watchgate's own.
pub fn directive_for(verbosity: u8) -> &'static str {
    match verbosity {
        0 | 1 => "info",
        2..=4 => "info,watchgate=debug",
        5 => "info,watchgate=trace",
        _ => "trace",
    }
}

/// The filter: RUST_LOG when it is set and valid, else the verbosity's directive.
pub fn filter(args: &LogArgs) -> EnvFilter {
    match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).unwrap_or_else(|err| {
            eprintln!("ignoring RUST_LOG={v:?}: {err}");
            EnvFilter::new(directive_for(args.verbosity))
        }),
        _ => EnvFilter::new(directive_for(args.verbosity)),
    }
}

/// Builds the subscriber for `args`, writing to `writer`, without terminal colours.
/// Separate from [`init`] so tests can capture what the binary would log.
pub fn subscriber<W>(
    args: &LogArgs,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync + 'static>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    build(args, writer, false)
}

fn build<W>(
    args: &LogArgs,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync + 'static>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(args))
        .with_writer(writer)
        .with_ansi(ansi);
    match args.log_format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().flatten_event(true).finish()),
    }
}

/// Installs the process's subscriber, writing to stderr. Text lines are coloured only on
/// a terminal: a container's log, a file or a pipe gets plain text (tracing-subscriber
/// colours by default, wherever the lines go).
pub fn init(args: &LogArgs) {
    use std::io::IsTerminal;
    let sub = build(args, std::io::stderr, std::io::stderr().is_terminal());
    if tracing::subscriber::set_global_default(sub).is_err() {
        eprintln!("a tracing subscriber is already installed");
    }
}

/// `50000` → `50,000`: counts in progress lines, readable at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Sizes in progress lines: `210 MB`, `4.2 MB`, `0.3 MB` (decimal megabytes, as `du -h
/// --si` and the benchmarks' figures).
pub fn megabytes(bytes: u64) -> String {
    let mb = bytes as f64 / 1e6;
    if mb >= 10.0 {
        format!("{} MB", thousands(mb.round() as u64))
    } else {
        format!("{mb:.1} MB")
    }
}

/// Durations in progress lines: `1.8 s`, or `35 ms` below a second.
pub fn seconds(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The `end of stream` line of a watch, in its request's span, under tower-http's
/// `on_eos` target (so that the filters that showed tower-http's line show this one), with
/// the reason it ended when the cache served it. Written once per watch by the watch
/// itself (`watch::body`) or by `stack::trace`, which does not wrap a cached watch's body.
pub fn end_of_stream(
    span: &tracing::Span,
    stream_duration: std::time::Duration,
    reason: Option<&str>,
) {
    span.in_scope(|| {
        tracing::debug!(
            target: "tower_http::trace::on_eos",
            stream_duration = %format_args!("{} ms", stream_duration.as_millis()),
            reason,
            "end of stream"
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_figures_are_human_readable() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(50_000), "50,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(megabytes(210_400_000), "210 MB");
        assert_eq!(megabytes(4_210_000), "4.2 MB");
        assert_eq!(megabytes(1_500_000_000), "1,500 MB");
        assert_eq!(seconds(std::time::Duration::from_millis(1800)), "1.8 s");
        assert_eq!(seconds(std::time::Duration::from_millis(35)), "35 ms");
    }

    #[test]
    fn verbosity_maps_to_tracing_levels() {
        assert_eq!(directive_for(0), "info");
        assert_eq!(directive_for(2), "info,watchgate=debug");
        assert_eq!(directive_for(5), "info,watchgate=trace");
        assert_eq!(directive_for(9), "trace");
    }
}
