//! A lock name's advisory lock key.

use lock_core::LockName;

/// The 64-bit key of `name`'s advisory lock: the first 8 bytes of the name's SHA-1.
/// Readers, writers and the mutex of one name share the key, as they share the name.
pub(crate) fn of(name: &LockName) -> i64 {
    let digest = sha1_smol::Sha1::from(name.as_str()).digest().bytes();
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The halves `pg_locks` shows a 64-bit key as: the high one in `classid`, the low one
/// in `objid`, each an unsigned 32-bit number.
pub(super) fn halves(key: i64) -> (i64, i64) {
    let bits = u64::from_ne_bytes(key.to_ne_bytes());
    (
        i64::from(u32::try_from(bits >> 32).unwrap_or(u32::MAX)),
        i64::from(u32::try_from(bits & 0xFFFF_FFFF).unwrap_or(u32::MAX)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_halves_put_together() {
        for name in ["a", "orders:42", "é", "a longer name than eight bytes"] {
            let key = of(&LockName::new(name).expect("a valid name"));
            let (high, low) = halves(key);
            let joined =
                (u64::try_from(high).expect("high") << 32) | u64::try_from(low).expect("low");
            assert_eq!(joined, u64::from_ne_bytes(key.to_ne_bytes()), "{name}");
        }
        assert_ne!(
            of(&LockName::new("a").expect("valid")),
            of(&LockName::new("b").expect("valid"))
        );
    }
}
