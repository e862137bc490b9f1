//! [`Connect`]: the one shape of every backend's connector.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Backend, Error, Locks};

/// How every backend crate connects: a URL, a settings value, then [`Connect::locks`] for
/// a client or [`Connect::connect`] for the backend (to wrap in a [`Locks::builder`] or
/// to combine with others). Every backend crate implements it on its `Connector`, so
/// code that takes its backend from configuration, or a test that runs on each, is
/// written once:
///
/// ```
/// use lock_core::{Connect, Error, Locks};
///
/// async fn client<C: Connect>(url: &str, settings: C::Settings) -> Result<Locks, Error> {
///     C::new(url).settings(settings).locks().await
/// }
/// ```
///
/// The connectors have the same methods of their own, with more beside them (an
/// existing pool, a root certificate, a notification URL), so that a caller who names
/// one backend does not need this trait in scope.
#[async_trait]
pub trait Connect: Sized + Send + 'static {
    /// Pools, timeouts and protocol options; `Default` is the backend's defaults.
    type Settings: Default + Clone + fmt::Debug + Send;
    /// What [`Connect::connect`] returns.
    type Backend: Backend;

    /// A connector for the deployment `url` names, with default settings.
    fn new(url: impl Into<String>) -> Self;

    /// Replaces the settings.
    #[must_use]
    fn settings(self, settings: Self::Settings) -> Self;

    /// Connects and returns the backend.
    ///
    /// # Cancel safety
    ///
    /// As the connector's own `connect` documents.
    async fn connect(self) -> Result<Self::Backend, Error>;

    /// Connects and returns a client with the default client
    /// [`Config`](crate::Config).
    ///
    /// # Cancel safety
    ///
    /// As [`Connect::connect`].
    async fn locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect().await?)))
    }
}

/// Refuses a pooled connector's settings that cannot work: a pool of no connections, or a
/// zero response or connect timeout (the database backends' connectors share these
/// settings).
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) saying which.
pub fn check_pool_settings(
    pool_size: usize,
    response_timeout: Duration,
    connect_timeout: Duration,
) -> Result<(), Error> {
    if pool_size == 0 {
        return Err(Error::invalid_config(
            "the pool size must be at least 1",
            None,
        ));
    }
    if response_timeout.is_zero() || connect_timeout.is_zero() {
        return Err(Error::invalid_config(
            "the response and connect timeouts must be positive",
            None,
        ));
    }
    Ok(())
}
