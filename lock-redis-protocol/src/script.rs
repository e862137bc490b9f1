//! The Lua scripts, kept once for every Redis adapter.

use std::fmt;
use std::sync::OnceLock;

mod library;
mod prelude;

pub use library::{Library, library};

/// A Lua script run atomically by Redis.
///
/// It is sent by SHA1 (`EVALSHA`), and with its source (`EVAL`, which loads it) when the
/// server answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`); see [`ScriptCall`].
pub struct Script {
    index: usize,
    name: &'static str,
    /// The script's own code.
    body: &'static str,
    /// The prelude's helpers it calls, then `body`: what the server runs.
    source: OnceLock<String>,
    sha1: OnceLock<String>,
}

impl Script {
    /// A short name for logs and errors.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source: the helpers of the prelude the script calls, then its own code.
    #[must_use]
    pub fn source(&self) -> &str {
        self.source.get_or_init(|| prelude::with_helpers(self.body))
    }

    /// The script's own code, without the prelude: it opens with the header that says
    /// what each key and argument is.
    #[must_use]
    pub fn body(&self) -> &'static str {
        self.body
    }

    /// The SHA1 of the source, in lowercase hex, as `EVALSHA` wants it.
    #[must_use]
    pub fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| sha1_smol::Sha1::from(self.source()).digest().to_string())
    }

    /// Plants a defect back in the source this process sends: the first `from` in the
    /// script's source (its helpers included) becomes `to`. The server then runs the
    /// defect under the source's own SHA1, beside the real script. Only before the
    /// script's first use in the process; for the test that shows a check catches it.
    ///
    /// # Errors
    ///
    /// When the script was used already, or its source has no `from`.
    #[cfg(feature = "mutants")]
    pub fn plant_defect(&self, from: &str, to: &str) -> Result<(), String> {
        if library::built() {
            return Err(format!(
                "{}: the function library was built already in this process",
                self.name
            ));
        }
        let source = prelude::with_helpers(self.body);
        if !source.contains(from) {
            return Err(format!("{}: no {from:?} to plant a defect in", self.name));
        }
        self.source
            .set(source.replacen(from, to, 1))
            .map_err(|_| format!("{}: already used in this process", self.name))
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
                body: include_str!(concat!("scripts/", $file, ".lua")),
                source: OnceLock::new(),
                sha1: OnceLock::new(),
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
    16 LATCH_SET = "latch_set";
    17 LATCH_COUNT_DOWN = "latch_count_down";
    18 LATCH_COUNT = "latch_count";
    19 LATCH_DELETE = "latch_delete";
    20 SEMAPHORE_SET = "semaphore_set";
    21 SEMAPHORE_ADD = "semaphore_add";
    22 SEMAPHORE_ACQUIRE = "semaphore_acquire";
    23 SEMAPHORE_RELEASE = "semaphore_release";
    24 SEMAPHORE_READ = "semaphore_read";
    25 EXPIRABLE_ISSUE = "expirable_issue";
    26 EXPIRABLE_RELEASE = "expirable_release";
    27 EXPIRABLE_RENEW = "expirable_renew";
    28 EXPIRABLE_READ = "expirable_read";
    29 SEMAPHORE_UNRESERVE = "semaphore_unreserve";
    30 MUTEX_CANCEL = "mutex_cancel";
    31 LOCK_DESCRIBE = "lock_describe";
    32 CLIENT_ANNOUNCE = "client_announce";
    33 CLIENT_READ = "client_read";
    34 LOCKS_SCAN = "locks_scan";
    35 CLUSTER_SLOTS = "cluster_slots";
}

/// How a script call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptForm {
    /// `EVALSHA sha1 ...`: the usual way of scripts, cheap on the wire.
    BySha,
    /// `EVAL source ...`: after `NOSCRIPT`; it also loads the script for later calls.
    WithSource,
    /// `FCALL function ...`: the script's function in the [`library`] (Redis 7).
    Function,
}

/// One call of a [`Script`] with its keys and arguments, ready for a driver: the command
/// name and its arguments in order. In a cluster it is routed by `keys[0]` (every key
/// shares its slot).
#[derive(Debug, Clone, Copy)]
pub struct ScriptCall<'a> {
    /// The script (every script is a static of this module).
    pub script: &'static Script,
    /// Its keys (`KEYS`).
    pub keys: &'a [&'a str],
    /// Its arguments (`ARGV`).
    pub args: &'a [&'a str],
    /// By SHA or with its source.
    pub form: ScriptForm,
}

impl ScriptCall<'_> {
    /// `EVALSHA`, `EVAL` or `FCALL`.
    #[must_use]
    pub fn command(&self) -> &'static str {
        match self.form {
            ScriptForm::BySha => "EVALSHA",
            ScriptForm::WithSource => "EVAL",
            ScriptForm::Function => "FCALL",
        }
    }

    /// How many arguments the command has after its name: the body, the number of keys,
    /// the keys and the arguments.
    #[must_use]
    pub fn arg_count(&self) -> usize {
        2 + self.keys.len() + self.args.len()
    }

    /// The bytes of the command's name and arguments together (not counting the
    /// protocol's framing): what a driver's buffer for it needs at least.
    #[must_use]
    pub fn byte_len(&self) -> usize {
        // The number of keys has at most 20 digits.
        self.command().len()
            + self.body().len()
            + 20
            + self
                .keys
                .iter()
                .chain(self.args)
                .map(|s| s.len())
                .sum::<usize>()
    }

    /// The first argument: the SHA1, the source or the function's name. The number of
    /// keys, the keys and the arguments follow it.
    #[must_use]
    pub fn body(&self) -> &'static str {
        match self.form {
            ScriptForm::BySha => self.script.sha1(),
            ScriptForm::WithSource => self.script.source(),
            ScriptForm::Function => library().function(self.script),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense() {
        for (i, script) in ALL.iter().enumerate() {
            assert_eq!(script.index(), i, "{}", script.name());
            assert!(!script.source().is_empty());
            assert_eq!(script.sha1().len(), 40);
        }
    }

    #[test]
    fn the_sha1_is_the_one_redis_computes() {
        // Redis' own example: `SCRIPT LOAD "return 1"` answers this SHA1.
        let script = Script {
            index: 0,
            name: "example",
            body: "return 1",
            source: OnceLock::new(),
            sha1: OnceLock::new(),
        };
        assert_eq!(script.sha1(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}
