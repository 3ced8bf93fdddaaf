//! Forged sizes against the memory limit, proven by counting allocations: every length or count
//! field of a small archive is forged to huge values, and decoding under a memory limit must fail
//! with an error without ever requesting one allocation larger than the limit. A decompression
//! bomb (a tiny archive of a large original) is refused before its output is allocated. The
//! GGUF parser that compression runs allocates nothing beyond a small multiple of the file's size
//! whatever its header's counts and lengths say.
//!
//! A `#[global_allocator]` is per binary, so this file is its own test binary; its tests take a
//! lock so that only one measures at a time.

mod support;

use brevis::internals::coder::bitio::{put_varint, BitWriter};
use brevis::internals::container::{self, MAX_META_BYTES};
use brevis::internals::dsl::build::*;
use brevis::internals::dsl::{Node, Stream, Ty};
use brevis::{Archive, DecodeOptions, Error};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use support::st::*;
use xxhash_rust::xxh3::xxh3_64;

// ---------------------------------------------------------------------------------------------
// The counting allocator.
// ---------------------------------------------------------------------------------------------

struct Counting;

/// Bytes allocated and not yet freed, the most of them since the last reset, and the largest
/// single request since the last reset (counted even when the system refuses it).
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

fn note_alloc(size: usize) {
    LARGEST.fetch_max(size, SeqCst);
    let live = LIVE.fetch_add(size, SeqCst) + size;
    PEAK.fetch_max(live, SeqCst);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), SeqCst);
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), SeqCst);
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator (hence by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, SeqCst);
        // SAFETY: `ptr` was returned by `System` with `layout`; the caller upholds the rest.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as a new block before the old one is released: a moving realloc briefly
            // holds both.
            note_alloc(new_size);
            LIVE.fetch_sub(layout.size(), SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One measurement at a time (the test harness runs tests on several threads).
static MEASURING: Mutex<()> = Mutex::new(());

/// What a measured call allocated.
#[derive(Clone, Copy, Debug)]
struct Usage {
    /// The largest single allocation requested.
    largest: usize,
    /// The most bytes live at once, above what was live when the call began.
    peak: usize,
}

fn measure<T>(f: impl FnOnce() -> T) -> (T, Usage) {
    let base = LIVE.load(SeqCst);
    PEAK.store(base, SeqCst);
    LARGEST.store(0, SeqCst);
    let out = f();
    let usage = Usage { largest: LARGEST.load(SeqCst), peak: PEAK.load(SeqCst).saturating_sub(base) };
    (out, usage)
}

/// Headroom above the limit allowed for the peak of live bytes: the decoder's working tables,
/// whose size no archive field controls beyond fixed bounds. The largest is one rANS leaf with
/// a context: up to 64 tables of 2^16 six-byte slots, 24 MiB, built from a few dozen bytes
/// (measured: 25.2 MB live for "rans 64 contexts of 1 symbols"). The largest single
/// allocation gets no headroom; the largest fixed one is 1 MiB (the 2^16 u128 weights of a
/// rANS table of 65536 symbols), which the smallest limit here allows.
const PEAK_SLACK: usize = 28 << 20;

/// Decodes `archive` under `limit` in every way a caller can (whole file, and tensor by tensor
/// through an archive opened with the limit), on one thread; returns the whole-file result and
/// what was allocated.
fn decode_under(archive: &[u8], limit: u64) -> (brevis::Result<Vec<u8>>, Usage) {
    let opts = DecodeOptions::default().with_threads(1).with_memory_limit(limit).with_verify(true);
    measure(|| {
        let whole = brevis::decompress_with(archive, &opts);
        if let Ok(a) = Archive::open_with_limit(archive, limit) {
            for i in 0..a.len() {
                let _ = a.decode_tensor(i);
            }
        }
        whole
    })
}

/// Asserts that decoding gives an error (or, for a field that does not matter to decoding, the
/// original) and that no allocation exceeded the limit; returns whether it was an error.
fn assert_bounded(what: &str, archive: &[u8], original: &[u8], limit: u64) -> (bool, Usage) {
    let (r, u) = decode_under(archive, limit);
    assert!(r.as_ref().map_or(true, |v| v == original), "{what}: decoded to other bytes");
    assert!(u.largest as u64 <= limit, "{what}: one allocation of {} bytes, limit {limit}", u.largest);
    assert!(u.peak as u64 <= limit + PEAK_SLACK as u64, "{what}: {} bytes live at once, limit {limit}", u.peak);
    (r.is_err(), u)
}

/// Like [`assert_bounded`], and decoding must fail.
fn assert_refused(what: &str, archive: &[u8], original: &[u8], limit: u64) -> Usage {
    let (refused, u) = assert_bounded(what, archive, original, limit);
    assert!(refused, "{what}: decoded under a limit of {limit} bytes");
    u
}

fn worse(a: Usage, b: Usage) -> Usage {
    Usage { largest: a.largest.max(b.largest), peak: a.peak.max(b.peak) }
}

// ---------------------------------------------------------------------------------------------
// An archive built field by field, so that each field can be forged.
// ---------------------------------------------------------------------------------------------

/// One field of the decoded meta block (docs/FORMAT.md, "Meta frame").
#[derive(Clone, Debug)]
enum Field {
    /// A varint length, count, size or offset, with what it is.
    Varint(String, u64),
    U8(u8),
    U32(u32),
    U64(u64),
    Bytes(Vec<u8>),
}

/// The meta block as fields, and the chunk payloads.
#[derive(Clone)]
struct Parts {
    meta: Vec<Field>,
    payload: Vec<u8>,
}

fn meta_bytes(meta: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in meta {
        match f {
            Field::Varint(_, v) => put_varint(&mut out, *v),
            Field::U8(b) => out.push(*b),
            Field::U32(v) => out.extend(v.to_le_bytes()),
            Field::U64(v) => out.extend(v.to_le_bytes()),
            Field::Bytes(b) => out.extend(b),
        }
    }
    out
}

/// Header, payloads, the meta frame (zstd with `META_DICT`), footer (meta length, decoded
/// length, xxh3 of the frame, end magic): a valid archive around whatever the fields say.
fn assemble(payload: &[u8], meta: &[u8], raw_len: u64) -> Vec<u8> {
    let frame = zstd::bulk::Compressor::with_dictionary(1, container::META_DICT).unwrap().compress(meta).unwrap();
    let mut out = container::MAGIC.to_vec();
    out.extend(container::VERSION.to_le_bytes());
    out.extend([0u8; 6]);
    out.extend(payload);
    out.extend(&frame);
    out.extend((frame.len() as u64).to_le_bytes());
    out.extend(raw_len.to_le_bytes());
    out.extend(xxh3_64(&frame).to_le_bytes());
    out.extend(container::END_MAGIC);
    out
}

impl Parts {
    fn archive(&self) -> Vec<u8> {
        let meta = meta_bytes(&self.meta);
        assemble(&self.payload, &meta, meta.len() as u64)
    }
}

/// Chunk size of the built archive (bytes of original data per chunk).
const CHUNK_BYTES: usize = 4096;

/// A tensor of the original and the program that codes it.
struct Coded {
    name: &'static str,
    dtype: &'static str,
    word_bits: u32,
    data: Vec<u8>,
    program: Node,
}

fn coded_tensors() -> Vec<Coded> {
    let mut rng = Rng(7);
    let c = |name, dtype, word_bits, data, program| Coded { name, dtype, word_bits, data, program };
    let levels: Vec<u64> = (0..9).map(|_| rng.below(1 << 32)).collect();
    vec![
        c("prev", "U16", 16, words(2, 3000, |i| (i as u64 / 7) % 300), rans_back(1)),
        c("huff", "U8", 8, words(1, 5000, |i| (i * i % 13) as u64), huffman()),
        c("dict", "U32", 32, words(4, 2000, |i| levels[i * 7 % 9]), dict(raw(), rans())),
        c("lz", "U8", 8, words(1, 6000, |i| (i % 97) as u64), zstd(3)),
        c("raw", "I64", 64, rng.bytes(8 * 500), raw()),
        c("const", "F32", 32, words(4, 1000, |_| 1.0f32.to_bits() as u64), konst(1.0f32.to_bits() as u64)),
        c("planes", "F16", 16, data_for("F16", 1500, &mut rng, false), byteplanes(vec![rans(), huffman()])),
        c("lanes", "BF16", 16, data_for("BF16", 5000, &mut rng, false), fields(8, 7, 3, [lanes_prev(), raw(), raw()])),
        // Pruned words split by `sparse`: a mask per 8 words, and the others as floats.
        c(
            "sparse",
            "F16",
            16,
            words(2, 4000, |i| if i % 4 < 2 { 0 } else { 0x3000 + (i as u64 * 37) % 700 }),
            sparse(8, huffman(), fields(5, 10, 2, [rans(), raw(), raw()])),
        ),
        // A pruned tensor whose mask is coded with the density of its bits as the context.
        c(
            "pop",
            "F16",
            16,
            words(2, 40_000, |i| if (i * 7 / 384 + i * i) % 5 < 2 { 0x3000 + (i as u64 * 37) % 700 } else { 0 }),
            sparse(4, rans_pop(16), fields(5, 10, 2, [rans(), raw(), raw()])),
        ),
        // Words on a grid of 5 values per group of 32, split by `palette`.
        c(
            "palette",
            "BF16",
            16,
            words(2, 4000, |i| 0x3c00 + (i as u64 * 7 % 5) * 3 + (i as u64 / 32) * 11),
            palette(32, huffman(), raw(), lanes(), lanes_adj()),
        ),
        // Quantization blocks (ggml Q4_0) split by `blocks`: the edge bytes, the fp16 scales, the quants.
        c("quant", "Q4_0", 8, support::gguf::quant_blocks(&mut rng, 18, 200), quant_program()),
    ]
}

fn quant_program() -> Node {
    blocks(2, vec![raw(), fields(5, 10, 2, [rans(), raw(), raw()]), rans_prev()])
}

/// Spaces after the JSON header, so that forged numbers can replace shorter ones in place.
const JSON_SLACK: usize = 64;

/// A safetensors file of `coded_tensors()` (all described by its header: kind-1 entries) and
/// 3000 trailing bytes (a kind-0 byte-stream entry) and a record of the original's mode and time,
/// its archive as fields, and the header JSON.
fn build() -> (Vec<u8>, Parts, String) {
    let tensors = coded_tensors();
    let st: Vec<Tensor> = tensors
        .iter()
        .map(|t| {
            let n = t.data.len() as u64 / (t.word_bits as u64 / 8);
            tensor(t.name, t.dtype, &[n], t.data.clone())
        })
        .collect();
    let file_plain = file(&st, None);
    let json =
        format!("{}{}", std::str::from_utf8(&file_plain[8..data_start(&file_plain)]).unwrap(), " ".repeat(JSON_SLACK));
    let mut original = file_from_header(&json, &file_plain[data_start(&file_plain)..]);
    let json = std::str::from_utf8(&original[8..data_start(&original)]).unwrap().to_string();
    let trailing = Rng(9).bytes(3000);
    let trailing_at = original.len() as u64;
    original.extend(&trailing);

    let residue = original[..data_start(&original)].to_vec();
    let mut meta = vec![
        Field::Varint("original size".into(), original.len() as u64),
        Field::U64(xxh3_64(&original)),
        Field::U8(0),
        Field::Varint("chunk size".into(), CHUNK_BYTES as u64),
        // Format version 2: the residue model (verbatim, so that the header's numbers are forged as
        // they are stored).
        Field::U8(brevis::internals::container::header_model::VERBATIM),
        Field::Varint("residue length".into(), residue.len() as u64),
        Field::Bytes(residue),
        Field::Varint("entry count".into(), tensors.len() as u64 + 1),
    ];
    let mut payload = Vec::new();
    let mut entry = |meta: &mut Vec<Field>, name: &str, word_bits: u32, data: &[u8], program: &Node| {
        let p = program.to_bytes();
        meta.push(Field::Varint(format!("{name}: program length"), p.len() as u64));
        meta.push(Field::Bytes(p));
        if !program.reads_payload() {
            return;
        }
        let step = (CHUNK_BYTES / (word_bits as usize / 8)).max(1) * (word_bits as usize / 8);
        for (c, chunk) in data.chunks(step).enumerate() {
            let mut out = Vec::new();
            program.encode(&Stream::from_le_bytes(Ty::u(word_bits), chunk).unwrap(), &[], &mut out).unwrap();
            meta.push(Field::Varint(format!("{name}: chunk {c} length"), out.len() as u64));
            // Format version 13: a chunk of at most 64 KiB stores the low half of its hash.
            let elems = (chunk.len() / (word_bits as usize / 8)) as u64;
            meta.push(match container::short_check(container::VERSION, word_bits, elems) {
                true => Field::U32(xxh3_64(chunk) as u32),
                false => Field::U64(xxh3_64(chunk)),
            });
            payload.extend(out);
        }
    };
    for t in &tensors {
        meta.push(Field::U8(1));
        entry(&mut meta, t.name, t.word_bits, &t.data, &t.program);
    }
    meta.push(Field::U8(0));
    for (what, v) in [("name length", 0), ("dtype length", 0), ("ndim", 1), ("shape", trailing.len() as u64)] {
        meta.push(Field::Varint(format!("trailing: {what}"), v));
    }
    meta.push(Field::Varint("trailing: word bits".into(), 8));
    meta.push(Field::Varint("trailing: offset".into(), trailing_at));
    meta.push(Field::Varint("trailing: nbytes".into(), trailing.len() as u64));
    entry(&mut meta, "trailing", 8, &trailing, &raw());
    // Format version 3: the records; one, the original's mode 0644 and time 0.
    meta.push(Field::Varint("record count".into(), 1));
    meta.push(Field::U8(1));
    meta.push(Field::Varint("record: body length".into(), 4));
    meta.push(Field::Varint("record: mode".into(), 0o644));
    meta.extend([Field::U8(0), Field::U8(0)]);
    (original, Parts { meta, payload }, json)
}

/// The limits the forged archives are decoded under: the original (~40 KB) fits in each.
const LIMITS: [u64; 2] = [1 << 20, 16 << 20];

/// Values a forged field takes: within the larger limit, near it, far above it, and huge.
fn forged_values() -> [u64; 6] {
    [1 << 20, (1 << 24) + 1, 1 << 31, 1 << 40, 1 << 62, u64::MAX]
}

#[test]
fn the_built_archive_is_faithful_and_the_counter_counts() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    let archive = parts.archive();
    // Every program kind and the trailing entry are there, and the archive decodes exactly.
    let a = Archive::open(&archive).unwrap();
    assert_eq!(a.len(), coded_tensors().len() + 1);
    assert_eq!(a.file_meta(), Some(brevis::FileMeta { mode: 0o644, mtime: 0, mtime_nanos: 0 }));
    let opts = DecodeOptions::default().with_threads(1).with_memory_limit(1 << 20).with_verify(true);
    let (back, u) = measure(|| brevis::decompress_with(&archive, &opts).unwrap());
    assert_eq!(back, original);
    // The output buffer itself was counted.
    assert!(u.largest >= original.len() && u.peak >= original.len(), "{u:?}");
    // Under a limit below the original's size, the output is refused before it is allocated.
    let limit = original.len() as u64 - 1;
    let u = assert_refused("a limit one byte short", &archive, &original, limit);
    assert!(u.largest < original.len(), "{u:?}");
}

