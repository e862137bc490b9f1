//! Releasing a lock: one script per kind family, each ending exactly the grant it names
//! (and handing a mutex, a fair lock or a write lock over when it frees it).

use lock_core::Error;
use lock_core::backend::{LockRef, Release, ReleaseRequest};

use super::{Family, RedisBackend, count, millis, unexpected};
use crate::calls;
use crate::decimals::Decimals;
use crate::layout;
use crate::transport::Reply;

/// A mutex release's rendered numbers and grant id.
struct MutexRelease<'a> {
    lease_ms: &'a str,
    offer_ms: &'a str,
    latch_ms: &'a str,
    grant: &'a str,
}

impl RedisBackend {
    /// Ends the grant `request` names (see `Backend::release`).
    pub(super) async fn release_grant(
        &self,
        lock: &LockRef,
        request: ReleaseRequest,
    ) -> Result<Release, Error> {
        let family = Family::of(lock.kind)?;
        let name = &lock.name;
        let owner = lock.owner.as_str();
        let key = layout::lock_key(name);
        let publish = self.options.publish.command();
        // Every release script ends its keys with the owner's grants hash and the
        // grant's latch, and its arguments with the grant's id and the latch lifetime.
        let mut built = layout::Keys::new(name);
        let grants_at = built.grants(owner, family == Family::Write);
        let latch_at = built.grant_latch(request.grant);
        let mut grant = String::with_capacity(32);
        request.grant.push_hex(&mut grant);
        // Kept twice the window: a copy of the grant's acquire request that comes later
        // than its own retries could must still find the grant ended.
        let numbers = Decimals::new([
            millis(request.lease),
            millis(request.retry_window.saturating_mul(2)),
            millis(self.options.reservation),
        ]);
        let [lease_ms, latch_ms, offer_ms] = numbers.get();
        let reply = match family {
            Family::Fair => {
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let prefix = layout::mutex_channel(name);
                let (token, epoch) = (layout::token_key(name), self.epoch_key(name));
                let quarantine = self.quarantine_ms().to_string();
                let call = calls::FairRelease {
                    lock: key,
                    queue: &queue,
                    deadlines: &deadlines,
                    alive: &alive,
                    token: &token,
                    epoch: &epoch,
                    grants: built.get(grants_at),
                    latch: built.get(latch_at),
                    lease_ms,
                    owner,
                    channel_prefix: &prefix,
                    publish,
                    quarantine_ms: &quarantine,
                    slot_ms: layout::REDISSON_WAIT_SLOT_TEXT,
                    grant: &grant,
                    latch_ms,
                };
                self.run("releasing", &call).await?
            }
            Family::Read | Family::Write => {
                let numbers = ReadWriteRelease {
                    lease_ms,
                    latch_ms,
                    grant: &grant,
                };
                self.release_read_write(lock, family, &mut built, (grants_at, latch_at), numbers)
                    .await?
            }
            Family::Mutex => {
                let mutex = MutexRelease {
                    lease_ms,
                    offer_ms,
                    latch_ms,
                    grant: &grant,
                };
                self.release_mutex(lock, &mut built, grants_at, latch_at, mutex)
                    .await?
            }
        };
        match reply {
            Reply::Int(-1) => Ok(Release::NotHeld),
            Reply::Int(0) => Ok(Release::Released),
            Reply::Int(n) if n > 0 => Ok(Release::StillHeld {
                holds: count(n, &reply)?,
            }),
            other => Err(unexpected("release", &other)),
        }
    }

    /// Runs a mutex's release script, which hands the lock over when it frees it.
    async fn release_mutex(
        &self,
        lock: &LockRef,
        built: &mut layout::Keys<'_>,
        grants_at: layout::KeyAt,
        latch_at: layout::KeyAt,
        numbers: MutexRelease<'_>,
    ) -> Result<Reply, Error> {
        let MutexRelease {
            lease_ms,
            offer_ms,
            latch_ms,
            grant,
        } = numbers;
        let channel_at = built.mutex_channel();
        let (waiting_at, reservation_at) = (built.waiting_clients(), built.reservation());
        let (requests_at, token_at) = (built.waiting_requests(), built.token());
        let count = self.listener_count_command();
        let channel = built.get(channel_at);
        let epoch = self.epoch_key(&lock.name);
        let quarantine = self.quarantine_ms().to_string();
        let call = calls::MutexRelease {
            lock: layout::lock_key(&lock.name),
            waiting: built.get(waiting_at),
            reservation: built.get(reservation_at),
            requests: built.get(requests_at),
            token: built.get(token_at),
            epoch: &epoch,
            grants: built.get(grants_at),
            latch: built.get(latch_at),
            lease_ms,
            owner: lock.owner.as_str(),
            channel,
            publish: self.options.publish.command(),
            numsub: count,
            offer_ms,
            quarantine_ms: &quarantine,
            grant,
            latch_ms,
        };
        self.run("releasing", &call).await
    }
}

/// A read or write release's rendered numbers and grant id.
struct ReadWriteRelease<'a> {
    lease_ms: &'a str,
    latch_ms: &'a str,
    grant: &'a str,
}

impl RedisBackend {
    /// Runs a read or write release's script; the one that frees the lock hands it to the
    /// waiting writer registered first (see the prelude's `wake_mutex_waiters`).
    async fn release_read_write(
        &self,
        lock: &LockRef,
        family: Family,
        built: &mut layout::Keys<'_>,
        (grants_at, latch_at): (layout::KeyAt, layout::KeyAt),
        numbers: ReadWriteRelease<'_>,
    ) -> Result<Reply, Error> {
        let ReadWriteRelease {
            lease_ms,
            latch_ms,
            grant,
        } = numbers;
        let name = &lock.name;
        let (waiting_at, requests_at) = (built.waiting_clients(), built.waiting_requests());
        let token_at = built.token();
        let (channel, epoch) = (layout::rw_channel(name), self.epoch_key(name));
        let quarantine = self.quarantine_ms().to_string();
        let (publish, count) = (
            self.options.publish.command(),
            self.listener_count_command(),
        );
        let (lock_key, waiting, requests, token, grants, latch) = (
            layout::lock_key(name),
            built.get(waiting_at),
            built.get(requests_at),
            built.get(token_at),
            built.get(grants_at),
            built.get(latch_at),
        );
        let owner = lock.owner.as_str();
        if family == Family::Read {
            let tagged = layout::tagged(name);
            let call = calls::RwReadRelease {
                lock: lock_key,
                waiting,
                requests,
                token,
                epoch: &epoch,
                grants,
                latch,
                owner,
                channel: &channel,
                publish,
                tagged_name: &tagged,
                numsub: count,
                quarantine_ms: &quarantine,
                grant,
                latch_ms,
            };
            return self.run("releasing", &call).await;
        }
        let call = calls::RwWriteRelease {
            lock: lock_key,
            waiting,
            requests,
            token,
            epoch: &epoch,
            grants,
            latch,
            lease_ms,
            owner,
            channel: &channel,
            publish,
            numsub: count,
            quarantine_ms: &quarantine,
            grant,
            latch_ms,
        };
        self.run("releasing", &call).await
    }
}
