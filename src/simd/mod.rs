//! CPU kernels of the decoder, one file per instruction set, always ending in the scalar one.
//!
//! The level is detected once (`is_x86_feature_detected!`) and cached. The environment variable
//! `BREVIS_CPU` (`scalar`, `avx2` or `avx512`) can only lower it: asking for a level the CPU
//! lacks keeps the detected one lower. Every level computes exactly the same words; `tests/simd.rs` compares
//! each with the scalar kernels on odd lengths and every width.
//!
//! Kernels:
//! * [`unpack`]: LSB-first bit-packed values of `bits` bits into u8/u16/u32/u64 words
//!   (AVX2 level: BMI2 `pdep` expands eight values per instruction pair).
//! * [`merge_fields`]: `(sign << top) | (head << lo) | low`, the inverse of `fields`
//!   (AVX2 level: sixteen 16-bit words per iteration for bf16/fp16).
//! * [`merge_planes`]: `(hi << shift) | lo`, the inverse of two byte planes.
//!
//! * [`palette`]: a `palette(g)`'s words from its groups' distinct words
//!   and its indices (AVX2 level: groups of 16 and 32 words, each group's words a prefix sum in
//!   vectors and its indices looked up by byte shuffles).
//! * [`pack_u8`]: the encoder's packing of bytes, the inverse of [`unpack_u8`] (AVX2 level: BMI2
//!   `pext`, the inverse of `unpack`'s `pdep`).
//!
//! The AVX-512 level has its own lanes decoder refill (`coder::lanes`) and its own
//! [`from_runs_steps`] (`avx512.rs`: the AVX2 kernel's transposes do not fit in 16 registers);
//! the other kernels run their AVX2 versions there.

#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod derive;
pub mod iq4;
pub mod kquants;
pub mod scalar;

use derive::{Kind, Src};
use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar = 1,
    /// AVX2 and BMI2 (x86-64).
    Avx2 = 2,
    /// The AVX2 level plus AVX-512 F, BW and VL and POPCNT (x86-64: Intel Skylake-SP and later,
    /// AMD Zen 4 and later).
    Avx512 = 3,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

/// The best level this CPU supports, ignoring `BREVIS_CPU`.
pub fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("bmi2") {
            if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("popcnt") {
                return Isa::Avx512;
            }
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The level for a `BREVIS_CPU` value: the detected level, lowered to the requested one.
/// An unknown value keeps the detected level.
pub fn lowered(detected: Isa, request: Option<&str>) -> Isa {
    let wanted = match request.map(|s| s.trim().to_ascii_lowercase()) {
        Some(s) if s == "scalar" => Isa::Scalar,
        Some(s) if s == "avx2" => Isa::Avx2,
        Some(s) if s == "avx512" => Isa::Avx512,
        _ => detected,
    };
    wanted.min(detected)
}

static ISA: AtomicU8 = AtomicU8::new(0);

/// The level the kernels run at: detected once, lowered by `BREVIS_CPU`.
pub fn isa() -> Isa {
    match ISA.load(Ordering::Relaxed) {
        1 => Isa::Scalar,
        2 => Isa::Avx2,
        3 => Isa::Avx512,
        _ => {
            let l = lowered(detected(), std::env::var("BREVIS_CPU").ok().as_deref());
            ISA.store(l as u8, Ordering::Relaxed);
            l
        }
    }
}

/// [`derive::derive_groups`] at the CPU's level.
pub fn derive(kind: Kind, src: Src, reference: &[u8], e0: usize, out: &mut [u8]) {
    derive_at(isa(), kind, src, reference, e0, out)
}

/// [`derive`] at a given level (lowered to what the CPU has).
pub fn derive_at(isa: Isa, kind: Kind, src: Src, reference: &[u8], e0: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { avx2::derive(kind, src, reference, e0, out) };
    }
    scalar::derive(kind, src, reference, e0, out)
}

