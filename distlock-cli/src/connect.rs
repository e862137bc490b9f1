//! The store a URL names, as a client of the library (named `distlock-cli`, so that its
//! own holds, if any, are told apart).

use distlock::{Error, Locks};

/// Every URL form the command takes, as its errors list them.
const FORMS: &str = "redis://, rediss://, redis+cluster://host:port,host:port, \
                     redis+sentinel://host:port,host:port/MASTER, unix:///path/to/redis.sock \
                     (Redis); postgres://, postgresql:// or a key-value string such as \
                     `host=h dbname=d` (PostgreSQL); mysql://user@host/database (MySQL, \
                     MariaDB)";

/// The client of the store `url` names: PostgreSQL for `postgres://` and
/// `postgresql://` (and key-value strings, which start with a key), MySQL for
/// `mysql://` and `mariadb://`, Redis for the Redis forms. Anything else is refused, naming the scheme it has and every form there is.
pub(crate) async fn locks(url: &str) -> Result<Locks, Error> {
    let backend = match store(url)? {
        Store::Postgres => distlock::postgres::connect_backend(url).await?,
        Store::Mysql => distlock::mysql::connect_backend(url).await?,
        Store::Redis => distlock::redis::connect_backend(url).await?,
    };
    Locks::builder(backend).client_name("distlock-cli").build()
}

/// Loads the lock functions on every primary of the Redis deployment `url` names;
/// returns the library's name.
pub(crate) async fn load_functions(url: &str) -> Result<&'static str, Error> {
    match store(url)? {
        Store::Redis => {
            let backend = distlock::redis::Connector::new(url).connect().await?;
            backend.load_functions().await
        }
        Store::Postgres | Store::Mysql => Err(Error::invalid_config(
            "`functions load` is for Redis: PostgreSQL's functions and MySQL's tables are \
             created by the library itself",
            None,
        )),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Store {
    Redis,
    Postgres,
    Mysql,
}

fn store(url: &str) -> Result<Store, Error> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("postgres" | "postgresql") => Ok(Store::Postgres),
        Some("mysql" | "mariadb") => Ok(Store::Mysql),
        Some(
            "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel" | "unix"
            | "redis+unix",
        ) => Ok(Store::Redis),
        // Only a scheme made of a scheme's characters is echoed: what comes before `://`
        // in a mistyped URL may be a password.
        Some(scheme)
            if scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            Err(unknown(&format!(
                "the URL scheme `{scheme}://` is none of this command's"
            )))
        }
        Some(_) => Err(unknown("the URL's scheme is none of this command's")),
        // A key-value connection string: `host=... dbname=...`.
        None if url.contains('=') => Ok(Store::Postgres),
        None => Err(unknown(
            "the URL has no scheme (`redis://...`, `postgres://...`)",
        )),
    }
}

fn unknown(what: &str) -> Error {
    Error::invalid_config(format!("{what}; use one of {FORMS}"), None)
}

#[cfg(test)]
mod tests {
    use super::{Store, store};

    #[test]
    fn the_scheme_picks_the_store() {
        assert_eq!(store("postgres://u@h/db").ok(), Some(Store::Postgres));
        assert_eq!(store("POSTGRESQL://h").ok(), Some(Store::Postgres));
        assert_eq!(store("host=h dbname=d").ok(), Some(Store::Postgres));
        assert_eq!(store("redis://h:1").ok(), Some(Store::Redis));
        assert_eq!(store("mysql://u@h/db").ok(), Some(Store::Mysql));
        assert_eq!(store("mariadb://u@h/db").ok(), Some(Store::Mysql));
        assert_eq!(store("redis+cluster://a:1,b:2").ok(), Some(Store::Redis));
    }

    #[test]
    fn an_unknown_form_is_named_and_every_form_listed() {
        let said = |url: &str| store(url).expect_err(url).to_string();
        let psql = said("psql://x@127.0.0.1:5/orders");
        assert!(psql.contains("`psql://`"), "{psql}");
        assert!(
            psql.contains("postgres://") && psql.contains("redis+sentinel://"),
            "{psql}"
        );
        assert!(said("nonsense").contains("no scheme"));
        assert!(said("redis:/host").contains("no scheme"));
        let secret = said("u:s3cret@h://x");
        assert!(!secret.contains("s3cret"), "{secret}");
    }
}
