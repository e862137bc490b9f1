//! How driver errors become lock-core errors.

use lock_core::Error;
use lock_redis_protocol::{ServerError, TransportError, connect};
use redis::RedisError;

/// A failure to reach or talk to the server.
pub(crate) fn connection(during: &'static str, err: RedisError) -> Error {
    let configuration = is_configuration(&err);
    connect::connect_failed(during, err, configuration)
}

/// A script call's failure, as lock-core's protocol layer expects it.
pub(crate) fn transport(err: RedisError) -> TransportError {
    match err.code() {
        Some(code) => {
            let code = code.to_owned();
            let message = err.detail().unwrap_or_default().to_owned();
            TransportError::Server(ServerError::new(code, message))
        }
        None => TransportError::Io(err.into()),
    }
}

/// Errors that retrying cannot fix: wrong credentials, a client setting the server
/// rejects, or a cluster client pointed at a server without cluster support.
fn is_configuration(err: &RedisError) -> bool {
    use redis::ErrorKind;
    matches!(
        err.kind(),
        ErrorKind::AuthenticationFailed
            | ErrorKind::InvalidClientConfig
            | ErrorKind::RESP3NotSupported
    ) || err
        .code()
        .is_some_and(|code| connect::refuses_the_settings(code, err.detail().unwrap_or_default()))
}
