//! Which form the scripts take on the wire: functions of the library (`FCALL`), or
//! scripts (`EVALSHA`), as [`ServerCode`] asks and the server allows.
//!
//! A client set to [`ServerCode::Auto`] starts with functions, and turns to scripts for
//! good the first time the server shows it cannot serve them: a server before Redis 7.0
//! (no `FCALL`), or an ACL that refuses `FCALL`, or `FUNCTION LOAD` when the library is
//! missing. Every refused call was not run, so it is sent again as a script at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::options::ServerCode;
use crate::script::{ScriptForm, library};
use crate::transport::{ServerError, TransportError};

/// The form this client sends its calls in.
#[derive(Debug)]
pub(super) struct CodeForm {
    setting: ServerCode,
    /// Set once an `Auto` client turned to scripts.
    scripts: AtomicBool,
    /// Held while this client loads the library: after a server lost it, the client's
    /// calls that find it missing load it once, not once each.
    loading: tokio::sync::Mutex<()>,
    /// How many times this client loaded the library: a call that found it missing
    /// before a load that ended meanwhile is sent again without loading it again.
    loads: AtomicU64,
}

/// What to do after a function call failed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterFunction {
    /// The library is missing here: load it, then call again.
    Load,
    /// Send the call as a script, now and from now on.
    TurnToScripts,
    /// The server cannot run functions for this client, which may not send scripts: the
    /// call fails with what [`functions_refused_error`] says.
    Refused,
    /// The failure is the call's own.
    Fail,
}

impl CodeForm {
    pub(super) fn new(setting: ServerCode) -> Self {
        Self {
            setting,
            scripts: AtomicBool::new(setting == ServerCode::Scripts),
            loading: tokio::sync::Mutex::new(()),
            loads: AtomicU64::new(0),
        }
    }

    /// How many loads this client made so far (see [`CodeForm::load_once`]).
    pub(super) fn loads(&self) -> u64 {
        self.loads.load(Ordering::Acquire)
    }

    /// Runs `load` unless a load ended since `seen` (what [`CodeForm::loads`] said before
    /// the call that found the library missing was sent), one load at a time.
    pub(super) async fn load_once<E>(
        &self,
        seen: u64,
        load: impl Future<Output = Result<(), E>>,
    ) -> Result<(), E> {
        let _one_at_a_time = self.loading.lock().await;
        if self.loads() != seen {
            return Ok(());
        }
        load.await?;
        self.loads.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The form of the next call.
    pub(super) fn form(&self) -> ScriptForm {
        if self.scripts.load(Ordering::Relaxed) {
            ScriptForm::BySha
        } else {
            ScriptForm::Function
        }
    }

    /// What a function call that failed with `err` asks for.
    pub(super) fn after_function(&self, err: &ServerError) -> AfterFunction {
        if function_missing(err) {
            AfterFunction::Load
        } else if functions_refused(err) && self.setting == ServerCode::Auto {
            self.turn_to_scripts(&err.to_string());
            AfterFunction::TurnToScripts
        } else if functions_refused(err) {
            AfterFunction::Refused
        } else {
            AfterFunction::Fail
        }
    }

    /// Loading the missing library failed with `err`: when the server refused it, an
    /// `Auto` client turns to scripts (true). Otherwise the call fails: with the
    /// connection's error, or with what [`functions_unavailable`] says.
    pub(super) fn after_failed_load(&self, err: &TransportError) -> bool {
        let TransportError::Server(refused) = err else {
            return false;
        };
        if self.setting != ServerCode::Auto {
            return false;
        }
        self.turn_to_scripts(&refused.to_string());
        true
    }

    fn turn_to_scripts(&self, why: &str) {
        if !self.scripts.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                library = library().name(),
                refused = why,
                "the server cannot run the lock functions for this client: sending scripts \
                 (EVALSHA) from now on; on Redis 7 or later, `distlock functions load <url>` \
                 loads them on every primary, and an ACL with +fcall lets clients use them"
            );
        }
    }
}

/// The server does not have the library (never loaded, or lost with a restart or a
/// `FUNCTION FLUSH`).
fn function_missing(err: &ServerError) -> bool {
    err.message.contains("Function not found")
}

/// The server cannot run `FCALL` at all: a version before 7.0, a renamed command, or an
/// ACL without it.
fn functions_refused(err: &ServerError) -> bool {
    let message = err.message.to_ascii_lowercase();
    (message.contains("unknown command") || err.code == "NOPERM") && message.contains("fcall")
}

