//! Which scenarios a fixture runs. Each scenario names what it needs beyond the reentrant
//! mutex; a fixture runs it when its backend's declared capabilities (and, for faults of
//! a deployment, the fixture itself) provide all of it, and says why when it does not.

use std::fmt;

use lock_core::{Capabilities, ErrorKind, LockKind, LockName, Locks};

use crate::Fixture;

/// Something a scenario needs beyond the reentrant mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Need {
    /// Fair locks ([`Capabilities::fair`]).
    Fair,
    /// Read-write locks ([`Capabilities::read_write`]).
    ReadWrite,
    /// Fencing tokens ([`Capabilities::fencing`]).
    Fencing,
    /// Answers remembered for retries ([`Capabilities::retry_safe`]).
    RetrySafe,
    /// Reservations for starving waiters ([`Capabilities::reservation`]).
    Reservation,
    /// Count-down latches ([`Capabilities::count_down_latch`]).
    CountDownLatch,
    /// Semaphores ([`Capabilities::semaphore`]).
    Semaphore,
    /// Expirable semaphores ([`Capabilities::expirable_semaphore`]).
    ExpirableSemaphore,
    /// Releases that wake one waiting client ([`Capabilities::wakes_one_client`]).
    WakesOneClient,
    /// Requests served in the order sent ([`Capabilities::ordered_requests`]).
    OrderedRequests,
    /// Server-side access to a Redis deployment ([`Fixture::redis`]).
    RedisControl,
    /// A deployment that can fail over to a replica (Sentinel).
    Failover,
    /// Who holds a lock ([`Capabilities::introspection`]).
    Introspection,
    /// Hand-over of a released lock to a waiting acquisition ([`Capabilities::hands_over`]).
    HandsOver,
    /// Hand-over of a read-write lock's write side to its next writer, as the protocol's
    /// rules make it: a store that hands over ([`Capabilities::hands_over`]) whose
    /// deployment does not say its writers are only woken
    /// ([`Deployment::writers_only_woken`]).
    WriterHandOver,
}

impl Need {
    /// Why `capabilities` and `deployment` do not provide this need, if they do not.
    fn lacking(self, deployment: Deployment, capabilities: Option<Capabilities>) -> Option<String> {
        let declared = |has: fn(Capabilities) -> bool, what: &str| {
            let caps = capabilities?;
            (!has(caps)).then(|| format!("the backend does not declare {what}"))
        };
        match self {
            Self::Fair => declared(|caps| caps.fair, "fair locks"),
            Self::ReadWrite => declared(|caps| caps.read_write, "read-write locks"),
            Self::Fencing => declared(|caps| caps.fencing, "fencing tokens"),
            Self::RetrySafe => declared(|caps| caps.retry_safe, "retry-safe requests"),
            Self::Reservation => declared(|caps| caps.reservation, "reservations"),
            Self::CountDownLatch => declared(|caps| caps.count_down_latch, "count-down latches"),
            Self::Semaphore => declared(|caps| caps.semaphore, "semaphores"),
            Self::ExpirableSemaphore => {
                declared(|caps| caps.expirable_semaphore, "expirable semaphores")
            }
            Self::WakesOneClient => declared(
                |caps| caps.wakes_one_client,
                "releases that wake one client",
            ),
            Self::OrderedRequests => {
                declared(|caps| caps.ordered_requests, "requests served in order")
            }
            Self::Introspection => declared(|caps| caps.introspection, "introspection"),
            Self::HandsOver => declared(|caps| caps.hands_over, "hand-over on release"),
            Self::WriterHandOver if deployment.writers_only_woken => Some(
                "the store wakes a read-write lock's writers on release instead of handing \
                 the lock to the next one"
                    .to_owned(),
            ),
            Self::WriterHandOver => declared(|caps| caps.hands_over, "hand-over on release"),
            Self::RedisControl => (!deployment.redis_control)
                .then(|| "the fixture has no Redis deployment to inject faults into".to_owned()),
            Self::Failover => (!deployment.failover)
                .then(|| "the fixture's deployment cannot fail over".to_owned()),
        }
    }

    /// Whether only the fixture (not its backend) answers this need.
    fn is_deployment(self) -> bool {
        matches!(self, Self::RedisControl | Self::Failover)
    }
}

/// What a fixture offers beyond its backend's capabilities, known without starting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deployment {
    /// Server-side access to a Redis deployment ([`Fixture::redis`]).
    pub redis_control: bool,
    /// The deployment can fail over to a replica.
    pub failover: bool,
    /// The store wakes a read-write lock's waiting writers when it is released, where
    /// the protocol's rules hand it to the first of them (PostgreSQL's table mode, for
    /// now): a difference of liveness the differential test of the read-write lock
    /// would report.
    pub writers_only_woken: bool,
}

impl Deployment {
    /// A Redis deployment, with failover when `failover`.
    #[must_use]
    pub fn redis(failover: bool) -> Self {
        Self {
            redis_control: true,
            failover,
            writers_only_woken: false,
        }
    }

    /// A deployment whose store wakes a read-write lock's writers on release instead of
    /// handing the lock to the next one (see [`Deployment::writers_only_woken`]).
    #[must_use]
    pub fn writers_only_woken() -> Self {
        Self {
            writers_only_woken: true,
            ..Self::default()
        }
    }
}

