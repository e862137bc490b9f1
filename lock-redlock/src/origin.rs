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

/// The origin a majority of `majority` nodes reports for the hold, if one does: the
/// grant whose hold RedLock's majority has. A node that reports another origin kept an
/// older hold of the same owner (a revocation that did not reach it), and must not hide
/// the majority's answer: a guard of that older hold has lost its majority.
pub(crate) fn majority_origin(
    origins: impl Iterator<Item = Option<RequestId>>,
    majority: usize,
) -> Option<RequestId> {
    let mut counted: Vec<(RequestId, usize)> = Vec::new();
    for origin in origins.flatten() {
        match counted.iter_mut().find(|(seen, _)| *seen == origin) {
            Some((_, count)) => *count += 1,
            None => counted.push((origin, 1)),
        }
    }
    counted
        .into_iter()
        .find(|&(_, count)| count >= majority)
        .map(|(origin, _)| origin)
}

#[cfg(test)]
mod tests {
    use super::{common_origin, majority_origin};
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

    #[test]
    fn a_majority_gives_its_origin_though_a_minority_disagrees() {
        let (a, b) = (RequestId::random(), RequestId::random());
        assert_eq!(
            majority_origin([Some(a), Some(a), Some(b)].into_iter(), 2),
            Some(a)
        );
        assert_eq!(
            majority_origin([Some(b), Some(a), Some(a)].into_iter(), 2),
            Some(a)
        );
        assert_eq!(
            majority_origin([Some(a), None, Some(a)].into_iter(), 2),
            Some(a)
        );
        assert_eq!(
            majority_origin([Some(a), Some(b), None].into_iter(), 2),
            None
        );
        assert_eq!(majority_origin([Some(a), Some(a)].into_iter(), 3), None);
        assert_eq!(majority_origin(std::iter::empty(), 1), None);
    }
}
