//! Ratios beside the targets, which are not targets themselves: what a miss is measured
//! against.

use super::All;
use super::targets::{figure, ratio};

/// Ratios beside the targets, which are not targets themselves: what a miss is measured
/// against.
pub(super) fn context(all: &All) -> Vec<(&'static str, Option<f64>)> {
    let mut context = uncontended_context(all);
    context.extend(handoff_context(all));
    context.extend(postgres_context(all));
    context
}

/// Beside the advisory mode's target: the same floor with its statements prepared, as
/// our advisory sessions prepare theirs (the target's floor sends them unnamed, parsed
/// and planned at every call, as tokio-postgres's `query_typed` does); beside table
/// mode's: the advisory lock, what most users compare it with.
fn postgres_context(all: &All) -> Vec<(&'static str, Option<f64>)> {
    let p = |who: &str, metric: &str| figure(all, "postgres", who, metric);
    vec![
        (
            "postgres advisory mode uncontended pairs/s vs pg_advisory_lock with prepared statements",
            ratio(
                p("lock (postgres advisory)", "pairs_per_s"),
                p("pg_advisory_lock (prepared)", "pairs_per_s"),
            ),
        ),
        (
            "postgres table mode uncontended pairs/s vs pg_advisory_lock",
            ratio(
                p("lock (postgres)", "pairs_per_s"),
                p("pg_advisory_lock", "pairs_per_s"),
            ),
        ),
        (
            "postgres table mode hand-off p50 (two clients) vs pg_advisory_lock's",
            ratio(
                p("lock (postgres)", "handoff_ms_p50"),
                p("pg_advisory_lock", "handoff_ms_p50"),
            ),
        ),
    ]
}

/// Beside the hand-off targets: the server's share. Our hand-off runs two scripts where
/// the floor runs a small one and a `SET`, on a server that idles between rounds.
fn handoff_context(all: &All) -> Vec<(&'static str, Option<f64>)> {
    let h = |who: &str, metric: &str| figure(all, "handoff", who, metric);
    vec![
        (
            "hand-off rounds (lock, wait, hand-off, unlock): server time, ours vs the bare floor's",
            ratio(
                h("lock (redis)", "server_us_per_round"),
                h("bare hand-off", "server_us_per_round"),
            ),
        ),
        (
            "hand-off rounds: server time per script call, ours vs the bare floor's",
            ratio(
                h("lock (redis)", "script_server_us_per_call"),
                h("bare hand-off", "script_server_us_per_call"),
            ),
        ),
        (
            "bare server-side hand-over p50 (one script, one delivery) vs loopback PING p50",
            ratio(
                h("bare server-side hand-over", "handoff_ms_p50"),
                h("loopback", "ping_ms_p50"),
            ),
        ),
        (
            "handoff p50 vs a loopback PING's p50 after the rounds' pause (2 ms idle)",
            ratio(
                h("lock (redis)", "handoff_ms_p50"),
                h("loopback", "ping_after_pause_ms_p50"),
            ),
        ),
        (
            "bare server-side hand-over p50 vs a loopback PING's p50 after the same pause",
            ratio(
                h("bare server-side hand-over", "handoff_ms_p50"),
                h("loopback", "ping_after_pause_ms_p50"),
            ),
        ),
    ]
}

/// Ratios beside the uncontended targets, which are not targets: what a miss is
/// measured against. The bare clients send our two scripts and nothing else, so the
/// adapters' cost above them is the library's, and the bare clients' own against the
/// peer is what any client of our scripts pays.
fn uncontended_context(all: &All) -> Vec<(&'static str, Option<f64>)> {
    let u = |who: &str, metric: &str| figure(all, "uncontended", who, metric);
    let cpu = |who: &str| u(who, "client_cpu_us_per_pair");
    let rate = |who: &str| u(who, "pairs_per_s");
    vec![
        (
            "client CPU per pair: bare redis-rs sending our scripts vs rslock",
            ratio(cpu("bare scripts (redis-rs)"), cpu("rslock")),
        ),
        (
            "pairs/s: fred adapter vs bare fred sending our scripts",
            ratio(rate("lock (fred)"), rate("bare scripts (fred)")),
        ),
        (
            "pairs/s: bare fred sending our scripts vs the redis adapter",
            ratio(rate("bare scripts (fred)"), rate("lock (redis)")),
        ),
        (
            "client CPU per pair: redis adapter vs rslock",
            ratio(cpu("lock (redis)"), cpu("rslock")),
        ),
        (
            "pairs/s: fred adapter vs the redis adapter",
            ratio(rate("lock (fred)"), rate("lock (redis)")),
        ),
        (
            "pairs/s: bare fred with TCP_NODELAY vs the redis adapter",
            ratio(
                rate("bare scripts (fred, TCP_NODELAY)"),
                rate("lock (redis)"),
            ),
        ),
        (
            "server time in scripts per pair, bare: our functions (FCALL) vs our scripts \
             (EVALSHA)",
            ratio(
                u("bare functions (redis-rs)", "server_script_us_per_pair"),
                u("bare scripts (redis-rs)", "server_script_us_per_pair"),
            ),
        ),
        (
            "server time in scripts per pair at 4k pairs/s: our functions vs our scripts",
            ratio(
                figure(
                    all,
                    "paced",
                    "lock (redis, functions)",
                    "server_script_us_per_pair",
                ),
                figure(
                    all,
                    "paced",
                    "lock (redis, scripts)",
                    "server_script_us_per_pair",
                ),
            ),
        ),
        (
            "server CPU per pair at 4k pairs/s: SET NX PX + compare-and-delete vs Redisson's \
             scripts",
            ratio(
                figure(
                    all,
                    "paced",
                    "SET NX PX + compare-and-delete (redis-rs)",
                    "server_cpu_us_per_pair",
                ),
                figure(
                    all,
                    "paced",
                    "Redisson's scripts (redis-rs)",
                    "server_cpu_us_per_pair",
                ),
            ),
        ),
    ]
}
