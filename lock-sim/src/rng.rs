//! The simulation's one source of randomness: `SplitMix64`, seeded, so that a seed replays
//! a run exactly.

/// A seeded generator (`SplitMix64`).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }

    /// True with probability `percent` in 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration of a whole number of milliseconds in `0..max_ms`. Whole: the runtime's
    /// timers count milliseconds from an instant a few microseconds off its clock's, and a
    /// deadline with a fraction of a millisecond would fall in one tick or the next
    /// depending on that offset, so that a run would not replay.
    pub(crate) fn millis_below(&mut self, max_ms: u64) -> std::time::Duration {
        std::time::Duration::from_millis(self.below(max_ms))
    }

    /// One of `items`.
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        let at = usize::try_from(self.below(items.len() as u64)).unwrap_or(0);
        items[at]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let first: Vec<u64> = (0..8).map(|_| a.next()).collect();
        assert!(first.iter().zip(first.iter().skip(1)).all(|(x, y)| x != y));
        assert_eq!(first, (0..8).map(|_| b.next()).collect::<Vec<_>>());
        assert_ne!(Rng::new(43).next(), first[0]);
        assert!((0..1000).all(|_| a.below(7) < 7));
    }
}