#[test]
fn forged_footer_sizes_allocate_nothing_beyond_the_limit() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    let meta = meta_bytes(&parts.meta);
    let archive = parts.archive();
    let footer = archive.len() - container::FOOTER_LEN;
    for &limit in &LIMITS {
        // The decoded length of the meta frame: larger, smaller, huge.
        let raw_lens =
            [0, 1, meta.len() as u64 - 1, meta.len() as u64 + 1, limit + 1, MAX_META_BYTES, MAX_META_BYTES + 1];
        for raw_len in raw_lens.into_iter().chain(forged_values()) {
            let forged = assemble(&parts.payload, &meta, raw_len);
            assert_refused(&format!("meta_raw_len {raw_len}"), &forged, &original, limit);
        }
        // The frame length (no longer covered by the footer's hash when it moves).
        for v in forged_values().into_iter().chain([0, 1, archive.len() as u64]) {
            let mut forged = archive.clone();
            forged[footer..footer + 8].copy_from_slice(&v.to_le_bytes());
            assert_refused(&format!("meta_len {v}"), &forged, &original, limit);
        }
    }
}

#[test]
fn a_meta_frame_bomb_is_refused_before_it_is_decoded() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    // 64 MiB of zeros in a frame of a few KB, declared honestly in the footer; then the same
    // frame declared as small as the real meta block.
    let bomb = vec![0u8; 64 << 20];
    let meta_len = meta_bytes(&parts.meta).len() as u64;
    for &limit in &LIMITS {
        for raw_len in [bomb.len() as u64, meta_len] {
            let forged = assemble(&parts.payload, &bomb, raw_len);
            assert!(forged.len() < 64 << 10);
            assert_refused(&format!("a 64 MiB meta frame declared as {raw_len} bytes"), &forged, &original, limit);
        }
    }
}

