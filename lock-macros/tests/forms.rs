//! Every form the attribute accepts compiles and runs: each function below is called
//! once on the memory backend. (The forms it refuses are `ui/fail`, checked by `ui.rs`;
//! with no passing case there, trybuild only type-checks, without generating code.)

use distlock::{Locks, distributed_lock};

#[derive(Debug, PartialEq)]
pub struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[derive(Debug)]
pub struct Order {
    pub id: u64,
}

/// Docs and attributes are kept.
#[distributed_lock("order:{order_id}")]
#[must_use = "kept with the other attributes"]
pub async fn by_default_client(order_id: u64) -> Result<u64, AppError> {
    Ok(order_id)
}

#[distributed_lock("order:{order.id}", wait = "5s", lease = "10s", kind = fair)]
async fn with_options(order: &Order) -> Result<u64, AppError> {
    Ok(order.id)
}

#[distributed_lock("renewed:{id}", watchdog_lease = "5s")]
async fn with_a_watchdog_lease(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock("renewed-pool", kind = semaphore(permits = 2), watchdog_lease = "5s")]
async fn with_a_renewed_permit() -> Result<usize, AppError> {
    Ok(distlock::current_permits().map_or(0, |permits| permits.count()))
}

#[distributed_lock("fixed", client = locks, kind = read, wait = "0s")]
async fn with_client(locks: &Locks) -> Result<bool, AppError> {
    Ok(distlock::current_guard().is_some())
}

#[distributed_lock("g:{key}", crate = "::distlock", kind = write)]
#[allow(
    clippy::multiple_bound_locations,
    reason = "the macro must keep bounds from both places"
)]
async fn generic<K: std::fmt::Display + Send>(key: K) -> Result<String, AppError>
where
    K: Sync,
{
    Ok(key.to_string())
}

#[derive(Debug)]
struct Service;

impl Service {
    #[distributed_lock("svc:{id}")]
    async fn method(&self, id: u32) -> Result<u32, AppError> {
        Ok(id)
    }
}

#[distributed_lock("pool:{name}", kind = semaphore(permits = 4), wait = "1s", lease = "30s")]
async fn at_most_four(name: &str) -> Result<usize, AppError> {
    let permits = distlock::current_permits().expect("runs under its permits");
    assert!(!name.is_empty());
    Ok(permits.count())
}

#[tokio::test]
async fn every_accepted_form_compiles_and_runs_under_its_lock() {
    let locks = distlock::memory::locks();
    distlock::set_default(locks.clone()).expect("the first default client");
    assert_eq!(by_default_client(42).await, Ok(42));
    assert_eq!(with_options(&Order { id: 7 }).await, Ok(7));
    assert_eq!(with_a_watchdog_lease(9).await, Ok(9));
    assert_eq!(with_a_renewed_permit().await, Ok(1));
    assert_eq!(with_client(&locks).await, Ok(true), "runs under its guard");
    assert_eq!(generic(5u8).await, Ok("5".to_owned()));
    assert_eq!(Service.method(3).await, Ok(3));
    assert_eq!(at_most_four("db").await, Ok(1));
    for name in ["order:42", "order:7", "renewed:9", "g:5", "svc:3"] {
        assert!(
            !locks
                .mutex(name)
                .is_locked()
                .await
                .expect("the memory backend answers"),
            "{name} stayed held after its function returned"
        );
    }
}
