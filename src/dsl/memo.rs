//! Estimates kept while one stream's programs are compared ([`with_memo`]): the finalists of
//! a tensor and their twins mostly differ in one leaf, so the same leaf is estimated on the same
//! stream again and again (a `fields` split's mantissa `lanes`, a sign's `raw`), and each
//! estimate is a pass over the stream with its tables. The transforms above the leaves repeat
//! too (the same `fields` split, the same `dict` under it): their output streams are kept, up
//! to [`PARTS_MAX`] bytes, and read back only when estimating, so that what is kept steers
//! choices and never what is written.

use super::stream::{Data, Stream};
use super::{Node, Op};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A leaf and what it codes: the leaf's wire form and a hash of its stream, its siblings
/// (a context) and the reference.
type Key = (Vec<u8>, u64);

/// What a transform reads: a hash of its stream and of the reference, and the position of the
/// stream's first element in its tensor.
pub(super) type PartsKey = (u64, u64);

/// Bytes of transform outputs kept at most (a few chunks' worth: a chunk's programs share
/// their first transforms).
pub const PARTS_MAX: usize = 4 << 20;

/// A transform kept on a stream: its operator, the header bytes it wrote and its streams.
type Kept = (Op, Vec<u8>, Rc<Vec<Stream>>);

#[derive(Default)]
struct Memo {
    leaves: HashMap<Key, Option<usize>>,
    parts: HashMap<PartsKey, Vec<Kept>>,
    parts_bytes: usize,
}

thread_local! {
    static MEMO: RefCell<Option<Memo>> = const { RefCell::new(None) };
}

/// Runs `f` with estimates kept on this thread: each leaf estimated on a stream is estimated
/// once (its appended length, or that it does not apply), and each transform's output is
/// kept for the estimates that follow.
pub fn with_memo<R>(f: impl FnOnce() -> R) -> R {
    /// Puts back the memo that was there, also when `f` panics.
    struct Restore(Option<Memo>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            MEMO.with(|m| *m.borrow_mut() = prev);
        }
    }
    let _restore = Restore(MEMO.with(|m| m.replace(Some(Memo::default()))));
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
    MEMO.with(|m| m.borrow().as_ref().and_then(|m| m.leaves.get(key).copied()))
}

/// Keeps `value` for `key`.
pub(super) fn put(key: Key, value: Option<usize>) {
    MEMO.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.leaves.insert(key, value);
        }
    });
}

/// The key of a transform `node` reading `x` (with `reference`; its first element is element
/// `elem_offset` of its tensor), where a memo is kept and `node` is a transform.
pub(super) fn parts_key(node: &Node, x: &Stream, reference: Option<&Stream>, elem_offset: u64) -> Option<PartsKey> {
    if node.is_leaf() || !MEMO.with(|m| m.borrow().is_some()) {
        return None;
    }
    let r = reference.map_or(0, |r| stream_hash(r).rotate_left(29) ^ 1);
    Some((stream_hash(x) ^ r, elem_offset))
}

/// The header bytes and streams kept for `op` at `key`.
pub(super) fn parts(key: &PartsKey, op: &Op) -> Option<(Vec<u8>, Rc<Vec<Stream>>)> {
    MEMO.with(|m| {
        let m = m.borrow();
        let kept = m.as_ref()?.parts.get(key)?;
        kept.iter().find(|k| k.0 == *op).map(|k| (k.1.clone(), Rc::clone(&k.2)))
    })
}

/// Keeps what `op` made at `key`, while the memo holds at most [`PARTS_MAX`] bytes of streams.
pub(super) fn keep_parts(key: PartsKey, op: &Op, header: &[u8], parts: &Rc<Vec<Stream>>) {
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let Some(m) = m.as_mut() else { return };
        let bytes: usize = parts.iter().map(|p| p.len() * p.ty.container_bytes()).sum();
        if m.parts_bytes + bytes > PARTS_MAX {
            return;
        }
        let kept = m.parts.entry(key).or_default();
        if !kept.iter().any(|k| k.0 == *op) {
            m.parts_bytes += bytes;
            kept.push((op.clone(), header.to_vec(), Rc::clone(parts)));
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

    /// A program encoded with the memo kept leaves its transforms' streams there, and the
    /// programs estimated after it that share them estimate as they do without: also a
    /// transform that writes a header (`dict`), and one that does not apply.
    #[test]
    fn kept_transforms_are_the_transforms() {
        let words: Vec<u8> = (0..30_000u32).flat_map(|i| ((i * i) % 977 * 65_537).to_le_bytes()).collect();
        let x = Stream::from_le_bytes(Ty::u(32), &words).unwrap();
        let programs = [
            fields(8, 23, 4, [lanes(), raw(), dict(raw(), lanes())]),
            fields(8, 23, 4, [rans(), raw(), dict(raw(), rans())]),
            fields(8, 23, 4, [lanes(), lanes(), dict(zstd(3), raw())]),
            dict(raw(), lanes()),
            dict(delta(1, raw()), huffman()),
        ];
        let plain: Vec<Option<usize>> = programs.iter().map(|p| p.estimated_len_with(&x, &[], None).ok()).collect();
        assert!(plain.iter().all(Option::is_some), "{plain:?}");
        for first in &programs {
            let kept: Vec<Option<usize>> = Node::with_estimates_kept(|| {
                let mut out = Vec::new();
                first.encode_with(&x, &[], None, &mut out).unwrap();
                programs.iter().map(|p| p.estimated_len_with(&x, &[], None).ok()).collect()
            });
            assert_eq!(kept, plain, "after {first}");
        }
        let distinct: Vec<u8> = (0..70_000u32).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
        let y = Stream::from_le_bytes(Ty::u(32), &distinct).unwrap();
        Node::with_estimates_kept(|| {
            for _ in 0..2 {
                assert!(dict(raw(), lanes()).estimated_len_with(&y, &[], None).is_err(), "too many words for dict");
            }
        });
    }
}
