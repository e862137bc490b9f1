//! What an operation is about: the lock's kind, its owner, and the request's id.

use std::fmt;
use std::sync::Arc;

use crate::LockName;

/// Which lock primitive an operation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The reentrant mutex.
    Mutex,
    /// The reentrant fair mutex: waiters are served in arrival order.
    Fair,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
}

impl LockKind {
    /// A short, stable label, used in metrics and logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Fair => "fair",
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The owner string stored in the backend: `"<client-uuid>:<holder>"`. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// Builds the owner string of `holder` on the client identified by `client_id`.
    #[must_use]
    pub fn new(client_id: &str, holder: &str) -> Self {
        Self::from_pieces(&[client_id, ":", holder])
    }

    /// The owner of request `request` alone: `"<client-uuid>:once-<request id>"`. An
    /// acquisition outside any holder's scope owns its hold under such an owner, and moves
    /// to a fresh owner when it moves to a fresh id ([`Owner::for_request`]), so that its
    /// owner, its request and its grant are one: a store may then keep no record of which
    /// grant began the hold (one record less per grant).
    /// [`Holder::new`](crate::Holder::new) refuses holders that would look like it.
    #[must_use]
    pub fn of_request(client_id: &str, request: RequestId) -> Self {
        let digits = request.hex_digits();
        // Always ASCII digits.
        let hex = std::str::from_utf8(&digits).unwrap_or_default();
        Self::from_pieces(&[client_id, ":", SOLE_PREFIX, hex])
    }

    /// The request this owner is the owner of alone (see [`Owner::of_request`]), if it is.
    #[must_use]
    pub fn sole_request(&self) -> Option<RequestId> {
        let (_, holder) = self.0.rsplit_once(':')?;
        RequestId::from_hex(holder.strip_prefix(SOLE_PREFIX)?)
    }

    /// The owner of `request` alone on this owner's client, when this owner is one
    /// request's alone; `None` for any other owner (which keeps its requests).
    #[must_use]
    pub fn for_request(&self, request: RequestId) -> Option<Self> {
        self.sole_request()?;
        let (client_id, _) = self.0.rsplit_once(':')?;
        Some(Self::of_request(client_id, request))
    }

    /// The owner string made of `pieces`, in one allocation (an owner is made for every
    /// operation outside a holder's scope).
    pub(crate) fn from_pieces(pieces: &[&str]) -> Self {
        Self(Arc::from(concat(pieces)))
    }

    /// The owner string as stored.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner a store kept as `stored` (what [`Owner::as_str`] gave it).
    #[must_use]
    pub fn from_stored(stored: &str) -> Self {
        Self(Arc::from(stored))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the holder of an owner of one request alone starts ([`Owner::of_request`]).
pub(crate) const SOLE_PREFIX: &str = "once-";

/// `pieces` joined into a string kept on the stack when it is short, so that turning it
/// into an `Arc<str>` is its only allocation.
pub(crate) fn concat(pieces: &[&str]) -> Concat {
    let len = pieces.iter().map(|piece| piece.len()).sum();
    if len > SHORT {
        return Concat::Long(pieces.concat());
    }
    let mut bytes = [0; SHORT];
    let mut at = 0;
    for piece in pieces {
        bytes[at..at + piece.len()].copy_from_slice(piece.as_bytes());
        at += piece.len();
    }
    Concat::Short { bytes, len }
}

/// How long a string [`concat`] keeps on the stack: a client id, a `:` and a holder
/// id of a few dozen characters.
const SHORT: usize = 96;

/// A string made by [`concat`].
pub(crate) enum Concat {
    Short { bytes: [u8; SHORT], len: usize },
    Long(String),
}

impl From<Concat> for Arc<str> {
    fn from(joined: Concat) -> Self {
        match joined {
            // Whole `str`s copied one after another are UTF-8.
            Concat::Short { bytes, len } => match std::str::from_utf8(&bytes[..len]) {
                Ok(text) => Arc::from(text),
                Err(_) => Arc::from(String::from_utf8_lossy(&bytes[..len])),
            },
            Concat::Long(text) => Arc::from(text),
        }
    }
}

/// One lock as seen by one owner: the subject of every backend operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockRef {
    /// The lock primitive.
    pub kind: LockKind,
    /// The lock's name.
    pub name: LockName,
    /// Who is asking.
    pub owner: Owner,
}

impl LockRef {
    /// Builds a lock reference.
    #[must_use]
    pub fn new(kind: LockKind, name: LockName, owner: Owner) -> Self {
        Self { kind, name, owner }
    }
}

/// Identifies one request across its retries: a backend answers a request it already
/// ran with that run's answer (within [`AcquireRequest::retry_window`](super::AcquireRequest::retry_window)), so a request
/// whose reply was lost can be sent again without counting twice. Shown as 32 lowercase
/// hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(u128);

impl RequestId {
    /// A fresh random id.
    #[must_use]
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }

    /// The id shown as `hex` (32 hex digits, as [`Display`](fmt::Display) shows it);
    /// `None` for anything else.
    #[must_use]
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(hex, 16).ok().map(Self)
    }

    /// The id whose 128 bits are `high` then `low` (a store that keeps numbers of 64 bits
    /// answers with the two halves).
    #[must_use]
    pub fn from_halves(high: i64, low: i64) -> Self {
        let (high, low) = (
            u128::from(high.cast_unsigned()),
            u128::from(low.cast_unsigned()),
        );
        Self(high << 64 | low)
    }

    /// The id's 128 bits, most significant byte first (a store that keeps bytes).
    #[must_use]
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The id whose bytes are `bytes` (as [`RequestId::to_bytes`] gave them).
    #[must_use]
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }

    /// Appends the id's 32 lowercase hex digits to `out`, as [`Display`](fmt::Display)
    /// shows it, without the formatting machinery (backends put it in keys on every
    /// request).
    pub fn push_hex(self, out: &mut String) {
        // Filled in place and appended at once: pushing digit by digit checked the
        // string's room 32 times.
        let hex = self.hex_digits();
        // Always ASCII digits.
        if let Ok(hex) = std::str::from_utf8(&hex) {
            out.push_str(hex);
        }
    }

    /// The id's 32 lowercase hex digits, on the stack.
    fn hex_digits(self) -> [u8; 32] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0.to_be_bytes()) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        hex
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({self})")
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::{Owner, RequestId};

    #[test]
    fn owners_join_client_and_holder_at_any_length() {
        let client = "6f1c2a8e-0d4b-4c55-9a51-3f0e1b2c3d4e";
        for holder in [
            "h",
            "scope-12",
            &"x".repeat(58),
            &"y".repeat(59),
            &"z".repeat(300),
        ] {
            assert_eq!(
                Owner::new(client, holder).as_str(),
                format!("{client}:{holder}")
            );
        }
    }

    #[test]
    fn request_id_hex_is_its_display() {
        for id in [
            0,
            1,
            0xabc,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            let id = RequestId(id);
            let mut hex = String::from("key:");
            id.push_hex(&mut hex);
            assert_eq!(hex, format!("key:{id}"));
        }
        let random = RequestId::random();
        let mut hex = String::new();
        random.push_hex(&mut hex);
        assert_eq!(hex, random.to_string());
        assert_eq!(RequestId::from_hex(&hex), Some(random));
        assert_eq!(RequestId::from_hex(&hex.to_uppercase()), Some(random));
        let id = RequestId(0x8000_0000_0000_0001_0000_0000_0000_00ff);
        assert_eq!(RequestId::from_halves(i64::MIN + 1, 0xff), id);
        for bad in [
            "",
            "0",
            &hex[1..],
            &format!("{hex}0"),
            &format!("+{}", &hex[1..]),
        ] {
            assert_eq!(RequestId::from_hex(bad), None, "{bad:?}");
        }
    }
}