/// Whether this CPU's hardware gather (`vpgatherdd`) beats eight scalar loads in a latency-bound
/// table-lookup loop: Intel's cores (one instruction of a few micro-ops; on an Intel Xeon with
/// AVX-512 the lanes decoder runs 13% faster with it, `cargo bench --bench lanes`), not AMD's,
/// whose gathers are microcoded (Zen 2 to 4: several times the micro-ops and slower than scalar
/// loads; Zen 5 measured no faster). Detected once from the CPU's vendor; the bytes decoded are
/// the same either way.
pub fn fast_gather() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let id = std::arch::x86_64::__cpuid(0);
            // "GenuineIntel", in the order EBX, EDX, ECX.
            (id.ebx, id.edx, id.ecx) == (0x756E_6547, 0x4965_6E69, 0x6C65_746E)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Levels this CPU can run, lowest first (for tests and benchmarks).
pub fn available() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= detected()).collect()
}

/// Word types of streams.
pub trait Lane: Copy + Default + Send + Sync + 'static {
    const BITS: u32;
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! lane {
    ($t:ty) => {
        impl Lane for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline(always)]
            fn to_u64(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
        }
    };
}
lane!(u8);
lane!(u16);
lane!(u32);
lane!(u64);

fn check_unpack(data: &[u8], bits: u32, n: usize, word_bits: u32) {
    assert!(bits >= 1 && bits <= word_bits && (n as u128 * bits as u128).div_ceil(8) == data.len() as u128);
}

/// As [`check_unpack`], `data` holding at least the values' bytes.
fn check_unpack_from(data: &[u8], bits: u32, n: usize, word_bits: u32) {
    assert!(bits >= 1 && bits <= word_bits && (n as u128 * bits as u128).div_ceil(8) <= data.len() as u128);
}

/// Unpacks `out.len()` values of `bits` bits (1..=8) from the start of the LSB-first bit stream
/// `data`, which holds at least `packed_len(out.len(), bits)` bytes: the bytes after the values
/// (the rest of a stream unpacked a block at a time) let the vector loop read whole 8-byte
/// windows up to the last values.
pub fn unpack_u8(data: &[u8], bits: u32, out: &mut [u8]) {
    unpack_u8_at(isa(), data, bits, out)
}

/// [`unpack_u8`] at a given level (lowered to what the CPU has).
pub fn unpack_u8_at(isa: Isa, data: &[u8], bits: u32, out: &mut [u8]) {
    check_unpack_from(data, bits, out.len(), 8);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 and BMI2 were detected on this CPU (every level from AVX2 up has them).
        return unsafe { avx2::unpack_u8(data, bits, out) };
    }
    let _ = isa;
    scalar::unpack(data, bits, out)
}

/// Packs byte values of `bits` bits (1..=8, values below `2^bits`) LSB-first, appended to `out`
/// (the inverse of [`unpack_u8`]; the same bytes as `coder::pack`).
#[inline]
pub fn pack_u8(values: &[u8], bits: u32, out: &mut Vec<u8>) {
    pack_u8_at(isa(), values, bits, out)
}

/// [`pack_u8`] at a given level (lowered to what the CPU has): from the AVX2 level, one BMI2
/// `pext` per eight values, else eight values at a time by shifts and masks.
#[inline]
pub fn pack_u8_at(isa: Isa, values: &[u8], bits: u32, out: &mut Vec<u8>) {
    assert!((1..=8).contains(&bits));
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 and BMI2 were detected on this CPU (every level from AVX2 up has them),
        // and `bits` is in 1..=8.
        return unsafe { avx2::pack_u8(values, bits, out) };
    }
    let _ = isa;
    scalar::pack_u8(values, bits, out)
}

/// Unpacks values of `bits` bits (1..=16) into u16 words, like [`unpack_u8`].
pub fn unpack_u16(data: &[u8], bits: u32, out: &mut [u16]) {
    unpack_u16_at(isa(), data, bits, out)
}

