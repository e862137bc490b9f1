//! A name's machine as bytes, for a store that keeps each name's state in one value and
//! executes the machine in its client (the MySQL store): the rules then live once, here,
//! and the store only loads, steps and saves under a lock of the name.
//!
//! The layout is versioned by its first byte. Decoding checks every tag and length and
//! refuses trailing bytes, so a damaged value is refused rather than misread.

use std::collections::BTreeMap;

use super::{Hold, Name, Reading, Record, Reply, Waiter};
use crate::backend::{Owner, RequestId};

/// The layout's version, the first byte of every encoded machine.
const VERSION: u8 = 2;

/// A value that a machine's ids, owners and asks are made of, as bytes.
pub trait Field: Sized {
    /// Appends the value to `out`.
    fn put(&self, out: &mut Vec<u8>);

    /// Takes the value from the front of `input`; `None` when the bytes are not one.
    fn take(input: &mut &[u8]) -> Option<Self>;
}

/// The first `n` bytes of `input`, taken.
fn bytes<'a>(input: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if input.len() < n {
        return None;
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Some(head)
}

fn array<const N: usize>(input: &mut &[u8]) -> Option<[u8; N]> {
    bytes(input, N)?.try_into().ok()
}

impl Field for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        array(input).map(Self::from_le_bytes)
    }
}

impl Field for u32 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        array(input).map(Self::from_le_bytes)
    }
}

impl Field for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        match array::<1>(input)? {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

impl Field for () {
    fn put(&self, _: &mut Vec<u8>) {}

    fn take(_: &mut &[u8]) -> Option<Self> {
        Some(())
    }
}

impl Field for RequestId {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        array(input).map(Self::from_bytes)
    }
}

impl Field for Owner {
    fn put(&self, out: &mut Vec<u8>) {
        put_len(self.as_str().len(), out);
        out.extend_from_slice(self.as_str().as_bytes());
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        let len = take_len(input)?;
        let text = std::str::from_utf8(bytes(input, len)?).ok()?;
        Some(Self::from_stored(text))
    }
}

impl<T: Field> Field for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                value.put(out);
            }
        }
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        match array::<1>(input)? {
            [0] => Some(None),
            [1] => T::take(input).map(Some),
            _ => None,
        }
    }
}

fn put_len(len: usize, out: &mut Vec<u8>) {
    u32::try_from(len).unwrap_or(u32::MAX).put(out);
}

fn take_len(input: &mut &[u8]) -> Option<usize> {
    let len = usize::try_from(u32::take(input)?).ok()?;
    // A length longer than what is left is damage, not a reason to allocate.
    (len <= input.len()).then_some(len)
}

impl<I: Field> Field for Reply<I> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Acquired {
                holds,
                token,
                origin,
            } => {
                out.push(0);
                holds.put(out);
                token.put(out);
                origin.put(out);
            }
            Self::Busy => out.push(1),
            Self::Ended => out.push(2),
            Self::Refused => out.push(3),
            Self::Released => out.push(4),
            Self::StillHeld(holds) => {
                out.push(5);
                holds.put(out);
            }
            Self::NotHeld => out.push(6),
            Self::Renewed { origin } => {
                out.push(7);
                origin.put(out);
            }
            Self::Gone => out.push(8),
            Self::Forced(held) => {
                out.push(9);
                held.put(out);
            }
            Self::Done => out.push(10),
            Self::WouldDeadlock => out.push(11),
        }
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(match array::<1>(input)?[0] {
            0 => Self::Acquired {
                holds: u32::take(input)?,
                token: u64::take(input)?,
                origin: I::take(input)?,
            },
            1 => Self::Busy,
            2 => Self::Ended,
            3 => Self::Refused,
            4 => Self::Released,
            5 => Self::StillHeld(u32::take(input)?),
            6 => Self::NotHeld,
            7 => Self::Renewed {
                origin: I::take(input)?,
            },
            8 => Self::Gone,
            9 => Self::Forced(bool::take(input)?),
            10 => Self::Done,
            11 => Self::WouldDeadlock,
            _ => return None,
        })
    }
}

