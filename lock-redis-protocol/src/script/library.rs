//! The scripts as one Redis Functions library (Redis 7): every helper of the prelude is
//! defined once, when the server loads the library, instead of on every call.
//!
//! Each script becomes a function of the library, called by `FCALL <function> numkeys
//! keys... args...` exactly as `EVALSHA` calls the script. The scripts read `KEYS` and
//! `ARGV`, which a function does not have as globals: the library declares them as two
//! locals that every helper and function sees, and each function sets them to its own
//! keys and arguments before it runs. A server runs one function at a time to its end,
//! so no call sees another's.
//!
//! The library's name carries a hash of its code (`distlock_<12 hex digits>`), and so do
//! its functions' names: clients of different versions of this crate each find their own
//! library on a server, side by side, and a library is never replaced under a client
//! that needs it. Loading is idempotent (`FUNCTION LOAD REPLACE` of the same code).

use std::fmt;
use std::sync::OnceLock;

use super::{ALL, Script, prelude};

/// The function library: its name, its Lua source and its functions' names.
pub struct Library {
    name: String,
    source: String,
    /// The function of each script, by [`Script::index`].
    functions: Vec<String>,
}

impl Library {
    /// The library's name, `distlock_<12 hex digits of its code's SHA1>`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source `FUNCTION LOAD` takes, shebang line first.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The name `FCALL` calls `script` by.
    #[must_use]
    pub fn function(&self, script: &Script) -> &str {
        &self.functions[script.index()]
    }

    /// Line `line` of the source (1 is the shebang line), as the server counts the lines
    /// it names in errors (`@user_function:<line>`).
    #[must_use]
    pub fn line(&self, line: usize) -> Option<&str> {
        self.source.lines().nth(line.checked_sub(1)?)
    }
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.name)
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

static LIBRARY: OnceLock<Library> = OnceLock::new();

/// The library of every script in [`ALL`], built on first use.
#[must_use]
pub fn library() -> &'static Library {
    LIBRARY.get_or_init(|| build(ALL))
}

/// Whether the library was built already (a defect planted after that would not be in
/// it).
#[cfg(feature = "mutants")]
pub(super) fn built() -> bool {
    LIBRARY.get().is_some()
}

/// What a script's function runs: its own code, with the library's helpers in scope.
/// A script whose source was changed in this process (a planted defect) carries that
/// source whole, its helpers defined inside the function: they shadow the library's.
fn code_of(script: &Script) -> std::borrow::Cow<'static, str> {
    #[cfg(feature = "mutants")]
    if script.source() != prelude::with_helpers(script.body()) {
        return std::borrow::Cow::Owned(script.source().to_owned());
    }
    std::borrow::Cow::Borrowed(script.body())
}

/// The function flags a script's header asks for, on a line `-- Function flags: <flag>,
/// ... (why)`: a script run by `EVAL` without flags may do what a function may only with
/// them (Redis 7 holds a function to the keys of one slot unless it is flagged
/// `allow-cross-slot-keys`).
fn flags_of(body: &str) -> impl Iterator<Item = &str> {
    body.lines()
        .find_map(|line| line.strip_prefix("-- Function flags: "))
        .map(|flags| flags.split(" (").next().unwrap_or_default())
        .into_iter()
        .flat_map(|flags| flags.split(','))
        .map(str::trim)
        .filter(|flag| !flag.is_empty())
}

/// `lua` without its comment lines and blank lines: the server compiles the library on
/// every load, and a client sends it whole where a server lacks it (the scripts' own
/// sources keep their comments).
fn without_comments(lua: &str) -> String {
    let mut code = String::with_capacity(lua.len());
    for line in lua.lines() {
        let trimmed = line.trim_start();
        if !trimmed.is_empty() && !trimmed.starts_with("--") {
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

/// What the library's name stands in for while its code is hashed: the name is the hash
/// of the code, function names included, so they carry this first and the name after.
const STAND_IN: &str = "distlock_000000000000";

/// Builds the library of `scripts`.
fn build(scripts: &[&Script]) -> Library {
    let mut code = String::from("local KEYS, ARGV\n");
    code.push_str(&without_comments(prelude::PRELUDE));
    for script in scripts {
        let flags = flags_of(script.body())
            .map(|flag| format!("'{flag}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let opening = format!(
            "redis.register_function{{function_name = '{STAND_IN}_{}', flags = {{{flags}}},\n\
             callback = function(keys, args)\nKEYS, ARGV = keys, args\n",
            script.name()
        );
        code.push_str(&opening);
        code.push_str(&without_comments(&code_of(script)));
        if !code.ends_with('\n') {
            code.push('\n');
        }
        code.push_str("end}\n");
    }
    let digest = sha1_smol::Sha1::from(&code).digest().to_string();
    let name = format!("distlock_{}", &digest[..12]);
    let source = format!("#!lua name={name}\n{}", code.replace(STAND_IN, &name));
    let functions = scripts
        .iter()
        .map(|script| format!("{name}_{}", script.name()))
        .collect();
    Library {
        name,
        source,
        functions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_a_function_named_after_the_library() {
        let library = library();
        assert!(library.name().starts_with("distlock_"));
        assert_eq!(library.name().len(), "distlock_".len() + 12);
        assert!(
            library
                .source()
                .starts_with(&format!("#!lua name={}\n", library.name()))
        );
        for script in ALL {
            let function = library.function(script);
            assert_eq!(function, format!("{}_{}", library.name(), script.name()));
            assert!(
                library
                    .source()
                    .contains(&format!("function_name = '{function}',")),
                "{function} is registered"
            );
        }
    }

    #[test]
    fn each_helper_is_defined_once() {
        let source = library().source();
        for line in prelude::PRELUDE.lines() {
            if let Some(rest) = line.strip_prefix("local function ") {
                let definition = format!("local function {rest}");
                assert_eq!(source.matches(&definition).count(), 1, "{definition}");
            }
        }
    }

    #[test]
    fn a_script_gets_the_flags_its_header_asks_for() {
        let scan = &crate::script::LOCKS_SCAN;
        assert_eq!(
            flags_of(scan.body()).collect::<Vec<_>>(),
            ["allow-cross-slot-keys"]
        );
        let function = library().function(scan);
        assert!(library().source().contains(&format!(
            "function_name = '{function}', flags = {{'allow-cross-slot-keys'}},"
        )));
        assert_eq!(flags_of("-- Function flags: a, b (why)\n").count(), 2);
        assert_eq!(flags_of(crate::script::MUTEX_ACQUIRE.body()).count(), 0);
    }

    #[test]
    fn the_library_carries_code_not_comments() {
        let source = library().source();
        assert!(source.lines().skip(1).all(|line| {
            let line = line.trim_start();
            !line.is_empty() && !line.starts_with("--")
        }));
        assert!(
            source.len() < prelude::PRELUDE.len() + 40_000,
            "{}",
            source.len()
        );
    }

    #[test]
    fn lines_are_counted_from_the_shebang() {
        let library = library();
        assert_eq!(library.line(1), library.source().lines().next());
        assert_eq!(library.line(0), None);
        assert_eq!(library.line(usize::MAX), None);
    }
}
