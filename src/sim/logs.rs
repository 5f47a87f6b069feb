//! `pods/{name}/log`: synthetic container logs as `text/plain`.
//!
//! Each container has a fixed history of [`LogConfig::history`] lines; `follow=true`
//! then streams a new line every [`LogConfig::interval`] until the client goes away
//! (the body stream is dropped by hyper, which ends the task — nothing keeps running
//! for a departed client). Supported parameters, after `PodLogOptions`:
//! `container`, `follow`, `tailLines`, `timestamps` (RFC3339Nano prefix plus a space, as
//! kubelet writes them), `limitBytes`, `previous` (no container has restarted, so it is
//! the kubelet's 400), `sinceSeconds`/`sinceTime` (accepted, ignored: history lines are
//! all "recent"). Validation messages follow `pkg/registry/core/pod/strategy.go`
//! `LogLocation` and `validation.ValidatePodLogOptions`.
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderValue, Response};
use http_body::Frame;
use http_body_util::StreamBody;
use jiff::Timestamp;
use serde_json::Value;

use std::sync::Arc;

use super::resources::ResourceType;
use super::Sim;
use crate::body::{self, Body, BoxError};
use crate::request::ApiRequest;
use crate::status::Status;

/// How the fake containers log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Lines already in the log when it is first read.
    pub history: u64,
    /// Time between new lines when following.
    pub interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            history: 20,
            interval: Duration::from_millis(1000),
        }
    }
}

/// Parsed `PodLogOptions`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogParams {
    pub container: Option<String>,
    pub follow: bool,
    pub tail_lines: Option<i64>,
    pub timestamps: bool,
    pub limit_bytes: Option<i64>,
    pub previous: bool,
}

fn parse_bool(k: &str, v: &str) -> Result<bool, Status> {
    match v {
        "" | "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" => Ok(false),
        _ => Err(Status::bad_request(format!(
            "strconv.ParseBool: parsing {v:?}: invalid syntax for {k}"
        ))),
    }
}

fn parse_int(v: &str) -> Result<i64, Status> {
    v.parse::<i64>().map_err(|_| {
        Status::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))
    })
}

impl LogParams {
    pub fn from_query(query: Option<&str>) -> Result<Self, Status> {
        let mut p = LogParams::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "container" => p.container = Some(v.into_owned()),
                "follow" => p.follow = parse_bool(&k, &v)?,
                "timestamps" => p.timestamps = parse_bool(&k, &v)?,
                "previous" => p.previous = parse_bool(&k, &v)?,
                "tailLines" => p.tail_lines = Some(parse_int(&v)?),
                "limitBytes" => p.limit_bytes = Some(parse_int(&v)?),
                _ => {}
            }
        }
        let mut causes = Vec::new();
        if p.tail_lines.is_some_and(|t| t < 0) {
            causes.push(("tailLines", "must be greater than or equal to 0"));
        }
        if p.limit_bytes.is_some_and(|l| l < 1) {
            causes.push(("limitBytes", "must be greater than 0"));
        }
        if let Some((field, msg)) = causes.first() {
            let v = match *field {
                "tailLines" => p.tail_lines.unwrap_or_default(),
                _ => p.limit_bytes.unwrap_or_default(),
            };
            let mut s = Status::new(
                422,
                "Invalid",
                format!("PodLogOptions \"\" is invalid: {field}: Invalid value: {v}: {msg}"),
            );
            s.kind = Some("PodLogOptions".into());
            s.with_details = true;
            s.causes.push(crate::status::Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {v}: {msg}"),
                field: Some((*field).into()),
            });
            return Err(s);
        }
        Ok(p)
    }
}

/// The container a log request reads, or the apiserver's 400.
fn pick_container(pod: &Value, p: &LogParams) -> Result<String, Status> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let cs: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    match &p.container {
        Some(c) if cs.contains(&c.as_str()) => Ok(c.clone()),
        Some(c) => Err(Status::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if cs.len() == 1 => Ok(cs[0].to_string()),
        None if cs.is_empty() => Err(Status::bad_request(format!(
            "a container name must be specified for pod {name}"
        ))),
        None => Err(Status::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            cs.join(" ")
        ))),
    }
}

