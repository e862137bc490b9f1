//! What the commands print: text for people, JSON (`--json`) for programs.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use distlock::{HolderInfo, LockInfo};
use serde_json::{Value, json};

/// Milliseconds, for JSON.
fn millis(duration: Option<Duration>) -> Value {
    duration.map_or(Value::Null, |d| {
        json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

/// Milliseconds since the epoch, for JSON.
fn epoch_millis(at: Option<SystemTime>) -> Value {
    millis(at.and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok()))
}

/// How long ago `at` was, for people.
fn ago(at: SystemTime) -> String {
    match SystemTime::now().duration_since(at) {
        Ok(ago) => format!("{} ago", seconds(ago)),
        Err(_) => "just now".to_owned(),
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

fn holder_json(holder: &HolderInfo) -> Value {
    let client = holder.client.as_ref().map_or(
        Value::Null,
        |client| json!({"name": client.name, "host": client.host, "pid": client.pid}),
    );
    let mut holder_json = json!({
        "owner": holder.owner,
        "client_id": holder.client_id(),
        "holds": holder.holds,
        "client": client,
        "since_epoch_ms": epoch_millis(holder.since),
    });
    // A holder's own lease only where it has one apart from the lock's (a reader's).
    if let Some(left) = holder.lease_left {
        holder_json["lease_left_ms"] = millis(Some(left));
    }
    holder_json
}

/// A lock's description.
pub(crate) fn lock(info: &LockInfo, json: bool) -> String {
    if json {
        return json!({
            "name": info.name,
            "held_as": info.held_as.as_str(),
            "holders": info.holders.iter().map(holder_json).collect::<Vec<_>>(),
            "lease_left_ms": millis(info.lease_left),
            "waiting": info.waiting,
            "fencing_token": info.fencing_token,
        })
        .to_string();
    }
    let mut text = format!("{}: {}", info.name, info.held_as.as_str());
    if let Some(left) = info.lease_left {
        // Writing to a String cannot fail.
        write!(text, ", lease left {}", seconds(left)).ok();
    }
    write!(text, ", {} waiting", info.waiting).ok();
    if let Some(token) = info.fencing_token {
        write!(text, ", last fencing token {token}").ok();
    }
    for holder in &info.holders {
        let who = holder.client.as_ref().map_or_else(
            || "a client that did not describe itself (a Java peer?)".to_owned(),
            |client| format!("{} (host {}, pid {})", client.name, client.host, client.pid),
        );
        write!(text, "\n  held by {who}\n    owner {}", holder.owner).ok();
        write!(text, ", {} hold(s)", holder.holds).ok();
        if let Some(since) = holder.since {
            write!(text, ", since {}", ago(since)).ok();
        }
        if let Some(left) = holder.lease_left {
            write!(text, ", its lease left {}", seconds(left)).ok();
        }
    }
    text
}

/// Held names (`prefix`: what they were asked to start with).
pub(crate) fn names(names: &[String], prefix: &str, json: bool) -> String {
    if json {
        return json!(names).to_string();
    }
    if names.is_empty() {
        return if prefix.is_empty() {
            "no lock is held".to_owned()
        } else {
            format!("no lock whose name starts with {prefix:?} is held")
        };
    }
    names.join("\n")
}

/// The function library loaded on every primary.
pub(crate) fn functions_loaded(library: &str, json: bool) -> String {
    if json {
        return json!({ "library": library, "loaded": true }).to_string();
    }
    format!("{library}: loaded on every primary")
}

/// A force-unlock's outcome: who held the lock before.
pub(crate) fn forced(before: &LockInfo, released: bool, json: bool) -> String {
    if json {
        return json!({
            "name": before.name,
            "released": released,
            "held_by": before.holders.iter().map(holder_json).collect::<Vec<_>>(),
        })
        .to_string();
    }
    if !released {
        return format!("{}: was free; nothing to unlock", before.name);
    }
    let mut text = format!("{}: force-unlocked; it was held by", before.name);
    for holder in &before.holders {
        let who = holder
            .client
            .as_ref()
            .map_or_else(|| holder.owner.clone(), |client| client.name.clone());
        write!(text, "\n  {who} (owner {})", holder.owner).ok();
    }
    text.push_str(
        "\nthe holder learns at its next renewal; its writes need fencing tokens to be refused",
    );
    text
}

#[cfg(test)]
mod tests {
    use distlock::{ClientInfo, HeldAs, HolderInfo, LockInfo};

    #[test]
    fn a_held_lock_in_text_and_json() {
        let mut info = LockInfo::free("order:42");
        info.held_as = HeldAs::Exclusive;
        info.fencing_token = Some(9);
        let mut holder = HolderInfo::new("c0ffee:1", 1);
        holder.client = Some(ClientInfo::new("orders-7", "web-3", 4242));
        info.holders.push(holder);
        let text = super::lock(&info, false);
        assert!(text.contains("order:42: exclusive"), "{text}");
        assert!(text.contains("orders-7 (host web-3, pid 4242)"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&super::lock(&info, true)).unwrap();
        assert_eq!(json["holders"][0]["client"]["name"], "orders-7");
        assert_eq!(json["holders"][0]["client_id"], "c0ffee");
        assert_eq!(json["fencing_token"], 9);
        // A holder without a lease of its own has no `lease_left_ms`, and its start is
        // named as an epoch time.
        assert!(json["holders"][0].get("lease_left_ms").is_none(), "{json}");
        assert!(json["holders"][0].get("since_epoch_ms").is_some(), "{json}");
    }

    #[test]
    fn no_held_lock_is_said_in_words() {
        assert_eq!(super::names(&[], "", false), "no lock is held");
        assert_eq!(
            super::names(&[], "order:", false),
            "no lock whose name starts with \"order:\" is held"
        );
        assert_eq!(super::names(&[], "", true), "[]");
        assert_eq!(super::names(&["a".to_owned()], "", false), "a");
    }
}
