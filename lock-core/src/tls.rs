//! The rustls client configuration the adapters' `tls` features share (feature `tls`):
//! the ring provider, TLS 1.2 and 1.3, and either exactly the root certificates a user
//! gave or the system's.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::Error;

/// A client configuration that trusts exactly the certificates in `root_pem`, or, without
/// one, the system's root certificates.
///
/// # Errors
///
/// [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) when `root_pem` holds
/// no usable certificate.
pub fn client_config(root_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, Error> {
    let invalid = |reason: &str, source: Option<crate::BoxError>| {
        Error::invalid_config(format!("unusable root certificates: {reason}"), source)
    };
    let mut roots = rustls::RootCertStore::empty();
    match root_pem {
        Some(pem) => {
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate =
                    certificate.map_err(|err| invalid("not PEM", Some(err.into())))?;
                roots
                    .add(certificate)
                    .map_err(|err| invalid("rejected", Some(err.into())))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for err in &found.errors {
                tracing::warn!(
                    target: crate::TRACING_TARGET,
                    error = %err,
                    "a system root certificate could not be read"
                );
            }
            // A certificate rustls cannot parse is skipped, as browsers do.
            let (_added, skipped) = roots.add_parsable_certificates(found.certs);
            if skipped > 0 {
                tracing::debug!(
                    target: crate::TRACING_TARGET,
                    skipped,
                    "system root certificates rustls cannot use were skipped"
                );
            }
        }
    }
    if roots.is_empty() {
        if root_pem.is_some() {
            return Err(invalid("no certificate in the PEM data", None));
        }
        // Connections that never use TLS need none; one that does fails its handshake
        // with an unknown issuer, and this says why.
        tracing::warn!(
            target: crate::TRACING_TARGET,
            "no system root certificates were found: TLS connections will fail unless a \
             root certificate is given"
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid("no TLS version in common", Some(err.into())))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_without_a_certificate_is_refused() {
        for pem in [&b""[..], b"not a certificate"] {
            let err = client_config(Some(pem)).expect_err("nothing to trust");
            assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig);
        }
    }
}
