//! One declaration per script: the keys and arguments it reads, by name, in the order it
//! reads them.
//!
//! Each script's call is a struct with one field per `KEYS[n]` and `ARGV[n]`, so a call
//! site names every input it sends and a missing one does not compile. Each script's
//! header says the same names (`KEYS[1] lock: ...`), and a test holds every declaration
//! to its script's header and body, so a swapped pair can no longer reach the server.
//! Scripts that take a batch (renewals, permit ids) declare the part that repeats per
//! item as a struct of its own.
//!
//! The structs only order already rendered text: no allocation for the fixed-size calls
//! of the hot paths.

use crate::script::{self, Script};

/// A script call with `K` keys and `A` arguments, each at the position its script reads.
pub trait FixedCall<'a, const K: usize, const A: usize> {
    /// The script it calls.
    const SCRIPT: &'static Script;
    /// Its keys (`KEYS`), in order.
    fn keys(&self) -> [&'a str; K];
    /// Its arguments (`ARGV`), in order.
    fn args(&self) -> [&'a str; A];
}

/// What a declaration says of its script, for the test against the script's header.
#[derive(Debug)]
pub struct Declared {
    /// The script.
    pub script: &'static Script,
    /// The names of its keys, in order.
    pub keys: &'static [&'static str],
    /// The names of its arguments, in order.
    pub args: &'static [&'static str],
    /// The names of the keys it takes once per item of a batch, after `keys`.
    pub each_keys: &'static [&'static str],
    /// The names of the arguments it takes once per item, after `args`.
    pub each_args: &'static [&'static str],
}

macro_rules! count {
    () => { 0usize };
    ($head:ident $($tail:ident)*) => { 1usize + count!($($tail)*) };
}

