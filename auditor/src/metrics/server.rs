//! The `/metrics` endpoint: an HTTP/1 server on a thread of its own that hands each scrape to
//! the session's loop and answers with the text the loop makes from the maps. When the
//! session stops, a scrape still waiting gets no counts (503, or its connection closed).
//!
//! It listens in a root session to whoever can reach the port, so nothing a client does may
//! cost the session more than a bounded share of memory and time ([`Limits`]): the server is
//! hyper on a one-thread tokio runtime, a connection is a task (not a thread); a request is a
//! GET or HEAD with no body, its head read whole within a deadline and a size; a connection
//! serves one request and is cut at a deadline, whether its client stalls sending or never
//! reads the answer; past the cap on connections the oldest is closed for the newest. The session's
//! end drops the runtime with every connection still open: it never waits for a client.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex, mpsc},
    thread::JoinHandle,
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Body as _, Bytes, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::oneshot;

/// The OpenMetrics content type (Prometheus asks for it first).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections the kernel queues for the accept loop.
const BACKLOG: u32 = 1024;

/// What one client may cost the session.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once; past it, the oldest is closed for the newest.
    pub connections: usize,
    /// How long a client has to send its request's whole head.
    pub head_time: Duration,
    /// The most a request's head may take in bytes (hyper's read buffer; 431 past it).
    pub head_size: usize,
    /// How long a connection lives in all, from its accept to its close.
    pub connection_time: Duration,
    /// How long a scrape waits for the session's loop (which looks every 20 ms).
    pub reply_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 128,
            head_time: Duration::from_secs(5),
            head_size: 8192,
            connection_time: Duration::from_secs(10),
            reply_wait: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("--metrics {given}: expected ADDRESS:PORT or PORT (for 127.0.0.1:PORT)")]
    Address { given: String },
    #[error("--metrics {address}: cannot listen there: {why}")]
    Bind {
        address: String,
        why: std::io::Error,
    },
}

/// A scrape waiting for its text.
struct Scrape {
    reply: oneshot::Sender<String>,
}

/// The endpoint of a session.
pub struct Exporter {
    address: SocketAddr,
    /// None once the session is over: scrapes then get no counts.
    scrapes: Option<mpsc::Receiver<Scrape>>,
    /// Ends the server's runtime, and with it every connection.
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// `ADDRESS:PORT`, or `PORT` alone for loopback.
pub fn parse(given: &str) -> Result<SocketAddr, ExporterError> {
    let full = if given.bytes().all(|b| b.is_ascii_digit()) {
        format!("127.0.0.1:{given}")
    } else {
        given.to_string()
    };
    full.parse().map_err(|_| ExporterError::Address {
        given: given.to_string(),
    })
}

impl Exporter {
    /// Listens on `given` and serves `/metrics` there from a thread, within [`Limits`]'s
    /// defaults.
    pub fn start(given: &str) -> Result<Exporter, ExporterError> {
        Exporter::start_within(given, Limits::default())
    }

