//! Free TCP ports on 127.0.0.1.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

/// Ports (and bus ports) handed out by this process and not yet released, so two
/// servers started concurrently in one test binary never pick the same one.
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The offset of a cluster node's bus port.
pub(crate) const BUS_OFFSET: u16 = 10_000;

/// Never hand out the ports a system Redis or PostgreSQL may be using.
const RESERVED: [u16; 2] = [6379, 5432];

fn binds(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// A port that is free right now (and, with `with_bus`, whose bus port is free too).
/// It stays reserved in this process until [`release`] is called with the same flag.
pub(crate) fn reserve(with_bus: bool) -> u16 {
    for _ in 0..1000 {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("bind 127.0.0.1:0 to find a free port");
        let bus = port.checked_add(BUS_OFFSET);
        if RESERVED.contains(&port) || (with_bus && !bus.is_some_and(binds)) {
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
