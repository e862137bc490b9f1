#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("pool", kind = semaphore)]
async fn no_size() -> Result<(), AppError> {
    Ok(())
}

#[distlock::distributed_lock("pool", kind = semaphore(size = 3))]
async fn wrong_option() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = no_size();
    let _ = wrong_option();
}
