//! The library's metrics (README, Telemetry), served for Prometheus while a few tasks
//! contend for a lock and a semaphore and wait for a latch.
//!
//! ```text
//! cargo run -p lock-examples --bin metrics -- [REDIS_URL] [--seconds S] [--port P]
//! curl http://127.0.0.1:9898/metrics
//! ```
//! Without a URL it uses the in-memory backend.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut url = None;
    let mut seconds = 10u64;
    let mut port = 9898u16;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().ok_or("--seconds needs a value")?.parse()?,
            "--port" => port = args.next().ok_or("--port needs a value")?.parse()?,
            other => url = Some(other.to_owned()),
        }
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (recorder, exporter) = PrometheusBuilder::new().with_http_listener(addr).build()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    let server = tokio::spawn(exporter);
    println!("metrics on http://{addr}/metrics for {seconds} s");

    let locks = match url {
        Some(url) => distlock::redis::connect(&url).await?,
        None => distlock::memory::locks(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for worker in 0..4u64 {
        let mutex = locks.mutex("metrics-demo");
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < deadline {
                let guard = mutex.lock().await?;
                tokio::time::sleep(Duration::from_millis(5 + worker)).await;
                guard.unlock().await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok::<_, distlock::Error>(())
        }));
    }
    // Two at a time through a semaphore, and a latch the workers open together.
    let slots = locks.semaphore("metrics-demo-slots");
    slots.try_set_permits(2).await?;
    let ready = locks.count_down_latch("metrics-demo-ready");
    ready.try_set_count(4).await?;
    for _ in 0..4 {
        let (slots, ready) = (slots.clone(), ready.clone());
        tasks.push(tokio::spawn(async move {
            ready.count_down().await?;
            ready.wait().await?;
            while tokio::time::Instant::now() < deadline {
                let permit = slots.acquire(1).await?;
                tokio::time::sleep(Duration::from_millis(3)).await;
                permit.release().await?;
            }
            Ok::<_, distlock::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    locks.shutdown().await;
    println!("{}", handle.render());
    server.abort();
    Ok(())
}
