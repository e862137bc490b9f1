#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("pool", kind = semaphore(permits = 0))]
async fn none_at_all() -> Result<(), AppError> {
    Ok(())
}

#[distlock::distributed_lock("pool", kind = semaphore(permits = 9223372036854775808))]
async fn too_many() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = none_at_all();
    let _ = too_many();
}
