//! Free TCP ports on 127.0.0.1.
//!
//! Ports are picked at random outside the kernel's ephemeral range. A port taken from
//! that range (with `bind(0)`) can be handed by the kernel to any outgoing connection of
//! any process between the moment we find it free and the moment the server binds it;
//! with hundreds of test processes connecting at once, that happened. Outside the range
//! only another test's server can want the same port, which a random pick over thousands
//! of ports makes rare, and the servers' start-up retries on a new port when it happens.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

/// Ports (and bus ports) handed out by this process and not yet released, so two
/// servers started concurrently in one test binary never pick the same one.
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The offset of a cluster node's bus port.
pub(crate) const BUS_OFFSET: u16 = 10_000;

/// How many ports a server tries before it gives up on finding a free one.
pub(crate) const PORT_ATTEMPTS: usize = 5;

/// Never hand out the ports a system Redis, PostgreSQL or MariaDB may be using.
const RESERVED: [u16; 3] = [6379, 5432, 3306];

/// The lowest port we pick: below it live well-known services.
const LOWEST: u16 = 10_000;

/// Linux's default ephemeral range, for systems that do not say theirs.
const DEFAULT_EPHEMERAL: (u16, u16) = (32_768, 60_999);

/// A server gave up starting because another process holds its port.
#[derive(Debug)]
pub(crate) struct PortTaken;

/// What a server's log says when its port was taken: the wording of Redis, PostgreSQL
/// and PgBouncer alike (it is `strerror(EADDRINUSE)`).
pub(crate) fn log_says_port_taken(log: &str) -> bool {
    log.contains("Address already in use")
}

/// Removes the log an earlier start left, so that the next start is judged by its own.
pub(crate) fn remove_earlier_log(log: &std::path::Path) {
    if let Err(err) = std::fs::remove_file(log)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("lock-testkit: removing {}: {err}", log.display());
    }
}

fn binds(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// The kernel's range for outgoing connections' local ports.
fn ephemeral_range() -> (u16, u16) {
    let Ok(text) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        return DEFAULT_EPHEMERAL;
    };
    let mut bounds = text.split_whitespace().map(str::parse::<u16>);
    match (bounds.next(), bounds.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => (low, high),
        _ => DEFAULT_EPHEMERAL,
    }
}

/// A random port at or above [`LOWEST`] that is neither ephemeral nor reserved (and whose
/// bus port is neither, with `with_bus`), or `None` if the draw missed.
fn draw(with_bus: bool, ephemeral: (u16, u16)) -> Option<u16> {
    let outside = |port: u16| {
        port >= LOWEST && !(ephemeral.0..=ephemeral.1).contains(&port) && !RESERVED.contains(&port)
    };
    let random = RandomState::new().hash_one(std::time::Instant::now());
    let span = u64::from(u16::MAX - LOWEST) + 1;
    let port = LOWEST + u16::try_from(random % span).ok()?;
    let bus_ok = !with_bus || port.checked_add(BUS_OFFSET).is_some_and(outside);
    (outside(port) && bus_ok).then_some(port)
}

/// A port from the kernel (`bind(0)`): the fallback when the ephemeral range leaves no
/// room outside it.
fn kernel_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("bind 127.0.0.1:0 to find a free port")
}

/// A port that is free right now (and, with `with_bus`, whose bus port is free too).
/// It stays reserved in this process until [`release`] is called with the same flag.
pub(crate) fn reserve(with_bus: bool) -> u16 {
    let ephemeral = ephemeral_range();
    for attempt in 0..10_000 {
        let candidate = if attempt < 9_000 {
            draw(with_bus, ephemeral)
        } else {
            Some(kernel_port())
        };
        let Some(port) = candidate else { continue };
        let bus = port.checked_add(BUS_OFFSET);
        if RESERVED.contains(&port) || !binds(port) || (with_bus && !bus.is_some_and(binds)) {
            continue;
        }
        let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = taken.get_or_insert_with(HashSet::new);
        if taken.contains(&port) {
            continue;
        }
        if with_bus {
            let Some(bus) = bus.filter(|bus| !taken.contains(bus)) else {
                continue;
            };
            taken.insert(bus);
        }
        taken.insert(port);
        return port;
    }
    panic!("could not find a free port on 127.0.0.1");
}

/// Gives a port (and its bus port, with `with_bus`) back.
pub(crate) fn release(port: u16, with_bus: bool) {
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(taken) = taken.as_mut() {
        taken.remove(&port);
        if with_bus && let Some(bus) = port.checked_add(BUS_OFFSET) {
            taken.remove(&bus);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_lie_outside_the_ephemeral_range_and_are_free() {
        let (low, high) = ephemeral_range();
        let ports: Vec<u16> = (0..50).map(|_| reserve(true)).collect();
        for &port in &ports {
            for p in [port, port + BUS_OFFSET] {
                assert!(!(low..=high).contains(&p), "{p} is in the ephemeral range");
                assert!(p >= LOWEST && !RESERVED.contains(&p), "{p}");
            }
        }
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        for port in ports {
            release(port, true);
        }
    }

    #[test]
    fn the_port_taken_message_is_recognised() {
        assert!(log_says_port_taken(
            "WARNING cannot listen on 127.0.0.1:34281: bind(): Address already in use"
        ));
        assert!(!log_says_port_taken("FATAL nowhere to listen on"));
    }
}
