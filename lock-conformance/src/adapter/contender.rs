//! [`Contender`]: one member of a mixed fleet, whatever library it speaks for.

/// One contender of a fleet: it takes the lock, and gives it back, its own way.
pub(super) trait Contender: Send + 'static {
    fn take(&mut self) -> impl Future<Output = ()> + Send;
    fn give_back(&mut self) -> impl Future<Output = ()> + Send;
}