/// The error of a call of a client set to functions on a server that refuses `FCALL`.
pub(super) fn functions_refused_error(refused: &ServerError) -> TransportError {
    TransportError::Server(ServerError::new(
        refused.code.clone(),
        format!(
            "this server cannot run the lock functions ({refused}): they need Redis 7.0 or \
             later and an ACL with +fcall; or set ServerCode::Scripts"
        ),
    ))
}

/// The error of a call whose function library is missing and could not be loaded: the
/// server's refusal, with what to do about it; a connection's failure as it is.
pub(super) fn functions_unavailable(load: TransportError) -> TransportError {
    let TransportError::Server(said) = load else {
        return load;
    };
    TransportError::Server(ServerError::new(
        "ERR",
        format!(
            "the server lacks the function library {} and this client could not load it \
             ({said}): run `distlock functions load <url>` with a user allowed FUNCTION \
             LOAD, or set ServerCode::Scripts",
            library().name()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str, message: &str) -> ServerError {
        ServerError::new(code, message)
    }

    #[test]
    fn a_missing_library_is_loaded_whatever_the_setting() {
        for setting in [ServerCode::Auto, ServerCode::Functions] {
            let form = CodeForm::new(setting);
            assert_eq!(form.form(), ScriptForm::Function);
            assert_eq!(
                form.after_function(&error("ERR", "Function not found")),
                AfterFunction::Load
            );
        }
    }

    #[test]
    fn an_auto_client_turns_to_scripts_where_fcall_is_unknown_or_refused() {
        for refusal in [
            error(
                "ERR",
                "unknown command 'FCALL', with args beginning with: 'x'",
            ),
            error("ERR", "unknown command `fcall`, with args beginning with: "),
            error(
                "NOPERM",
                "this user has no permissions to run the 'fcall' command",
            ),
        ] {
            let form = CodeForm::new(ServerCode::Auto);
            assert_eq!(form.after_function(&refusal), AfterFunction::TurnToScripts);
            assert_eq!(form.form(), ScriptForm::BySha, "for good");
            let strict = CodeForm::new(ServerCode::Functions);
            assert_eq!(strict.after_function(&refusal), AfterFunction::Refused);
            assert_eq!(strict.form(), ScriptForm::Function);
            let TransportError::Server(said) = functions_refused_error(&refusal) else {
                panic!("a server error");
            };
            assert!(said.message.contains("Redis 7.0"), "{said}");
        }
    }

    #[test]
    fn a_call_of_its_own_failing_changes_nothing() {
        let form = CodeForm::new(ServerCode::Auto);
        let own = error(
            "ERR",
            "The user executing the script can't run this command or subcommand script: \
             f, on @user_function:10.",
        );
        assert_eq!(form.after_function(&own), AfterFunction::Fail);
        assert_eq!(
            form.after_function(&error("WRONGTYPE", "x")),
            AfterFunction::Fail
        );
        assert_eq!(form.form(), ScriptForm::Function);
    }

    #[test]
    fn a_refused_load_turns_only_an_auto_client_to_scripts() {
        let refused = TransportError::Server(error(
            "NOPERM",
            "this user has no permissions to run the 'function|load' command",
        ));
        let form = CodeForm::new(ServerCode::Auto);
        assert!(form.after_failed_load(&refused));
        assert_eq!(form.form(), ScriptForm::BySha);
        let strict = CodeForm::new(ServerCode::Functions);
        assert!(!strict.after_failed_load(&refused));
        let broken = TransportError::Io("connection reset".into());
        assert!(!CodeForm::new(ServerCode::Auto).after_failed_load(&broken));
        assert_eq!(strict.form(), ScriptForm::Function);
        let TransportError::Server(said) = functions_unavailable(refused) else {
            panic!("a server error");
        };
        assert!(said.message.contains("distlock functions load"), "{said}");
    }

    #[tokio::test]
    async fn a_load_that_ended_meanwhile_is_not_run_again() {
        let form = CodeForm::new(ServerCode::Auto);
        let seen = form.loads();
        let ran = std::sync::atomic::AtomicU32::new(0);
        let load = || async {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok::<(), ()>(())
        };
        // Two calls found the library missing before either loaded it.
        form.load_once(seen, load()).await.unwrap();
        form.load_once(seen, load()).await.unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        // A call sent after that load finds it missing again (the server lost it).
        form.load_once(form.loads(), load()).await.unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 2);
        // A failed load counts for nothing.
        let seen = form.loads();
        assert!(form.load_once(seen, async { Err(()) }).await.is_err());
        form.load_once(seen, load()).await.unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_scripts_client_sends_scripts() {
        assert_eq!(CodeForm::new(ServerCode::Scripts).form(), ScriptForm::BySha);
    }
}