#[test]
fn every_forged_meta_field_allocates_nothing_beyond_the_limit() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    let mut forged_fields = 0;
    let mut worst = Usage { largest: 0, peak: 0 };
    let mut inert = Vec::new();
    for (i, f) in parts.meta.iter().enumerate() {
        let Field::Varint(what, real) = f else { continue };
        forged_fields += 1;
        for v in forged_values().into_iter().filter(|v| v != real) {
            let mut forged = parts.clone();
            forged.meta[i] = Field::Varint(what.clone(), v);
            let archive = forged.archive();
            for &limit in &LIMITS {
                let (refused, u) = assert_bounded(&format!("{what} = {v}"), &archive, &original, limit);
                if !refused && !inert.contains(what) {
                    inert.push(what.clone());
                }
                worst = worse(worst, u);
            }
        }
    }
    // Every length, count and size of the index: sizes, residue, entries, programs, chunks.
    assert!(forged_fields >= 30, "{forged_fields} fields");
    // Only the shape of an explicit entry does not matter to decoding (docs/FORMAT.md, open
    // point 6); every other forged field is an error.
    assert_eq!(inert, ["trailing: shape"]);
    eprintln!("{forged_fields} varint fields forged; worst: {worst:?}");
}

#[test]
fn forged_safetensors_header_numbers_allocate_nothing_beyond_the_limit() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, json) = build();
    let residue_at = parts.meta.iter().position(|f| matches!(f, Field::Bytes(_))).unwrap();
    let Field::Bytes(residue) = &parts.meta[residue_at] else { unreachable!() };
    let huge = ["1099511627776", "18446744073709551615", "99999999999999999999999", "-1", "1e300"];
    // Each number of the JSON (shapes, offsets) replaced in place, the slack taking up the
    // difference; then the length prefix.
    let mut cases = Vec::new();
    let bytes = json.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // A number: a digit after something other than a letter or digit (not in "U16").
        if bytes[i].is_ascii_digit() && i > 0 && !bytes[i - 1].is_ascii_alphanumeric() {
            let end = i + bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            for h in huge {
                let j = format!("{}{}{}", &json[..i], h, &json[end..]);
                let j = format!("{:<width$}", j.trim_end(), width = json.len());
                assert_eq!(j.len(), json.len());
                cases.push(j);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    assert!(cases.len() >= 5 * 3 * coded_tensors().len(), "{} cases", cases.len());
    for (k, j) in cases.iter().enumerate() {
        let mut forged = parts.clone();
        let mut r = residue.clone();
        r[8..].copy_from_slice(j.as_bytes());
        forged.meta[residue_at] = Field::Bytes(r);
        assert_refused(&format!("header case {k}: {j}"), &forged.archive(), &original, LIMITS[0]);
    }
    for n in [0u64, 1, 8, 100_000_000, 1 << 40, u64::MAX] {
        let mut forged = parts.clone();
        let mut r = residue.clone();
        r[..8].copy_from_slice(&n.to_le_bytes());
        forged.meta[residue_at] = Field::Bytes(r);
        assert_refused(&format!("header length {n}"), &forged.archive(), &original, LIMITS[0]);
    }
}

/// The parts with the program of entry `name` replaced (its payload kept).
fn with_program(parts: &Parts, name: &str, program: &Node) -> Parts {
    let mut forged = parts.clone();
    let at =
        forged.meta.iter().position(|f| matches!(f, Field::Varint(w, _) if *w == format!("{name}: program length")));
    let at = at.unwrap();
    let p = program.to_bytes();
    forged.meta[at] = Field::Varint(format!("{name}: program length"), p.len() as u64);
    forged.meta[at + 1] = Field::Bytes(p);
    forged
}

#[test]
fn forged_program_parameters_allocate_nothing_beyond_the_limit() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    let big = [1u64 << 20, 1 << 31, (1 << 32) - 1, 1 << 40, u64::MAX];
    for &v in &big {
        let programs = [
            ("prev", rans_back(v)),
            ("prev", delta(v, rans())),
            ("prev", xor(v, rans())),
            ("prev", repeat(v, rans())),
            ("prev", concat(vec![v], vec![rans(), rans()])),
            ("prev", concat(vec![v, v], vec![rans(), rans(), rans()])),
            ("const", arange(v, v)),
            ("const", konst(v)),
            ("const", copy(v as u32)),
            ("raw", delta(v, raw())),
        ];
        for (name, p) in programs {
            // A stride or context distance beyond the chunk changes nothing: the original is fine.
            let archive = with_program(&parts, name, &p).archive();
            assert_bounded(&format!("{name}: {p}"), &archive, &original, LIMITS[0]);
        }
    }
}

