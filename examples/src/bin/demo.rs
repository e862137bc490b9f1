//! The guided tour behind `cargo xtask demo`: contention, watchdog renewals, and a holder
//! that crashes while holding a lock. Reads `REDIS_URL`; without it, runs on the
//! in-memory backend and says so.

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{Locks, memory::MemoryBackend};
use tokio::time::Instant;

/// Short enough that the crash-and-expire step takes seconds, long enough to renew.
const DEMO_LEASE: Duration = Duration::from_secs(3);

#[derive(Clone)]
enum Target {
    Redis(String),
    Postgres(String),
    Memory(MemoryBackend),
}

impl Target {
    /// The server `url` names: PostgreSQL for `postgres://` and `postgresql://`, else
    /// Redis.
    fn server(url: String) -> Self {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Target::Postgres(url)
        } else {
            Target::Redis(url)
        }
    }

    async fn client(&self) -> Result<Locks, distlock::Error> {
        let backend: Arc<dyn distlock::Backend> = match self {
            Target::Redis(url) => distlock::redis::connect_backend(url).await?,
            Target::Postgres(url) => distlock::postgres::connect_backend(url).await?,
            Target::Memory(store) => Arc::new(store.clone()),
        };
        Locks::builder(backend).watchdog_lease(DEMO_LEASE).build()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--hold-until-killed") {
        // The child of the crash step: take the lock, say so, and wait to be killed.
        let url = args.next().ok_or("missing URL")?;
        let name = args.next().ok_or("missing name")?;
        let locks = Target::server(url).client().await?;
        let _guard = locks.mutex(&name).lock().await?;
        println!("holding");
        std::future::pending::<()>().await;
    }
    let target = if let Ok(url) = std::env::var("REDIS_URL") {
        println!("Using Redis at {url}.");
        Target::server(url)
    } else {
        println!(
            "No REDIS_URL: using the in-memory backend (locks shared within this process only)."
        );
        Target::Memory(MemoryBackend::new())
    };
    println!();
    contention(&target).await?;
    watchdog(&target).await?;
    crash(&target).await?;
    println!("\nThat was the tour. `cargo xtask test` runs the full suite.");
    Ok(())
}

async fn contention(target: &Target) -> Result<(), Box<dyn std::error::Error>> {
    println!("1. Contention: 6 clients take turns on one lock for 3 s (hold 2 ms, pause 1 ms).");
    let inside = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let ops = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut workers = Vec::new();
    for _ in 0..6 {
        let locks = target.client().await?;
        let (inside, violations, ops) = (inside.clone(), violations.clone(), ops.clone());
        workers.push(tokio::spawn(async move {
            let mutex = locks.mutex("demo:contention");
            while Instant::now() < deadline {
                let guard = mutex.lock().await?;
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    violations.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
                ops.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<_, distlock::Error>(())
        }));
    }
    while Instant::now() < deadline {
        print!(
            "\r   {:>6} critical sections so far",
            ops.load(Ordering::Relaxed)
        );
        std::io::stdout().flush()?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for worker in workers {
        worker.await??;
    }
    println!(
        "\r   {} critical sections in 3 s, {} overlaps (mutual exclusion held).",
        ops.load(Ordering::Relaxed),
        violations.load(Ordering::SeqCst)
    );
    Ok(())
}

async fn watchdog(target: &Target) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n2. Watchdog: hold a lock for 7 s with a {DEMO_LEASE:?} lease; the watchdog renews it every {:?}.",
        DEMO_LEASE / 3
    );
    let locks = target.client().await?;
    let mutex = locks.mutex("demo:watchdog");
    let guard = mutex.lock().await?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(7) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ttl = mutex.remaining_lease().await?.unwrap_or_default();
        println!(
            "   t={:>2.0}s  server lease left {:>5.2}s  guard valid for {:>5.2}s  held: {}",
            start.elapsed().as_secs_f64(),
            ttl.as_secs_f64(),
            guard.valid_for().unwrap_or_default().as_secs_f64(),
            guard.is_held()
        );
    }
    guard.unlock().await?;
    println!("   released after 7 s: more than twice the lease, thanks to renewals.");
    Ok(())
}

async fn crash(target: &Target) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n3. Crash: a holder dies without releasing; the lock frees itself when its lease runs out."
    );
    let name = "demo:crash";
    match target {
        Target::Redis(url) | Target::Postgres(url) => {
            let mut child = tokio::process::Command::new(std::env::current_exe()?)
                .args(["--hold-until-killed", url, name])
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let mut out = child.stdout.take().ok_or("no child stdout")?;
            let mut buf = [0u8; 16];
            let n = tokio::io::AsyncReadExt::read(&mut out, &mut buf).await?;
            if !buf[..n].starts_with(b"holding") {
                return Err("the holder process did not take the lock".into());
            }
            println!(
                "   holder process {} took the lock; killing it with SIGKILL.",
                child.id().unwrap_or(0)
            );
            child.kill().await?;
        }
        Target::Memory(_) => {
            // In one process, a "crash" is a client whose runtime stops (taking its
            // watchdog with it) and whose guard is never released.
            let target = target.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
                rt.block_on(async {
                    let locks = target.client().await.map_err(|e| e.to_string())?;
                    let guard = locks.mutex(name).lock().await.map_err(|e| e.to_string())?;
                    std::mem::forget(guard);
                    Ok::<_, String>(())
                })
            })
            .join()
            .map_err(|_| "the holder thread panicked")??;
            println!("   a client took the lock and its runtime stopped without releasing it.");
        }
    }
    let locks = target.client().await?;
    let mutex = locks.mutex(name);
    let start = Instant::now();
    let waiting = mutex.lock();
    tokio::pin!(waiting);
    let guard = loop {
        tokio::select! {
            guard = &mut waiting => break guard?,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                print!("\r   waiting {:.1}s ...", start.elapsed().as_secs_f64());
                std::io::stdout().flush()?;
            }
        }
    };
    println!(
        "\r   acquired after {:.1}s: the dead holder's lease ({DEMO_LEASE:?}) ran out, nobody renewed it.",
        start.elapsed().as_secs_f64()
    );
    guard.unlock().await?;
    Ok(())
}