macro_rules! calls {
    ($(
        $(#[$doc:meta])*
        $call:ident = $script:ident {
            keys: [$($key:ident),* $(,)?],
            args: [$($arg:ident),* $(,)?],
            $(
                $(#[$each_doc:meta])*
                each $each:ident {
                    keys: [$($each_key:ident),* $(,)?],
                    args: [$($each_arg:ident),* $(,)?] $(,)?
                },
            )?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[doc = ""]
            #[doc = concat!("Calls `", stringify!($script), "`.")]
            #[derive(Debug, Clone, Copy)]
            #[allow(missing_docs, reason = "each field is the script's input of that name")]
            pub struct $call<'a> {
                $(pub $key: &'a str,)*
                $(pub $arg: &'a str,)*
            }

            impl $call<'_> {
                /// The script it calls.
                pub const SCRIPT: &'static Script = &script::$script;
            }

            impl<'a> FixedCall<'a, { count!($($key)*) }, { count!($($arg)*) }> for $call<'a> {
                const SCRIPT: &'static Script = &script::$script;

                fn keys(&self) -> [&'a str; count!($($key)*)] {
                    [$(self.$key),*]
                }

                fn args(&self) -> [&'a str; count!($($arg)*)] {
                    [$(self.$arg),*]
                }
            }

            $(
                $(#[$each_doc])*
                #[derive(Debug, Clone, Copy)]
                #[allow(missing_docs, reason = "each field is the script's input of that name")]
                pub struct $each<'a> {
                    $(pub $each_key: &'a str,)*
                    $(pub $each_arg: &'a str,)*
                }

                impl<'a> $call<'a> {
                    /// The keys for a batch of `items`: the call's own, then each item's.
                    #[must_use]
                    pub fn keys_with(&self, items: &[$each<'a>]) -> Vec<&'a str> {
                        let head = FixedCall::keys(self);
                        let mut keys =
                            Vec::with_capacity(head.len() + items.len() * count!($($each_key)*));
                        keys.extend(head);
                        for _item in items {
                            $(keys.push(_item.$each_key);)*
                        }
                        keys
                    }

                    /// The arguments for a batch of `items`: the call's own, then each
                    /// item's.
                    #[must_use]
                    pub fn args_with(&self, items: &[$each<'a>]) -> Vec<&'a str> {
                        let head = FixedCall::args(self);
                        let mut args =
                            Vec::with_capacity(head.len() + items.len() * count!($($each_arg)*));
                        args.extend(head);
                        for _item in items {
                            $(args.push(_item.$each_arg);)*
                        }
                        args
                    }
                }
            )?
        )*

        /// Every declaration, in the order of this module.
        pub static DECLARED: &[Declared] = &[$(
            Declared {
                script: &script::$script,
                keys: &[$(stringify!($key)),*],
                args: &[$(stringify!($arg)),*],
                each_keys: &[$($(stringify!($each_key)),*)?],
                each_args: &[$($(stringify!($each_arg)),*)?],
            },
        )*];
    };
}

calls! {
    /// Takes a mutex, or one more hold of it.
    MutexAcquire = MUTEX_ACQUIRE {
        keys: [lock, reservation, token, epoch, waiting, requests, grants, latch],
        args: [
            lease_ms, owner, starving, reservation_ms, waited_ms, fencing, quarantine_ms,
            wake_id, registered_ms, place_ms, attempt, grant, latch_ms,
        ],
    }
    /// Ends one grant of a mutex, handing the lock over when it frees it.
    MutexRelease = MUTEX_RELEASE {
        keys: [lock, waiting, reservation, requests, token, epoch, grants, latch],
        args: [
            lease_ms, owner, channel, publish, numsub, offer_ms, quarantine_ms, grant,
            latch_ms,
        ],
    }
    /// Re-arms the leases of a batch of mutex, fair and write holds.
    MutexRenew = MUTEX_RENEW {
        keys: [],
        args: [lease_ms],
        /// One hold of a [`MutexRenew`] batch.
        each MutexRenewed {
            keys: [lock, grants],
            args: [owner],
        },
    }
    /// Reads a lock as one owner sees it.
    MutexInspect = MUTEX_INSPECT {
        keys: [lock],
        args: [field, mode],
    }
    /// Deletes a mutex whoever holds it.
    MutexForceRelease = MUTEX_FORCE_RELEASE {
        keys: [lock],
        args: [channel, publish],
    }
    /// A mutex's or a writer's waiter gives up.
    MutexCancel = MUTEX_CANCEL {
        keys: [lock, waiting, reservation, requests, token, epoch],
        args: [
            wake_id, channel, publish, numsub, offer_ms, quarantine_ms, acquisition, field,
            latch_ms, mode,
        ],
    }
    /// Takes a fair lock, or joins its queue.
    FairAcquire = FAIR_ACQUIRE {
        keys: [lock, queue, deadlines, alive, token, epoch, grants, latch],
        args: [
            lease_ms, owner, joins, place_ms, fencing, quarantine_ms, slot_ms, attempt, grant,
            latch_ms,
        ],
    }
    /// Ends one grant of a fair lock, handing it to the first of its queue.
    FairRelease = FAIR_RELEASE {
        keys: [lock, queue, deadlines, alive, token, epoch, grants, latch],
        args: [
            lease_ms, owner, channel_prefix, publish, quarantine_ms, slot_ms, grant, latch_ms,
        ],
    }
    /// A fair lock's waiter leaves its queue.
    FairCancel = FAIR_CANCEL {
        keys: [lock, queue, deadlines, alive, token, epoch],
        args: [owner, channel_prefix, publish, slot_ms, quarantine_ms, acquisition, latch_ms],
    }
    /// Deletes a fair lock whoever holds it.
    FairForceRelease = FAIR_FORCE_RELEASE {
        keys: [lock, queue, deadlines, alive],
        args: [channel_prefix, publish],
    }
    /// Takes a read hold.
    RwReadAcquire = RW_READ_ACQUIRE {
        keys: [lock, token, epoch, grants, latch],
        args: [lease_ms, owner, hold_prefix, fencing, quarantine_ms, grant, latch_ms],
    }
    /// Takes the write hold, or one more of it.
    RwWriteAcquire = RW_WRITE_ACQUIRE {
        keys: [lock, token, epoch, waiting, requests, grants, latch],
        args: [
            lease_ms, owner, fencing, quarantine_ms, hold_prefix, wake_id, registered_ms,
            place_ms, attempt, grant, latch_ms,
        ],
    }
    /// Ends one read grant.
    RwReadRelease = RW_READ_RELEASE {
        keys: [lock, waiting, requests, token, epoch, grants, latch],
        args: [owner, channel, publish, tagged_name, numsub, quarantine_ms, grant, latch_ms],
    }
    /// Ends one write grant.
    RwWriteRelease = RW_WRITE_RELEASE {
        keys: [lock, waiting, requests, token, epoch, grants, latch],
        args: [lease_ms, owner, channel, publish, numsub, quarantine_ms, grant, latch_ms],
    }
    /// Re-arms the read holds of a batch of owners.
    RwReadRenew = RW_READ_RENEW {
        keys: [],
        args: [lease_ms],
        /// One owner's read holds in a [`RwReadRenew`] batch.
        each RwReadRenewed {
            keys: [lock, grants],
            args: [owner, hold_prefix],
        },
    }
    /// Deletes a read-write lock in one mode whoever holds it.
    RwForceRelease = RW_FORCE_RELEASE {
        keys: [lock],
        args: [mode, channel, publish],
    }
    /// Raises a fencing counter to at least a value.
    FencingRaise = FENCING_RAISE {
        keys: [token],
        args: [value],
    }
    /// Sets a latch's count if it is open.
    LatchSet = LATCH_SET {
        keys: [latch, marker],
        args: [count, channel, publish, java_channel],
    }
    /// Counts a latch down once.
    LatchCountDown = LATCH_COUNT_DOWN {
        keys: [latch, answer, marker],
        args: [channel, publish, answer_ms, java_channel],
    }
    /// Reads a latch's count.
    LatchCount = LATCH_COUNT {
        keys: [latch, marker],
        args: [],
    }
    /// Deletes a latch.
    LatchDelete = LATCH_DELETE {
        keys: [latch, marker],
        args: [channel, publish, java_channel],
    }
    /// Sets a semaphore's permits if it has none.
    SemaphoreSet = SEMAPHORE_SET {
        keys: [semaphore, marker, peak],
        args: [permits, channel, publish],
    }
    /// Adds permits to a semaphore.
    SemaphoreAdd = SEMAPHORE_ADD {
        keys: [semaphore, marker, peak],
        args: [delta, channel, publish],
    }
    /// Takes permits under a request's grant.
    SemaphoreAcquire = SEMAPHORE_ACQUIRE {
        keys: [semaphore, grant, reservation, marker, peak],
        args: [permits, waiter, waited_ms, reservation_ms],
    }
    /// Ends a grant of permits.
    SemaphoreRelease = SEMAPHORE_RELEASE {
        keys: [semaphore, grant, marker],
        args: [channel, publish, answer_ms],
    }
    /// Reads or drains a semaphore's permits.
    SemaphoreRead = SEMAPHORE_READ {
        keys: [semaphore, marker, peak],
        args: [action],
    }
    /// Ends a starving waiter's reservation of permits.
    SemaphoreUnreserve = SEMAPHORE_UNRESERVE {
        keys: [reservation],
        args: [waiter],
    }
    /// Issues permits with ids and a lease.
    ExpirableIssue = EXPIRABLE_ISSUE {
        keys: [semaphore, issued, epoch, reservation, marker, peak],
        args: [channel, publish, lease_ms, quarantine_ms, waiter, waited_ms, reservation_ms],
        /// One permit of an [`ExpirableIssue`].
        each ExpirableIssued {
            keys: [],
            args: [id],
        },
    }
    /// Gives issued permits back.
    ExpirableRelease = EXPIRABLE_RELEASE {
        keys: [semaphore, issued, answer],
        args: [channel, publish, answer_ms],
        /// One permit of an [`ExpirableRelease`].
        each ExpirableReleased {
            keys: [],
            args: [id],
        },
    }
    /// Renews issued permits, or sets their lease.
    ExpirableRenew = EXPIRABLE_RENEW {
        keys: [semaphore, issued],
        args: [channel, publish, lease_ms, exact],
        /// One permit of an [`ExpirableRenew`].
        each ExpirableRenewed {
            keys: [],
            args: [id],
        },
    }
    /// Reads an expirable semaphore's available permits.
    ExpirableRead = EXPIRABLE_READ {
        keys: [semaphore, issued],
        args: [channel, publish],
    }
    /// Describes a lock for introspection.
    LockDescribe = LOCK_DESCRIBE {
        keys: [lock, queue, waiting, token],
        args: [grants_prefix, holds_prefix],
    }
    /// Records what a client says about itself.
    ClientAnnounce = CLIENT_ANNOUNCE {
        keys: [client],
        args: [description, lives_ms],
    }
    /// Reads what a client said about itself.
    ClientRead = CLIENT_READ {
        keys: [client],
        args: [],
    }
    /// One step of a walk over a server's locks.
    LocksScan = LOCKS_SCAN {
        keys: [route],
        args: [cursor, pattern, step],
    }
    /// The cluster's slot ranges and their masters.
    ClusterSlots = CLUSTER_SLOTS {
        keys: [route],
        args: [],
    }
}

#[cfg(test)]
mod tests;