/// The parts with chunk 0 of entry `name` replaced by `payload` (its length field follows).
fn with_chunk0(parts: &Parts, name: &str, payload: &[u8]) -> Parts {
    let mut forged = parts.clone();
    let key = format!("{name}: chunk 0 length");
    let mut start = 0;
    for f in &mut forged.meta {
        if let Field::Varint(w, len) = f {
            if w.ends_with("length") && w.contains(": chunk ") {
                if *w == key {
                    let old = *len as usize;
                    forged.payload.splice(start..start + old, payload.iter().copied());
                    *len = payload.len() as u64;
                    return forged;
                }
                start += *len as usize;
            }
        }
    }
    panic!("no chunk 0 of {name}");
}

/// A leaf's `bytes` string: a varint length, then the block.
fn leaf(block: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, block.len() as u64);
    out.extend(block);
    out
}

/// A rANS block header: `k` contexts (thresholds 1, 2, ..), each a table of one symbol at
/// precision 16 (the largest slot table from the fewest bits), then `words` 16-bit words
/// declared (and none given) after the four states.
fn rans_block(k: u64, used: u64, words: u64) -> Vec<u8> {
    let mut w = BitWriter::new();
    w.gamma(k);
    for _ in 1..k {
        w.gamma(1);
    }
    for _ in 0..k {
        w.gamma(used);
        for _ in 0..used {
            w.gamma(1);
        }
        w.put(6, 3);
        if used > 1 {
            w.put(0, 2);
            for _ in 0..used {
                w.gamma0(0);
            }
        }
    }
    let mut out = w.finish();
    put_varint(&mut out, words);
    out.extend([0u8; 16]);
    out
}

