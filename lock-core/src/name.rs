//! Validated lock names.

use std::fmt;
use std::sync::Arc;

use crate::Error;

/// The longest lock name accepted, in bytes. Backends allow far longer keys, but a name
/// this long is a bug in the caller (a serialized payload used as a name, say).
pub const MAX_NAME_LEN: usize = 4096;

/// A lock's name: non-empty, at most [`MAX_NAME_LEN`] bytes. Cheap to clone.
///
/// Backends store the lock under this name and derive everything else of the lock (its
/// notification channel, its counters) from it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::invalid_argument(
                "name",
                "a lock name must not be empty",
            ));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::invalid_argument(
                "name",
                format!(
                    "a lock name must be at most {MAX_NAME_LEN} bytes, this one has {}",
                    name.len()
                ),
            ));
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name as given.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_and_oversized_names() {
        assert!(LockName::new("").unwrap_err().is_invalid_input());
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(LockName::new(&long).unwrap_err().is_invalid_input());
        assert_eq!(
            LockName::new("order:42")
                .map(|n| n.to_string())
                .ok()
                .as_deref(),
            Some("order:42")
        );
    }
}
