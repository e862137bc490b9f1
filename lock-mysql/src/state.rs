//! What a name's row keeps: the protocol's machine, the answers to its recent releases
//! (a release sent again after its reply was lost answers as the first time; the
//! machine itself remembers acquisitions, not releases), and where the readers waiting
//! for a writer listen (the machine keeps no readers in line: a writer's release wakes
//! them all).

use lock_core::backend::machine::Machine;
use lock_core::backend::{Release, RequestId};
use lock_core::protocol::Field;

use crate::mailbox::{Ask, Mailbox};
use crate::store::Serving;

/// The layout's version, the first byte of every row's state.
const VERSION: u8 = 2;

/// A name's state as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) machine: Machine<Ask>,
    /// Releases answered, by their request id: the answer, and until when (the
    /// machine's time) it is kept.
    releases: Vec<(RequestId, Release, u64)>,
    /// The mailboxes of clients whose readers wait for the writer, and until when (the
    /// machine's time) each is kept.
    readers_waiting: Vec<(Mailbox, u64)>,
    /// Whether the name was last asked for as a read-write lock (its holder writes).
    pub(crate) read_write: bool,
    /// The server that wrote the row last (`@@server_id`).
    server: u32,
}

impl State {
    pub(crate) fn new(machine: Machine<Ask>) -> Self {
        Self {
            machine,
            releases: Vec::new(),
            readers_waiting: Vec::new(),
            read_write: false,
            server: 0,
        }
    }

    /// A new name's state, on the server `serving` names: nothing is granted during
    /// its quarantine.
    pub(crate) fn fresh(mut machine: Machine<Ask>, serving: Serving) -> Self {
        machine.hold_back_until(serving.quarantine_until);
        let mut state = Self::new(machine);
        state.server = serving.server;
        state
    }

    /// The state as the server `serving` names takes it up: nothing granted during the
    /// quarantine; and, when another server wrote it last, its fencing tokens raised
    /// past `token_floor` (a token the other server issued after this row's copy was
    /// made may be lost with it).
    pub(crate) fn serve_on(&mut self, serving: Serving, token_floor: u64) {
        if self.server != serving.server {
            self.machine.raise_token(token_floor);
            self.server = serving.server;
        }
        self.machine.hold_back_until(serving.quarantine_until);
    }

    /// Keeps `mailbox`, whose client has a reader waiting, until `until`, and forgets
    /// the mailboxes kept past `clock`.
    pub(crate) fn reader_waits(&mut self, mailbox: Mailbox, (clock, until): (u64, u64)) {
        self.readers_waiting.retain(|(_, kept)| *kept > clock);
        match self.readers_waiting.iter_mut().find(|(m, _)| *m == mailbox) {
            Some((_, kept)) => *kept = (*kept).max(until),
            None => self.readers_waiting.push((mailbox, until)),
        }
    }

    /// The mailboxes of the clients whose readers still wait at `clock`, which are
    /// forgotten: they are to be woken now.
    pub(crate) fn take_readers_waiting(&mut self, clock: u64) -> Vec<Mailbox> {
        std::mem::take(&mut self.readers_waiting)
            .into_iter()
            .filter(|(_, until)| *until > clock)
            .map(|(mailbox, _)| mailbox)
            .collect()
    }

    /// The answer given to release `id`, if it is still kept at `clock`.
    pub(crate) fn answered(&self, id: RequestId, clock: u64) -> Option<Release> {
        self.releases
            .iter()
            .find(|(answered, _, until)| *answered == id && *until > clock)
            .map(|(_, answer, _)| *answer)
    }

    /// Keeps `answer` to release `id` until `until`, and forgets answers kept past
    /// `clock`.
    /// Forgets the answer to release `id`: its client got it, and never sends it again.
    pub(crate) fn forget_answer(&mut self, id: RequestId) {
        self.releases.retain(|(answered, _, _)| *answered != id);
    }

    pub(crate) fn remember(&mut self, id: RequestId, answer: Release, (clock, until): (u64, u64)) {
        self.releases.retain(|(_, _, kept)| *kept > clock);
        self.releases.push((id, answer, until));
    }

