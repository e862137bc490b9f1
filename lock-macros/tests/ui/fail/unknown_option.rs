#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job", timeout = "5s")]
async fn unknown_option() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = unknown_option();
}
