#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("job", wait = "1s", wait = "2s")]
async fn duplicate_option() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = duplicate_option();
}
