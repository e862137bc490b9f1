#[distlock::distributed_lock("job")]
async fn not_result() -> u32 {
    1
}

fn main() {
    let _ = not_result();
}
