#[derive(Debug)]
pub struct AppError;
impl From<lock::Error> for AppError {
    fn from(_: lock::Error) -> Self {
        AppError
    }
}

#[lock::distributed_lock("order:{order_id}")]
async fn unknown_argument(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {
    let _ = unknown_argument(1);
}
