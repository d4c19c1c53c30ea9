//! Building and running the HTTP service: bind first (so tests can use port 0 and read the
//! port), serve until a shutdown signal, then close the store.

use std::future::Future;
use std::sync::Arc;

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
                    if let Err(e) = app.catch_up_analytics().await {
                        tracing::warn!(error = %e, "analytics projector will retry");
                    }
                }
            })
        };
        let served = axum::serve(self.listener, router).with_graceful_shutdown(shutdown).await.context("the HTTP server failed");
        projector.abort();
        self.app.store.close().await;
        served?;
        Ok(())
    }
}

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
