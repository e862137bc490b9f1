//! The locks: the handles ([`Lock`](crate::Lock), [`RwLock`](crate::RwLock)), how an
//! acquisition asks and waits, the guards and the holds they share, and the clocks of
//! their leases.

pub(crate) mod acquire;
pub(crate) mod answered;
mod attempt;
pub(crate) mod guard;
pub(crate) mod handed;
pub(crate) mod handle;
pub(crate) mod hold;
pub(crate) mod holder;
pub(crate) mod lease;
pub(crate) mod turns;
