//! The composition root: building the application with the tools the MCP layer ships, and
//! running the HTTP service — bind first (so tests can use port 0 and read the port), serve
//! until a shutdown signal, then close the store.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::app::App;
use crate::config::HttpSettings;
use crate::http::{self, PeerAddr};

/// The application with every shipped tool registered: the one way the binary, the CLI and
/// the tests build it (the application layer itself knows no transport).
pub async fn build_app(settings: crate::config::Settings, clock: Arc<dyn crate::clock::Clock>) -> anyhow::Result<Arc<App>> {
    App::build(settings, clock, &crate::mcp::tools::registrations()).await
}

/// A bound, ready-to-run service.
pub struct Application {
    listener: TcpListener,
    app: Arc<App>,
}

impl Application {
    /// Binds the listen address.
    pub async fn build(app: Arc<App>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(&app.settings.addr).await.with_context(|| format!("cannot listen on {}", app.settings.addr))?;
        Ok(Self { listener, app })
    }

    /// Serves on a listener bound beforehand (so the public URL can name its port).
    pub fn on(listener: TcpListener, app: Arc<App>) -> Self {
        Self { listener, app }
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Serves until `shutdown` resolves, then drains requests and closes the store.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let router = http::router(self.app.clone());
        // The analytics projector follows the log in the background on the one instance holding
        // its lease; reads catch up first anyway.
        let projector = {
            let app = self.app.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    if let Err(e) = app.project_as_leader().await {
                        tracing::warn!(error = %e, "analytics projector will retry");
                    }
                }
            })
        };
        serve(self.listener, router, &self.app.settings.http, shutdown).await;
        projector.abort();
        self.app.store.close().await;
        Ok(())
    }
}

/// The accept loop. `axum::serve` sets no timer, so hyper would wait forever for the headers
/// of a slow or dead client, for an HTTP/2 preface, or on an idle HTTP/2 connection. Here every
/// connection has a watchdog: while no request is in flight, it may stay silent for at most
/// `client_timeout` (from the accept, or from its last response) — HTTP/1 and HTTP/2 alike, in
/// protocol detection too. At most `max_connections` are open; one beyond is closed at once. On
/// shutdown the listener closes and open requests drain for as long as a handler may run.
async fn serve(listener: TcpListener, router: axum::Router, http: &HttpSettings, shutdown: impl Future<Output = ()>) {
    let client_timeout = http.client_timeout;
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(client_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(client_timeout).keep_alive_timeout(client_timeout);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(http.max_connections.max(1)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(max = http.max_connections, "connection limit reached; a new connection is closed");
            drop(stream);
            continue;
        };
        let (builder, router, watcher) = (builder.clone(), router.clone(), graceful.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            let activity = Arc::new(Activity::new());
            let service = Tracked { inner: TowerToHyperService::new(router), activity: activity.clone(), peer: PeerAddr(peer.ip()) };
            let connection = watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned());
            let mut connection = std::pin::pin!(connection);
            let mut tick = tokio::time::interval((client_timeout / 4).max(Duration::from_millis(50)));
            loop {
                tokio::select! {
                    result = &mut connection => {
                        if let Err(e) = result {
                            tracing::debug!(error = %e, "connection closed with an error");
                        }
                        break;
                    }
                    _ = tick.tick() => if activity.idle_longer_than(client_timeout) {
                        // Dropping the connection closes the socket: nothing is in flight.
                        tracing::debug!("idle connection closed");
                        break;
                    },
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("some connections did not drain in time");
    }
}

/// What a connection's watchdog knows: requests in flight, and when the connection last did
/// something (accepted, or finished a request).
struct Activity {
    in_flight: AtomicUsize,
    since: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self { in_flight: AtomicUsize::new(0), since: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn idle_longer_than(&self, limit: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
            && self.now_ms().saturating_sub(self.last_ms.load(Ordering::Acquire)) > u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)
    }
}

/// The connection's service, counting the requests in flight for its watchdog and telling each
/// request its peer address.
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    peer: PeerAddr,
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for Tracked<S>
where
    S: hyper::service::Service<hyper::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, mut request: hyper::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        let guard = InFlight::enter(self.activity.clone());
        let future = self.inner.call(request);
        Box::pin(async move {
            let result = future.await;
            drop(guard);
            result
        })
    }
}

/// One request in flight; leaving (also by a cancelled HTTP/2 stream dropping the future)
/// counts it out and marks the connection active now.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long open requests may finish after a shutdown signal.
const DRAIN: Duration = Duration::from_secs(35);

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
