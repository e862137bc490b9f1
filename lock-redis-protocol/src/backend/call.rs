//! Running scripts: by SHA first, with their source when the server lost it, with or
//! without waiting for replicas; and a failed call classified as a lock-core error.

use lock_core::Error;

use super::code::{AfterFunction, functions_refused_error, functions_unavailable};
use super::{RedisBackend, unexpected};
use crate::calls::FixedCall;
use crate::error::WrongType;
use crate::script::{Script, ScriptCall, ScriptForm, library};
use crate::transport::{ReplicaWait, Reply, ServerError, Topology, TransportError};

impl RedisBackend {
    /// Runs a script that writes a hold (acquire, renew): with replica acknowledgement
    /// on, also returns how many replicas confirmed (else `None`).
    pub(super) async fn eval_write(
        &self,
        during: &'static str,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<(Reply, Option<u32>), Error> {
        match self.options.replica_ack {
            None => self
                .eval(during, script, keys, args)
                .await
                .map(|r| (r, None)),
            Some((replicas, timeout)) => {
                if self.transport.topology() == Topology::Cluster {
                    return Err(Error::invalid_config(
                        "replica acknowledgement is not supported on Redis Cluster",
                        None,
                    ));
                }
                let wait = ReplicaWait { replicas, timeout };
                let limit = Some(self.transport.response_timeout() * 2 + timeout);
                let sent = self.send_loading(script, keys, args, |call| {
                    TransportError::within(limit, self.transport.send_then_wait(call, wait))
                });
                let (reply, acks) = sent
                    .await
                    .map_err(|err| script_failed(err, during, script, keys, args))?;
                match acks {
                    Reply::Int(acks) => Ok((reply, Some(u32::try_from(acks).unwrap_or(0)))),
                    other => Err(unexpected("WAIT", &other)),
                }
            }
        }
    }

    /// Runs a declared call.
    pub(super) async fn run<'a, C, const K: usize, const A: usize>(
        &self,
        during: &'static str,
        call: &C,
    ) -> Result<Reply, Error>
    where
        C: FixedCall<'a, K, A>,
    {
        self.eval(during, C::SCRIPT, &call.keys(), &call.args())
            .await
    }

    /// Runs a script.
    pub(super) async fn eval(
        &self,
        during: &'static str,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, Error> {
        let limit = (!self.transport.bounds_its_calls()).then(|| self.transport.response_timeout());
        self.send_loading(script, keys, args, |call| {
            TransportError::within(limit, self.transport.send(call))
        })
        .await
        .map_err(|err| script_failed(err, during, script, keys, args))
    }
}

impl RedisBackend {
    /// Sends a call as this client's [`CodeForm`] says: as a function, loading the
    /// library where it is missing; or as a script by SHA, with its source (which loads
    /// it) where the server does not know it (after a restart or `SCRIPT FLUSH`). In a
    /// cluster, each form is routed by the first key, so it lands on the node that needs
    /// it. A call refused for its form did not run, and is sent again in another.
    async fn send_loading<'a, T, F, Fut>(
        &self,
        script: &'static Script,
        keys: &'a [&'a str],
        args: &'a [&'a str],
        send: F,
    ) -> Result<T, TransportError>
    where
        F: Fn(ScriptCall<'a>) -> Fut,
        Fut: Future<Output = Result<T, TransportError>>,
    {
        let mut call = ScriptCall {
            script,
            keys,
            args,
            form: self.code.form(),
        };
        if call.form == ScriptForm::Function {
            let seen = self.code.loads();
            let err = match send(call).await {
                Err(TransportError::Server(err)) => err,
                done => return done,
            };
            match self.code.after_function(&err) {
                AfterFunction::Fail => return Err(TransportError::Server(err)),
                AfterFunction::Refused => return Err(functions_refused_error(&err)),
                AfterFunction::TurnToScripts => {}
                AfterFunction::Load => {
                    let limit = Some(self.transport.response_timeout());
                    let source = library().source();
                    let load = TransportError::within(limit, self.transport.load_library(source));
                    let loaded = self.code.load_once(seen, load).await;
                    match loaded {
                        Ok(()) => return send(call).await,
                        Err(load) if !self.code.after_failed_load(&load) => {
                            return Err(functions_unavailable(load));
                        }
                        Err(_) => {}
                    }
                }
            }
            call.form = ScriptForm::BySha;
        }
        match send(call).await {
            Err(TransportError::Server(err)) if err.code == "NOSCRIPT" => {
                call.form = ScriptForm::WithSource;
                send(call).await
            }
            other => other,
        }
    }
}

