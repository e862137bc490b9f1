//! Reading an acquire script's answer.

use lock_core::backend::Acquire;
use lock_core::{Error, LockName, RequestId};

use super::{count, pttl, unexpected};
use crate::events;
use crate::transport::Reply;

/// The integers an acquire script answers with (two or three), read without allocating,
/// and a grant's origin.
pub(super) struct AcquireAnswer {
    items: [i64; 3],
    len: usize,
    pub(super) origin: Option<RequestId>,
}

impl AcquireAnswer {
    /// A grant (`'<holds>:<token>'`, read as `[1, holds, token]`), or an array of at most
    /// three integers; `None` for anything else.
    pub(super) fn of(reply: &Reply) -> Option<Self> {
        let replies = match reply {
            Reply::Bytes(grant) => return Self::grant(grant),
            Reply::Array(replies) => replies,
            _ => return None,
        };
        let mut answer = Self {
            items: [0; 3],
            len: 0,
            origin: None,
        };
        for reply in replies {
            let (Reply::Int(n), Some(slot)) = (reply, answer.items.get_mut(answer.len)) else {
                return None;
            };
            *slot = *n;
            answer.len += 1;
        }
        Some(answer)
    }

    /// `'<holds>:<token>:<origin>'`.
    fn grant(grant: &[u8]) -> Option<Self> {
        let (holds, rest) = std::str::from_utf8(grant).ok()?.split_once(':')?;
        let (token, origin) = rest.split_once(':')?;
        Some(Self {
            items: [1, holds.parse().ok()?, token.parse().ok()?],
            len: 3,
            origin: Some(RequestId::from_hex(origin)?),
        })
    }

    pub(super) fn items(&self) -> &[i64] {
        &self.items[..self.len]
    }
}

/// An acquire script's answer: `'<holds>:<token>:<origin>'` (read as
/// `[1, holds, token]` and the origin),
/// `{0, ttl}` busy, `{2, ttl}` reserved for a starving waiter, `{3, _}` an upgrade that
/// would wait for itself, `{4, ms}` no grants during the restart quarantine (reported
/// through `tracing`), `{5, 0}` the acquisition is over (see [`Acquire::Ended`]).
pub(super) fn decode_acquire(
    items: Option<&[i64]>,
    origin: Option<RequestId>,
    reply: &Reply,
    name: &LockName,
    fencing: bool,
) -> Result<Acquire, Error> {
    match items {
        Some([1, holds, token]) => Ok(Acquire::Acquired {
            holds: count(*holds, reply)?,
            token: u64::try_from(*token).ok().filter(|&t| fencing && t > 0),
            origin,
        }),
        Some([0, ttl]) => Ok(Acquire::Busy {
            ttl: pttl(*ttl),
            reserved: false,
        }),
        Some([2, ttl]) => Ok(Acquire::Busy {
            ttl: pttl(*ttl),
            reserved: true,
        }),
        Some([4, left]) => {
            let left = pttl(*left);
            events::quarantine_active(name, left);
            Ok(Acquire::Busy {
                ttl: left,
                reserved: false,
            })
        }
        Some([3, _]) => Err(Error::would_deadlock(name.as_str())),
        Some([5, _]) => Ok(Acquire::Ended),
        _ => Err(unexpected("acquire", reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_answer_is_a_grant_or_two_integers_and_nothing_else() {
        let ints = |ns: &[i64]| Reply::Array(ns.iter().map(|&n| Reply::Int(n)).collect());
        let read = |reply: &Reply| AcquireAnswer::of(reply).map(|a| a.items().to_vec());
        let bytes = |s: &str| Reply::Bytes(s.as_bytes().to_vec());
        let origin = RequestId::random();
        let grant = format!("2:7:{origin}");
        assert_eq!(read(&bytes(&grant)), Some(vec![1, 2, 7]));
        assert_eq!(
            AcquireAnswer::of(&bytes(&grant)).and_then(|a| a.origin),
            Some(origin)
        );
        assert_eq!(read(&bytes("2:7")), None, "a grant without its origin");
        assert_eq!(read(&bytes("2:7:x")), None, "an origin that is no id");
        assert_eq!(read(&bytes("2")), None, "a grant without its token");
        assert_eq!(
            read(&bytes(&format!("2:x:{origin}"))),
            None,
            "a token that is no number"
        );
        assert_eq!(read(&ints(&[0, 250])), Some(vec![0, 250]));
        assert_eq!(read(&ints(&[1, 1, 7, 8])), None, "a fourth integer");
        assert_eq!(
            read(&Reply::Array(vec![Reply::Int(0), Reply::Nil])),
            None,
            "not an integer"
        );
        assert_eq!(read(&Reply::Int(1)), None, "not an array");
        let name = LockName::new("n").expect("valid name");
        let too_long = ints(&[1, 1, 7, 8]);
        let decoded = decode_acquire(None, None, &too_long, &name, true);
        assert!(decoded.is_err(), "an unreadable answer is an error");
    }
}