/// A zstd frame that declares `size` bytes of content and holds one RLE block of 128 KiB.
fn zstd_bomb(size: u64) -> Vec<u8> {
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header descriptor: 8-byte content size, single segment, no checksum, no dictionary.
    f.push(0xe0);
    f.extend(size.to_le_bytes());
    // Block header: last block, RLE, 128 KiB; then the repeated byte.
    let header = 1 | (1 << 1) | ((128u32 << 10) << 3);
    f.extend(&header.to_le_bytes()[..3]);
    f.push(0);
    f
}

#[test]
fn forged_coder_sizes_allocate_nothing_beyond_the_limit() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (original, parts, _) = build();
    let mut cases: Vec<(String, Parts)> = Vec::new();
    let mut case = |what: String, name: &str, payload: Vec<u8>| cases.push((what, with_chunk0(&parts, name, &payload)));
    for v in forged_values() {
        // The length of a leaf's string.
        let mut p = Vec::new();
        put_varint(&mut p, v);
        for name in ["prev", "huff", "lz", "raw", "lanes"] {
            case(format!("{name}: leaf length {v}"), name, p.clone());
        }
        // rANS: the count of renormalization words.
        case(format!("rans words {v}"), "prev", leaf(&rans_block(1, 1, v)));
        // dict: the table size.
        case(format!("dict table size {v}"), "dict", p.clone());
        // zstd: the content size the frame declares.
        case(format!("zstd frame of {v} bytes"), "lz", leaf(&zstd_bomb(v)));
    }
    // rANS: most contexts and symbols, each table at the largest precision, then no data.
    for (k, used) in [(64, 1), (65, 1), (1, 1 << 16), (1, (1 << 16) + 1), (2, 1 << 16)] {
        case(format!("rans {k} contexts of {used} symbols"), "prev", leaf(&rans_block(k, used, 0)));
    }
    // Huffman: most symbols declared, with no table after them; and a one-symbol code (every
    // symbol from zero bits) for a chunk the index says is large.
    for k in [4096u64, 65536, 65537, 1 << 40] {
        let mut w = BitWriter::new();
        w.gamma(k);
        w.put(0, 1);
        case(format!("huffman {k} symbols"), "huff", leaf(&w.finish()));
    }
    // lanes: most distinct symbols declared, with nothing after them (the head leaf of `fields`;
    // the sign and low parts follow as empty leaves).
    for u in [4095u64, 4096, 65536, 1 << 40] {
        let mut w = BitWriter::new();
        w.gamma(u);
        let mut p = leaf(&w.finish());
        p.extend([0, 0]);
        case(format!("lanes {u} symbols"), "lanes", p);
    }
    let mut total = Usage { largest: 0, peak: 0 };
    for (what, forged) in &cases {
        for &limit in &LIMITS {
            let u = assert_refused(what, &forged.archive(), &original, limit);
            total = worse(total, u);
        }
    }
    eprintln!("{} coder cases; worst: {total:?}", cases.len());
}