/// [`unpack_u16`] at a given level.
pub fn unpack_u16_at(isa: Isa, data: &[u8], bits: u32, out: &mut [u16]) {
    check_unpack_from(data, bits, out.len(), 16);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 and BMI2 were detected on this CPU (every level from AVX2 up has them).
        return unsafe { avx2::unpack_u16(data, bits, out) };
    }
    let _ = isa;
    scalar::unpack(data, bits, out)
}

/// Unpacks into any word type (scalar at every level: wide words are rare).
pub fn unpack<T: Lane>(data: &[u8], bits: u32, out: &mut [T]) {
    check_unpack(data, bits, out.len(), T::BITS);
    scalar::unpack(data, bits, out)
}

fn check_merge(a: usize, b: usize, c: usize, out: usize) {
    assert!(a == out && b == out && c == out, "kernel inputs of different lengths");
}

/// The inverse of `fields` for 16-bit words whose low mantissa part fits a byte (bf16, and fp16
/// with k >= 2): `out[i] = s[i] << 15 | h[i] << lo | m[i]`. Inputs are within their widths.
pub fn merge_fields16(h: &[u16], s: &[u8], m: &[u8], lo: u32, out: &mut [u16]) {
    merge_fields16_at(isa(), h, s, m, lo, out)
}

/// [`merge_fields16`] at a given level.
pub fn merge_fields16_at(isa: Isa, h: &[u16], s: &[u8], m: &[u8], lo: u32, out: &mut [u16]) {
    check_merge(h.len(), s.len(), m.len(), out.len());
    assert!(lo <= 8);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it).
        return unsafe { avx2::merge_fields16(h, s, m, lo, out) };
    }
    let _ = isa;
    scalar::merge_fields(h, s, m, lo, 15, out)
}

/// The inverse of `fields` for any word types: `out[i] = s[i] << top | h[i] << lo | m[i]`.
pub fn merge_fields<H: Lane, M: Lane, O: Lane>(h: &[H], s: &[u8], m: &[M], lo: u32, top: u32, out: &mut [O]) {
    check_merge(h.len(), s.len(), m.len(), out.len());
    scalar::merge_fields(h, s, m, lo, top, out)
}

/// [`merge_fields`] into a new vector, written once (no zero fill first).
pub fn merged_fields<H: Lane, M: Lane, O: Lane>(h: &[H], s: &[u8], m: &[M], lo: u32, top: u32) -> Vec<O> {
    check_merge(h.len(), s.len(), m.len(), h.len());
    scalar::merged_fields(h, s, m, lo, top)
}

/// The inverse of two byte planes of words up to 16 bits: `out[i] = hi[i] << shift | lo[i]`
/// (the high plane as bytes, or as 16-bit symbols below 256).
pub fn merge_planes16<H: RunWord>(hi: &[H], lo: &[u8], shift: u32, out: &mut [u16]) {
    merge_planes16_at(isa(), hi, lo, shift, out)
}

/// Runs of [`to_runs`]: the lanes of the `lanes` coder (`coder::lanes::LANES` is this constant).
pub const RUNS: usize = 32;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u16 {}
}

/// A word that [`to_runs`] moves: a byte or a 16-bit word (the AVX2 kernel loads 16 of them
/// into the 16-bit lanes of a vector). Sealed: implemented for `u8` and `u16` only.
pub trait RunWord: sealed::Sealed + Copy + Into<u16> {
    /// The low bits of a 16-bit word that fit (a symbol below 256 for a byte).
    fn narrow(v: u16) -> Self;
    /// # Safety
    /// The CPU must support AVX2, and 16 words must be readable from `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m256i;
    /// Stores the 16 words of `v` (narrowed, for bytes) at `p`.
    ///
    /// # Safety
    /// The CPU must support AVX2, and 16 words must be writable at `p`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn store16(p: *mut Self, v: std::arch::x86_64::__m256i);
}

