//! The simulation's one source of randomness: `ChaCha8`, seeded, so that a seed replays a
//! run exactly (`ChaCha`'s output for a seed is fixed across releases of `rand_chacha`).

use std::time::Duration;

use rand::seq::IndexedRandom;
use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded generator with the draws the simulation makes.
#[derive(Debug, Clone)]
pub(crate) struct Rng(ChaCha8Rng);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.0.random_range(0..bound)
        }
    }

    /// True with probability `percent` in 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        let percent = u32::try_from(percent.min(100)).unwrap_or(100);
        self.0.random_ratio(percent, 100)
    }

    /// A duration of a whole number of milliseconds in `0..max_ms`. Whole: the runtime's
    /// timers count milliseconds from an instant a few microseconds off its clock's, and a
    /// deadline with a fraction of a millisecond would fall in one tick or the next
    /// depending on that offset, so that a run would not replay.
    pub(crate) fn millis_below(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.below(max_ms))
    }

    /// One of `items` (which must not be empty).
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        *items.choose(&mut self.0).expect("picking from no items")
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let first: Vec<u64> = (0..8).map(|_| a.below(u64::MAX)).collect();
        assert!(first.iter().zip(first.iter().skip(1)).all(|(x, y)| x != y));
        assert_eq!(first, (0..8).map(|_| b.below(u64::MAX)).collect::<Vec<_>>());
        assert_ne!(Rng::new(43).below(u64::MAX), first[0]);
        assert!((0..1000).all(|_| a.below(7) < 7));
    }
}