/// Why `fixture` skips a scenario that needs `needs`, or `None` when it runs it. The
/// fixture's deployment is asked first; its backend is started only when the deployment
/// offers everything.
pub async fn skip_reason(fixture: &dyn Fixture, needs: &[Need]) -> Option<String> {
    let deployment = fixture.deployment();
    let lacking_deployment = needs
        .iter()
        .filter(|need| need.is_deployment())
        .find_map(|need| need.lacking(deployment, None));
    if lacking_deployment.is_some() {
        return lacking_deployment;
    }
    if needs.iter().all(|need| need.is_deployment()) {
        return None;
    }
    let capabilities = fixture.backend().await.capabilities();
    needs
        .iter()
        .find_map(|need| need.lacking(deployment, Some(capabilities)))
}

/// One line of a fixture's selection: a scenario and why it was skipped, if it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// The scenario.
    pub scenario: &'static str,
    /// Why it is skipped; `None` when it runs.
    pub skipped: Option<String>,
}

impl fmt::Display for Selected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.skipped {
            None => write!(f, "runs     {}", self.scenario),
            Some(reason) => write!(f, "skipped  {}: {reason}", self.scenario),
        }
    }
}

/// The whole selection of `fixture` over `scenarios` (name and needs), in order.
pub async fn select(fixture: &dyn Fixture, scenarios: &[(&'static str, &[Need])]) -> Vec<Selected> {
    let mut selection = Vec::with_capacity(scenarios.len());
    for &(scenario, needs) in scenarios {
        selection.push(Selected {
            scenario,
            skipped: skip_reason(fixture, needs).await,
        });
    }
    selection
}

/// Panics unless `fixture` lacks exactly the needs in `expected` among those of
/// `scenarios`.
pub async fn assert_lacking(
    fixture: &dyn Fixture,
    scenarios: &[(&'static str, &[Need])],
    expected: &[Need],
) {
    let mut lacking = Vec::new();
    for need in scenarios
        .iter()
        .flat_map(|(_, needs)| needs.iter().copied())
    {
        if !lacking.contains(&need) && skip_reason(fixture, &[need]).await.is_some() {
            lacking.push(need);
        }
    }
    let unexpected: Vec<Need> = lacking
        .iter()
        .copied()
        .filter(|need| !expected.contains(need))
        .collect();
    let provided: Vec<Need> = expected
        .iter()
        .copied()
        .filter(|need| !lacking.contains(need))
        .collect();
    assert!(
        unexpected.is_empty() && provided.is_empty(),
        "the fixture lacks {unexpected:?} unexpectedly and provides {provided:?} though listed as lacking"
    );
}

/// A family of operations (latches, introspection, semaphores) answers through the
/// client and through the backend alike when it is declared, and is refused with
/// [`ErrorKind::Unsupported`] when it is not: the capabilities are the only word on it.
async fn families_answer_as_declared(fx: &dyn Fixture, locks: &Locks, name: &str) {
    let backend = fx.backend().await;
    let capabilities = backend.capabilities();
    let lock_name = LockName::new(name).expect("a valid name");
    let latches = [
        locks.count_down_latch(name).count().await.map(drop),
        backend.latches().count(&lock_name).await.map(drop),
    ];
    let introspection = [
        locks.describe(name).await.map(drop),
        backend.introspection().describe(&lock_name).await.map(drop),
    ];
    let semaphores = [
        locks.semaphore(name).available().await.map(drop),
        backend.semaphores().available(&lock_name).await.map(drop),
    ];
    for (family, declared, answers) in [
        ("count-down latches", capabilities.count_down_latch, latches),
        ("introspection", capabilities.introspection, introspection),
        ("semaphores", capabilities.semaphore, semaphores),
    ] {
        for (through, answer) in ["the client", "the backend"].into_iter().zip(answers) {
            match answer {
                Ok(()) => assert!(declared, "{family}: undeclared, but {through} answered"),
                Err(err) => {
                    assert!(!declared, "{family}: declared, but {through} failed: {err}");
                    assert_eq!(err.kind(), ErrorKind::Unsupported, "{family}: {err}");
                }
            }
        }
    }
}

/// What a backend does not declare is refused with [`ErrorKind::Unsupported`], and what
/// it declares works: every lock kind is tried through a client of the fixture.
pub async fn declared_capabilities_hold(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let capabilities = backend.capabilities();
    let locks = Locks::new(backend);
    let name = crate::scenarios::unique("capabilities");
    for kind in [
        LockKind::Mutex,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ] {
        let handle = match kind {
            LockKind::Fair => locks.fair_mutex(&name),
            LockKind::Read => locks.rw_lock(&name).reader(),
            LockKind::Write => locks.rw_lock(&name).writer(),
            _ => locks.mutex(&name),
        };
        let tried = handle.try_lock().await;
        if capabilities.supports(kind) {
            let guard = tried
                .unwrap_or_else(|err| panic!("{kind}: declared, but {err}"))
                .unwrap_or_else(|| panic!("{kind}: declared, but a free lock was busy"));
            guard.unlock().await.expect("released");
        } else {
            let err = tried.expect_err("an undeclared kind must be refused");
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{kind}: {err}");
        }
    }
    families_answer_as_declared(fx, &locks, &name).await;
    let fenced = Locks::builder(fx.backend().await).fencing(true).build();
    match fenced {
        Ok(fenced) => {
            assert!(capabilities.fencing, "fencing accepted but not declared");
            let guard = fenced.mutex(&name).lock().await.expect("a fenced lock");
            assert!(
                guard.fencing_token().is_some(),
                "no token from a fencing backend"
            );
            guard.unlock().await.expect("released");
        }
        Err(err) => {
            assert!(!capabilities.fencing, "declared fencing refused: {err}");
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        }
    }
}
