#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job", lease = "ten seconds")]
async fn bad_duration() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = bad_duration();
}
