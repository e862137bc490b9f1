//! The connection URL forms every Redis adapter accepts, split into what the driver
//! understands: one URL per server.
//!
//! - `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS): a single server;
//! - `redis+cluster://[user:password@]host:port,host:port,...` (or `rediss+cluster://`):
//!   a Redis Cluster, discovered from any listed node;
//! - `redis+sentinel://[user:password@]host:port,host:port,.../NAME`: the master Sentinels
//!   know as `NAME` (the credentials are the master's).
//!
//! Checking each server URL is the driver's business; this module only splits.
//!
//! Written here rather than with the `url` crate: a multi-host authority
//! (`h1:p1,h2:p2`) is not a URL that crate (or RFC 3986) accepts, and the forms are
//! Redisson's and the adapters' own contract, so one small splitter with its tests is
//! the whole of it.

use lock_core::Error;

/// What a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
    /// One server: the URL as given.
    Single(String),
    /// A cluster: one `redis://` (or `rediss://`) URL per listed node, each with the
    /// credentials, path and query of the original.
    Cluster(Vec<String>),
    /// A master behind Sentinel.
    Sentinel(SentinelUrl),
}

/// The parts of a `redis+sentinel://` URL.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelUrl {
    /// One `redis://host:port` URL per Sentinel, without credentials.
    pub sentinels: Vec<String>,
    /// The master's name as the Sentinels know it.
    pub master: String,
    /// `user:password` (still percent-encoded) for the master, if the URL had any.
    pub userinfo: Option<String>,
}

impl std::fmt::Debug for SentinelUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The user info may carry a password.
        f.debug_struct("SentinelUrl")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("userinfo", &self.userinfo.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Every URL form the adapters accept, for messages about a URL they cannot use.
pub const ACCEPTED_FORMS: &str = "a Redis URL is one of redis://[user:password@]host:port[/db], \
     rediss://... (TLS), redis+cluster://host:port,host:port,... (or rediss+cluster://), \
     redis+sentinel://host:port,host:port,.../MASTER and, with the redis adapter, \
     unix:///path/to/redis.sock";

/// A URL the adapters cannot use (without echoing it: it may carry a password), with
/// `what` is wrong and the forms they accept.
#[must_use]
pub fn unusable(what: &str) -> Error {
    Error::invalid_config(format!("{what}; {ACCEPTED_FORMS}"), None)
}

/// Whether `url` asks for TLS (`rediss://`, `rediss+cluster://`).
#[must_use]
pub fn wants_tls(url: &str) -> bool {
    strip_prefix_ignore_case(url, "rediss").is_some()
}

/// The error for a TLS URL in a build without TLS, naming the feature to enable.
#[must_use]
pub fn tls_left_out(adapter: &str) -> Error {
    Error::invalid_config(
        format!(
            "rediss:// URLs need TLS, which this build leaves out: enable the `tls` feature \
             of distlock (or of {adapter} when used without distlock)"
        ),
        None,
    )
}

const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// Splits `url` into the servers it names. Errors never echo the URL: it may carry a
/// password.
pub fn parse(url: &str) -> Result<Deployment, Error> {
    if let Some(rest) = strip_prefix_ignore_case(url, "redis+sentinel://") {
        return sentinel(rest).map(Deployment::Sentinel);
    }
    for (cluster_scheme, node_scheme) in CLUSTER_SCHEMES {
        if let Some(rest) = strip_prefix_ignore_case(url, cluster_scheme) {
            return split_hosts(rest, node_scheme).map(Deployment::Cluster);
        }
    }
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("redis" | "rediss") => database(url)?,
        // The socket's path, which the redis adapter takes and the fred adapter refuses.
        Some("unix" | "redis+unix") => {}
        _ => return Err(unusable("unknown URL scheme")),
    }
    Ok(Deployment::Single(url.to_owned()))
}

/// Checks the database number in a single server's URL path (`/3`), if any: a number
/// the server then accepts or refuses (`databases` in its configuration).
fn database(url: &str) -> Result<(), Error> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let Some(path) = rest
        .split(['?', '#'])
        .next()
        .and_then(|r| r.split_once('/'))
    else {
        return Ok(());
    };
    let number = path.1.trim_end_matches('/');
    if number.is_empty() || number.parse::<u32>().is_ok() {
        return Ok(());
    }
    Err(unusable("the path of a Redis URL is a database number"))
}