#[cfg(not(target_arch = "x86_64"))]
impl RunWord for u8 {
    fn narrow(v: u16) -> u8 {
        v as u8
    }
}
#[cfg(not(target_arch = "x86_64"))]
impl RunWord for u16 {
    fn narrow(v: u16) -> u16 {
        v
    }
}

/// The coded order of `lanes(adj)`: `y[32 t + j] = x[r j + t]` with `r = n / 32` (run `j` of
/// `x` in lane `j`), then the last `n - 32 r` words as they are; `y` is as long as `x`.
pub fn to_runs<T: RunWord>(x: &[T], y: &mut [u16]) {
    to_runs_at(isa(), x, y)
}

/// [`to_runs`] at a given level.
pub fn to_runs_at<T: RunWord>(isa: Isa, x: &[T], y: &mut [u16]) {
    assert_eq!(x.len(), y.len());
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it); the lengths
        // are equal (asserted above).
        let t0 = unsafe { avx2::to_runs(x, y) };
        return scalar::to_runs(x, y, t0);
    }
    let _ = isa;
    scalar::to_runs(x, y, 0)
}

/// The inverse of [`to_runs`]: `x[r j + t] = y[32 t + j]`, then the last words; `x` is as long
/// as `y`.
pub fn from_runs(y: &[u16], x: &mut [u16]) {
    from_runs_at(isa(), y, x)
}

/// [`from_runs`] at a given level.
pub fn from_runs_at(isa: Isa, y: &[u16], x: &mut [u16]) {
    assert_eq!(x.len(), y.len());
    let whole = x.len() / RUNS * RUNS;
    // In groups of 16 steps (1 KiB of `y`), so that the reads stay in L1 while each run's 16
    // words are written together.
    for (g, block) in y[..whole].chunks(16 * RUNS).enumerate() {
        from_runs_steps_at(isa, block, x, 16 * g);
    }
    x[whole..].copy_from_slice(&y[whole..]);
}

/// Steps `t0..t0 + block.len() / 32` of [`from_runs`]: `x[r j + t0 + t] = block[32 t + j]` with
/// `r = x.len() / 32` (a decoder that writes a few steps at a time moves them while they are
/// in L1). `block` holds whole steps, and they are steps of `x`. Into bytes, each word is
/// narrowed to its low byte.
pub fn from_runs_steps<T: RunWord>(block: &[u16], x: &mut [T], t0: usize) {
    from_runs_steps_at(isa(), block, x, t0)
}

/// [`from_runs_steps`] at a given level.
pub fn from_runs_steps_at<T: RunWord>(isa: Isa, block: &[u16], x: &mut [T], t0: usize) {
    assert!(block.len().is_multiple_of(RUNS) && t0 + block.len() / RUNS <= x.len() / RUNS);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it), and AVX-512 F
        // and BW at the AVX-512 level; the block's steps are within `x` (asserted above).
        let done = unsafe {
            if isa.min(detected()) == Isa::Avx512 {
                avx512::from_runs_steps(block, x, t0)
            } else {
                avx2::from_runs_steps(block, x, t0)
            }
        };
        return scalar::from_runs_steps(block, x, t0, done);
    }
    let _ = isa;
    scalar::from_runs_steps(block, x, t0, 0)
}

/// Writes 4- or 5-bit quants (bytes, 32 per block, below 32) into the blocks of `body` (blocks
/// of `b` bytes): the low nibbles of values `j` and `16 + j` into byte `qs + j` of their block,
/// and with `qh`, bit 4 of value `j` into bit `j` of the little-endian `u32` at byte `qh`: the
/// quants of ggml's Q4_0/Q4_1 (without `qh`) and Q5_0/Q5_1 (with).
pub fn nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    nibble_blocks_at(isa(), vals, body, b, qs, qh)
}

