//! Connection URLs: the driver's own forms plus a cluster form listing several nodes.

use lock_core::Error;

/// What a URL names.
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

const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

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

/// Parses `redis://`, `rediss://`, `unix://` (single server) and `redis+cluster://`,
/// `rediss+cluster://` (cluster: `user:password@host:port,host:port/?query`).
pub(crate) fn parse(url: &str, tls: &Tls) -> Result<Deployment, Error> {
    if let Some(rest) = strip_prefix_ignore_case(url, "redis+sentinel://") {
        return sentinel(rest);
    }
    for (cluster_scheme, node_scheme) in CLUSTER_SCHEMES {
        if let Some(rest) = strip_prefix_ignore_case(url, cluster_scheme) {
            return split_cluster(rest, node_scheme).map(Deployment::Cluster);
        }
    }
    client(url, tls).map(Deployment::Single)
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

/// `user:pw@h1:p1,h2:p2/NAME`: the Sentinels (without the credentials, which are the
/// master's) and the master's name.
fn sentinel(rest: &str) -> Result<Deployment, Error> {
    let (authority, name) = rest.split_once('/').unwrap_or((rest, ""));
    let master = name.split(['?', '/']).next().unwrap_or("").to_owned();
    if master.is_empty() {
        return Err(Error::invalid_config(
            "a Sentinel URL names the master: redis+sentinel://host:port,.../NAME",
            None,
        ));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..at], &authority[at + 1..]),
        None => ("", authority),
    };
    let sentinels = split_cluster(hosts, "redis://")?;
    let node = if userinfo.is_empty() {
        None
    } else {
        let probe = client(&format!("redis://{userinfo}@127.0.0.1:1"), &Tls::default())?;
        Some(probe.get_connection_info().redis_settings().clone())
    };
    Ok(Deployment::Sentinel {
        sentinels,
        master,
        node,
    })
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// `user:pw@h1:p1,h2:p2/path?query` -> `scheme user:pw@h1:p1/path?query`, ...
fn split_cluster(rest: &str, scheme: &str) -> Result<Vec<String>, Error> {
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, suffix) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let urls: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(|host| format!("{scheme}{userinfo}{host}{suffix}"))
        .collect();
    if urls.is_empty() {
        return Err(Error::invalid_config(
            "a cluster URL needs at least one host:port",
            None,
        ));
    }
    for url in &urls {
        client(url, &Tls::default())?;
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(url: &str) -> Vec<String> {
        match parse(url, &Tls::default()) {
            Ok(Deployment::Cluster(urls)) => urls,
            Ok(_) => panic!("{url} is not a cluster URL"),
            Err(err) => panic!("{url}: {err}"),
        }
    }

    #[test]
    fn cluster_urls_expand_to_one_url_per_node() {
        assert_eq!(
            nodes("redis+cluster://a:7000,b:7001"),
            ["redis://a:7000", "redis://b:7001"]
        );
        assert_eq!(
            nodes("redis+cluster://u:p@a:7000,b:7001/?protocol=resp3"),
            [
                "redis://u:p@a:7000/?protocol=resp3",
                "redis://u:p@b:7001/?protocol=resp3"
            ]
        );
        assert_eq!(nodes("REDIS+CLUSTER://a:1"), ["redis://a:1"]);
    }

    #[test]
    fn sentinel_urls_name_the_master() {
        match parse(
            "redis+sentinel://u:p@a:26379,b:26379/locks",
            &Tls::default(),
        ) {
            Ok(Deployment::Sentinel {
                sentinels,
                master,
                node,
            }) => {
                assert_eq!(sentinels, ["redis://a:26379", "redis://b:26379"]);
                assert_eq!(master, "locks");
                assert_eq!(
                    node.and_then(|n| n.password().map(str::to_owned)),
                    Some("p".into())
                );
            }
            _ => panic!("not a Sentinel deployment"),
        }
        assert!(parse("redis+sentinel://a:26379", &Tls::default()).is_err());
    }

    #[test]
    fn single_server_urls_stay_single() {
        assert!(matches!(
            parse("redis://127.0.0.1:7000/2", &Tls::default()),
            Ok(Deployment::Single(_))
        ));
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in [
            "",
            "http://x",
            "redis+cluster://",
            "redis+cluster://,",
            "redis://:notaport",
        ] {
            let err = parse(url, &Tls::default())
                .err()
                .unwrap_or_else(|| panic!("{url:?} was accepted"));
            assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{url:?}");
        }
    }
}