#[test]
fn a_decompression_bomb_is_refused_before_its_output_is_allocated() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    // A real archive of 48 MiB of zeros: a few hundred bytes.
    let zeros = vec![0u8; 48 << 20];
    let opts = brevis::Options::default().with_threads(1);
    let archive = brevis::compress(&zeros, &opts).unwrap();
    assert!(archive.len() < 4096, "{} bytes", archive.len());
    drop(zeros);
    for limit in [1u64 << 20, 16 << 20, (48 << 20) - 1] {
        let (r, u) = measure(|| {
            brevis::decompress_with(
                &archive,
                &DecodeOptions::default().with_threads(1).with_memory_limit(limit).with_verify(true),
            )
        });
        assert!(matches!(r, Err(Error::Limit(_))), "limit {limit}: {:?}", r.map(|v| v.len()));
        assert!((u.largest as u64) < limit.min(1 << 20), "limit {limit}: {u:?}");
        let (r, u) = measure(|| Archive::open_with_limit(&archive, limit).and_then(|a| a.decode_tensor(0)));
        assert!(matches!(r, Err(Error::Limit(_))), "limit {limit}: {:?}", r.map(|v| v.len()));
        assert!((u.largest as u64) < limit.min(1 << 20), "limit {limit}: {u:?}");
    }
    // At the original's size it decodes, and the counter saw the output.
    let (r, u) = measure(|| {
        brevis::decompress_with(
            &archive,
            &DecodeOptions::default().with_threads(1).with_memory_limit(48 << 20).with_verify(true),
        )
    });
    assert_eq!(r.unwrap().len(), 48 << 20);
    assert!(u.largest >= 48 << 20, "{u:?}");
}

