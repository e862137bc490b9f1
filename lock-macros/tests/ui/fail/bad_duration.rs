#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("job", lease = "ten seconds")]
async fn bad_duration() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = bad_duration();
}
