//! The store a URL names, as a client of the library (named `distlock-cli`, so that its
//! own holds, if any, are told apart).

use distlock::{Error, Locks};

/// The client of the store `url` names: PostgreSQL for `postgres://` and
/// `postgresql://` (and key-value strings, which start with a key), Redis otherwise.
pub(crate) async fn locks(url: &str) -> Result<Locks, Error> {
    let backend = if is_postgres(url) {
        distlock::postgres::connect_backend(url).await?
    } else {
        distlock::redis::connect_backend(url).await?
    };
    Locks::builder(backend).client_name("distlock-cli").build()
}

fn is_postgres(url: &str) -> bool {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("postgres" | "postgresql") => true,
        Some(_) => false,
        // A key-value connection string: `host=... dbname=...`.
        None => url.contains('='),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_scheme_picks_the_store() {
        assert!(super::is_postgres("postgres://u@h/db"));
        assert!(super::is_postgres("POSTGRESQL://h"));
        assert!(super::is_postgres("host=h dbname=d"));
        assert!(!super::is_postgres("redis://h:1"));
        assert!(!super::is_postgres("redis+cluster://a:1,b:2"));
        assert!(!super::is_postgres("nonsense"));
    }
}
