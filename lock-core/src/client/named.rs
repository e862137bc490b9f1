//! [`Named`]: what every handle on a named object of a store holds: its client's shared
//! state and its name, checked when the handle is used (making a handle does no I/O and cannot fail).

use crate::backend::Capabilities;
use std::sync::Arc;

use crate::client::shared::Inner;
use crate::{Backend, Error, LockName};

/// A client and a name that is checked on use.
#[derive(Clone)]
pub(crate) struct Named {
    pub(crate) client: Arc<Inner>,
    name: Result<LockName, String>,
}

impl Named {
    pub(crate) fn new(client: &Arc<Inner>, name: &str) -> Self {
        let name = LockName::new(name).map_err(|err| match err {
            Error::InvalidArgument { reason, .. } => reason,
            other => other.to_string(),
        });
        Self {
            client: Arc::clone(client),
            name,
        }
    }

    /// The name as given; empty when it was refused.
    pub(crate) fn as_str(&self) -> &str {
        self.name.as_ref().map_or("", LockName::as_str)
    }

    /// The store of this kind of object and the checked name: refused when the name
    /// is, or when the backend does not declare `what` (`declared`): its capabilities
    /// are the only word on it.
    pub(crate) fn store<'a, T: ?Sized>(
        &'a self,
        declared: fn(&Capabilities) -> bool,
        store: fn(&'a dyn Backend) -> &'a T,
        what: &'static str,
    ) -> Result<(&'a T, &'a LockName), Error> {
        let name = self.checked()?;
        let inner = &self.client;
        let store = declared(&inner.capabilities)
            .then(|| store(&*inner.backend))
            .ok_or_else(|| Error::unsupported(what))?;
        Ok((store, name))
    }

    /// Refuses new work on the store once the client is shut down (see
    /// [`Locks::shutdown`](crate::Locks::shutdown)): what sets, adds, takes, counts down
    /// or deletes. Releases of what the client holds, and reads, still go.
    pub(crate) fn open(&self) -> Result<(), Error> {
        if self.client.supervisor.is_closed() {
            return Err(Error::ShutDown);
        }
        Ok(())
    }

    /// The checked name, or why it was refused.
    pub(crate) fn checked(&self) -> Result<&LockName, Error> {
        self.name
            .as_ref()
            .map_err(|reason| Error::invalid_argument("name", reason.clone()))
    }
}
