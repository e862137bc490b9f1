//! How fred's errors become lock-core errors.

use fred::error::{Error as FredError, ErrorKind as FredKind};
use lock_core::Error;
use lock_redis_protocol::{ServerError, TransportError, connect};

/// A failure to reach or talk to the server while connecting.
pub(crate) fn connection(during: &'static str, err: FredError) -> Error {
    let configuration = is_configuration(&err);
    connect::connect_failed(during, err, configuration)
}

/// The server's error reply inside a fred error, if it is one: fred keeps the reply
/// (`CODE message`) as the error's details.
pub(crate) fn server_reply(err: &FredError) -> Option<ServerError> {
    if matches!(
        err.kind(),
        FredKind::IO | FredKind::Timeout | FredKind::Canceled | FredKind::Protocol
    ) {
        return None;
    }
    let details = err.details().trim();
    let (code, message) = details.split_once(' ').unwrap_or((details, ""));
    // Server error codes are one upper-case word (ERR, NOSCRIPT, WRONGTYPE, NOPERM, ...);
    // fred's own messages are sentences.
    let is_code = !code.is_empty()
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    is_code.then(|| ServerError::new(code, message))
}

/// A script call's failure, as lock-core's protocol layer expects it.
pub(crate) fn transport(err: FredError) -> TransportError {
    match server_reply(&err) {
        Some(server) => TransportError::Server(server),
        None => TransportError::Io(err.into()),
    }
}

/// Errors that retrying cannot fix: wrong credentials, a bad URL or setting, or a
/// cluster client pointed at a server without cluster support.
fn is_configuration(err: &FredError) -> bool {
    matches!(
        err.kind(),
        FredKind::Auth | FredKind::Config | FredKind::Url
    ) || server_reply(err)
        .is_some_and(|reply| connect::refuses_the_settings(&reply.code, &reply.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_replies_are_told_from_client_errors() {
        let noscript = FredError::new(FredKind::Unknown, "NOSCRIPT No matching script.");
        assert_eq!(
            server_reply(&noscript),
            Some(ServerError::new("NOSCRIPT", "No matching script."))
        );
        let io = FredError::new(FredKind::IO, "ERR connection reset");
        assert_eq!(server_reply(&io), None);
        let sentence = FredError::new(FredKind::Unknown, "Canceled.");
        assert_eq!(server_reply(&sentence), None);
        let wrong = FredError::new(FredKind::Auth, "WRONGPASS invalid username-password pair");
        assert!(is_configuration(&wrong));
    }
}
