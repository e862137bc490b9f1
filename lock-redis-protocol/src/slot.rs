//! Redis Cluster key slots (CRC16/XMODEM of the hash tag, modulo 16384).

/// Number of slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The part of `key` that decides its slot: the first non-empty `{...}`, else the key.
#[must_use]
pub fn hash_tag(key: &str) -> &[u8] {
    let bytes = key.as_bytes();
    if let Some(open) = bytes.iter().position(|&b| b == b'{')
        && let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &bytes[open + 1..open + 1 + len];
    }
    bytes
}

/// The cluster slot of `key`.
#[must_use]
pub fn key_slot(key: &str) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    // CRC16/XMODEM: polynomial 0x1021, initial value 0, no reflection.
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_slots() {
        // Reference values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_eq!(hash_tag("foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag("foo{{bar}}zap"), b"{bar");
    }
}
