//! `cargo xtask demo` and `cargo xtask redis`: the demo, and local Redis topologies kept up
//! until Ctrl-C.

use std::process::{Command, ExitCode, ExitStatus};
use std::time::Instant;

use lock_testkit::{RedisCluster, RedisServer, redis_server_binary};

use crate::install::NOT_FOUND;
use crate::test::workspace_command;
use crate::{Topology, exit_code, run_streaming, runtime, target_dir};

/// `cargo xtask demo`: builds the demo first, showing cargo's progress, then starts a
/// throwaway redis-server (unless `REDIS_URL` names one), then runs the demo.
pub(crate) fn demo(extra: &[String]) -> Result<ExitCode, String> {
    let runtime = runtime()?;
    let started = Instant::now();
    // Built as the tests build the workspace (dev profile, every feature), so that a
    // newcomer who runs the demo and then the tests compiles the dependencies once.
    println!(
        "xtask: building the demo (cargo's progress below; the first build takes a few \
         minutes, and the tests reuse it)"
    );
    let building = workspace_command(&["build", "--bin", "demo"], &[]);
    let status = run_streaming(building)?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    println!(
        "xtask: demo built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut server = None;
    let mut redis_url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty());
    match (&redis_url, redis_server_binary()) {
        (Some(url), _) => println!("xtask: using REDIS_URL={url}"),
        (None, Some(binary)) => {
            println!(
                "xtask: starting a throwaway redis-server ({}) on a free port",
                binary.display()
            );
            let starting = Instant::now();
            let started = runtime.block_on(RedisServer::start());
            println!(
                "xtask: redis-server is up on 127.0.0.1:{} after {} ms",
                started.port(),
                starting.elapsed().as_millis()
            );
            redis_url = Some(started.url());
            server = Some(started);
        }
        (None, None) => println!(
            "xtask: no REDIS_URL and no redis-server found; the demo falls back to the \
             in-memory backend"
        ),
    }
    println!("xtask: running the demo");
    let mut demo = Command::new(target_dir().join("debug").join("demo"));
    demo.args(extra);
    match &redis_url {
        Some(url) => demo.env("REDIS_URL", url),
        None => demo.env_remove("REDIS_URL"),
    };
    let status = runtime.block_on(wait_through_ctrl_c(demo));
    if let Some(server) = server {
        drop(server);
        println!("xtask: stopped the throwaway redis-server");
    }
    Ok(exit_code(status?))
}

/// `cargo xtask redis standalone | cluster [--masters N]`.
pub(crate) fn redis(topology: Topology) -> Result<ExitCode, String> {
    let runtime = runtime()?;
    if redis_server_binary().is_none() {
        return Err(NOT_FOUND.to_owned());
    }
    match topology {
        Topology::Standalone => runtime.block_on(async {
            let server = RedisServer::start().await;
            println!("standalone redis-server: {}", server.url());
            hold_until_ctrl_c().await;
            drop(server);
            println!("stopped");
        }),
        Topology::Cluster { masters } => {
            let masters = usize::from(masters);
            runtime.block_on(async {
                let cluster = RedisCluster::start(masters).await;
                println!("redis cluster with {masters} masters:");
                for url in cluster.urls() {
                    println!("  {url}");
                }
                hold_until_ctrl_c().await;
                drop(cluster);
                println!("stopped");
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn hold_until_ctrl_c() {
    println!("press Ctrl-C to stop");
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("xtask: cannot wait for Ctrl-C ({e}); stopping");
    }
}

/// Runs `command` with inherited stdio; a Ctrl-C reaches the child (same process group)
/// while xtask keeps waiting for it, so cleanup after it still happens.
pub(crate) async fn wait_through_ctrl_c(command: Command) -> Result<ExitStatus, String> {
    let mut command = tokio::process::Command::from(command);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", command.as_std()))?;
    loop {
        tokio::select! {
            status = child.wait() => {
                return status.map_err(|e| format!("waiting for {:?}: {e}", command.as_std()));
            }
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}
