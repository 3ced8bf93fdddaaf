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

/// [`super::pack_u8`] without SIMD: eight values at a time, gathered into `bits` bytes by three
/// steps of shifts and masks.
pub fn pack_u8(values: &[u8], bits: u32, out: &mut Vec<u8>) {
    debug_assert!((1..=8).contains(&bits));
    #[inline(always)]
    fn gather(x: u64, bits: u32) -> u64 {
        let y = (x & 0x00FF_00FF_00FF_00FF) | ((x & 0xFF00_FF00_FF00_FF00) >> (8 - bits));
        let z = (y & 0x0000_FFFF_0000_FFFF) | ((y & 0xFFFF_0000_FFFF_0000) >> (16 - 2 * bits));
        (z & 0xFFFF_FFFF) | ((z >> 32) << (4 * bits))
    }
    if bits == 1 {
        // Eight 0/1 bytes to one byte, value `j` at bit `j`: the multiplication moves bit `8j`
        // to bit `56 + j` (and every other product below bit 56 or above bit 63).
        let pack8 = |g: &[u8]| {
            (u64::from_le_bytes(g.try_into().expect("8 values")).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
        };
        let groups = values.chunks_exact(8);
        let rest = groups.remainder();
        out.extend(groups.map(pack8));
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            out.push(pack8(&last));
        }
        return;
    }
    let (start, len) = (out.len(), (values.len() * bits as usize).div_ceil(8));
    // Each group of eight is stored as eight bytes, of which the next group overwrites all but
    // the first `bits`: room for the last store, cut off at the end.
    out.resize(start + len + 8, 0);
    let dst = &mut out[start..];
    let mut at = 0;
    let mut groups = values.chunks_exact(8);
    for g in &mut groups {
        let x = gather(u64::from_le_bytes(g.try_into().expect("8 values")), bits);
        dst[at..at + 8].copy_from_slice(&x.to_le_bytes());
        at += bits as usize;
    }
    let mut last = [0u8; 8];
    last[..groups.remainder().len()].copy_from_slice(groups.remainder());
    dst[at..at + 8].copy_from_slice(&gather(u64::from_le_bytes(last), bits).to_le_bytes());
    out.truncate(start + len);
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

/// See [`super::merged_fields`]: an exact-size iterator, collected in place.
pub fn merged_fields<H: Lane, M: Lane, O: Lane>(h: &[H], s: &[u8], m: &[M], lo: u32, top: u32) -> Vec<O> {
    h.iter()
        .zip(s)
        .zip(m)
        .map(|((&h, &s), &m)| O::from_u64(((s as u64) << top) | (h.to_u64() << lo) | m.to_u64()))
        .collect()
}

/// See [`super::merge_planes16`].
pub fn merge_planes<H: Copy + Into<u16>>(hi: &[H], lo: &[u8], shift: u32, out: &mut [u16]) {
    for ((o, &h), &l) in out.iter_mut().zip(hi).zip(lo) {
        *o = (h.into() << shift) | l as u16;
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

/// See [`super::from_runs_steps`], from step `from` of the block on.
pub fn from_runs_steps<T: super::RunWord>(block: &[u16], x: &mut [T], t0: usize, from: usize) {
    const LANES: usize = super::RUNS;
    let r = x.len() / LANES;
    for (t, step) in block.chunks_exact(LANES).enumerate().skip(from) {
        for (j, &v) in step.iter().enumerate() {
            x[r * j + t0 + t] = T::narrow(v);
        }
    }
}

/// See [`super::nibble_blocks`], from block `from` on.
pub fn nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>, from: usize) {
    for (blk, vs) in body.chunks_exact_mut(b).zip(vals.chunks_exact(32)).skip(from) {
        let (lo, hi) = vs.split_at(16);
        for ((d, l), u) in blk[qs..qs + 16].iter_mut().zip(lo).zip(hi) {
            *d = (l & 15) | (u & 15) << 4;
        }
        if let Some(q) = qh {
            let h = vs.iter().enumerate().fold(0u32, |h, (j, v)| h | (((v >> 4) & 1) as u32) << j);
            blk[q..q + 4].copy_from_slice(&h.to_le_bytes());
        }
    }
}

/// See [`super::six_bit_blocks`]: per half block, the 128 values as fixed-size arrays, so that
/// the compiler vectorizes the loop at any level (the AVX2 level compiles this same body).
#[inline(always)]
pub fn six_bit_blocks(vals: &[u8], body: &mut [u8], b: usize, ql: usize, qh: usize) {
    for (blk, vs) in body.chunks_exact_mut(b).zip(vals.chunks_exact(256)) {
        for n in 0..2 {
            let v: &[u8; 128] = vs[128 * n..128 * n + 128].try_into().unwrap();
            let (mut lo, mut hi) = ([0u8; 64], [0u8; 32]);
            for l in 0..32 {
                lo[l] = (v[l] & 15) | (v[64 + l] & 15) << 4;
                lo[32 + l] = (v[32 + l] & 15) | (v[96 + l] & 15) << 4;
                hi[l] =
                    (v[l] >> 4 & 3) | (v[32 + l] >> 4 & 3) << 2 | (v[64 + l] >> 4 & 3) << 4 | (v[96 + l] >> 4 & 3) << 6;
            }
            blk[ql + 64 * n..ql + 64 * n + 64].copy_from_slice(&lo);
            blk[qh + 32 * n..qh + 32 * n + 32].copy_from_slice(&hi);
        }
    }
}

/// See [`super::k_nibble_blocks`]: per block, the values in groups of 64 as fixed-size arrays
/// (vectorized at any level, like [`six_bit_blocks`]).
#[inline(always)]
pub fn k_nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    for (blk, vs) in body.chunks_exact_mut(b).zip(vals.chunks_exact(256)) {
        let (mut q, mut h) = ([0u8; 128], [0u8; 32]);
        for g in 0..4 {
            let v: &[u8; 64] = vs[64 * g..64 * g + 64].try_into().unwrap();
            for l in 0..32 {
                q[32 * g + l] = (v[l] & 15) | (v[32 + l] & 15) << 4;
                h[l] |= (v[l] >> 4 & 1) << (2 * g) | (v[32 + l] >> 4 & 1) << (2 * g + 1);
            }
        }
        blk[qs..qs + 128].copy_from_slice(&q);
        if let Some(o) = qh {
            blk[o..o + 32].copy_from_slice(&h);
        }
    }
}

/// See [`super::crumb_blocks`]: per block, the values in groups of 32 as fixed-size arrays
/// (vectorized at any level, like [`six_bit_blocks`]).
#[inline(always)]
pub fn crumb_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, hmask: Option<usize>) {
    for (blk, vs) in body.chunks_exact_mut(b).zip(vals.chunks_exact(256)) {
        let (mut q, mut h) = ([0u8; 64], [0u8; 32]);
        for g in 0..8 {
            let v: &[u8; 32] = vs[32 * g..32 * g + 32].try_into().unwrap();
            let (n, j) = (g / 4, g % 4);
            for l in 0..32 {
                q[32 * n + l] |= (v[l] & 3) << (2 * j);
                h[l] |= (v[l] >> 2 & 1) << g;
            }
        }
        blk[qs..qs + 64].copy_from_slice(&q);
        if let Some(o) = hmask {
            blk[o..o + 32].copy_from_slice(&h);
        }
    }
}

