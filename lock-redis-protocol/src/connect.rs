//! What every adapter's connector checks and classifies the same way while connecting.

use lock_core::{BoxError, Error};

/// Whether a server error code means the credentials (or the ACL user) were refused:
/// retrying cannot help, so it is a configuration error, said at once.
#[must_use]
pub fn is_refused_credentials(code: &str) -> bool {
    matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
}

/// Whether a server's error reply means a connection setting was refused: the
/// credentials, or a database number the server lacks (`SELECT`, from the URL's path).
/// Retrying cannot help: a configuration error, said at once.
#[must_use]
pub fn refuses_the_settings(code: &str, message: &str) -> bool {
    is_refused_credentials(code) || (code == "ERR" && message.contains("DB index is out of range"))
}

/// A failure while connecting: a configuration error when retrying cannot fix it
/// (`configuration`: wrong credentials, a setting the server or driver rejects), else a
/// connection error.
pub fn connect_failed(
    during: &'static str,
    err: impl Into<BoxError>,
    configuration: bool,
) -> Error {
    if configuration {
        Error::invalid_config(
            "the Redis server refused the connection settings (check the URL's user, \
             password and database number)",
            Some(err.into()),
        )
    } else {
        Error::connection(during, err)
    }
}

/// The answer of `INFO cluster` on a single-server URL: a cluster node there would answer
/// `MOVED` for every other key, so it is refused at once with the URL form to use.
pub fn refuse_cluster_node(info_cluster: &str) -> Result<(), Error> {
    if info_cluster.contains("cluster_enabled:1") {
        return Err(Error::invalid_config(
            "this server is a Redis Cluster node: connect with redis+cluster://host:port,...",
            None,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lock_core::ErrorKind;

    use super::*;

    #[test]
    fn a_cluster_node_is_refused_and_a_plain_server_taken() {
        let err = refuse_cluster_node("# Cluster\r\ncluster_enabled:1\r\n").expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(refuse_cluster_node("# Cluster\r\ncluster_enabled:0\r\n").is_ok());
    }

    #[test]
    fn refused_credentials_are_configuration_errors() {
        assert!(is_refused_credentials("WRONGPASS") && !is_refused_credentials("LOADING"));
        assert!(refuses_the_settings("ERR", "DB index is out of range"));
        assert!(!refuses_the_settings(
            "ERR",
            "max number of clients reached"
        ));
        let err = connect_failed("connecting", "WRONGPASS invalid password", true);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        let err = connect_failed("connecting", "connection refused", false);
        assert_eq!(err.kind(), ErrorKind::Connection);
    }
}
