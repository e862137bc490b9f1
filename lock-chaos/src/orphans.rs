//! The end-of-run check for orphaned holds. Once every worker is dead nobody renews or
//! releases anything, so every name must come free within what a hold may still last;
//! a name still held after that is held by nobody, beyond its lease.

use std::time::Duration;

use tokio::time::Instant;

use crate::args::Kind;

/// How long after the last worker died a name may still be held: a lease (the holds of
/// the dead), a second lease (a late copy's grant for nobody, see the runner's
/// `LATE_BY`), a failover's quarantine (two leases on PostgreSQL), and two seconds for a
/// node that is restarting.
fn bound(lease: Duration) -> Duration {
    lease * 4 + Duration::from_secs(2)
}

/// The names of `kind` (of `permits` permits each, for semaphores) that the operator's
/// client `locks` could not take whole within the bound after the last worker died.
pub(crate) async fn orphaned_holds(
    locks: &distlock::Locks,
    kind: Kind,
    names: usize,
    permits: u64,
    lease: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + bound(lease);
    let mut orphaned = Vec::new();
    for n in 0..names {
        let name = format!("chaos:{n}");
        if !comes_free(locks, kind, &name, permits, deadline).await {
            orphaned.push(name);
        }
    }
    orphaned
}

/// Whether the name comes free by `deadline`: a connection error (a node still
/// restarting) is tried again until then.
async fn comes_free(
    locks: &distlock::Locks,
    kind: Kind,
    name: &str,
    permits: u64,
    deadline: Instant,
) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let taken = match kind {
            Kind::Semaphore => take_every_permit(locks, name, permits, left).await,
            Kind::Mutex | Kind::Fair | Kind::Rw => take_the_lock(locks, kind, name, left).await,
        };
        match taken {
            Ok(free) => return free,
            Err(err) if Instant::now() < deadline => {
                eprintln!("chaos: checking {name} for an orphaned hold: {err}; again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => {
                eprintln!("chaos: checking {name} for an orphaned hold: {err}");
                return false;
            }
        }
    }
}

async fn take_the_lock(
    locks: &distlock::Locks,
    kind: Kind,
    name: &str,
    wait: Duration,
) -> Result<bool, distlock::Error> {
    let lock = crate::worker::handle(locks, kind, name, true);
    let Some(guard) = lock.try_lock_for(wait, None).await? else {
        return Ok(false);
    };
    if let Err(err) = guard.unlock().await {
        eprintln!("chaos: releasing {name} after the orphan check: {err}");
    }
    Ok(true)
}

async fn take_every_permit(
    locks: &distlock::Locks,
    name: &str,
    permits: u64,
    wait: Duration,
) -> Result<bool, distlock::Error> {
    let semaphore = locks.expirable_semaphore(name);
    // A restart loses the count: set it again, as the workers do.
    semaphore.try_set_permits(permits).await?;
    match semaphore.acquire(permits).wait(wait).await {
        Ok(permit) => {
            if let Err(err) = permit.release().await {
                eprintln!("chaos: releasing {name}'s permits after the orphan check: {err}");
            }
            Ok(true)
        }
        Err(err) if err.is_timeout() => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// The check finds a hold that outlives the bound (a lease of a minute, never
    /// released), and only that one.
    #[tokio::test(start_paused = true)]
    async fn a_hold_nobody_releases_is_reported() {
        let store = distlock::memory::MemoryBackend::new();
        let dead = distlock::Locks::new(Arc::new(store.clone()));
        let operator = distlock::Locks::new(Arc::new(store));
        let minute = Some(Duration::from_secs(60));
        let _held = dead
            .mutex("chaos:1")
            .try_lock_for(Duration::ZERO, minute)
            .await;
        let lease = Duration::from_millis(500);
        let orphaned = orphaned_holds(&operator, Kind::Mutex, 3, 1, lease).await;
        assert_eq!(orphaned, vec!["chaos:1".to_owned()]);
    }
}
