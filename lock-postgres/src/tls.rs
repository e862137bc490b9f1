//! How connections are encrypted: with the `tls` feature, rustls (trusting the system's
//! roots or a given root certificate), negotiated as the URL's `sslmode` says (`prefer`,
//! the default, or `require`); without it, plain connections only, and a URL that
//! requires TLS is refused with the feature named.

use lock_core::Error;
use tokio_postgres::Config;
#[cfg(not(feature = "tls"))]
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;

/// What makes each connection's TLS session.
#[cfg(feature = "tls")]
pub(crate) type MakeTls = tokio_postgres_rustls::MakeRustlsConnect;

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
