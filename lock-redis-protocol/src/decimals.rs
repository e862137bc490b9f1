//! Script arguments are strings: the numbers of one call, rendered into one buffer.

/// The decimal renderings of `N` numbers kept in one buffer, so that a script call's
/// numeric arguments cost one allocation instead of one each, and no trip through the
/// formatting machinery (every acquire and release sends several).
pub(crate) struct Decimals<const N: usize> {
    text: String,
    ends: [usize; N],
}

impl<const N: usize> Decimals<N> {
    /// Renders `numbers`, in order.
    pub(crate) fn new(numbers: [u128; N]) -> Self {
        let mut digits = itoa::Buffer::new();
        // Milliseconds of a lease or a window: a handful of digits each, as a rule.
        let mut text = String::with_capacity(N * 8);
        let ends = numbers.map(|n| {
            text.push_str(digits.format(n));
            text.len()
        });
        Self { text, ends }
    }

    /// The renderings, in the order of the numbers.
    pub(crate) fn get(&self) -> [&str; N] {
        let mut start = 0;
        self.ends.map(|end| {
            let rendered = &self.text[start..end];
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
        let decimals = Decimals::new([0, 7, 30_000, u128::from(u64::MAX), 12]);
        assert_eq!(
            decimals.get(),
            ["0", "7", "30000", "18446744073709551615", "12"]
        );
        assert_eq!(Decimals::<0>::new([]).get(), [""; 0]);
    }
}
