//! Graceful drain: open watches end with a clean end of stream, in-flight requests
//! finish, new connections are refused, and the drain is over by its deadline.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use support::raw::*;
use support::servers::{forwarding_gateway, gateway};
use support::stub::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use watchgate::body;
use watchgate::drain::DrainOutcome;

/// Watches get an endless channel body; `/slow` answers when the test says so.
async fn stub() -> (
    Stub,
    mpsc::Receiver<mpsc::Sender<Bytes>>,
    mpsc::Receiver<oneshot::Sender<()>>,
) {
    let (watch_tx, watch_rx) = mpsc::channel(4);
    let (slow_tx, slow_rx) = mpsc::channel(4);
    let stub = Stub::start(handler(move |req: Request<hyper::body::Incoming>| {
        let watch_tx = watch_tx.clone();
        let slow_tx = slow_tx.clone();
        async move {
            if req.uri().path() == "/slow" {
                let (release, released) = oneshot::channel();
                slow_tx.send(release).await.unwrap();
                let _ = released.await;
                return Response::new(body::full("slow but complete"));
            }
            let (tx, body) = channel_body(1);
            watch_tx.send(tx).await.unwrap();
            Response::builder()
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        }
    }))
    .await;
    (stub, watch_rx, slow_rx)
}

/// The next non-empty data frame, `None` at a clean end, `Some(Err)` on a reset. (An
/// HTTP/2 END_STREAM may arrive on an empty DATA frame.)
async fn frame(body: &mut hyper::body::Incoming) -> Option<Result<Bytes, hyper::Error>> {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a frame or the end within 5s")
            .map(|f| f.map(|f| f.into_data().unwrap()));
        match next {
            Some(Ok(data)) if data.is_empty() => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn drain_ends_watches_cleanly_and_lets_in_flight_requests_finish() {
    let (stub, mut watches, mut slows) = stub().await;
    let mut gw = forwarding_gateway(&stub.url()).await;
    let addr = gw.addr();

    // An HTTP/1.1 watch, an HTTP/2 watch and a slow in-flight request.
    let h1_watch = h1_get(addr, "/api/v1/pods?watch=true").await;
    let up1 = watches.recv().await.unwrap();
    let h2_watch = h2(addr)
        .await
        .send_request(
            Request::get(format!("http://{addr}/apis/apps/v1/watch/deployments"))
                .body(body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let up2 = watches.recv().await.unwrap();
    let mut slow_conn = h1(addr).await;
    let slow = tokio::spawn(async move {
        let resp = slow_conn.send_request(get_request("/slow")).await.unwrap();
        resp.into_body().collect().await.unwrap().to_bytes()
    });
    let release_slow = slows.recv().await.unwrap();

    let event = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{}}\n");
    up1.send(event.clone()).await.unwrap();
    up2.send(event.clone()).await.unwrap();
    let (mut b1, mut b2) = (h1_watch.into_body(), h2_watch.into_body());
    assert_eq!(frame(&mut b1).await.unwrap().unwrap(), event);
    assert_eq!(frame(&mut b2).await.unwrap().unwrap(), event);

    let started = Instant::now();
    let drain = tokio::spawn(async move {
        let outcome = gw.drain_within(Duration::from_secs(10)).await;
        (gw, outcome)
    });

    // Both watches end with a clean end of stream (chunked terminator / END_STREAM),
    // not an error, although their upstream streams are still open.
    assert!(frame(&mut b1).await.is_none(), "h1 watch: clean end");
    let end2 = frame(&mut b2).await;
    assert!(end2.is_none(), "h2 watch: clean end, got {end2:?}");

    // New connections are refused once the listener is closed (bounded polling).
    tokio::time::timeout(Duration::from_secs(5), async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("listener closed during the drain");

    // The in-flight request still completes, and only then is the drain over.
    assert!(
        !drain.is_finished(),
        "drain must wait for the in-flight request"
    );
    release_slow.send(()).unwrap();
    assert_eq!(slow.await.unwrap(), "slow but complete");
    let (_gw, outcome) = drain.await.unwrap();
    assert_eq!(outcome, DrainOutcome::Complete);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Item 3 of issue 16: an HTTP/2 client is told GOAWAY (NO_ERROR) when the drain begins,
/// so it opens no new stream on the connection (an informer re-watches elsewhere instead
/// of relisting, kubewharf/kubegateway#37), while its in-flight request completes and its
/// watch ends at an event boundary. Seen with the h2 crate, which reports the frame
/// itself.
#[tokio::test]
async fn http2_clients_get_goaway_on_drain_and_their_requests_complete() {
    let (stub, mut watches, mut slows) = stub().await;
    let mut gw = forwarding_gateway(&stub.url()).await;
    let addr = gw.addr();
    let (client, conn) = h2::client::handshake(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let get = |path: &str| {
        Request::get(format!("http://{addr}{path}"))
            .body(())
            .unwrap()
    };
    let mut client = client.ready().await.unwrap();
    let (slow, _) = client.send_request(get("/slow"), true).unwrap();
    let release_slow = slows.recv().await.unwrap();
    let mut client = client.ready().await.unwrap();
    let (watch, _) = client
        .send_request(get("/api/v1/pods?watch=true"), true)
        .unwrap();
    let upstream_watch = watches.recv().await.unwrap();
    let mut watch = watch.await.unwrap().into_body();
    let event = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{}}\n");
    upstream_watch.send(event.clone()).await.unwrap();
    assert_eq!(watch.data().await.unwrap().unwrap(), event);

    let drain = tokio::spawn(async move {
        let outcome = gw.drain_within(Duration::from_secs(10)).await;
        (gw, outcome)
    });

    // GOAWAY: the connection takes no new stream.
    support::wait_until(
        "the client has received GOAWAY",
        Duration::from_secs(5),
        || {
            let c = client.clone();
            async move { c.ready().await.is_err() }
        },
    )
    .await;
    let err = client.clone().ready().await.err().unwrap();
    assert!(err.is_go_away() && err.is_remote(), "{err:?}");
    assert_eq!(
        err.reason(),
        Some(h2::Reason::NO_ERROR),
        "a graceful GOAWAY"
    );

    // The watch ends with a clean END_STREAM, the in-flight request with its whole answer.
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        // END_STREAM may come on an empty DATA frame.
        loop {
            match watch.data().await {
                Some(Ok(d)) if d.is_empty() => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the watch ends within 5 s");
    assert!(end.is_none(), "clean end of the watch, got {end:?}");
    assert!(
        !drain.is_finished(),
        "the drain waits for the in-flight request"
    );
    release_slow.send(()).unwrap();
    let slow = slow.await.expect("the in-flight request completes");
    assert_eq!(slow.status(), 200);
    let mut body = slow.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        got.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(got, b"slow but complete");
    let (_gw, outcome) = drain.await.unwrap();
    assert_eq!(outcome, DrainOutcome::Complete);
    // And the connection closes without an error.
    let closed = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the connection closes")
        .unwrap();
    assert!(closed.is_ok(), "{closed:?}");
}

#[tokio::test]
async fn drain_cuts_what_is_left_at_the_deadline() {
    // A tunnel that never ends on its own keeps the drain busy until the deadline.
    let up = Stub::start(handler(
        |mut req: Request<hyper::body::Incoming>| async move {
            let on = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(io) = on.await {
                    let mut io = hyper_util::rt::TokioIo::new(io);
                    let mut buf = [0u8; 64];
                    while let Ok(n) = io.read(&mut buf).await {
                        if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            });
            Response::builder()
                .status(101)
                .header("connection", "Upgrade")
                .header("upgrade", "SPDY/3.1")
                .body(body::empty())
                .unwrap()
        },
    ))
    .await;
    let mut gw = gateway(&up.url()).await;
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    s.write_all(b"POST /api/v1/namespaces/a/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 101"));
    s.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");

    let started = Instant::now();
    let outcome = gw.drain_within(Duration::from_millis(300)).await;
    assert_eq!(outcome, DrainOutcome::DeadlineExceeded);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The tunnel was closed at the deadline.
    assert_eq!(read_to_close(&mut s).await, "");
}