    /// Listens on `given` and serves `/metrics` there from a thread, within `limits`.
    pub fn start_within(given: &str, limits: Limits) -> Result<Exporter, ExporterError> {
        let address = parse(given)?;
        let failed = |why| ExporterError::Bind {
            address: address.to_string(),
            why,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(failed)?;
        let listener = {
            let _inside = runtime.enter();
            let socket = match address {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
            }
            .map_err(failed)?;
            socket.set_reuseaddr(true).map_err(failed)?;
            socket.bind(address).map_err(failed)?;
            // A deep queue: a burst of connections waits its turn rather than being refused.
            socket.listen(BACKLOG).map_err(failed)?
        };
        let address = listener.local_addr().map_err(failed)?;
        let (sender, scrapes) = mpsc::channel();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(async {
                    tokio::select! {
                        () = serve(listener, sender, limits) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime drops every connection's task where it stands.
                drop(runtime);
            })
            .map_err(failed)?;
        Ok(Exporter {
            address,
            scrapes: Some(scrapes),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen when 0 was given).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A warning when the endpoint can be reached from other machines (it serves the
    /// counts, and the names of the programs, to whoever asks).
    pub fn reachable_warning(&self) -> Option<String> {
        (!self.address.ip().is_loopback()).then(|| {
            format!(
                "Warning: the metrics endpoint listened on {}, which other machines can reach: \
                 it served the counts and the traced programs' names to whoever asked.",
                self.address
            )
        })
    }

    /// Answers the scrapes that came since the last call with what `text` makes (None:
    /// the counts could not be read, and the scrape gets none).
    pub fn answer(&self, mut text: impl FnMut() -> Option<String>) {
        let Some(scrapes) = &self.scrapes else {
            return;
        };
        while let Ok(scrape) = scrapes.try_recv() {
            if let Some(text) = text() {
                let _ = scrape.reply.send(text);
            }
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // A scrape in flight is let go (its wait ends), and the server stops.
        drop(self.scrapes.take());
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The connections being served, oldest first, each with what ends it when dropped.
#[derive(Default)]
struct Open {
    next: u64,
    connections: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// Accepts connections for ever, each a task within `limits`.
async fn serve(listener: tokio::net::TcpListener, scrapes: mpsc::Sender<Scrape>, limits: Limits) {
    let open = Arc::new(Mutex::new(Open::default()));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors or memory: wait for connections to end rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (end, ended) = oneshot::channel();
        let id = {
            let mut open = open.lock().expect("no task panics holding it");
            // Past the cap the oldest goes: a scrape is answered within milliseconds, so the
            // oldest is a client that stalls, and idle clients cannot lock the scrapes out.
            while open.connections.len() >= limits.connections.max(1) {
                open.connections.pop_front();
            }
            open.next += 1;
            let id = open.next;
            open.connections.push_back((id, end));
            id
        };
        let scrapes = scrapes.clone();
        let open = Arc::clone(&open);
        tokio::spawn(async move {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head_time)
                .max_buf_size(limits.head_size)
                .keep_alive(false)
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(|request| answer(request, scrapes.clone(), limits.reply_wait)),
                );
            // Whatever the client does, the connection ends by its deadline, or sooner when
            // newer ones need its place.
            tokio::select! {
                _ = tokio::time::timeout(limits.connection_time, connection) => {}
                _ = ended => {}
            }
            let mut open = open.lock().expect("no task panics holding it");
            open.connections.retain(|(other, _)| *other != id);
        });
    }
}

/// The answer to one request: the counts for `GET /metrics`, a refusal for anything else.
async fn answer(
    request: Request<Incoming>,
    scrapes: mpsc::Sender<Scrape>,
    reply_wait: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let refusal = |status: StatusCode, why: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(why.as_bytes())));
        *response.status_mut() = status;
        response
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = refusal(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    // A GET has no body: one announced is refused unread, whatever its size.
    if !request.body().is_end_stream() {
        return Ok(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a request to this endpoint has no body\n",
        ));
    }
    if request.uri().path() != "/metrics" {
        return Ok(refusal(
            StatusCode::NOT_FOUND,
            "the counts are at /metrics\n",
        ));
    }
    let (reply, text) = oneshot::channel();
    if scrapes.send(Scrape { reply }).is_err() {
        return Ok(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the session is over\n",
        ));
    }
    match tokio::time::timeout(reply_wait, text).await {
        Ok(Ok(text)) => {
            let mut response = Response::new(Full::new(Bytes::from(text)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(CONTENT_TYPE),
            );
            Ok(response)
        }
        // The session stopped meanwhile, or could not read its maps in time: no counts.
        _ => Ok(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the counts could not be read\n",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{
        io::{Read, Write},
        time::Instant,
    };

    fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    /// Runs `client` on a thread while this thread answers scrapes with `text`, as a
    /// session's loop does every 20 ms; the client's result.
    fn while_answering<T: Send + 'static>(
        exporter: &Exporter,
        text: &str,
        client: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let client = std::thread::spawn(client);
        while !client.is_finished() {
            exporter.answer(|| Some(text.to_string()));
            std::thread::sleep(Duration::from_millis(5));
        }
        client.join().unwrap()
    }

    /// Sends `request` whole and reads the answer to its end.
    fn exchange(address: SocketAddr, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    /// Limits short enough for a test to see them act.
    fn short() -> Limits {
        Limits {
            connections: 4,
            head_time: Duration::from_millis(300),
            connection_time: Duration::from_millis(800),
            ..Limits::default()
        }
    }

    const COUNTS: &str = "auditor_calls_total 1\n# EOF\n";

    #[test]
    fn scrapes_get_the_text_the_loop_makes() {
        let exporter = Exporter::start("127.0.0.1:0").unwrap();
        let address = exporter.address();
        let response = while_answering(&exporter, COUNTS, move || get(address, "/metrics"));
        assert!(response.starts_with("HTTP/1.0 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        assert!(response.ends_with(COUNTS), "{response}");
        assert!(get(address, "/other").starts_with("HTTP/1.0 404"));
        let head = while_answering(&exporter, COUNTS, move || {
            exchange(address, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        });
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(!head.contains("# EOF"), "{head}");
    }

    #[test]
    fn a_body_is_refused_unread_whatever_its_size() {
        let exporter = Exporter::start("127.0.0.1:0").unwrap();
        let address = exporter.address();
        for announced in [
            "Content-Length: 1000000000000\r\n",
            "Content-Length: 5\r\n",
            "Transfer-Encoding: chunked\r\n",
        ] {
            let response = exchange(
                address,
                &format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{announced}\r\n"),
            );
            assert!(
                response.starts_with("HTTP/1.1 413"),
                "{announced}: {response}"
            );
        }
        let post = exchange(address, "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.contains("allow: GET, HEAD"), "{post}");
        // A head past its size is refused too, and the endpoint goes on serving.
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let response = exchange(address, &huge);
        assert!(!response.contains("200 OK"), "{response}");
        let response = while_answering(&exporter, COUNTS, move || get(address, "/metrics"));
        assert!(response.ends_with(COUNTS), "{response}");
    }

    #[test]
    fn a_client_that_stalls_is_cut_off_while_others_are_served() {
        let exporter = Exporter::start_within("127.0.0.1:0", short()).unwrap();
        let address = exporter.address();
        let (stalled, served) = while_answering(&exporter, COUNTS, move || {
            // Half a head, never finished.
            let mut stalled = std::net::TcpStream::connect(address).unwrap();
            stalled.write_all(b"GET /metr").unwrap();
            let started = Instant::now();
            let served = get(address, "/metrics");
            let mut rest = Vec::new();
            let _ = stalled.read_to_end(&mut rest);
            (started.elapsed(), served)
        });
        assert!(served.ends_with(COUNTS), "{served}");
        assert!(
            stalled < Duration::from_secs(2),
            "cut off after {stalled:?}"
        );
    }

    #[test]
    fn idle_clients_past_the_cap_do_not_lock_the_scrapes_out() {
        let exporter = Exporter::start_within(
            "127.0.0.1:0",
            Limits {
                head_time: Duration::from_secs(60),
                connection_time: Duration::from_secs(60),
                ..short()
            },
        )
        .unwrap();
        let address = exporter.address();
        let idle: Vec<_> = (0..50)
            .map(|_| std::net::TcpStream::connect(address).unwrap())
            .collect();
        let (took, served) = while_answering(&exporter, COUNTS, move || {
            let started = Instant::now();
            (started.elapsed(), get(address, "/metrics"))
        });
        assert!(served.ends_with(COUNTS), "{served}");
        assert!(took < Duration::from_secs(1), "{took:?}");
        drop(idle);
    }

    #[test]
    fn the_session_ends_without_waiting_for_a_client() {
        let exporter = Exporter::start("127.0.0.1:0").unwrap();
        let address = exporter.address();
        // One client stalls in its head, another never reads a large answer.
        let mut stalled = std::net::TcpStream::connect(address).unwrap();
        stalled.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let mut deaf = std::net::TcpStream::connect(address).unwrap();
        deaf.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let large = "x".repeat(16 << 20);
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(300) {
            exporter.answer(|| Some(large.clone()));
            std::thread::sleep(Duration::from_millis(5));
        }
        let stopping = Instant::now();
        drop(exporter);
        assert!(
            stopping.elapsed() < Duration::from_millis(500),
            "{:?}",
            stopping.elapsed()
        );
    }

    #[test]
    fn a_scrape_after_the_session_gets_no_counts() {
        let exporter = Exporter::start("0").unwrap();
        let address = exporter.address();
        assert!(address.ip().is_loopback());
        assert_eq!(exporter.reachable_warning(), None);
        drop(exporter);
        // Nothing listens any more, or the connection closes unanswered.
        let answered = std::net::TcpStream::connect(address).is_ok_and(|mut stream| {
            let _ = write!(stream, "GET /metrics HTTP/1.0\r\n\r\n");
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            !response.is_empty()
        });
        assert!(!answered);
    }

    #[test]
    fn an_endpoint_other_machines_reach_is_warned_of() {
        let exporter = Exporter::start("0.0.0.0:0").unwrap();
        let warning = exporter.reachable_warning().unwrap();
        assert!(warning.contains("0.0.0.0:"), "{warning}");
    }

    #[test]
    fn bad_addresses_are_refused_before_anything_runs() {
        assert!(matches!(
            Exporter::start("localhost"),
            Err(ExporterError::Address { .. })
        ));
        let taken = Exporter::start("127.0.0.1:0").unwrap();
        let again = Exporter::start(&taken.address().to_string());
        assert!(
            matches!(again, Err(ExporterError::Bind { .. })),
            "{:?}",
            again.err()
        );
    }
}