/// Compression parses GGUF headers: every field of a small GGUF file (written by the reference
/// writer) forged to huge counts and lengths, at every byte offset of its header, costs no
/// allocation beyond a small multiple of the file's size.
#[test]
fn forged_gguf_header_numbers_allocate_nothing_beyond_the_file() {
    let _g = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/gguf/small_v3.gguf")).unwrap();
    let l = brevis::internals::tensor::gguf::layout_from_prefix(&f, f.len() as u64).unwrap();
    assert_eq!(l.spans.len(), 3);
    let mut worst = Usage { largest: 0, peak: 0 };
    let mut refused = 0;
    for at in 0..l.data_start as usize {
        for (v, width) in [(u64::MAX, 8), (1 << 40, 8), (f.len() as u64, 8), (u32::MAX as u64, 4)] {
            let mut g = f.clone();
            let end = (at + width).min(g.len());
            g[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            let (r, u) = measure(|| brevis::internals::tensor::gguf::layout(&g));
            refused += r.is_err() as usize;
            worst = worse(worst, u);
        }
    }
    assert!(worst.largest <= 4 * f.len() && worst.peak <= 16 * f.len(), "{worst:?} for a file of {} bytes", f.len());
    assert!(refused > 2 * l.data_start as usize, "{refused} of {} forged headers refused", 4 * l.data_start);
    eprintln!("{} GGUF fields forged, {refused} refused; worst: {worst:?}", 4 * l.data_start);
}
