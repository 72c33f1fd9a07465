//! The `/metrics` endpoint: an HTTP server on a thread of its own that hands each scrape to
//! the session's loop and answers with the text the loop makes from the maps. When the
//! session stops, a scrape still waiting gets its connection closed, never partial counts.

use std::{
    net::{SocketAddr, TcpListener},
    sync::{Arc, mpsc},
    thread::JoinHandle,
    time::Duration,
};

/// How long a scrape waits for the session's loop (which looks every 20 ms).
const REPLY_WAIT: Duration = Duration::from_secs(5);

/// The OpenMetrics content type (Prometheus asks for it first).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
    reply: mpsc::SyncSender<String>,
}

/// The endpoint of a session.
pub struct Exporter {
    address: SocketAddr,
    /// None once the session is over: scrapes then get their connection closed.
    scrapes: Option<mpsc::Receiver<Scrape>>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

/// `ADDRESS:PORT`, or `PORT` alone for loopback.
fn parse(given: &str) -> Result<SocketAddr, ExporterError> {
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
    /// Listens on `given` and serves `/metrics` there from a thread.
    pub fn start(given: &str) -> Result<Exporter, ExporterError> {
        let address = parse(given)?;
        let listener = TcpListener::bind(address).map_err(|why| ExporterError::Bind {
            address: address.to_string(),
            why,
        })?;
        let address = listener.local_addr().map_err(|why| ExporterError::Bind {
            address: address.to_string(),
            why,
        })?;
        let server = Arc::new(
            tiny_http::Server::from_listener(listener, None).map_err(|why| {
                ExporterError::Bind {
                    address: address.to_string(),
                    why: std::io::Error::other(why.to_string()),
                }
            })?,
        );
        let (sender, scrapes) = mpsc::channel();
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&serving, &sender))
            .map_err(|why| ExporterError::Bind {
                address: address.to_string(),
                why,
            })?;
        Ok(Exporter {
            address,
            scrapes: Some(scrapes),
            server,
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen when 0 was given).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers the scrapes that came since the last call with what `text` makes (None:
    /// the counts could not be read, and the scrape's connection is closed).
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
        // A scrape in flight is let go (its wait ends), and the server stops accepting.
        drop(self.scrapes.take());
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, scrapes: &mpsc::Sender<Scrape>) {
    for request in server.incoming_requests() {
        if request.url() != "/metrics" {
            let _ = request.respond(tiny_http::Response::empty(404));
            continue;
        }
        let (reply, text) = mpsc::sync_channel(1);
        if scrapes.send(Scrape { reply }).is_err() {
            // The session is over: the connection closes unanswered.
            return;
        }
        // No text in time, or the session stopped meanwhile: the connection closes.
        let Ok(text) = text.recv_timeout(REPLY_WAIT) else {
            continue;
        };
        let header =
            tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE).expect("a valid header");
        let _ = request.respond(tiny_http::Response::from_string(text).with_header(header));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    #[test]
    fn scrapes_get_the_text_the_loop_makes() {
        let exporter = Exporter::start("127.0.0.1:0").unwrap();
        let address = exporter.address();
        let client = std::thread::spawn(move || get(address, "/metrics"));
        // The loop answers, as a session's does every 20 ms.
        while !client.is_finished() {
            exporter.answer(|| Some("auditor_calls_total 1\n# EOF\n".into()));
            std::thread::sleep(Duration::from_millis(5));
        }
        let response = client.join().unwrap();
        assert!(response.starts_with("HTTP/1.0 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        assert!(
            response.ends_with("auditor_calls_total 1\n# EOF\n"),
            "{response}"
        );
        assert!(get(address, "/other").starts_with("HTTP/1.0 404"));
    }

    #[test]
    fn a_scrape_after_the_session_gets_no_counts() {
        let exporter = Exporter::start("0").unwrap();
        let address = exporter.address();
        assert!(address.ip().is_loopback());
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
