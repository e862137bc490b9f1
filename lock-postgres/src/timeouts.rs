//! The default bounds of connecting and of every statement.

use std::time::Duration;

/// How long a statement may take by default (see
/// [`ConnectorSettings::response_timeout`](crate::ConnectorSettings::response_timeout)).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long connecting may take by default (see
/// [`ConnectorSettings::connect_timeout`](crate::ConnectorSettings::connect_timeout)), as
/// the Redis adapters.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The cause of a wait that `bound` cut short, naming the setting (`which`): "no answer
/// within the response timeout (3s)", where the runtime's own words would say only that a
/// deadline passed.
pub(crate) fn silent(which: &str, bound: Duration) -> String {
    format!("no answer within the {which} ({bound:?})")
}
