#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("job")]
fn not_async() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    let _ = not_async();
}
