//! Estimates of coding leaves kept while one sample's programs are compared
//! ([`with_memo`]): the finalists of a tensor and their twins mostly differ in one leaf, so the
//! same leaf is estimated on the same stream again and again (a `fields` split's mantissa
//! `lanes`, a sign's `raw`), and each estimate is a pass over the stream with its tables.

use super::stream::{Data, Stream};
use super::Node;
use std::cell::RefCell;
use std::collections::HashMap;

/// A leaf and what it codes: the leaf's wire form and a hash of its stream, its siblings
/// (a context) and the reference.
type Key = (Vec<u8>, u64);

thread_local! {
    static MEMO: RefCell<Option<HashMap<Key, Option<usize>>>> = const { RefCell::new(None) };
}

/// Runs `f` with estimates of coding leaves kept on this thread: each leaf estimated on a
/// stream is estimated once (its appended length, or that it does not apply).
pub fn with_memo<R>(f: impl FnOnce() -> R) -> R {
    /// Puts back the memo that was there, also when `f` panics.
    struct Restore(Option<HashMap<Key, Option<usize>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            MEMO.with(|m| *m.borrow_mut() = prev);
        }
    }
    let _restore = Restore(MEMO.with(|m| m.replace(Some(HashMap::new()))));
    f()
}

/// The key of `leaf` coding `x` (with `sib` and `reference`), where a memo is kept.
pub(super) fn key(leaf: &Node, x: &Stream, sib: &[Stream], reference: Option<&Stream>) -> Option<Key> {
    if !MEMO.with(|m| m.borrow().is_some()) {
        return None;
    }
    let mut h = Vec::with_capacity(8 * (3 + sib.len()));
    for s in std::iter::once(x).chain(sib).chain(reference) {
        h.extend_from_slice(&stream_hash(s).to_le_bytes());
    }
    h.extend_from_slice(&(sib.len() as u64 | (u64::from(reference.is_some()) << 32)).to_le_bytes());
    Some((leaf.to_bytes(), crate::hash::xxh3_64(&h)))
}

/// The estimate kept for `key`: Some(Some(bytes appended)), Some(None) where the leaf does not
/// apply, None where there is none.
pub(super) fn get(key: &Key) -> Option<Option<usize>> {
    MEMO.with(|m| m.borrow().as_ref().and_then(|m| m.get(key).copied()))
}

/// Keeps `value` for `key`.
pub(super) fn put(key: Key, value: Option<usize>) {
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.insert(key, value);
        }
    });
}

fn stream_hash(s: &Stream) -> u64 {
    let bytes: &[u8] = match &s.data {
        Data::U8(d) => d,
        Data::U16(d) => bytemuck::cast_slice(d),
        Data::U32(d) => bytemuck::cast_slice(d),
        Data::U64(d) => bytemuck::cast_slice(d),
    };
    crate::hash::xxh3_64(bytes) ^ (u64::from(s.ty.bits) << 56) ^ (s.len() as u64).rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::super::build::*;
    use super::super::stream::{Stream, Ty};
    use super::super::Node;

    /// With estimates kept, every program's estimated length is the one it has without, also
    /// the second time and for programs that share leaves, and a leaf that does not apply still
    /// does not.
    #[test]
    fn kept_estimates_are_the_estimates() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u16
        };
        let skewed: Vec<u8> = (0..40_000).flat_map(|_| (next() % 64 + (next() % 3) * 1024).to_le_bytes()).collect();
        let wide: Vec<u8> = (0..40_000u32).flat_map(|i| (i as u16).wrapping_mul(40_503).to_le_bytes()).collect();
        let programs = [
            lanes(),
            rans(),
            huffman(),
            zstd(9),
            fields(5, 10, 2, [lanes(), raw(), raw()]),
            fields(5, 10, 2, [rans(), raw(), raw()]),
            fields(5, 10, 3, [lanes(), raw(), lanes()]),
            byteplanes(vec![lanes(), raw()]),
        ];
        for data in [&skewed, &wide] {
            let x = Stream::from_le_bytes(Ty::u(16), data).unwrap();
            let plain: Vec<Option<usize>> = programs.iter().map(|p| p.estimated_len_with(&x, &[], None).ok()).collect();
            let kept: Vec<Option<usize>> = Node::with_estimates_kept(|| {
                programs.iter().chain(&programs).map(|p| p.estimated_len_with(&x, &[], None).ok()).collect()
            });
            assert_eq!(kept[..programs.len()], plain[..]);
            assert_eq!(kept[programs.len()..], plain[..]);
            assert!(plain.iter().any(Option::is_some));
        }
        let x = Stream::from_le_bytes(Ty::u(16), &wide).unwrap();
        assert!(lanes().estimated_len_with(&x, &[], None).is_err(), "lanes codes at most 4095 symbols");
    }
}
