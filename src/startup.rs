//! Building and running the HTTP service: bind first (so tests can use port 0 and read the
//! port), serve until a shutdown signal, then close the store.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::app::App;
use crate::http;

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
        // The analytics projector follows the log in the background; reads catch up first anyway.
        let projector = {
            let app = self.app.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    if let Err(e) = app.project_pending().await {
                        tracing::warn!(error = %e, "analytics projector will retry");
                    }
                }
            })
        };
        serve(self.listener, router, self.app.settings.http.client_timeout, shutdown).await;
        projector.abort();
        self.app.store.close().await;
        Ok(())
    }
}

/// The accept loop. `axum::serve` sets no timer, so hyper would wait forever for the headers
/// of a slow or dead client; here a client has `client_timeout` to send them (also between
/// keep-alive requests). On shutdown the listener closes and open requests drain for as long
/// as a handler may run.
async fn serve(listener: TcpListener, router: axum::Router, client_timeout: Duration, shutdown: impl Future<Output = ()>) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(client_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(client_timeout).keep_alive_timeout(client_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (builder, router, watcher) = (builder.clone(), router.clone(), graceful.watcher());
        tokio::spawn(async move {
            // hyper's protocol detection waits for the first bytes without a timer: a client
            // that connects and sends nothing is dropped here.
            let mut first = [0u8; 1];
            if !matches!(tokio::time::timeout(client_timeout, stream.peek(&mut first)).await, Ok(Ok(n)) if n > 0) {
                return;
            }
            let service = TowerToHyperService::new(router);
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("some connections did not drain in time");
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