impl<I: Field> Field for Record<I> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Self::Granted(reply) => {
                out.push(0);
                reply.put(out);
            }
            Self::Handed(reply) => {
                out.push(1);
                reply.put(out);
            }
            Self::Ended => out.push(2),
        }
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(match array::<1>(input)?[0] {
            0 => Self::Granted(Reply::take(input)?),
            1 => Self::Handed(Reply::take(input)?),
            2 => Self::Ended,
            _ => return None,
        })
    }
}

impl<I: Field, O: Field> Field for Hold<I, O> {
    fn put(&self, out: &mut Vec<u8>) {
        self.owner.put(out);
        put_len(self.grants.len(), out);
        for grant in &self.grants {
            grant.put(out);
        }
        self.origin.put(out);
        self.token.put(out);
        self.expires.put(out);
        self.since.put(out);
        self.handed.put(out);
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        let owner = O::take(input)?;
        let count = take_len(input)?;
        let grants = (0..count).map(|_| I::take(input)).collect::<Option<_>>()?;
        Some(Self {
            owner,
            grants,
            origin: I::take(input)?,
            token: u64::take(input)?,
            expires: u64::take(input)?,
            since: u64::take(input)?,
            handed: bool::take(input)?,
        })
    }
}

impl<I: Field, O: Field> Field for Reading<I, O> {
    fn put(&self, out: &mut Vec<u8>) {
        self.owner.put(out);
        put_len(self.grants.len(), out);
        for (grant, expires) in &self.grants {
            grant.put(out);
            expires.put(out);
        }
        self.origin.put(out);
        self.token.put(out);
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        let owner = O::take(input)?;
        let count = take_len(input)?;
        let grants = (0..count)
            .map(|_| Some((I::take(input)?, u64::take(input)?)))
            .collect::<Option<_>>()?;
        Some(Self {
            owner,
            grants,
            origin: I::take(input)?,
            token: u64::take(input)?,
        })
    }
}

impl<I: Field, O: Field, A: Field> Field for Waiter<I, O, A> {
    fn put(&self, out: &mut Vec<u8>) {
        self.id.put(out);
        self.owner.put(out);
        self.lease.put(out);
        self.place.put(out);
        self.keeps_until.put(out);
        self.ask.put(out);
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(Self {
            id: I::take(input)?,
            owner: O::take(input)?,
            lease: u64::take(input)?,
            place: u64::take(input)?,
            keeps_until: u64::take(input)?,
            ask: A::take(input)?,
        })
    }
}

