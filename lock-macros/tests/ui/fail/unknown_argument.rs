#[derive(Debug)]
pub struct AppError;
impl From<distlock::Error> for AppError {
    fn from(_: distlock::Error) -> Self {
        AppError
    }
}

#[distlock::distributed_lock("order:{order_id}")]
async fn unknown_argument(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = unknown_argument(1);
}