    /// The first time after the machine's now at which time alone may change what an
    /// operation on this state does (see [`lock_core::protocol::Name::steady_until`]):
    /// the machine's next boundary, or a kept release answer or reader's mailbox that
    /// runs out.
    pub(crate) fn steady_until(&self) -> u64 {
        let now = self.machine.now();
        let answers = self.releases.iter().map(|(_, _, until)| *until);
        let readers = self.readers_waiting.iter().map(|(_, until)| *until);
        answers
            .chain(readers)
            .filter(|until| *until > now)
            .fold(self.machine.steady_until(), u64::min)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let machine = self.machine.encode();
        let mut out = Vec::with_capacity(machine.len() + 16 + self.releases.len() * 29);
        out.push(VERSION);
        u32::try_from(machine.len())
            .unwrap_or(u32::MAX)
            .put(&mut out);
        out.extend_from_slice(&machine);
        u32::try_from(self.releases.len())
            .unwrap_or(u32::MAX)
            .put(&mut out);
        for (id, answer, until) in &self.releases {
            id.put(&mut out);
            let (tag, holds) = match answer {
                Release::StillHeld { holds } => (1u8, *holds),
                Release::NotHeld => (2, 0),
                _ => (0, 0),
            };
            out.push(tag);
            holds.put(&mut out);
            until.put(&mut out);
        }
        u32::try_from(self.readers_waiting.len())
            .unwrap_or(u32::MAX)
            .put(&mut out);
        for (mailbox, until) in &self.readers_waiting {
            mailbox.key.put(&mut out);
            until.put(&mut out);
        }
        self.read_write.put(&mut out);
        self.server.put(&mut out);
        out
    }

    /// The state `bytes` hold; `None` when they are not one this version wrote.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&version, mut input) = bytes.split_first()?;
        if version != VERSION {
            return None;
        }
        let len = usize::try_from(u32::take(&mut input)?).ok()?;
        if input.len() < len {
            return None;
        }
        let (machine, mut input) = input.split_at(len);
        let machine = Machine::decode(machine)?;
        let count = u32::take(&mut input)?;
        let mut releases = Vec::new();
        for _ in 0..count {
            let id = RequestId::take(&mut input)?;
            let (&tag, rest) = input.split_first()?;
            input = rest;
            let holds = u32::take(&mut input)?;
            let answer = match tag {
                0 => Release::Released,
                1 => Release::StillHeld { holds },
                2 => Release::NotHeld,
                _ => return None,
            };
            releases.push((id, answer, u64::take(&mut input)?));
        }
        let count = u32::take(&mut input)?;
        let mut readers_waiting = Vec::new();
        for _ in 0..count {
            let key = RequestId::take(&mut input)?;
            readers_waiting.push((Mailbox { key }, u64::take(&mut input)?));
        }
        let read_write = bool::take(&mut input)?;
        let server = u32::take(&mut input)?;
        input.is_empty().then_some(Self {
            machine,
            releases,
            readers_waiting,
            read_write,
            server,
        })
    }
}

#[cfg(test)]
mod tests {
    use lock_core::backend::machine::new_machine;
    use lock_core::backend::{LockKind, Release, RequestId};

    use super::State;

    #[test]
    fn a_state_comes_back_from_its_bytes_and_damage_is_refused() {
        let machine = new_machine(
            LockKind::Fair,
            None,
            std::time::Duration::from_secs(1),
            (5, 7, 0),
        );
        let mut state = State::new(machine);
        let (first, second) = (RequestId::random(), RequestId::random());
        state.remember(first, Release::StillHeld { holds: 2 }, (10, 100));
        state.remember(second, Release::Released, (10, 200));
        let mailbox = crate::mailbox::Mailbox {
            key: RequestId::random(),
        };
        state.reader_waits(mailbox, (10, 50));
        state.read_write = true;
        state.serve_on(
            crate::store::Serving {
                server: 7,
                quarantine_until: 0,
            },
            100,
        );
        let bytes = state.encode();
        assert_eq!(State::decode(&bytes), Some(state.clone()));
        assert_eq!(
            state.answered(first, 99),
            Some(Release::StillHeld { holds: 2 })
        );
        assert_eq!(state.answered(first, 100), None);
        for cut in 0..bytes.len() {
            assert_eq!(State::decode(&bytes[..cut]), None, "{cut}");
        }
        let mut longer = bytes;
        longer.push(0);
        assert_eq!(State::decode(&longer), None);
    }
}
