//! The origin of a composite hold, from its parts'.

use lock_core::RequestId;

/// The origin every part reports for the hold, if they agree: the composite grant that
/// began every part's hold. Parts that disagree (one began again after losing its hold,
/// or kept a hold from an earlier attempt) give none, and the client falls back to the
/// hold counts.
pub(crate) fn common_origin(
    mut origins: impl Iterator<Item = Option<RequestId>>,
) -> Option<RequestId> {
    let first = origins.next()??;
    origins.all(|origin| origin == Some(first)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::common_origin;
    use lock_core::RequestId;

    #[test]
    fn parts_give_an_origin_only_when_all_agree() {
        let (a, b) = (RequestId::random(), RequestId::random());
        assert_eq!(common_origin([Some(a), Some(a)].into_iter()), Some(a));
        assert_eq!(common_origin([Some(a), Some(b)].into_iter()), None);
        assert_eq!(common_origin([Some(a), None].into_iter()), None);
        assert_eq!(common_origin([None, Some(a)].into_iter()), None);
        assert_eq!(common_origin(std::iter::empty()), None);
    }
}
