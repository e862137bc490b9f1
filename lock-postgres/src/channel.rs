//! The `LISTEN`/`NOTIFY` channel a waiter listens on: `dl_` and the SHA-1 in hex of a key,
//! as channel names are identifiers of at most 63 bytes.
//!
//! For a mutex the key is its client's (a release hands the lock over to the first waiter
//! in the queue and wakes its client alone, where the client's waiters for the name take
//! turns on one listener), for a fair lock the waiter's own, for a read-write lock the
//! name's. Every lock and unlock sends one, so the key is built and the digest written
//! without the formatting machinery, which cost more than the digest itself.

use lock_core::LockName;
use lock_core::backend::{LockKind, LockRef};

use crate::schema::SchemaName;

/// The channel a waiter of `lock` listens on, in the tables of `schema`.
pub(crate) fn of_lock(schema: &SchemaName, lock: &LockRef) -> String {
    let name = lock.name.as_str();
    let schema = schema.as_str();
    let mut key = String::with_capacity(schema.len() + 2 * name.len() + 32);
    key.push_str(schema);
    key.push(':');
    match lock.kind {
        LockKind::Fair => {
            push_length_and_name(&mut key, name);
            key.push_str(lock.owner.as_str());
        }
        LockKind::Mutex => {
            let owner = lock.owner.as_str();
            let client = owner.split_once(':').map_or(owner, |(client, _)| client);
            key.push_str("client:");
            push_length_and_name(&mut key, name);
            key.push_str(client);
        }
        _ => key.push_str(name),
    }
    of_key(&key)
}

/// The channel of `name` itself (what a release of a read-write lock wakes): the channel
/// of the name's write lock.
pub(crate) fn of_name(schema: &SchemaName, name: &LockName) -> String {
    let (schema, name) = (schema.as_str(), name.as_str());
    let mut key = String::with_capacity(schema.len() + name.len() + 1);
    key.push_str(schema);
    key.push(':');
    key.push_str(name);
    of_key(&key)
}

/// `<length>:<name>:`, the length in decimal: it keeps apart names that a separator
/// inside them would otherwise make look alike.
fn push_length_and_name(key: &mut String, name: &str) {
    let mut digits = [0_u8; 20];
    let mut start = digits.len();
    let mut length = name.len();
    while start > 0 {
        start -= 1;
        digits[start] = b"0123456789"[length % 10];
        length /= 10;
        if length == 0 {
            break;
        }
    }
    key.extend(digits[start..].iter().map(|&digit| char::from(digit)));
    key.push(':');
    key.push_str(name);
    key.push(':');
}

/// `dl_` and the SHA-1 of `key` in lowercase hex.
fn of_key(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = sha1_smol::Sha1::from(key).digest().bytes();
    let mut channel = String::with_capacity(3 + 2 * digest.len());
    channel.push_str("dl_");
    for byte in digest {
        channel.push(char::from(HEX[usize::from(byte >> 4)]));
        channel.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    channel
}

#[cfg(test)]
mod tests {
    use lock_core::LockName;
    use lock_core::backend::{LockKind, LockRef, Owner};

    use super::{of_lock, of_name};
    use crate::schema::SchemaName;

    /// The channels as `format!` made them before: `dl_` and the digest's `Display`
    /// of the same keys. Would fail if a faster key or hex differed by a byte, which
    /// would leave waiters of other clients of this version unwoken.
    #[test]
    fn channels_are_the_digests_of_their_keys() {
        let schema = SchemaName::default();
        let expected = |key: String| format!("dl_{}", sha1_smol::Sha1::from(key).digest());
        for name in ["a", "orders:42", &"n".repeat(1000)] {
            let owner = Owner::new("client-1", "holder:7");
            for (kind, key) in [
                (
                    LockKind::Mutex,
                    format!("{schema}:client:{}:{name}:client-1", name.len()),
                ),
                (
                    LockKind::Fair,
                    format!("{schema}:{}:{name}:{owner}", name.len()),
                ),
                (LockKind::Read, format!("{schema}:{name}")),
            ] {
                let lock = LockRef::new(kind, LockName::new(name).unwrap(), owner.clone());
                assert_eq!(of_lock(&schema, &lock), expected(key), "{kind:?} {name}");
            }
            assert_eq!(
                of_name(&schema, &LockName::new(name).unwrap()),
                expected(format!("{schema}:{name}"))
            );
        }
    }
}
