#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job", lease = "1s", watchdog_lease = "2s")]
async fn two_leases() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = two_leases();
}