/// A command a script ran was refused (an ACL without it): Redis names the script line,
/// not the command. Finds the command on that line (a literal, or the `KEYS`/`ARGV`
/// element it names) and says which one it was.
fn name_refused_command(
    server: ServerError,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> ServerError {
    let refused = server.code == "NOPERM" || server.message.contains("can't run this command");
    // A script's lines are its source's; a function's, the library's.
    let at = |marker: &str| {
        let (_, rest) = server.message.rsplit_once(marker)?;
        rest.trim_end_matches('.').trim().parse::<usize>().ok()
    };
    let text = if let Some(line) = at("@user_script:") {
        script.source().lines().nth(line.saturating_sub(1))
    } else if let Some(line) = at("@user_function:") {
        library().line(line)
    } else {
        None
    };
    let (true, Some(text)) = (refused, text) else {
        return server;
    };
    let command = Some(text)
        .and_then(|text| {
            text.split_once("redis.call(")
                .or_else(|| text.split_once("redis.pcall("))
        })
        .and_then(|(_, call)| call.split([',', ')']).next())
        .map(str::trim)
        .and_then(|first| {
            let index = |prefix: &str| {
                first
                    .strip_prefix(prefix)?
                    .strip_suffix(']')?
                    .parse::<usize>()
                    .ok()
            };
            if let Some(i) = index("ARGV[") {
                args.get(i.checked_sub(1)?).map(|a| (*a).to_owned())
            } else if let Some(i) = index("KEYS[") {
                keys.get(i.checked_sub(1)?).map(|k| (*k).to_owned())
            } else if let Some(field) = first.strip_prefix("m.") {
                // A helper's table of the script's settings names them as the script's
                // declaration does (`m.publish`: the argument `publish`).
                declared_arg(script, field, args)
            } else {
                Some(first.trim_matches('\'').to_owned())
            }
        });
    match command {
        Some(command) => ServerError::new(
            "NOPERM",
            format!(
                "the server refused `{command}` in the lock script `{}` (ACL): {}",
                script.name(),
                server.message
            ),
        ),
        None => server,
    }
}

/// The argument of `script`'s call that its declaration names `name`.
fn declared_arg(script: &Script, name: &str, args: &[&str]) -> Option<String> {
    let declared = crate::calls::DECLARED
        .iter()
        .find(|declared| std::ptr::eq(declared.script, script))?;
    let at = declared.args.iter().position(|arg| *arg == name)?;
    args.get(at).map(|arg| (*arg).to_owned())
}

/// A script call's failure as a lock-core error, naming the command an ACL refused.
fn script_failed(
    err: TransportError,
    during: &'static str,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> Error {
    let err = match err {
        TransportError::Server(server) => {
            TransportError::Server(name_refused_command(server, script, keys, args))
        }
        other => other,
    };
    classify(err, during, keys.first().copied().unwrap_or(""))
}

fn classify(err: TransportError, during: &'static str, key: &str) -> Error {
    match err {
        TransportError::Server(server)
            if server.code == "WRONGTYPE" || server.message.contains("WRONGTYPE") =>
        {
            let said = server.message.as_str();
            let found = said
                .split_once("WRONGTYPE")
                .map_or(said, |(_, rest)| rest)
                .trim();
            let found = if found.is_empty() {
                "it holds another Redis type than expected"
            } else {
                found
            };
            Error::incompatible(
                key,
                WrongType {
                    key: key.to_owned(),
                    found: found.to_owned(),
                },
            )
        }
        // The command did not run where it was sent (a slot moved, a node is loading or
        // became a replica): like a broken connection, it is sent again.
        TransportError::Server(server) if not_run_here(&server) => {
            Error::connection(during, server)
        }
        // Out of memory, or busy running another script: the same request may pass later.
        TransportError::Server(server) if matches!(server.code.as_str(), "OOM" | "BUSY") => {
            Error::backend_retryable(during, server)
        }
        TransportError::Server(server) => Error::backend(during, server),
        TransportError::Io(source) => Error::connection(during, source),
    }
}

/// Error replies that mean the server did not run the command.
fn not_run_here(server: &ServerError) -> bool {
    matches!(
        server.code.as_str(),
        "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "READONLY" | "MASTERDOWN"
    )
}
