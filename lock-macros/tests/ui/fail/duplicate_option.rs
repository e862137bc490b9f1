#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job", wait = "1s", wait = "2s")]
async fn duplicate_option() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = duplicate_option();
}
