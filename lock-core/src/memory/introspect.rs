//! Who holds the memory backend's locks: read straight from the store.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryBackend, Mode};
use crate::backend::client_id_of;
use crate::{ClientInfo, Error, HeldAs, HolderInfo, Introspect, LockInfo, LockName};

#[async_trait]
impl Introspect for MemoryBackend {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let now = Instant::now();
        let mut store = self.store();
        let key = name.as_str();
        let mut info = LockInfo::free(key);
        info.fencing_token = store.tokens.get(key).copied().filter(|token| *token > 0);
        if store.describe_exclusive(key, now, &mut info) {
            return Ok(Self::with_clients(&store, info, now));
        }
        let Some(entry) = store.live(key, now) else {
            return Ok(Self::with_clients(&store, info, now));
        };
        info.held_as = match entry.mode {
            None => HeldAs::Exclusive,
            Some(Mode::Read) => HeldAs::Read,
            Some(Mode::Write) => HeldAs::Write,
        };
        info.lease_left = Some(entry.expires.saturating_duration_since(now));
        for (field, held) in &entry.fields {
            // A writer's field is `<owner>:write`; its read holds (a downgrade) are the
            // owner's own field.
            let owner = field.strip_suffix(":write").unwrap_or(field);
            let live: Vec<_> = held
                .grants
                .iter()
                .filter(|grant| grant.expires.is_none_or(|expires| expires > now))
                .collect();
            if live.is_empty() {
                continue;
            }
            let mut holder = HolderInfo::new(owner, u32::try_from(live.len()).unwrap_or(u32::MAX));
            holder.since = Some(held.since);
            holder.lease_left = live
                .iter()
                .filter_map(|grant| grant.expires)
                .max()
                .map(|expires| expires.saturating_duration_since(now));
            info.holders.push(holder);
        }
        Ok(Self::with_clients(&store, info, now))
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let now = Instant::now();
        let mut store = self.store();
        let mut names = store.exclusive_names(now);
        names.extend(
            store
                .locks
                .iter()
                .filter(|(_, entry)| entry.expires > now)
                .map(|(name, _)| name.clone()),
        );
        names.retain(|name| name.starts_with(prefix));
        names.truncate(limit);
        Ok(names)
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        let until = Instant::now() + ttl;
        self.store()
            .clients
            .insert(client_id.to_owned(), (client.clone(), until));
        Ok(())
    }
}

impl MemoryBackend {
    /// `info` with each holder's client, as it announced itself; holders sorted.
    fn with_clients(store: &super::Store, mut info: LockInfo, now: Instant) -> LockInfo {
        // Only the holders' own clients are looked up, once the holders are read.
        for holder in &mut info.holders {
            holder.client = store
                .clients
                .get(client_id_of(&holder.owner))
                .filter(|(_, until)| *until > now)
                .map(|(client, _)| client.clone());
        }
        info.holders.sort_by(|a, b| a.owner.cmp(&b.owner));
        info
    }
}
