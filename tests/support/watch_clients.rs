//! Watch clients for the fan-out tests: many watches multiplexed over a few HTTP/2
//! connections (h2c, prior knowledge), one watch per HTTP/1.1 connection, and raw TCP
//! watchers that send their request and then stop reading (stalled clients), reading the
//! chunked response by hand when they resume.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The bound for connecting and getting a watch's response head.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A response head plus its body read one event line at a time.
pub struct Watch {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub lines: LineReader,
}

impl Watch {
    /// The `x-watchgate-source` header (`cache` or `upstream`), if any.
    pub fn source(&self) -> Option<String> {
        crate::support::http::source(&self.headers).map(str::to_string)
    }
}

/// Reads events as [`Sig`]s up to and including the first for which `last` holds (e.g. a
/// sentinel object written after everything a test checks). A stream that ends, or stays
/// silent for `timeout` between two lines, before that is an error naming how far it got.
///
/// [`Sig`]: crate::support::watch_checker::Sig
pub async fn read_sigs_until(
    lines: &mut LineReader,
    timeout: Duration,
    last: impl Fn(&crate::support::watch_checker::Sig) -> bool,
) -> Result<Vec<crate::support::watch_checker::Sig>, String> {
    let mut out = Vec::new();
    loop {
        let line = match lines.next_line_within(timeout).await {
            Ok(Some(l)) => l,
            Ok(None) => {
                return Err(format!(
                    "the stream ended after {} events, before the last expected one",
                    out.len()
                ))
            }
            Err(e) => return Err(format!("{e} (after {} events)", out.len())),
        };
        let sig = crate::support::watch_checker::Sig::from_line(&line)?;
        let done = last(&sig);
        out.push(sig);
        if done {
            return Ok(out);
        }
    }
}

/// Newline-delimited events from a hyper body.
pub struct LineReader {
    body: Incoming,
    buf: BytesMut,
    ended: bool,
}

impl LineReader {
    /// The next non-empty line (without its newline), `Ok(None)` at a clean end of stream.
    pub async fn next_line(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1).freeze().slice(..pos);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.ended {
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                return Err(format!(
                    "stream ended inside an event ({} bytes buffered)",
                    self.buf.len()
                ));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(format!("stream error: {e}")),
                None => self.ended = true,
            }
        }
    }

    /// Like [`LineReader::next_line`], failing after `timeout`.
    pub async fn next_line_within(&mut self, timeout: Duration) -> Result<Option<Bytes>, String> {
        match tokio::time::timeout(timeout, self.next_line()).await {
            Ok(r) => r,
            Err(_) => Err(format!("no event within {timeout:?}")),
        }
    }
}

fn request(uri: String, host: &str, accept: &str) -> Request<Empty<Bytes>> {
    Request::get(uri)
        .header("host", host)
        .header("accept", accept)
        .body(Empty::new())
        .expect("valid request")
}

async fn into_watch(resp: http::Response<Incoming>) -> Watch {
    let (parts, body) = resp.into_parts();
    Watch {
        status: parts.status,
        headers: parts.headers,
        lines: LineReader {
            body,
            buf: BytesMut::new(),
            ended: false,
        },
    }
}

/// One HTTP/2 connection (h2c with prior knowledge) carrying many watches.
#[derive(Clone)]
pub struct H2Conn {
    addr: SocketAddr,
    sender: http2::SendRequest<Empty<Bytes>>,
}

impl H2Conn {
    pub async fn connect(addr: SocketAddr) -> Result<Self, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("h2 handshake with {addr}: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { addr, sender })
    }

    /// Opens one more stream on this connection.
    pub async fn watch(&self, path: &str) -> Result<Watch, String> {
        Ok(into_watch(self.response(path, "application/json").await?).await)
    }

    /// Opens one more stream on this connection with this `Accept` (e.g. protobuf), and
    /// returns its response as it comes.
    pub async fn response(
        &self,
        path: &str,
        accept: &str,
    ) -> Result<http::Response<Incoming>, String> {
        let mut sender = self.sender.clone();
        let uri = format!("http://{}{path}", self.addr);
        let fut = async {
            sender
                .ready()
                .await
                .map_err(|e| format!("h2 connection not ready: {e}"))?;
            sender
                .send_request(request(uri, &self.addr.to_string(), accept))
                .await
                .map_err(|e| format!("h2 watch {path}: {e}"))
        };
        tokio::time::timeout(CONNECT_TIMEOUT, fut)
            .await
            .map_err(|_| format!("h2 watch {path}: no response head within {CONNECT_TIMEOUT:?}"))?
    }
}

/// One watch on its own HTTP/1.1 connection.
pub async fn h1_watch(addr: SocketAddr, path: &str) -> Result<Watch, String> {
    Ok(into_watch(h1_response(addr, path, "application/json").await?).await)
}

