//! The key layout against Redisson's names, the scripts, and itself.

use super::*;
use crate::slot::key_slot;

fn name(s: &str) -> LockName {
    LockName::new(s).expect("valid name")
}

#[test]
fn the_wait_slot_reads_the_same_in_both_forms() {
    assert_eq!(REDISSON_WAIT_SLOT_TEXT, REDISSON_WAIT_SLOT_MS.to_string());
}

#[test]
fn the_scripts_build_a_clients_own_channel_as_the_layout_does() {
    let wake_id = format!("{WAKE_ID_PREFIX}1234");
    let own = own_channel(&wake_id);
    assert_eq!(own, format!("redisson_lock__channel:{wake_id}"));
    let prelude = include_str!("../scripts/prelude/waiting.lua");
    assert!(prelude.contains("return 'redisson_lock__channel:' .. wake_id"));
    // Never a lock's channel: those always hold the name's hash tag.
    assert!(!own.contains('{'));
    assert!(mutex_channel(&name("distlock-wake:1234")).contains('{'));
    assert!(is_own_channel(&own));
    assert!(!is_own_channel(&mutex_channel(&name("distlock-wake:1234"))));
}

#[test]
fn every_slot_has_a_tag() {
    for slot in [0, 1, 5461, 12182, 16383] {
        assert_eq!(key_slot(&tag_for_slot(slot)), slot);
    }
}

#[test]
fn keys_spell_out_their_layout() {
    let id = RequestId::random();
    for (plain, tag) in [("order:42", "{order:42}"), ("a{t}b", "a{t}b")] {
        let n = name(plain);
        assert_eq!(tagged(&n), tag);
        assert_eq!(reservation_key(&n), format!("redisson_lock_reserved:{tag}"));
        assert_eq!(token_key(&n), format!("redisson_lock_token:{tag}"));
        assert_eq!(
            waiting_clients_key(&n),
            format!("redisson_lock_waiting:{tag}")
        );
        assert_eq!(
            fair_queue_keys(&n),
            [
                format!("redisson_lock_queue:{tag}"),
                format!("redisson_lock_timeout:{tag}"),
                format!("redisson_lock_waiter_alive:{tag}"),
            ]
        );
        assert_eq!(
            fair_waiter_channel(&n, "c:1"),
            format!("redisson_lock__channel:{tag}:c:1")
        );
        assert_eq!(rw_channel(&n), format!("redisson_rwlock:{tag}"));
        assert_eq!(
            read_hold_prefix(&n, "c:1"),
            format!("{tag}:c:1:rwlock_timeout")
        );
        assert_eq!(
            grant_latch_key(&n, id),
            format!("redisson_lock_latch:{tag}:{id}")
        );
        assert_eq!(
            release_latch_key(&n, id),
            format!("redisson_unlock_latch:{tag}:{id}")
        );
        assert_eq!(
            count_down_answer_key(&n, id),
            format!("{tag}:redisson_latch_count_down:{id}")
        );
        assert_eq!(semaphore_channel(&n), format!("redisson_sc:{tag}"));
        assert_eq!(
            permit_answer_key(&n, id),
            format!("{tag}:redisson_sc_request:{id}")
        );
        assert_eq!(
            permit_reservation_key(&n),
            format!("redisson_sc_reserved:{tag}")
        );
        assert_eq!(permit_timeouts_key(&n), format!("{tag}:timeout"));
    }
}

#[test]
fn a_requests_keys_in_one_buffer_are_the_layouts_keys() {
    let other = RequestId::random();
    for plain in [
        "order:42",
        "a{t}b",
        "a-name-long-enough-to-make-the-buffer-grow-twice",
    ] {
        let n = name(plain);
        let mut keys = Keys::new(&n);
        let at = [
            keys.grants("client:holder", true),
            keys.grant_latch(other),
            keys.mutex_channel(),
            keys.waiting_clients(),
            keys.reservation(),
            keys.token(),
        ];
        let built = at.map(|at| keys.get(at).to_owned());
        assert_eq!(
            built,
            [
                grants_key(&n, "client:holder", true),
                grant_latch_key(&n, other),
                mutex_channel(&n),
                waiting_clients_key(&n),
                reservation_key(&n),
                token_key(&n),
            ]
        );
    }
}

#[test]
fn follows_redisson() {
    assert_eq!(
        mutex_channel(&name("order:42")),
        "redisson_lock__channel:{order:42}"
    );
    assert_eq!(
        mutex_channel(&name("a{t}b")),
        "redisson_lock__channel:a{t}b"
    );
}

#[test]
fn our_latch_channel_shares_the_slot_of_the_latch() {
    for n in ["ready", "{user:1}:ready", "a{t}b"] {
        let n = name(n);
        assert_eq!(
            key_slot(lock_key(&n)),
            key_slot(&latch_listen_channel(&n)),
            "{n}"
        );
    }
    // Java's channel for a hash-tagged name lies elsewhere; for a plain one it is ours.
    let tagged = name("{user:1}:ready");
    assert_ne!(
        key_slot(lock_key(&tagged)),
        key_slot(&latch_channel(&tagged))
    );
    assert_eq!(
        latch_listen_channel(&name("ready")),
        latch_channel(&name("ready"))
    );
}

#[test]
fn channel_shares_the_slot_of_the_lock() {
    for n in ["order:42", "x", "a{t}b", "{user:1}:cart"] {
        let n = name(n);
        assert_eq!(key_slot(lock_key(&n)), key_slot(&mutex_channel(&n)), "{n}");
        assert_eq!(
            key_slot(lock_key(&n)),
            key_slot(&reservation_key(&n)),
            "{n}"
        );
    }
}
