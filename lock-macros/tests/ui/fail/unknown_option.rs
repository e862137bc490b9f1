#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("job", timeout = "5s")]
async fn unknown_option() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = unknown_option();
}