/// [`super::derive()`] without vector extensions beyond the target's baseline.
pub fn derive(kind: super::derive::Kind, src: super::derive::Src, reference: &[u8], e0: usize, out: &mut [u8]) {
    super::derive::derive_groups(kind, src, reference, e0, out, &super::kquants::Scalar)
}

/// See [`super::palette()`], from group `from` on, the groups before it having used the gaps
/// before `at`.
pub fn palette<T: super::PaletteWord>(p: &super::PaletteParts<T>, from: usize, mut at: usize, out: &mut [T]) -> bool {
    // Indices are bytes: a palette of 256 words takes any of them without a bounds check.
    let mut palette = [T::default(); 256];
    let groups = p.count.iter().zip(p.low).zip(p.index.chunks(p.g).zip(out.chunks_mut(p.g)));
    for ((&c, &lo), (ids, words)) in groups.skip(from) {
        let k = c as usize + 1;
        let Some(step) = p.gaps.get(at..at + k - 1) else { return false };
        at += k - 1;
        if k > ids.len() || ids.iter().fold(0u8, |m, &i| m.max(i)) as usize >= k {
            return false;
        }
        palette[0] = lo;
        for (j, &d) in step.iter().enumerate() {
            palette[j + 1] = palette[j].add(d, p.mask);
        }
        for (w, &i) in words.iter_mut().zip(ids) {
            *w = palette[i as usize];
        }
    }
    at == p.gaps.len()
}
