#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("job")]
fn not_async() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = not_async();
}
