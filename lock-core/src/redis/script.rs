//! The Lua scripts, kept once for every Redis adapter.

use std::fmt;

/// A Lua script run atomically by Redis.
///
/// Adapters run it by SHA1 (`EVALSHA`) and load it again when the server answers
/// `NOSCRIPT` (after a restart or `SCRIPT FLUSH`). [`Script::index`] is dense, so an
/// adapter can keep its prepared driver scripts in a `Vec` indexed by it.
pub struct Script {
    index: usize,
    name: &'static str,
    source: &'static str,
}

impl Script {
    /// A short name for logs and errors.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    #[must_use]
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The position of this script in [`ALL`].
    #[must_use]
    pub fn index(&self) -> usize {
        self.index
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

macro_rules! scripts {
    ($($index:literal $ident:ident = $file:literal;)*) => {
        $(
            #[doc = concat!("`", $file, "`")]
            pub static $ident: Script = Script {
                index: $index,
                name: $file,
                source: concat!(
                    include_str!("scripts/prelude.lua"),
                    include_str!(concat!("scripts/", $file, ".lua"))
                ),
            };
        )*
        /// Every script, indexed by [`Script::index`].
        pub static ALL: &[&Script] = &[$(&$ident),*];
    };
}

scripts! {
    0 MUTEX_ACQUIRE = "mutex_acquire";
    1 MUTEX_RELEASE = "mutex_release";
    2 MUTEX_RENEW = "mutex_renew";
    3 MUTEX_INSPECT = "mutex_inspect";
    4 MUTEX_FORCE_RELEASE = "mutex_force_release";
    5 FAIR_ACQUIRE = "fair_acquire";
    6 FAIR_RELEASE = "fair_release";
    7 FAIR_CANCEL = "fair_cancel";
    8 FAIR_FORCE_RELEASE = "fair_force_release";
    9 RW_READ_ACQUIRE = "rw_read_acquire";
    10 RW_WRITE_ACQUIRE = "rw_write_acquire";
    11 RW_READ_RELEASE = "rw_read_release";
    12 RW_WRITE_RELEASE = "rw_write_release";
    13 RW_READ_RENEW = "rw_read_renew";
    14 RW_FORCE_RELEASE = "rw_force_release";
    15 FENCING_RAISE = "fencing_raise";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense() {
        for (i, script) in ALL.iter().enumerate() {
            assert_eq!(script.index(), i, "{}", script.name());
            assert!(!script.source().is_empty());
        }
    }
}
