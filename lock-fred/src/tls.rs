//! TLS with a given root certificate (feature `tls`).

use fred::prelude::TlsConnector;
use lock_core::Error;

/// A rustls connector (ring provider) that trusts exactly the certificates in `pem`.
pub(crate) fn connector(pem: &[u8]) -> Result<TlsConnector, Error> {
    Ok(TlsConnector::from(lock_core::tls::client_config(Some(
        pem,
    ))?))
}
