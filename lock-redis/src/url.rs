//! Connection URLs: lock-core splits the URL forms (cluster and Sentinel list several
//! servers); this module turns each server URL into a driver client.

use lock_core::Error;
pub(crate) use lock_redis_protocol::settings::TlsTrust as Tls;
use lock_redis_protocol::url::{self as forms, SentinelUrl};

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

/// The driver's form of the trusted root, if one was given.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &Tls) -> Option<redis::TlsCertificates> {
    tls.root_certificate().map(|root| redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(root.to_vec()),
    })
}

/// Parses every URL form lock-core knows and checks each server URL with the driver.
pub(crate) fn parse(url: &str, tls: &Tls) -> Result<Deployment, Error> {
    if cfg!(not(feature = "tls")) && forms::wants_tls(url) {
        return Err(forms::tls_left_out("lock-redis"));
    }
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
    if let Some(certificates) = certificates(tls) {
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
