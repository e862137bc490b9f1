//! How connections are encrypted: with the `tls` feature, rustls (trusting the system's
//! roots or a given root certificate), negotiated as the URL's `sslmode` says (`prefer`,
//! the default, or `require`); without it, plain connections only, and a URL that
//! requires TLS is refused with the feature named.

use lock_core::Error;
use tokio_postgres::Config;
#[cfg(not(feature = "tls"))]
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;

/// What makes each connection's TLS session: rustls for a TCP connection; nothing for a
/// Unix socket, where PostgreSQL offers no TLS. tokio-postgres asks for a TLS connector
/// before it knows whether the server offers TLS, and names no host for a Unix socket,
/// which rustls refuses as a server name: without this, a URL naming a socket directory
/// could not connect at all with the `tls` feature.
#[cfg(feature = "tls")]
#[derive(Clone)]
pub(crate) struct MakeTls(tokio_postgres_rustls::MakeRustlsConnect);

#[cfg(feature = "tls")]
impl MakeTls {
    fn new(config: rustls::ClientConfig) -> Self {
        Self(tokio_postgres_rustls::MakeRustlsConnect::new(config))
    }
}

/// rustls's connector for one connection over a stream of type `S`.
#[cfg(feature = "tls")]
type RustlsConnect<S> = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;

/// The TLS connector of one connection: rustls's, or none where no host was named (a
/// Unix socket, whose server never offers TLS).
#[cfg(feature = "tls")]
pub(crate) struct TlsConnector<S>(Option<RustlsConnect<S>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;

#[cfg(feature = "tls")]
impl<S> MakeTlsConnect<S> for MakeTls
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = TlsConnector<S>;
    type Error = <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, host: &str) -> Result<TlsConnector<S>, Self::Error> {
        if host.is_empty() {
            return Ok(TlsConnector(None));
        }
        MakeTlsConnect::<S>::make_tls_connect(&mut self.0, host).map(|tls| TlsConnector(Some(tls)))
    }
}

#[cfg(feature = "tls")]
impl<S> tokio_postgres::tls::TlsConnect<S> for TlsConnector<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <RustlsConnect<S> as tokio_postgres::tls::TlsConnect<S>>::Stream;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Stream, std::io::Error>> + Send>,
    >;

    fn connect(self, stream: S) -> Self::Future {
        match self.0 {
            Some(tls) => Box::pin(tls.connect(stream)),
            // Only a server that offered TLS where no host name was given (a Unix socket,
            // or a `hostaddr` without a `host`) gets here: there is no name to verify its
            // certificate against.
            None => Box::pin(std::future::ready(Err(std::io::Error::other(
                "the server offered TLS, but the URL names no host to verify its \
                 certificate against (give `host` beside `hostaddr`)",
            )))),
        }
    }
}

/// What makes each connection's TLS session: none without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(crate) type MakeTls = tokio_postgres::NoTls;

/// The stream of a connection [`MakeTls`] made.
pub(crate) type TlsStream = <MakeTls as MakeTlsConnect<tokio_postgres::Socket>>::Stream;

/// The root certificates a connector trusts: the system's unless one was given.
#[derive(Clone, Default)]
pub(crate) struct Trust {
    #[cfg(feature = "tls")]
    root_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut trust = f.debug_struct("Trust");
        #[cfg(feature = "tls")]
        trust.field("root_certificate", &self.root_pem.is_some());
        trust.finish()
    }
}

impl Trust {
    /// Trusts exactly the certificates in `pem` instead of the system's.
    #[cfg(feature = "tls")]
    pub(crate) fn set_root_certificate(&mut self, pem: Vec<u8>) {
        self.root_pem = Some(pem);
    }

    /// The connector for connections `configs` describe.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a given
    /// root certificate that cannot be used.
    #[cfg(feature = "tls")]
    pub(crate) fn make_tls(&self, _configs: &[&Config]) -> Result<MakeTls, Error> {
        let config = lock_core::tls::client_config(self.root_pem.as_deref())?;
        Ok(MakeTls::new(config))
    }

    /// The connector for connections `configs` describe.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a config
    /// with `sslmode=require`, which needs the `tls` feature.
    #[cfg(not(feature = "tls"))]
    #[allow(
        clippy::unused_self,
        reason = "the signature is the one of the `tls` feature's"
    )]
    pub(crate) fn make_tls(&self, configs: &[&Config]) -> Result<MakeTls, Error> {
        if configs
            .iter()
            .any(|config| config.get_ssl_mode() == SslMode::Require)
        {
            return Err(Error::invalid_config(
                "sslmode=require needs TLS: enable the `tls` feature of distlock (or of \
                 lock-postgres)",
                None,
            ));
        }
        Ok(tokio_postgres::NoTls)
    }
}

/// Another handle on `tls` for one more connection: a clone of rustls' shared
/// configuration, a copy of `NoTls`.
#[allow(
    clippy::clone_on_copy,
    clippy::trivially_copy_pass_by_ref,
    reason = "MakeTls is Copy (and empty) only without the `tls` feature"
)]
pub(crate) fn another(tls: &MakeTls) -> MakeTls {
    tls.clone()
}
