//! Script arguments are strings: the numbers of one call, rendered into one buffer.

/// The longest decimal rendering of a `u64`.
const LONGEST: usize = 20;
/// Room for four numbers, the most any script call renders at once.
const ROOM: usize = 4 * LONGEST;

/// The decimal renderings of `N` numbers (at most four) kept in one buffer on the stack,
/// so that a script call's numeric arguments cost no allocation and no trip through the
/// formatting machinery (every acquire and release sends several).
pub(crate) struct Decimals<const N: usize> {
    text: [u8; ROOM],
    ends: [usize; N],
}

impl<const N: usize> Decimals<N> {
    /// Renders `numbers`, in order.
    ///
    /// Never inlined: every acquire and release renders numbers, and one copy of this
    /// code (with `itoa`'s) serves them all, where inlined copies would each take room
    /// in the processor's instruction cache, which a lock/unlock pair overflows (see
    /// docs/benchmarks.md, stop 12).
    #[inline(never)]
    pub(crate) fn new(numbers: [u64; N]) -> Self {
        const { assert!(N * LONGEST <= ROOM, "room for at most four numbers") };
        let mut digits = itoa::Buffer::new();
        let mut text = [0; ROOM];
        let mut len = 0;
        let ends = numbers.map(|n| {
            let rendered = digits.format(n).as_bytes();
            text[len..len + rendered.len()].copy_from_slice(rendered);
            len += rendered.len();
            len
        });
        Self { text, ends }
    }

    /// The renderings, in the order of the numbers.
    pub(crate) fn get(&self) -> [&str; N] {
        // Only ASCII digits were written: one check covers them all (the empty fallback
        // never happens), and no cut between two of them splits a character.
        let len = self.ends.last().copied().unwrap_or(0);
        let text = std::str::from_utf8(&self.text[..len]).unwrap_or_default();
        let mut start = 0;
        self.ends.map(|end| {
            let rendered = text.get(start..end).unwrap_or_default();
            start = end;
            rendered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Decimals;

    #[test]
    fn renders_each_number_apart() {
        let decimals = Decimals::new([0, 30_000, u64::MAX]);
        assert_eq!(decimals.get(), ["0", "30000", "18446744073709551615"]);
        assert_eq!(Decimals::new([7, 12]).get(), ["7", "12"]);
        assert_eq!(Decimals::<0>::new([]).get(), [""; 0]);
    }
}