/// [`nibble_blocks`] at a given level.
pub fn nibble_blocks_at(isa: Isa, vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    assert!(qs + 16 <= b && qh.is_none_or(|q| q + 4 <= b));
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it); the field
        // offsets lie within a block (asserted above).
        let done = unsafe { avx2::nibble_blocks(vals, body, b, qs, qh) };
        return scalar::nibble_blocks(vals, body, b, qs, qh, done);
    }
    let _ = isa;
    scalar::nibble_blocks(vals, body, b, qs, qh, 0)
}

/// Asks the CPU to bring the cache lines of `bytes` in to be written (a hint: no byte is read
/// or written). The decoders call it on what they write next, so that the lines arrive while
/// they decode rather than when they store.
#[inline]
pub fn prefetch_for_write(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
        let p = bytes.as_ptr();
        for i in (0..bytes.len()).step_by(64).chain(bytes.len().checked_sub(1)) {
            // SAFETY: a prefetch accesses no memory and cannot fault; the address lies within
            // `bytes`.
            unsafe { _mm_prefetch::<_MM_HINT_ET0>(p.add(i) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Writes 6-bit quants (bytes, 256 per block) into the blocks of `body` (blocks of `b` bytes),
/// as ggml's Q6_K holds them: value `128 n + 32 g + l` puts its low nibble in nibble `g >> 1` of
/// byte `ql + 64 n + 32 (g & 1) + l` and its bits 4-5 in bits `2 g` of byte `qh + 32 n + l`.
/// Bits 6-7 of each value are ignored.
pub fn six_bit_blocks(vals: &[u8], body: &mut [u8], b: usize, ql: usize, qh: usize) {
    six_bit_blocks_at(isa(), vals, body, b, ql, qh)
}

/// [`six_bit_blocks`] at a given level.
pub fn six_bit_blocks_at(isa: Isa, vals: &[u8], body: &mut [u8], b: usize, ql: usize, qh: usize) {
    assert!(ql + 128 <= b && qh + 64 <= b);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it); the field
        // offsets lie within a block (asserted above).
        return unsafe { avx2::six_bit_blocks(vals, body, b, ql, qh) };
    }
    let _ = isa;
    scalar::six_bit_blocks(vals, body, b, ql, qh)
}

/// Writes 4- or 5-bit quants (bytes, 256 per block) into the blocks of `body` (blocks of `b`
/// bytes), as ggml's Q4_K and Q5_K hold them: value `64 g + 32 h + l` puts its low nibble in
/// nibble `h` of byte `qs + 32 g + l` and, with `qh`, its bit 4 in bit `2 g + h` of byte
/// `qh + l`. The other bits of each value are ignored.
pub fn k_nibble_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    k_nibble_blocks_at(isa(), vals, body, b, qs, qh)
}

/// [`k_nibble_blocks`] at a given level.
pub fn k_nibble_blocks_at(isa: Isa, vals: &[u8], body: &mut [u8], b: usize, qs: usize, qh: Option<usize>) {
    assert!(qs + 128 <= b && qh.is_none_or(|q| q + 32 <= b));
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it); the field
        // offsets lie within a block (asserted above).
        return unsafe { avx2::k_nibble_blocks(vals, body, b, qs, qh) };
    }
    let _ = isa;
    scalar::k_nibble_blocks(vals, body, b, qs, qh)
}

/// Writes 2-bit quants (bytes, 256 per block) into the blocks of `body` (blocks of `b` bytes), as
/// ggml's Q2_K and TQ2_0 hold them: value `128 n + 32 j + l` in bits `2 j` of byte
/// `qs + 32 n + l`; with `hmask` (Q3_K), bit 2 of value `e` in bit `e / 32` of byte
/// `hmask + e % 32`. The other bits of each value are ignored.
pub fn crumb_blocks(vals: &[u8], body: &mut [u8], b: usize, qs: usize, hmask: Option<usize>) {
    crumb_blocks_at(isa(), vals, body, b, qs, hmask)
}