impl<I, O, A> Name<I, O, A>
where
    I: Field + Copy + Ord,
    O: Field + Clone + PartialEq,
    A: Field + Clone,
{
    /// The machine as bytes ([`Name::decode`] reads them back). A planted defect is not
    /// part of it: the store plants its own.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.push(VERSION);
        self.put_state(&mut out);
        out
    }

    /// The machine `bytes` hold, with no defect planted; `None` when they are not one
    /// this layout wrote (another version, a bad tag, a short or long value).
    #[must_use]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut input = bytes;
        if array::<1>(&mut input)? != [VERSION] {
            return None;
        }
        let name = Self::take_state(&mut input)?;
        input.is_empty().then_some(name)
    }

    fn put_state(&self, out: &mut Vec<u8>) {
        self.now.put(out);
        self.fair.put(out);
        self.longest_lease.put(out);
        self.quarantine.put(out);
        self.retention.put(out);
        self.hold.put(out);
        put_len(self.readers.len(), out);
        for reading in &self.readers {
            reading.put(out);
        }
        put_len(self.waiters.len(), out);
        for waiter in &self.waiters {
            waiter.put(out);
        }
        put_len(self.records.len(), out);
        for (id, (record, since)) in &self.records {
            id.put(out);
            record.put(out);
            since.put(out);
        }
        self.token.put(out);
        self.longest_granted.put(out);
        self.quarantine_until.put(out);
        self.others.put(out);
        self.offer.put(out);
        self.offered_until.put(out);
        match &self.replica {
            None => out.push(0),
            Some(replica) => {
                out.push(1);
                replica.put_state(out);
            }
        }
    }

    fn take_state(input: &mut &[u8]) -> Option<Self> {
        let now = u64::take(input)?;
        let fair = bool::take(input)?;
        let longest_lease = u64::take(input)?;
        let quarantine = u64::take(input)?;
        let retention = <Option<u64> as Field>::take(input)?;
        let hold = <Option<Hold<I, O>> as Field>::take(input)?;
        let count = take_len(input)?;
        let readers = (0..count)
            .map(|_| Reading::take(input))
            .collect::<Option<Vec<_>>>()?;
        let count = take_len(input)?;
        let waiters = (0..count)
            .map(|_| Waiter::take(input))
            .collect::<Option<Vec<_>>>()?;
        let count = take_len(input)?;
        let mut records = BTreeMap::new();
        for _ in 0..count {
            let id = I::take(input)?;
            let record = Record::take(input)?;
            records.insert(id, (record, u64::take(input)?));
        }
        let token = u64::take(input)?;
        let longest_granted = u64::take(input)?;
        let quarantine_until = u64::take(input)?;
        let others = u32::take(input)?;
        let offer = u64::take(input)?;
        let offered_until = u64::take(input)?;
        let replica = match array::<1>(input)? {
            [0] => None,
            [1] => Some(Box::new(Self::take_state(input)?)),
            _ => return None,
        };
        Some(Self {
            now,
            fair,
            longest_lease,
            quarantine,
            retention,
            // Not kept: a store that loads the machine looks its records through at
            // the first step.
            next_forget: super::LookAt::default(),
            hold,
            readers,
            waiters,
            records,
            token,
            longest_granted,
            quarantine_until,
            others,
            offer,
            offered_until,
            replica,
            defect: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Name;
    use crate::backend::{Owner, RequestId};
    use crate::protocol::{Event, check};

    /// Every state the exhaustive check reaches (small ids and owners, asks of nothing)
    /// comes back from its bytes as it was, and no prefix of its bytes decodes.
    #[test]
    fn every_reachable_state_comes_back_from_its_bytes() {
        let states = check::reachable_states(3);
        assert!(states.len() > 100, "{} states", states.len());
        for state in states {
            let bytes = state.encode();
            assert_eq!(Name::decode(&bytes).as_ref(), Some(&state));
            for cut in 0..bytes.len() {
                assert!(Name::<u32, u32>::decode(&bytes[..cut]).is_none(), "{cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Name::<u32, u32>::decode(&longer).is_none());
        }
    }

    /// A store's machine (request ids, owners, and an ask of its own) comes back from
    /// its bytes with its holder, waiters and records.
    #[test]
    fn a_stores_machine_comes_back_from_its_bytes() {
        let mut name = Name::<RequestId, Owner, Option<u64>>::new(true, 30_000_000)
            .forgetting_after(10_000_000)
            .starting(1_700_000_000_000_000, 41, 0);
        let (first, second) = (RequestId::random(), RequestId::random());
        for (id, owner, ask) in [(first, "a:1", None), (second, "b:ü", Some(7))] {
            name.step(Event::Attempt {
                side: crate::protocol::Side::Write,
                id,
                owner: Owner::new(owner, "h"),
                lease: 1_000,
                place: Some(5_000),
                ask,
            });
        }
        assert_eq!(name.waiting(), 1);
        let decoded = Name::decode(&name.encode()).expect("decodes");
        assert_eq!(decoded, name);
        assert_eq!(decoded.last_token(), 42);
    }

    /// Bytes of another version, or with a bad tag, are refused.
    #[test]
    fn damaged_bytes_are_refused() {
        let name = Name::<u32, u32>::new(false, 100);
        let mut bytes = name.encode();
        bytes[0] = 1;
        assert!(Name::<u32, u32>::decode(&bytes).is_none());
        assert!(Name::<u32, u32>::decode(&[]).is_none());
        assert!(Name::<u32, u32>::decode(&[1, 0xff, 0xff]).is_none());
    }
}
