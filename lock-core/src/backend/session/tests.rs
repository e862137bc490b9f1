//! [`SessionLocks`] on a server of this process: session locks in a map, each session
//! an id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{LockSession, SessionLocks, SessionServer, Taken};
use crate::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, Owner,
};
use crate::{Error, LockName};

/// Which session holds each key.
type Held = Arc<Mutex<HashMap<String, u64>>>;

#[derive(Debug, Default)]
struct Server {
    held: Held,
    sessions: AtomicU64,
}

#[derive(Debug)]
struct Session {
    id: u64,
    held: Held,
}

impl Session {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.held.lock().expect("the server's locks")
    }
}

#[async_trait]
impl LockSession for Session {
    type Key = String;

    fn is_broken(&self) -> bool {
        false
    }

    async fn try_lock(&self, key: &String, _: bool, _: Option<&str>) -> Result<Taken, Error> {
        let mut held = self.held();
        if held.get(key).is_some_and(|id| *id != self.id) {
            return Ok(Taken::Busy);
        }
        held.insert(key.clone(), self.id);
        Ok(Taken::Granted(None))
    }

    async fn lock(
        &self,
        key: &String,
        shared: bool,
        fencing: Option<&str>,
        _: Duration,
    ) -> Result<Taken, Error> {
        self.try_lock(key, shared, fencing).await
    }

    async fn token(&self, _: &str) -> Result<u64, Error> {
        Ok(1)
    }

    async fn unlock(&self, key: &String, _: bool) -> Result<(), Error> {
        self.held().remove(key);
        Ok(())
    }

    async fn held_elsewhere(&self, key: &String, _: bool) -> Result<bool, Error> {
        Ok(self.held().get(key).is_some_and(|id| *id != self.id))
    }

    async fn end_holders(&self, _: &String, _: bool) -> Result<bool, Error> {
        Ok(false)
    }

    async fn ping(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[async_trait]
impl SessionServer for Server {
    type Session = Session;

    const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Session);

    fn key(&self, name: &LockName) -> String {
        name.as_str().to_owned()
    }

    fn slot(&self, _: &String) -> u64 {
        0
    }

    fn check(&self, _: &LockRef) -> Result<(), Error> {
        Ok(())
    }

    async fn open(&self) -> Result<Arc<Session>, Error> {
        Ok(Arc::new(Session {
            id: self.sessions.fetch_add(1, Ordering::Relaxed),
            held: Arc::clone(&self.held),
        }))
    }
}

fn mutex(name: &str) -> LockRef {
    LockRef::new(
        LockKind::Mutex,
        LockName::new(name).expect("a name"),
        Owner::new("client", name),
    )
}

async fn acquire(backend: &SessionLocks<Server>, lock: &LockRef, lease: Duration) {
    let request = AcquireRequest::new(lease).fresh_id();
    let answer = backend.acquire(lock, request).await.expect("an answer");
    assert!(matches!(answer, Acquire::Acquired { .. }), "{answer:?}");
}

/// A lease set while the task that ends leases is looking through the names ends on
/// time. The task looks at 200 ms, when the first lease ends, and waits on that name's
/// record; the second lease (300 ms) is set meanwhile, on a name the look does not
/// see. Judged against that look's time, it would end only at the next look (1 s
/// later) and its server lock would be held at 605 ms.
#[tokio::test(start_paused = true)]
async fn a_lease_set_while_the_task_looks_ends_on_time() {
    let server = Server::default();
    let held = Arc::clone(&server.held);
    let backend = SessionLocks::new(server, 1);
    let (first, second) = (mutex("first"), mutex("second"));
    acquire(&backend, &first, Duration::from_millis(200)).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let first_record = backend.state.slot(&first.name);
    let record = first_record.lock().await;
    // 205 ms: the look that began at 200 ms waits on the first name's record.
    tokio::time::sleep(Duration::from_millis(195)).await;
    acquire(&backend, &second, Duration::from_millis(300)).await;
    drop(record);
    drop(first_record);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let held = held.lock().expect("the server's locks");
    assert!(!held.contains_key("first"), "the first lease did not end");
    assert!(
        !held.contains_key("second"),
        "the second lease ended at 505 ms; its lock is still held at 605 ms"
    );
}