/// [`crumb_blocks`] at a given level.
pub fn crumb_blocks_at(isa: Isa, vals: &[u8], body: &mut [u8], b: usize, qs: usize, hmask: Option<usize>) {
    assert!(qs + 64 <= b && hmask.is_none_or(|h| h + 32 <= b));
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it); the field
        // offsets lie within a block (asserted above).
        return unsafe { avx2::crumb_blocks(vals, body, b, qs, hmask) };
    }
    let _ = isa;
    scalar::crumb_blocks(vals, body, b, qs, hmask)
}

/// [`merge_planes16`] at a given level.
pub fn merge_planes16_at<H: RunWord>(isa: Isa, hi: &[H], lo: &[u8], shift: u32, out: &mut [u16]) {
    check_merge(hi.len(), lo.len(), out.len(), out.len());
    assert!(shift <= 8);
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it).
        return unsafe { avx2::merge_planes16(hi, lo, shift, out) };
    }
    let _ = isa;
    scalar::merge_planes(hi, lo, shift, out)
}

/// The parts of a `palette(g)` (`dsl::ops::palette`): per group of `g` words its number of
/// distinct words less one (`count`) and its smallest word (`low`); the groups' other distinct
/// words as gaps from the one before (`gaps`, in group order); each word's rank among its
/// group's distinct words (`index`). `mask` keeps a sum within the words' bits.
pub struct PaletteParts<'a, T> {
    pub count: &'a [u8],
    pub low: &'a [T],
    pub gaps: &'a [T],
    pub index: &'a [u8],
    pub g: usize,
    pub mask: T,
}

/// A word of a palette (bytes and 16-bit words): added with wrap-around, and rebuilt by its own
/// AVX2 kernel.
pub trait PaletteWord: Copy + Default {
    /// `(self + other) & mask`.
    fn add(self, other: Self, mask: Self) -> Self;
    /// The AVX2 kernel for these words: where the scalar kernel goes on (group, gap), or None
    /// on damaged parts.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2(p: &PaletteParts<Self>, out: &mut [Self]) -> Option<(usize, usize)>;
}

/// `PaletteWord` for a word type and its AVX2 kernel.
macro_rules! palette_word {
    ($t:ty, $kernel:ident) => {
        impl PaletteWord for $t {
            #[inline(always)]
            fn add(self, other: $t, mask: $t) -> $t {
                self.wrapping_add(other) & mask
            }
            #[cfg(target_arch = "x86_64")]
            unsafe fn avx2(p: &PaletteParts<$t>, out: &mut [$t]) -> Option<(usize, usize)> {
                // SAFETY: the caller's promise.
                unsafe { avx2::$kernel(p, out) }
            }
        }
    };
}
palette_word!(u8, palette_u8);
palette_word!(u16, palette_u16);

/// The words of a palette's groups into `out` (`index.len()` words): group `j`'s distinct words
/// are `low[j]` and the running sums of its `count[j]` gaps, and each word is the distinct word
/// its index names. False when a count reaches past its group, the counts do not use up the
/// gaps, or an index is not below its group's count (`out` is then partly written).
pub fn palette<T: PaletteWord>(p: &PaletteParts<T>, out: &mut [T]) -> bool {
    palette_at(isa(), p, out)
}

/// [`palette`] at a given level (from the AVX2 level, groups of 16 and 32 words by byte
/// shuffles; 16-bit words as their low and high bytes looked up apart).
pub fn palette_at<T: PaletteWord>(isa: Isa, p: &PaletteParts<T>, out: &mut [T]) -> bool {
    assert!(out.len() == p.index.len() && p.g >= 1 && p.count.len() == p.index.len().div_ceil(p.g));
    #[cfg(target_arch = "x86_64")]
    if isa.min(detected()) >= Isa::Avx2 {
        // SAFETY: AVX2 was detected on this CPU (every level from AVX2 up has it).
        return match unsafe { T::avx2(p, out) } {
            Some((from, at)) => scalar::palette(p, from, at, out),
            None => false,
        };
    }
    let _ = isa;
    scalar::palette(p, 0, 0, out)
}