/// One watch on its own HTTP/1.1 connection with this `Accept` (e.g. protobuf), its
/// response as it comes.
pub async fn h1_response(
    addr: SocketAddr,
    path: &str,
    accept: &str,
) -> Result<http::Response<Incoming>, String> {
    let fut = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let (mut sender, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("h1 handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sender
            .send_request(request(path.to_string(), &addr.to_string(), accept))
            .await
            .map_err(|e| format!("h1 watch {path}: {e}"))
    };
    tokio::time::timeout(CONNECT_TIMEOUT, fut)
        .await
        .map_err(|_| format!("h1 watch {path}: no response head within {CONNECT_TIMEOUT:?}"))?
}

/// A watcher on a raw TCP connection: it sends its request and reads nothing until told
/// to, so its socket buffers (kept small) fill and the server sees a stalled client.
pub struct RawWatch {
    stream: TcpStream,
    buf: BytesMut,
    /// Decoded body bytes not yet split into lines.
    body: BytesMut,
    head: Option<(u16, Vec<(String, String)>)>,
    /// Bytes left in the current chunk (None: expect a chunk-size line).
    chunk_left: Option<usize>,
    ended: bool,
}

impl RawWatch {
    /// Connects with a receive buffer of about `recv_buf` bytes and sends the request.
    pub async fn open(addr: SocketAddr, path: &str, recv_buf: u32) -> Result<Self, String> {
        let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
        // Set before connect so the advertised window is small from the start.
        socket
            .set_recv_buffer_size(recv_buf)
            .map_err(|e| format!("SO_RCVBUF: {e}"))?;
        let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr))
            .await
            .map_err(|_| format!("connect {addr}: timed out"))?
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nUser-Agent: stalled-watcher\r\n\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send request: {e}"))?;
        Ok(Self {
            stream,
            buf: BytesMut::new(),
            body: BytesMut::new(),
            head: None,
            chunk_left: None,
            ended: false,
        })
    }

    async fn fill(&mut self) -> Result<bool, String> {
        let mut tmp = vec![0u8; 256 * 1024];
        let n = self
            .stream
            .read(&mut tmp)
            .await
            .map_err(|e| format!("read: {e}"))?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// Reads the response head (status and headers).
    pub async fn head(&mut self) -> Result<(u16, Vec<(String, String)>), String> {
        while self.head.is_none() {
            if let Some(pos) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = self.buf.split_to(pos + 4);
                let text = String::from_utf8_lossy(&head).into_owned();
                let mut lines = text.split("\r\n");
                let status_line = lines.next().unwrap_or_default();
                let code = status_line
                    .split(' ')
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| format!("bad status line {status_line:?}"))?;
                let headers = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect::<Vec<_>>();
                if !headers
                    .iter()
                    .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
                {
                    return Err(format!("watch response is not chunked: {headers:?}"));
                }
                self.head = Some((code, headers));
                break;
            }
            if !self.fill().await? {
                return Err("connection closed before the response head".into());
            }
        }
        Ok(self.head.clone().unwrap_or_default())
    }

    /// Decodes whatever chunked data is buffered into `self.body`.
    fn decode(&mut self) -> Result<(), String> {
        loop {
            if self.ended {
                // Nothing follows the terminating chunk but its CRLF.
                return Ok(());
            }
            match self.chunk_left {
                None => {
                    let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                        return Ok(());
                    };
                    let line = self.buf.split_to(pos + 2);
                    let size = std::str::from_utf8(&line[..pos])
                        .ok()
                        .map(|s| s.split(';').next().unwrap_or("").trim().to_string())
                        .and_then(|s| usize::from_str_radix(&s, 16).ok())
                        .ok_or_else(|| {
                            format!(
                                "bad chunk size line {:?} (then {:?})",
                                String::from_utf8_lossy(&line[..pos]),
                                String::from_utf8_lossy(&self.buf[..self.buf.len().min(80)])
                            )
                        })?;
                    if size == 0 {
                        // The last chunk: a clean end of the response.
                        self.ended = true;
                        return Ok(());
                    }
                    self.chunk_left = Some(size);
                }
                Some(0) => {
                    if self.buf.len() < 2 {
                        return Ok(());
                    }
                    if &self.buf[..2] != b"\r\n" {
                        return Err("chunk not followed by CRLF".into());
                    }
                    self.buf.advance(2);
                    self.chunk_left = None;
                }
                Some(left) => {
                    if self.buf.is_empty() {
                        return Ok(());
                    }
                    let n = left.min(self.buf.len());
                    let data = self.buf.split_to(n);
                    self.body.extend_from_slice(&data);
                    self.chunk_left = Some(left - n);
                }
            }
        }
    }

    /// The next event line; `Ok(None)` once the server has ended the response cleanly
    /// (the terminating zero-length chunk). A connection closed without it is an error.
    pub async fn next_line(&mut self) -> Result<Option<Bytes>, String> {
        self.head().await?;
        loop {
            self.decode()?;
            if let Some(pos) = self.body.iter().position(|b| *b == b'\n') {
                let line = self.body.split_to(pos + 1).freeze().slice(..pos);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.ended {
                return if self.body.is_empty() {
                    Ok(None)
                } else {
                    Err("response ended inside an event".into())
                };
            }
            if !self.fill().await? {
                return Err("connection closed without the terminating chunk".into());
            }
        }
    }

    pub async fn next_line_within(&mut self, timeout: Duration) -> Result<Option<Bytes>, String> {
        match tokio::time::timeout(timeout, self.next_line()).await {
            Ok(r) => r,
            Err(_) => Err(format!("no event within {timeout:?}")),
        }
    }
}

/// The process's resident set size in bytes (VmRSS of /proc/self/status).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}
