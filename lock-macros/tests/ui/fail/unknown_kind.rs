#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("job", kind = exclusive)]
async fn unknown_kind() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = unknown_kind();
}
