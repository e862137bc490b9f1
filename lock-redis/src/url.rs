//! Connection URLs: lock-core splits the URL forms (cluster and Sentinel list several
//! servers); this module turns each server URL into a driver client.

use lock_core::Error;
use lock_core::redis::url::{self as forms, SentinelUrl};

/// What a URL names, as driver clients.
pub(crate) enum Deployment {
    Single(redis::Client),
    /// One `redis://` (or `rediss://`) URL per listed node.
    Cluster(Vec<String>),
    /// Sentinel URLs, the master's name, and credentials for the master.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        node: Option<redis::RedisConnectionInfo>,
    },
}

/// TLS settings for `rediss://` connections.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// A PEM root certificate to trust instead of the system's.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) root_certificate: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificate", &self.root_certificate.is_some())
            .finish()
    }
}

impl Tls {
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.root_certificate
            .as_ref()
            .map(|root| redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(root.clone()),
            })
    }
}

/// Parses every URL form lock-core knows and checks each server URL with the driver.
pub(crate) fn parse(url: &str, tls: &Tls) -> Result<Deployment, Error> {
    match forms::parse(url)? {
        forms::Deployment::Single(url) => client(&url, tls).map(Deployment::Single),
        forms::Deployment::Cluster(urls) => {
            clients(&urls, &Tls::default())?;
            Ok(Deployment::Cluster(urls))
        }
        forms::Deployment::Sentinel(sentinel) => sentinel_deployment(sentinel),
        _ => Err(Error::invalid_config(
            "this URL form is not supported by the redis adapter",
            None,
        )),
    }
}

/// Opens a driver client, or explains why the URL is unusable (without echoing it: it
/// may carry a password).
pub(crate) fn client(url: &str, tls: &Tls) -> Result<redis::Client, Error> {
    let invalid =
        |err: redis::RedisError| Error::invalid_config("invalid Redis URL", Some(err.into()));
    #[cfg(feature = "tls")]
    if let Some(certificates) = tls.certificates() {
        return redis::Client::build_with_tls(url, certificates).map_err(invalid);
    }
    let _ = tls;
    redis::Client::open(url).map_err(invalid)
}

pub(crate) fn clients(urls: &[String], tls: &Tls) -> Result<Vec<redis::Client>, Error> {
    if urls.is_empty() {
        return Err(Error::invalid_config(
            "a cluster needs at least one node URL",
            None,
        ));
    }
    urls.iter().map(|url| client(url, tls)).collect()
}

fn sentinel_deployment(sentinel: SentinelUrl) -> Result<Deployment, Error> {
    clients(&sentinel.sentinels, &Tls::default())?;
    let node = match &sentinel.userinfo {
        None => None,
        Some(userinfo) => {
            // The driver parses (and percent-decodes) credentials only as part of a URL.
            let probe = client(&format!("redis://{userinfo}@127.0.0.1:1"), &Tls::default())?;
            Some(probe.get_connection_info().redis_settings().clone())
        }
    };
    Ok(Deployment::Sentinel {
        sentinels: sentinel.sentinels,
        master: sentinel.master,
        node,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_credentials_are_the_masters() {
        match parse(
            "redis+sentinel://u:p@a:26379,b:26379/locks",
            &Tls::default(),
        ) {
            Ok(Deployment::Sentinel { node, master, .. }) => {
                assert_eq!(master, "locks");
                assert_eq!(
                    node.and_then(|n| n.password().map(str::to_owned)),
                    Some("p".into())
                );
            }
            _ => panic!("not a Sentinel deployment"),
        }
    }

    #[test]
    fn single_server_urls_stay_single() {
        assert!(matches!(
            parse("redis://127.0.0.1:7000/2", &Tls::default()),
            Ok(Deployment::Single(_))
        ));
    }
}
