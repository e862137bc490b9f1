#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job", kind = exclusive)]
async fn unknown_kind() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = unknown_kind();
}
