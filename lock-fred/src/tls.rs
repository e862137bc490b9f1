//! TLS with a given root certificate (feature `tls`).

use std::sync::Arc;

use fred::prelude::TlsConnector;
use lock_core::Error;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A rustls connector (ring provider) that trusts exactly the certificates in `pem`.
pub(crate) fn connector(pem: &[u8]) -> Result<TlsConnector, Error> {
    let invalid = |reason: &str, source: Option<lock_core::BoxError>| {
        Error::invalid_config(format!("unusable root certificate: {reason}"), source)
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate = certificate.map_err(|err| invalid("not PEM", Some(err.into())))?;
        roots
            .add(certificate)
            .map_err(|err| invalid("rejected", Some(err.into())))?;
    }
    if roots.is_empty() {
        return Err(invalid("no certificate in the PEM data", None));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid("no TLS version in common", Some(err.into())))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(config))
}
