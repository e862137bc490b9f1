// Every accepted form compiles; main only checks the generated signatures.
use distlock::{Locks, distributed_lock};

#[derive(Debug)]
pub struct AppError;

impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

pub struct Order {
    pub id: u64,
}

/// Docs and attributes are kept.
#[distributed_lock("order:{order_id}")]
#[allow(dead_code)]
pub async fn by_default_client(order_id: u64) -> Result<u64, AppError> {
    Ok(order_id)
}

#[distributed_lock("order:{order.id}", wait = "5s", lease = "10s", kind = fair)]
async fn with_options(order: &Order) -> Result<(), AppError> {
    let _ = order.id;
    Ok(())
}

#[distributed_lock("fixed", client = locks, kind = read, wait = "0s")]
async fn with_client(locks: &Locks) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock("g:{key}", crate = "::distlock", kind = write)]
async fn generic<K: std::fmt::Display + Send>(key: K) -> Result<(), AppError>
where
    K: Sync,
{
    Ok(())
}

struct Service;

impl Service {
    #[distributed_lock("svc:{id}")]
    async fn method(&self, id: u32) -> Result<u32, AppError> {
        Ok(id)
    }
}

#[distributed_lock("pool:{name}", kind = semaphore(permits = 4), wait = "1s", lease = "30s")]
async fn at_most_four(name: &str) -> Result<(), AppError> {
    let _ = distlock::current_permits();
    let _ = name;
    Ok(())
}

fn main() {
    let _ = at_most_four;
    let _ = by_default_client;
    let _ = with_options;
    let _ = with_client;
    let _ = generic::<u8>;
    let _ = Service::method;
}
