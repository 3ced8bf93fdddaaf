//! Portable kernels: the reference every other level must match word for word.

use super::Lane;

/// See [`super::unpack_u8`]; any word type, `bits` at most its width.
pub fn unpack<T: Lane>(data: &[u8], bits: u32, out: &mut [T]) {
    if bits > 56 {
        // A value may straddle nine bytes: two loads.
        let mut bitpos = 0usize;
        for o in out.iter_mut() {
            let lo = load(data, bitpos >> 3) >> (bitpos & 7);
            let hi = if bitpos & 7 == 0 { 0 } else { load(data, (bitpos >> 3) + 8) << (64 - (bitpos & 7)) };
            *o = T::from_u64((lo | hi) & mask(bits));
            bitpos += bits as usize;
        }
        return;
    }
    let m = mask(bits);
    // Values whose 8-byte window lies inside the data: one unaligned load each.
    let fast = if data.len() >= 8 { ((data.len() - 8) * 8) / bits as usize + 1 } else { 0 }.min(out.len());
    let (head, tail) = out.split_at_mut(fast);
    let mut bitpos = 0usize;
    for o in head.iter_mut() {
        let b = bitpos >> 3;
        let w = u64::from_le_bytes(data[b..b + 8].try_into().unwrap());
        *o = T::from_u64((w >> (bitpos & 7)) & m);
        bitpos += bits as usize;
    }
    for o in tail.iter_mut() {
        *o = T::from_u64((load(data, bitpos >> 3) >> (bitpos & 7)) & m);
        bitpos += bits as usize;
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Eight bytes from `byte` on, zero past the end.
#[inline]
fn load(data: &[u8], byte: usize) -> u64 {
    let mut t = [0u8; 8];
    let rest = &data[byte.min(data.len())..];
    let k = rest.len().min(8);
    t[..k].copy_from_slice(&rest[..k]);
    u64::from_le_bytes(t)
}

/// See [`super::merge_fields`].
pub fn merge_fields<H: Lane, M: Lane, O: Lane>(h: &[H], s: &[u8], m: &[M], lo: u32, top: u32, out: &mut [O]) {
    for (((o, &h), &s), &m) in out.iter_mut().zip(h).zip(s).zip(m) {
        *o = O::from_u64(((s as u64) << top) | (h.to_u64() << lo) | m.to_u64());
    }
}

/// See [`super::merge_planes16`].
pub fn merge_planes(hi: &[u8], lo: &[u8], shift: u32, out: &mut [u16]) {
    for ((o, &h), &l) in out.iter_mut().zip(hi).zip(lo) {
        *o = ((h as u16) << shift) | l as u16;
    }
}

/// See [`super::to_runs`]: steps `from..` of the runs (and the words past the last run), in
/// blocks of 16 steps (1 KiB of `y`) so that each run is read 16 words at a time and the
/// block's writes stay in L1.
pub fn to_runs<T: Copy + Into<u16>>(x: &[T], y: &mut [u16], from: usize) {
    const LANES: usize = super::RUNS;
    let r = x.len() / LANES;
    for t0 in (from..r).step_by(16) {
        let tn = 16.min(r - t0);
        let block = &mut y[LANES * t0..LANES * (t0 + tn)];
        for j in 0..LANES {
            for (t, &v) in x[r * j + t0..r * j + t0 + tn].iter().enumerate() {
                block[LANES * t + j] = v.into();
            }
        }
    }
    for (o, &v) in y[LANES * r..].iter_mut().zip(&x[LANES * r..]) {
        *o = v.into();
    }
}

/// See [`super::from_runs`]: in blocks of 16 steps (1 KiB of `y`), so that the reads stay in L1
/// while each lane's 16 words are written together.
pub fn from_runs(y: &[u16], x: &mut [u16]) {
    const LANES: usize = super::RUNS;
    let (n, r) = (y.len(), y.len() / LANES);
    for t0 in (0..r).step_by(16) {
        let tn = 16.min(r - t0);
        let block = &y[LANES * t0..LANES * (t0 + tn)];
        for j in 0..LANES {
            for (t, o) in x[r * j + t0..r * j + t0 + tn].iter_mut().enumerate() {
                *o = block[LANES * t + j];
            }
        }
    }
    x[LANES * r..n].copy_from_slice(&y[LANES * r..]);
}
