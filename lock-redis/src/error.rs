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
    let Some(code) = err.code().map(str::to_owned) else {
        return TransportError::Io(err.into());
    };
    // A pipeline's failure (a script and its `WAIT`) keeps its detail with the failed
    // command, where `detail` does not look.
    let message = match err.detail() {
        Some(detail) => detail.to_owned(),
        None => err
            .into_server_errors()
            .and_then(|failed| Some(failed.first()?.1.details()?.to_owned()))
            .unwrap_or_default(),
    };
    TransportError::Server(ServerError::new(code, message))
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