/// `user:pw@h1:p1,h2:p2/NAME`.
fn sentinel(rest: &str) -> Result<SentinelUrl, Error> {
    let (authority, name) = rest.split_once('/').unwrap_or((rest, ""));
    let master = name.split(['?', '/']).next().unwrap_or("").to_owned();
    if master.is_empty() {
        return Err(unusable("a Sentinel URL names the master after the hosts"));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(authority[..at].to_owned()), &authority[at + 1..]),
        None => (None, authority),
    };
    Ok(SentinelUrl {
        sentinels: split_hosts(hosts, "redis://")?,
        master,
        userinfo: userinfo.filter(|info| !info.is_empty()),
    })
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// `user:pw@h1:p1,h2:p2/path?query` -> `scheme user:pw@h1:p1/path?query`, ...
fn split_hosts(rest: &str, scheme: &str) -> Result<Vec<String>, Error> {
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
        return Err(unusable("the URL needs at least one host:port"));
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_are_named_without_credentials() {
        assert_eq!(super::hosts("redis://u:p@h:1/0?x=1"), "h:1");
        assert_eq!(super::hosts("redis+cluster://u:p@a:1,b:2"), "a:1,b:2");
        assert_eq!(super::hosts("redis+sentinel://s:1,t:2/mymaster"), "s:1,t:2");
        assert_eq!(super::hosts("rediss://h:6380"), "h:6380");
    }

    use super::*;

    fn nodes(url: &str) -> Vec<String> {
        match parse(url) {
            Ok(Deployment::Cluster(urls)) => urls,
            Ok(other) => panic!("{url} is not a cluster URL: {other:?}"),
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
        assert_eq!(nodes("rediss+cluster://a:1"), ["rediss://a:1"]);
    }

    #[test]
    fn sentinel_urls_name_the_master() {
        let parsed = parse("redis+sentinel://u:p@a:26379,b:26379/locks");
        let Ok(Deployment::Sentinel(sentinel)) = parsed else {
            panic!("not a Sentinel deployment: {parsed:?}");
        };
        assert_eq!(sentinel.sentinels, ["redis://a:26379", "redis://b:26379"]);
        assert_eq!(sentinel.master, "locks");
        assert_eq!(sentinel.userinfo.as_deref(), Some("u:p"));
        assert!(!format!("{sentinel:?}").contains("u:p"), "Debug hides it");
        for refused in ["redis+sentinel://a:26379", "redis+sentinel:///locks"] {
            let kind = parse(refused).map_err(|err| err.kind());
            assert_eq!(kind, Err(lock_core::ErrorKind::InvalidConfig), "{refused}");
        }
    }

    #[test]
    fn single_server_urls_stay_single() {
        assert_eq!(
            parse("redis://127.0.0.1:7000/2").ok(),
            Some(Deployment::Single("redis://127.0.0.1:7000/2".into()))
        );
    }

    #[test]
    fn unusable_urls_list_the_forms_and_never_echo_the_url() {
        for url in [
            "http://u:s3cret@localhost",
            "not a url",
            "redis://u:s3cret@h:1/zero",
            "redis+sentinel://u:s3cret@a:1",
        ] {
            let err = parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url:?} was accepted"));
            assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{url:?}");
            let said = err.chain().to_string();
            assert!(said.contains("redis+cluster://"), "{said}");
            assert!(!said.contains("s3cret"), "{said}");
        }
        for url in [
            "redis://h:1/",
            "redis://h:1/15",
            "REDISS://h:1/0?x=1",
            "unix:///r.sock",
        ] {
            assert!(parse(url).is_ok(), "{url:?} was refused");
        }
    }

    #[test]
    fn a_tls_url_without_tls_names_the_feature() {
        assert!(wants_tls("rediss://h:1") && wants_tls("REDISS+cluster://h:1"));
        assert!(!wants_tls("redis://h:1"));
        let said = tls_left_out("lock-fred").to_string();
        assert!(said.contains("`tls` feature of distlock"), "{said}");
    }

    #[test]
    fn clusters_without_hosts_are_config_errors() {
        for url in [
            "redis+cluster://",
            "redis+cluster://,",
            "redis+cluster://u:p@/",
        ] {
            let err = parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url:?} was accepted"));
            assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{url:?}");
        }
    }
}

/// The `host:port` list of a URL of any accepted form, without scheme, credentials,
/// database or query: what an error says was tried.
#[must_use]
pub fn hosts(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts)
}

/// Runs a connector's `connecting`; a connection error names the hosts of `url` (when
/// the connector was given one) that were tried. The connecting future is boxed at once:
/// it is a large state machine, and every caller's future would carry it.
pub fn naming_hosts_on_failure<'a, T: 'a>(
    url: Option<String>,
    connecting: impl Future<Output = Result<T, lock_core::Error>> + Send + 'a,
) -> std::pin::Pin<Box<dyn Future<Output = Result<T, lock_core::Error>> + Send + 'a>> {
    Box::pin(async move {
        let connected = connecting.await;
        match url {
            Some(url) => connected.map_err(|err| naming_hosts(err, &url)),
            None => connected,
        }
    })
}

/// A connection error, naming the hosts of `url` that were tried (other errors are
/// returned unchanged).
#[must_use]
pub fn naming_hosts(err: lock_core::Error, url: &str) -> lock_core::Error {
    match err {
        lock_core::Error::Connection { during, source, .. } => lock_core::Error::connection(
            during,
            Tried {
                hosts: hosts(url).to_owned(),
                source,
            },
        ),
        other => other,
    }
}

/// The hosts a failed connection tried, with the driver's error as the source.
#[derive(Debug)]
struct Tried {
    hosts: String,
    source: lock_core::Cause,
}

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tried {}", self.hosts)
    }
}

impl std::error::Error for Tried {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}