/// The text of log line `n` (0-based) of a container: deterministic, so tests can
/// assert exact content.
pub fn line_text(pod: &str, container: &str, n: u64) -> String {
    format!("{pod}/{container} line {n}: GET /healthz 200 OK")
}

fn render(pod: &str, container: &str, n: u64, at: Timestamp, timestamps: bool) -> String {
    let text = line_text(pod, container, n);
    if timestamps {
        format!("{} {text}\n", at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    } else {
        format!("{text}\n")
    }
}

/// Router contract: `GET pods/{name}/log`. A missing pod is the apiserver's 404.
pub async fn handle(
    sim: &Arc<Sim>,
    api: &ApiRequest,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
) -> Response<Body> {
    let Some(pod) = sim.store.get(rt, ns, name) else {
        return Status::not_found(&rt.group_resource(), name).into_response();
    };
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(api.query.iter())
        .finish();
    handle_pod(&pod, Some(&query), &LogConfig::default())
}

/// Answers a log request for `pod`.
pub fn handle_pod(pod: &Value, query: Option<&str>, cfg: &LogConfig) -> Response<Body> {
    let p = match LogParams::from_query(query) {
        Ok(p) => p,
        Err(s) => return s.into_response(),
    };
    let container = match pick_container(pod, &p) {
        Ok(c) => c,
        Err(s) => return s.into_response(),
    };
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    if p.previous {
        return Status::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        ))
        .into_response();
    }
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return Status::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        ))
        .into_response();
    }
    let _ = ns;
    let now = Timestamp::now();
    let start = p
        .tail_lines
        .map(|t| cfg.history.saturating_sub(t as u64))
        .unwrap_or(0);
    let mut history = String::new();
    for n in start..cfg.history {
        let back = (cfg.history - n) as i64;
        let at = now
            .checked_sub(jiff::SignedDuration::from_secs(back))
            .unwrap_or(now);
        history.push_str(&render(&name, &container, n, at, p.timestamps));
    }
    let limit = p.limit_bytes.map(|l| l as usize);

    let resp_body: Body = if !p.follow {
        let mut bytes = history.into_bytes();
        if let Some(l) = limit {
            bytes.truncate(l);
        }
        body::full(bytes)
    } else {
        // State: next line number, bytes still allowed, whether history was sent.
        let interval = cfg.interval;
        let timestamps = p.timestamps;
        let first = Some(history);
        let s = stream::unfold(
            (first, cfg.history, limit, name, container),
            move |(first, n, left, name, container)| async move {
                if left == Some(0) {
                    return None;
                }
                let (chunk, next_n) = match first {
                    Some(h) => (h, n),
                    None => {
                        tokio::time::sleep(interval).await;
                        (
                            render(&name, &container, n, Timestamp::now(), timestamps),
                            n + 1,
                        )
                    }
                };
                let mut bytes = chunk.into_bytes();
                let left = left.map(|l| {
                    bytes.truncate(l);
                    l - bytes.len()
                });
                let frame: Result<Frame<Bytes>, BoxError> = Ok(Frame::data(Bytes::from(bytes)));
                Some((frame, (None, next_n, left, name, container)))
            },
        );
        body::boxed(StreamBody::new(s))
    };
    let mut resp = Response::new(resp_body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params() {
        let p = LogParams::from_query(Some("follow=true&tailLines=3&timestamps=true")).unwrap();
        assert!(p.follow && p.timestamps);
        assert_eq!(p.tail_lines, Some(3));
        let e = LogParams::from_query(Some("tailLines=-1")).unwrap_err();
        assert_eq!(e.code, 422);
        let e = LogParams::from_query(Some("tailLines=x")).unwrap_err();
        assert_eq!(e.code, 400);
    }
}
