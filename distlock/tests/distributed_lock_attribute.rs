//! `#[distributed_lock]` against a real Redis: exclusion, reentry, timeouts, early
//! returns, panics, cancellation, templates with fields, methods and kinds. (Here rather
//! than in lock-macros: trybuild compiles every dev-dependency of that crate for its
//! cases, and a Redis client and server kit would double their build.)

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{Locks, distributed_lock};
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep, timeout};

#[derive(Debug)]
enum AppError {
    Lock(distlock::Error),
    Early,
}

impl From<distlock::Error> for AppError {
    fn from(err: distlock::Error) -> Self {
        Self::Lock(err)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// How many bodies run at once, and the most ever seen.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Inside {
    async fn visit(&self, hold: Duration) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        sleep(hold).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    /// A visit that stays until `gate` lets it through: what a test checks meanwhile
    /// cannot race the visit's own time (a fixed stay ended, under load, between a
    /// check that both permits were taken and the call that relied on it).
    async fn visit_until(&self, gate: &tokio::sync::Semaphore) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        gate.acquire().await.expect("the gate stays open").forget();
        sleep(Duration::from_millis(20)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn server_and_client() -> (RedisServer, Locks) {
    let server = RedisServer::start().await;
    let locks = distlock::redis::connect(&server.url()).await.unwrap();
    (server, locks)
}

#[distributed_lock("job:{id}", client = locks)]
async fn job(locks: &Locks, id: u32, inside: &Inside) -> Result<u32, AppError> {
    inside.visit(Duration::from_millis(30)).await;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_exclude_each_other() {
    let (_server, locks) = server_and_client().await;
    let inside = Inside::default();
    let (a, b, c) = tokio::join!(
        job(&locks, 1, &inside),
        job(&locks, 1, &inside),
        job(&locks, 1, &inside)
    );
    assert_eq!((a.unwrap(), b.unwrap(), c.unwrap()), (1, 1, 1));
    assert_eq!(
        inside.most.load(Ordering::SeqCst),
        1,
        "two bodies ran at once"
    );
    // Different names do not exclude each other.
    let inside = Inside::default();
    let (a, b) = tokio::join!(job(&locks, 1, &inside), job(&locks, 2, &inside));
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(inside.most.load(Ordering::SeqCst), 2);
}

#[distributed_lock("nest:{id}", client = locks)]
async fn outer(locks: &Locks, id: u32) -> Result<u32, AppError> {
    let guard = distlock::current_guard().expect("the guard is visible to the body");
    assert!(guard.is_held());
    inner(locks, id).await
}

#[distributed_lock("nest:{id}", client = locks)]
async fn inner(locks: &Locks, id: u32) -> Result<u32, AppError> {
    Ok(id + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter() {
    let (_server, locks) = server_and_client().await;
    let result = timeout(Duration::from_secs(5), outer(&locks, 7))
        .await
        .expect("a nested call with the same name re-enters instead of waiting");
    assert_eq!(result.unwrap(), 8);
    assert!(
        distlock::current_guard().is_none(),
        "no guard outside the body"
    );
    assert!(!locks.mutex("nest:7").is_locked().await.unwrap());
}

#[distributed_lock("busy", client = locks, wait = "100ms")]
async fn impatient(locks: &Locks) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock("busy", client = locks, wait = "0s")]
async fn once(locks: &Locks) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_times_out_into_the_error_type() {
    let (server, locks) = server_and_client().await;
    let other = distlock::redis::connect(&server.url()).await.unwrap();
    let held = other.mutex("busy").lock().await.unwrap();
    let started = Instant::now();
    match impatient(&locks).await {
        Err(AppError::Lock(err)) => assert!(err.is_timeout(), "{err}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let started = Instant::now();
    assert!(matches!(once(&locks).await, Err(AppError::Lock(e)) if e.is_timeout()));
    assert!(started.elapsed() < Duration::from_millis(500));
    held.unlock().await.unwrap();
    assert!(impatient(&locks).await.is_ok());
}

#[distributed_lock("early:{fail}", client = locks)]
async fn early(locks: &Locks, fail: bool) -> Result<(), AppError> {
    if fail {
        Err(AppError::Early)?;
    }
    Ok(())
}

#[distributed_lock("boom", client = locks)]
async fn boom(locks: &Locks) -> Result<(), AppError> {
    panic!("the body panics");
}

#[distributed_lock("slow", client = locks)]
async fn slow(locks: &Locks) -> Result<(), AppError> {
    sleep(Duration::from_secs(30)).await;
    Ok(())
}

/// True once `name` can be taken (then released) by another client, within a second.
async fn freed(other: &Locks, name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if let Some(guard) = other.mutex(name).try_lock().await.unwrap() {
            guard.unlock().await.unwrap();
            return true;
        }
        sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_returns_panics_and_cancellation_release() {
    let (server, locks) = server_and_client().await;
    let other = distlock::redis::connect(&server.url()).await.unwrap();

    assert!(matches!(early(&locks, true).await, Err(AppError::Early)));
    assert!(
        freed(&other, "early:true").await,
        "a `?` return kept the lock"
    );

    let panicking = {
        let locks = locks.clone();
        tokio::spawn(async move { boom(&locks).await })
    };
    assert!(panicking.await.is_err(), "the body panicked");
    assert!(freed(&other, "boom").await, "a panic kept the lock");

    let cancelled = timeout(Duration::from_millis(100), slow(&locks)).await;
    assert!(cancelled.is_err(), "the call was cut short");
    assert!(
        freed(&other, "slow").await,
        "a dropped future kept the lock"
    );
}

struct Order {
    id: u64,
    customer: Customer,
}

struct Customer {
    name: String,
}

struct Service {
    locks: Locks,
    calls: AtomicUsize,
}

impl Service {
    #[distributed_lock("order:{order.id}:{order.customer.name}", client = self.locks)]
    async fn settle(&self, order: &Order) -> Result<String, AppError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let guard = distlock::current_guard().unwrap();
        Ok(guard.name().to_owned())
    }

    #[distributed_lock("counter", client = self.locks, lease = "10s")]
    async fn bump(&mut self, by: impl Into<usize>) -> Result<usize, AppError> {
        Ok(self.calls.fetch_add(by.into(), Ordering::SeqCst))
    }
}

/// Generic functions keep their parameters and `where` clauses.
#[distributed_lock("generic:{key}", client = locks, kind = write)]
async fn generic<K>(locks: &Locks, key: K) -> Result<String, AppError>
where
    K: fmt::Display + Send,
{
    Ok(key.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_fields_generics_and_impl_trait() {
    let (_server, locks) = server_and_client().await;
    let mut service = Service {
        locks: locks.clone(),
        calls: AtomicUsize::new(0),
    };
    let order = Order {
        id: 42,
        customer: Customer { name: "ada".into() },
    };
    assert_eq!(service.settle(&order).await.unwrap(), "order:42:ada");
    assert_eq!(service.bump(2u8).await.unwrap(), 1);
    assert_eq!(generic(&locks, 5).await.unwrap(), "5");
}

#[distributed_lock("shared", client = locks, kind = read)]
async fn reader(locks: &Locks, inside: &Inside) -> Result<(), AppError> {
    inside.visit(Duration::from_millis(100)).await;
    Ok(())
}

#[distributed_lock("shared", client = locks, kind = fair, wait = "5s")]
async fn fair_writer(locks: &Locks) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_kind_shares_and_other_kinds_work() {
    let (_server, locks) = server_and_client().await;
    let inside = Arc::new(Inside::default());
    let (a, b) = tokio::join!(reader(&locks, &inside), reader(&locks, &inside));
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(
        inside.most.load(Ordering::SeqCst),
        2,
        "readers share the lock"
    );
    assert!(fair_writer(&locks).await.is_ok());
}

#[distributed_lock("pool:{pool}", client = locks, kind = semaphore(permits = 2))]
async fn pooled(
    locks: &Locks,
    pool: &str,
    inside: &Inside,
    gate: &tokio::sync::Semaphore,
) -> Result<(), AppError> {
    let permit = distlock::current_permits().expect("the body sees its permit");
    assert!(permit.is_held());
    inside.visit_until(gate).await;
    Ok(())
}

#[distributed_lock("pool:{pool}", client = locks, kind = semaphore(permits = 2), wait = "0s")]
async fn pooled_or_not(locks: &Locks, pool: &str) -> Result<(), AppError> {
    Ok(())
}

/// `kind = semaphore(permits = 2)`: six concurrent calls, two at a time; a call that may
/// not wait fails with the timeout while both permits are taken; every permit comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_kind_runs_at_most_n_at_once() {
    let (_server, locks) = server_and_client().await;
    let inside = Arc::new(Inside::default());
    // Closed until the refusal below was checked: the two calls that hold the permits
    // stay inside until then.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let (locks, inside, gate) = (locks.clone(), Arc::clone(&inside), Arc::clone(&gate));
            tokio::spawn(async move { pooled(&locks, "p", &inside, &gate).await })
        })
        .collect();
    // Until two calls are inside, holding the permits (a fixed pause is too short on a
    // loaded machine; "no permit available" is also what the store says before the
    // first call made the semaphore, which let the refused call in once under load).
    timeout(Duration::from_secs(10), async {
        while inside.now.load(Ordering::SeqCst) < 2 {
            sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("two calls take the permits");
    let semaphore = locks.expirable_semaphore("pool:p");
    assert_eq!(semaphore.available().await.unwrap(), 0);
    let refused = pooled_or_not(&locks, "p").await;
    assert!(
        matches!(&refused, Err(AppError::Lock(err)) if err.is_timeout()),
        "{refused:?}"
    );
    gate.add_permits(6);
    for call in calls {
        timeout(Duration::from_secs(10), call)
            .await
            .expect("every call runs")
            .unwrap()
            .unwrap();
    }
    assert_eq!(inside.most.load(Ordering::SeqCst), 2, "two at a time");
    assert_eq!(semaphore.available().await.unwrap(), 2);
    assert_eq!(semaphore.issued().await.unwrap(), 0);
    assert!(pooled_or_not(&locks, "p").await.is_ok());
}

/// A trait whose implementation goes through `#[async_trait]`: the attribute sees the
/// method after `#[async_trait]` rewrote it into a boxed future, and locks it all the
/// same.
#[async_trait::async_trait]
trait Jobs {
    async fn run_job(&self, id: u32, inside: &Inside) -> Result<u32, AppError>;
}

struct TraitService {
    locks: Locks,
}

#[async_trait::async_trait]
impl Jobs for TraitService {
    #[distributed_lock("trait-job:{id}", client = self.locks, wait = "5s")]
    async fn run_job(&self, id: u32, inside: &Inside) -> Result<u32, AppError> {
        inside.visit(Duration::from_millis(50)).await;
        let guard = distlock::current_guard().unwrap();
        assert_eq!(guard.name(), format!("trait-job:{id}"));
        Ok(id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_trait_methods_run_under_the_lock() {
    let (_server, locks) = server_and_client().await;
    let service = Arc::new(TraitService { locks });
    let inside = Arc::new(Inside::default());
    let calls = (0..4).map(|_| {
        let (service, inside) = (Arc::clone(&service), Arc::clone(&inside));
        tokio::spawn(async move { service.run_job(7, &inside).await })
    });
    for call in calls.collect::<Vec<_>>() {
        assert_eq!(call.await.unwrap().unwrap(), 7);
    }
    assert_eq!(
        inside.most.load(Ordering::SeqCst),
        1,
        "two calls of one name ran at once"
    );
}

/// Runs past three of its 600 ms leases while the lock stays held with at most one lease
/// left in Redis; returns the longest remaining lease it saw.
#[distributed_lock("short-watchdog", client = locks, watchdog_lease = "600ms")]
async fn on_a_short_watchdog(locks: &Locks) -> Result<Duration, AppError> {
    let guard = distlock::current_guard().expect("runs under its guard");
    let mut longest = Duration::ZERO;
    for _ in 0..10 {
        sleep(Duration::from_millis(200)).await;
        assert!(guard.is_held(), "the watchdog let the lock go");
        let ttl = locks
            .mutex("short-watchdog")
            .remaining_lease()
            .await?
            .expect("a lease");
        longest = longest.max(ttl);
    }
    Ok(longest)
}

/// `watchdog_lease` renews for its own lease, not the client's 30 s: fails if the
/// option is dropped on the way to the acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_lease_renews_the_body_for_that_lease() {
    let (_server, locks) = server_and_client().await;
    let longest = on_a_short_watchdog(&locks).await.unwrap();
    assert!(
        longest <= Duration::from_millis(600),
        "a remaining lease of {longest:?}"
    );
    assert!(!locks.mutex("short-watchdog").is_locked().await.unwrap());
}
