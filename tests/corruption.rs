//! Damaged, truncated and forged archives: decoding must fail cleanly (an `Err`, never a panic,
//! never an allocation the caller did not allow), and must never return anything but the
//! original bytes.

mod support;

use brevis::internals::container::{self, Index};
use brevis::internals::dsl::build::*;
use brevis::internals::dsl::ops::maps::Map;
use brevis::internals::dsl::Node;
use brevis::{Archive, DecodeOptions, Error, Options};
use std::panic::{catch_unwind, AssertUnwindSafe};
use support::st::*;
use xxhash_rust::xxh3::xxh3_64;

/// A ~20 KB safetensors file whose tensors exercise the main program kinds: float fields, a
/// constant, an arange, a duplicate (copy), low-cardinality data, an unknown dtype, gaps.
fn original() -> Vec<u8> {
    let mut rng = Rng(42);
    let w = data_for("BF16", 3000, &mut rng, true);
    let levels: Vec<u64> = (0..5).map(|_| rng.below(1 << 16)).collect();
    let tensors = vec![
        tensor("embed.weight", "BF16", &[30, 100], w.clone()),
        tensor("norm.weight", "F32", &[300], words(4, 300, |_| 1.0f32.to_bits() as u64)),
        tensor("position_ids", "I64", &[400], words(8, 400, |i| i as u64)),
        tensor("lm_head.weight", "BF16", &[30, 100], w),
        tensor("quant", "F16", &[2000], words(2, 2000, |i| levels[(i * i) % 5])),
        tensor("blob", "Q4_K", &[50], rng.bytes(333)),
        tensor("small.bias", "F32", &[7], data_for("F32", 7, &mut rng, true)),
        tensor("empty", "F16", &[0], vec![]),
    ];
    let mut f = file(&tensors, Some(&[("format", "pt")]));
    f.extend(b"trailing bytes after the data");
    f
}

fn compressed(original: &[u8]) -> Vec<u8> {
    let archive = brevis::compress(original, &Options::default().with_chunk_bytes(4096).with_threads(1)).unwrap();
    assert_eq!(brevis::decompress(&archive).unwrap(), original);
    archive
}

fn one_thread(verify: bool) -> DecodeOptions {
    DecodeOptions::default().with_threads(1).with_verify(verify)
}

/// What decoding a damaged archive did.
#[derive(Debug, PartialEq)]
enum Outcome {
    Err,
    Original,
    Other,
    Panic,
}

fn decode(archive: &[u8], original: &[u8], opts: &DecodeOptions) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| brevis::decompress_with(archive, opts))) {
        Err(_) => Outcome::Panic,
        Ok(Err(_)) => Outcome::Err,
        Ok(Ok(v)) if v == original => Outcome::Original,
        Ok(Ok(_)) => Outcome::Other,
    }
}

/// Runs `f(i)` for `i in 0..n` on two threads; returns the failures.
fn sweep(n: usize, f: impl Fn(usize) -> Option<String> + Sync) -> Vec<String> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2).map(|t| s.spawn(move || (t..n).step_by(2).filter_map(f).collect::<Vec<_>>())).collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

/// End of the chunk payloads: the header before them and everything after them (the index and
/// the footer) are covered by the index checksum or checked field by field.
fn payload_end(archive: &[u8]) -> usize {
    let a = Archive::open(archive).unwrap();
    let ends =
        brevis::internals::index(&a).tensors.iter().flat_map(|t| t.chunks.iter().map(|c| (c.offset + c.len) as usize));
    ends.max().unwrap_or(container::HEADER_LEN).max(container::HEADER_LEN)
}

/// The decoded meta block (index and residue) of an archive, and the archive rebuilt around
/// another meta block: footer = meta length, decoded length, xxh3 of the frame, end magic.
fn meta_of(archive: &[u8]) -> Vec<u8> {
    let f = archive.len() - container::FOOTER_LEN;
    let word = |i: usize| u64::from_le_bytes(archive[f + 8 * i..f + 8 * i + 8].try_into().unwrap()) as usize;
    let (len, raw_len) = (word(0), word(1));
    let mut d = zstd::bulk::Decompressor::with_dictionary(container::META_DICT).unwrap();
    d.decompress(&archive[f - len..f], raw_len).unwrap()
}

fn with_meta(archive: &[u8], meta: &[u8]) -> Vec<u8> {
    let f = archive.len() - container::FOOTER_LEN;
    let len = u64::from_le_bytes(archive[f..f + 8].try_into().unwrap()) as usize;
    let frame = zstd::bulk::Compressor::with_dictionary(1, container::META_DICT).unwrap().compress(meta).unwrap();
    let mut out = archive[..f - len].to_vec();
    out.extend(&frame);
    out.extend((frame.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    out.extend(xxh3_64(&frame).to_le_bytes());
    out.extend(container::END_MAGIC);
    out
}

#[test]
fn meta_helpers_are_faithful() {
    let orig = original();
    let archive = compressed(&orig);
    let same = with_meta(&archive, &meta_of(&archive));
    assert_eq!(brevis::decompress(&same).unwrap(), orig);
}

#[test]
fn truncation_at_every_length_is_an_error() {
    let orig = original();
    let archive = compressed(&orig);
    assert!(archive.len() > 2000);
    let bad = sweep(archive.len(), |len| {
        let cut = &archive[..len];
        let open = catch_unwind(|| Archive::open(cut).is_err());
        match (decode(cut, &orig, &one_thread(true)), open) {
            (Outcome::Err, Ok(true)) => None,
            (o, open) => Some(format!("truncated to {len} bytes: {o:?}, open refused: {open:?}")),
        }
    });
    assert!(bad.is_empty(), "{} failures, e.g. {:?}", bad.len(), &bad[..bad.len().min(5)]);
}

#[test]
fn bytes_appended_or_removed_in_front_are_errors() {
    let orig = original();
    let archive = compressed(&orig);
    for extra in [1usize, 7, 8, 24, 100] {
        let mut a = archive.clone();
        a.extend(vec![0u8; extra]);
        assert_eq!(decode(&a, &orig, &one_thread(true)), Outcome::Err, "{extra} zero bytes appended");
        // The archive repeated after itself: the footer is intact but the index length is not.
        let mut twice = archive.clone();
        twice.extend(&archive[..extra.min(archive.len())]);
        twice.extend(&archive[archive.len() - container::FOOTER_LEN..]);
        assert_eq!(decode(&twice, &orig, &one_thread(true)), Outcome::Err, "{extra}");
        assert_eq!(decode(&archive[extra..], &orig, &one_thread(true)), Outcome::Err, "{extra} removed in front");
    }
}

#[test]
fn single_bit_flips_never_give_other_data() {
    let orig = original();
    let archive = compressed(&orig);
    let idx = payload_end(&archive);
    let checked = |byte: usize| byte < container::HEADER_LEN || byte >= idx;
    // Every bit of the header, the index and the footer; every 7th bit elsewhere (7 is prime to
    // 8, so every bit position of a byte is hit).
    let bits: Vec<usize> = (0..archive.len() * 8).filter(|&b| checked(b / 8) || b % 7 == 0).collect();
    assert!(bits.len() > 2000);
    let bad = sweep(bits.len(), |k| {
        let bit = bits[k];
        let mut a = archive.clone();
        a[bit / 8] ^= 1 << (bit % 8);
        let strict = decode(&a, &orig, &one_thread(true));
        // Without the whole-file hash, chunk and residue checksums alone must still hold.
        let loose = decode(&a, &orig, &one_thread(false));
        // The version field is not under a checksum: flipped to an older version of the same
        // layout (7 -> 3: versions 3 on share one layout), an archive without newer operators is
        // that version's archive.
        let version = u16::from_le_bytes([a[8], a[9]]);
        let same_layout = (8..10).contains(&(bit / 8)) && (3..=container::VERSION).contains(&version);
        let ok = |o: &Outcome| match o {
            Outcome::Err => true,
            Outcome::Original => !checked(bit / 8) || same_layout,
            _ => false,
        };
        (!ok(&strict) || !ok(&loose))
            .then(|| format!("bit {bit} (byte {}): {strict:?} / verify off: {loose:?}", bit / 8))
    });
    assert!(bad.is_empty(), "{} failures (index starts at {idx}), e.g. {:?}", bad.len(), &bad[..bad.len().min(8)]);
}

/// A whole-file decode verifies the whole file's checksum rather than each chunk's; when it
/// fails, the error still names the damaged chunk (each chunk's own checksum is then checked,
/// in memory or read back from the file), on every flipped payload byte that decodes without
/// another error.
#[test]
fn a_damaged_chunk_is_named() {
    let orig = original();
    let archive = compressed(&orig);
    let end = payload_end(&archive);
    let dir = std::env::temp_dir().join(format!("brevis-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut named = 0;
    for byte in (container::HEADER_LEN..end).step_by(61) {
        let mut a = archive.clone();
        a[byte] ^= 0x10;
        let Err(Error::Checksum(m)) = brevis::decompress(&a) else { continue };
        assert!(m.contains("chunk"), "byte {byte}: {m}");
        named += 1;
        // Into a file, with positioned writes: a checksum error too.
        let src = dir.join("a.brv");
        std::fs::write(&src, &a).unwrap();
        let f = std::fs::File::open(&src).unwrap();
        let out =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.join("a")).unwrap();
        let r = brevis::Archive::open_file(&f, 1 << 30).unwrap().decompress_to_file(&out, &DecodeOptions::default());
        assert!(matches!(&r, Err(Error::Checksum(m)) if m.contains("chunk")), "byte {byte}: {r:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(named > 10, "{named} flips reached the checksums");
}

/// Flips every 5th bit of the payloads and decodes each tensor on its own (those whose program
/// satisfies `which`): an error or the tensor's bytes, never other bytes, never a panic.
fn tensor_access_under_flips(which: impl Fn(&Node) -> bool + Sync) -> Vec<String> {
    let orig = original();
    let archive = compressed(&orig);
    let a = Archive::open(&archive).unwrap();
    let expected: Vec<Vec<u8>> = (0..a.len()).map(|i| a.decode_tensor(i).unwrap()).collect();
    let tested: Vec<usize> =
        (0..a.len()).filter(|&i| which(&brevis::internals::index(&a).tensors[i].program)).collect();
    assert!(!tested.is_empty());
    let idx = payload_end(&archive);
    let bits: Vec<usize> = (container::HEADER_LEN * 8..idx * 8).step_by(5).collect();
    sweep(bits.len(), |k| {
        let bit = bits[k];
        let mut damaged = archive.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        let a = Archive::open(&damaged).ok()?;
        for &i in &tested {
            match catch_unwind(AssertUnwindSafe(|| a.decode_tensor(i))) {
                Err(_) => return Some(format!("bit {bit}: tensor {i} panicked")),
                Ok(Ok(v)) if v != expected[i] => {
                    return Some(format!(
                        "bit {bit}: tensor {i} ({}) decodes to other bytes",
                        a.info(i).unwrap().program()
                    ))
                }
                _ => {}
            }
        }
        None
    })
}

fn is_copy(p: &Node) -> bool {
    matches!(p.op, brevis::internals::dsl::Op::Copy(_))
}

#[test]
fn single_bit_flips_in_tensor_access_never_give_other_data() {
    let bad = tensor_access_under_flips(|p| !is_copy(p));
    assert!(bad.is_empty(), "{} failures, e.g. {:?}", bad.len(), &bad[..bad.len().min(8)]);
}

/// Regression: a `copy` tensor has no chunk checksum (payload-free programs have none since the
/// meta-frame format), and `chunk_stream` decoded the source tensor's chunk without checking the
/// source's checksum, so `Archive::decode_tensor` of a copy returned damaged bytes, without an
/// error, after a single bit flip in the source tensor's payload (whole-file decompression
/// failed, on the source chunk's own checksum). Checked: after a bit flip in the payloads (every
/// 5th bit), decoding a copy gives an error or its exact bytes, never other bytes nor a panic.
#[test]
fn single_bit_flips_in_copied_tensors_are_errors() {
    let bad = tensor_access_under_flips(is_copy);
    assert!(bad.is_empty(), "{} failures, e.g. {:?}", bad.len(), &bad[..bad.len().min(8)]);
}

#[test]
fn wrong_magic_version_and_reserved_bytes() {
    let orig = original();
    let archive = compressed(&orig);
    for i in 0..8 {
        let mut a = archive.clone();
        a[i] ^= 0x20;
        assert!(matches!(brevis::decompress(&a), Err(Error::Corrupt(_))), "magic byte {i}");
        let mut a = archive.clone();
        let n = a.len();
        a[n - 8 + i] ^= 0x20;
        assert!(matches!(brevis::decompress(&a), Err(Error::Corrupt(_))), "end magic byte {i}");
    }
    // Versions this build does not read are Unsupported, whatever follows.
    for v in [0u16, container::VERSION + 1, container::VERSION + 2, 0x100, u16::MAX] {
        let mut a = archive.clone();
        a[8..10].copy_from_slice(&v.to_le_bytes());
        let r = brevis::decompress(&a);
        assert!(matches!(r, Err(Error::Unsupported(_))), "version {v}: {r:?}");
        assert!(matches!(Archive::open(&a), Err(Error::Unsupported(_))), "version {v}");
        // Even when the rest is garbage.
        let mut g = vec![0u8; 100];
        g[..8].copy_from_slice(&container::MAGIC);
        g[8..10].copy_from_slice(&v.to_le_bytes());
        assert!(matches!(brevis::decompress(&g), Err(Error::Unsupported(_))), "version {v}, garbage");
    }
    for i in 10..16 {
        let mut a = archive.clone();
        a[i] = 1;
        assert!(matches!(brevis::decompress(&a), Err(Error::Corrupt(_))), "reserved byte {i}");
    }
    // The index checksum.
    let mut a = archive.clone();
    let n = a.len();
    a[n - 16] ^= 1;
    assert!(matches!(brevis::decompress(&a), Err(Error::Checksum(_))));
}

#[test]
fn empty_short_and_garbage_inputs() {
    let orig = original();
    assert!(matches!(brevis::decompress(&[]), Err(Error::Corrupt(_))));
    assert!(Archive::open(&[]).is_err());
    assert!(brevis::decompress(&container::MAGIC).is_err());
    let mut rng = Rng(7);
    for round in 0..3000 {
        let len = match round % 3 {
            0 => rng.below(64) as usize,
            1 => rng.below(2000) as usize,
            _ => container::HEADER_LEN + container::FOOTER_LEN + rng.below(200) as usize,
        };
        let mut g = rng.bytes(len);
        if round % 2 == 1 && len >= container::HEADER_LEN + container::FOOTER_LEN {
            // A plausible frame around garbage: magic, version, zero reserved bytes, an index of
            // random bytes with a correct length and checksum, and the end magic.
            g[..8].copy_from_slice(&container::MAGIC);
            g[8..10].copy_from_slice(&container::VERSION.to_le_bytes());
            g[10..16].fill(0);
            let foot = len - container::FOOTER_LEN;
            let meta_len = rng.below((foot - container::HEADER_LEN) as u64 + 1) as usize;
            let h = xxh3_64(&g[foot - meta_len..foot]);
            g[foot..foot + 8].copy_from_slice(&(meta_len as u64).to_le_bytes());
            let raw_len = [rng.below(1000), rng.next(), 0][round % 3];
            g[foot + 8..foot + 16].copy_from_slice(&raw_len.to_le_bytes());
            g[foot + 16..foot + 24].copy_from_slice(&h.to_le_bytes());
            g[foot + 24..].copy_from_slice(&container::END_MAGIC);
        }
        let o = decode(&g, &orig, &one_thread(true));
        assert!(o == Outcome::Err, "garbage of {len} bytes (round {round}): {o:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Forged archives: a consistent index with a valid checksum that lies.
// ---------------------------------------------------------------------------------------------

/// Re-assembles `archive` after `f` edits its index and payloads (one payload per chunk, in
/// index order; chunk lengths follow the payloads).
fn forge(archive: &[u8], f: impl FnOnce(&mut Index, &mut Vec<Vec<u8>>)) -> Vec<u8> {
    let a = Archive::open(archive).unwrap();
    let mut index = brevis::internals::index(&a).clone();
    let mut payloads: Vec<Vec<u8>> = index
        .tensors
        .iter()
        .flat_map(|t| t.chunks.iter().map(|c| archive[c.offset as usize..(c.offset + c.len) as usize].to_vec()))
        .collect();
    f(&mut index, &mut payloads);
    let mut k = 0;
    for t in &mut index.tensors {
        for c in &mut t.chunks {
            if let Some(p) = payloads.get(k) {
                c.len = p.len() as u64;
            }
            k += 1;
        }
    }
    container::write_archive(&index, &payloads).unwrap()
}

/// `archive` with tensor `t`'s program replaced by `program`, and its chunk payloads re-encoded
/// with `payload_program` (so that the payload is well formed for a program of the same shape).
fn forge_program(archive: &[u8], t: usize, payload_program: &Node, program: Node) -> Vec<u8> {
    let a = Archive::open(archive).unwrap();
    let data = a.decode_tensor(t).unwrap();
    let entry = &brevis::internals::index(&a).tensors[t];
    let wb = entry.word_bits as usize / 8;
    let mut chunks = Vec::new();
    let mut pos = 0;
    for c in &entry.chunks {
        let end = pos + c.elems as usize * wb;
        let x = brevis::internals::dsl::Stream::from_le_bytes(
            brevis::internals::dsl::Ty::u(entry.word_bits),
            &data[pos..end],
        )
        .unwrap();
        let mut out = Vec::new();
        payload_program.encode(&x, &[], &mut out).unwrap();
        chunks.push((out, xxh3_64(&data[pos..end])));
        pos = end;
    }
    let first: usize = brevis::internals::index(&a).tensors[..t].iter().map(|e| e.chunks.len()).sum();
    forge(archive, |ix, p| {
        ix.tensors[t].program = program;
        for (k, (c, h)) in chunks.into_iter().enumerate() {
            p[first + k] = c;
            ix.tensors[t].chunks[k].checksum = Some(h);
        }
    })
}

#[test]
fn forge_helpers_are_faithful() {
    // The forging helpers must be faithful, or the tests below prove nothing.
    let orig = original();
    let archive = compressed(&orig);
    assert_eq!(brevis::decompress(&forge(&archive, |_, _| {})).unwrap(), orig);
    let a = Archive::open(&archive).unwrap();
    let quant = a.find("quant").unwrap();
    let same = forge_program(&archive, quant, &dict(raw(), raw()), dict(raw(), raw()));
    assert_eq!(decode(&same, &orig, &one_thread(true)), Outcome::Original);
    // A map that changes the indices is caught by the chunk checksums.
    let other = forge_program(&archive, quant, &dict(raw(), raw()), dict(raw(), map(Map::XorConst(1), raw())));
    assert_eq!(decode(&other, &orig, &one_thread(false)), Outcome::Err);
}

/// A file of one constant tensor: its size and the archive's chunk size can be forged (with the
/// original size) without moving anything else, and no tensor has per-chunk index entries.
fn one_constant() -> (Vec<u8>, Vec<u8>) {
    let f = file(&[tensor("c", "F32", &[4], words(4, 4, |_| 0x3f80_0000))], Some(&[("format", "pt")]));
    let archive = compressed(&f);
    let a = Archive::open(&archive).unwrap();
    let c = a.find("c").unwrap();
    assert!(a.info(c).unwrap().program().starts_with("const"), "{}", brevis::internals::index(&a).tensors[c].program);
    (f, archive)
}

/// Grows the constant tensor to `elems` elements, with an archive chunk size of `chunk_bytes`.
fn grow(archive: &[u8], elems: u64, chunk_bytes: u64) -> Vec<u8> {
    forge(archive, |ix, _| {
        ix.chunk_bytes = chunk_bytes;
        let t = &mut ix.tensors[0];
        let old = t.nbytes;
        // Stored in the index rather than taken from the safetensors header.
        t.from_header = false;
        t.nbytes = elems * 4;
        t.shape = vec![elems];
        ix.original_size = ix.original_size - old + t.nbytes;
    })
}

#[test]
fn forged_original_size_is_refused_before_allocating() {
    let (orig, archive) = one_constant();
    for elems in [1u64 << 38, 1 << 42] {
        let forged = grow(&archive, elems, container::MAX_CHUNK_BYTES);
        let a = Archive::open(&forged).unwrap();
        assert_eq!(a.original_size(), orig.len() as u64 - 16 + elems * 4);
        // Allocating any of these sizes would abort the process, so an error here proves the
        // check happens first.
        for limit in [1u64 << 20, 1 << 40] {
            let opts = DecodeOptions::default().with_memory_limit(limit);
            let r = brevis::decompress_with(&forged, &opts);
            assert!(matches!(r, Err(Error::Limit(_))), "{elems} elements, limit {limit}: {r:?}");
        }
        // Per tensor: the archive's own limit.
        let mut a = Archive::open(&forged).unwrap();
        a.set_memory_limit(1 << 30);
        assert!(matches!(a.decode_tensor(a.find("c").unwrap()), Err(Error::Limit(_))));
    }
    // The limit is inclusive of the real size (of a file larger than its index).
    let orig = original();
    let archive = compressed(&orig);
    let size = orig.len() as u64;
    let r = brevis::decompress_with(&archive, &DecodeOptions::default().with_memory_limit(size - 1));
    assert!(matches!(r, Err(Error::Limit(_))), "{r:?}");
    let r = brevis::decompress_with(&archive, &DecodeOptions::default().with_memory_limit(size));
    assert_eq!(r.unwrap(), orig);
}

#[test]
fn forged_chunk_sizes_are_capped() {
    let (_, archive) = one_constant();
    let cap = container::MAX_CHUNK_BYTES;
    // At the cap: one chunk of 64 MiB of the constant, which is not the original.
    let at_cap = grow(&archive, cap / 4, cap);
    assert_eq!(Archive::open(&at_cap).unwrap().info(0).unwrap().chunks, 1);
    assert!(matches!(brevis::decompress(&at_cap), Err(Error::Checksum(_))));
    // Above it, and zero: refused when the index is read.
    for chunk_bytes in [cap + 1, 0, u64::MAX] {
        let forged = grow(&archive, 4, chunk_bytes);
        let r = Archive::open(&forged).map(|_| ());
        assert!(matches!(r, Err(Error::Corrupt(_))), "chunks of {chunk_bytes} bytes: {r:?}");
        assert!(brevis::decompress(&forged).is_err());
    }
}

/// Regression: the chunk list of a payload-free tensor (const, arange, copy) is built from
/// `nbytes / chunk_elems`, which nothing in the index bounded: a tiny forged archive made
/// `Archive::open` allocate one `ChunkEntry` per chunk, whatever the memory limit (here 4M
/// entries, ~160 MB; with `nbytes` near 2^62 the process ran out of memory). Checked: opening
/// such an archive within a memory limit fails instead of allocating past it.
#[test]
fn forged_chunk_counts_are_bounded_by_the_memory_limit() {
    let (_, archive) = one_constant();
    let forged = grow(&archive, 1 << 22, 1);
    assert!(forged.len() < 4096);
    let r = Archive::open_with_limit(&forged, 1 << 20);
    let chunks = r.as_ref().map(|a| a.info(0).unwrap().chunks).unwrap_or(0);
    assert!(r.is_err(), "opened with a 1 MiB limit; the index holds {chunks} chunk entries");
}

#[test]
fn forged_programs_fail_cleanly() {
    let orig = original();
    let archive = compressed(&orig);
    let a = Archive::open(&archive).unwrap();
    let t = |name: &str| a.find(name).unwrap();
    let (embed, quant, pos, head, norm) =
        (t("embed.weight"), t("quant"), t("position_ids"), t("lm_head.weight"), t("norm.weight"));
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |what: &str, forged: Vec<u8>| cases.push((what.to_string(), forged));

    // Programs that parse but cannot decode this payload, or decode to other data.
    let set = |i: usize, p: Node| move |ix: &mut Index, _: &mut Vec<Vec<u8>>| ix.tensors[i].program = p;
    add("raw over a fields payload", forge(&archive, set(embed, raw())));
    add(
        "program of another tensor",
        forge(&archive, set(embed, brevis::internals::index(&a).tensors[quant].program.clone())),
    );
    add("const of another value", forge(&archive, set(norm, konst(0x3f80_0001))));
    add("const too wide", forge(&archive, set(norm, konst(1 << 40))));
    add("arange off by one", forge(&archive, set(pos, arange(1, 1))));
    add("arange too wide", forge(&archive, set(pos, arange(1 << 20, u64::MAX))));
    add("copy of itself", forge(&archive, set(head, copy(head as u32))));
    add("copy of a later tensor", forge(&archive, set(embed, copy(head as u32))));
    add("copy of another layout", forge(&archive, set(head, copy(quant as u32))));
    add("copy out of range", forge(&archive, set(head, copy(u32::MAX))));
    add("concat longer than the chunk", forge(&archive, set(norm, concat(vec![5000], vec![konst(0), konst(0)]))));
    add("repeat of a constant", forge(&archive, set(embed, repeat(1, raw()))));
    add("view that does not divide", forge(&archive, set(t("small.bias"), view(64, raw()))));
    // Maps on an empty field, and under a dict index narrower than its parse type, over payloads
    // that are valid for the same program without the map (a map adds no payload bytes).
    let fields_payload = fields(8, 7, 7, [raw(), raw(), raw()]);
    for (what, p) in [
        ("rotate(0) on u0", fields(8, 7, 7, [raw(), raw(), map(Map::Rotate(0), raw())])),
        ("xorconst(0) on u0", fields(8, 7, 7, [raw(), raw(), map(Map::XorConst(0), raw())])),
        ("zigzag on u0", fields(8, 7, 7, [raw(), raw(), map(Map::ZigZag, raw())])),
    ] {
        add(what, forge_program(&archive, embed, &fields_payload, p));
    }
    for (what, p) in [
        ("rotate(15) under a 3-bit dict index", dict(raw(), map(Map::Rotate(15), raw()))),
        ("rotate(3) under a 3-bit dict index", dict(raw(), map(Map::Rotate(3), raw()))),
        ("xorconst(8) under a 3-bit dict index", dict(raw(), map(Map::XorConst(8), raw()))),
    ] {
        add(what, forge_program(&archive, quant, &dict(raw(), raw()), p));
    }
    // Chunks and layout.
    add(
        "chunk payloads swapped",
        forge(&archive, |_, p| {
            let n = p.len();
            p.swap(0, n - 1)
        }),
    );
    add("chunk size changed", forge(&archive, |ix, _| ix.chunk_bytes -= 2));
    add("chunk size doubled", forge(&archive, |ix, _| ix.chunk_bytes *= 2));
    add("chunk size zero", forge(&archive, |ix, _| ix.chunk_bytes = 0));
    add(
        "checksum of a chunk",
        forge(&archive, |ix, _| {
            ix.tensors[quant].chunks[0].checksum = ix.tensors[quant].chunks[0].checksum.map(|h| h ^ 1)
        }),
    );
    add("residue byte", forge(&archive, |ix, _| ix.residue[20] ^= 1));
    add(
        "residue shorter",
        forge(&archive, |ix, _| {
            ix.residue.pop();
        }),
    );
    add("original hash", forge(&archive, |ix, _| ix.original_hash ^= 1));
    add("original size smaller", forge(&archive, |ix, _| ix.original_size -= 1));
    // Entries described by the safetensors header are stored in the index once made explicit.
    let explicit = |i: usize, f: fn(&mut container::TensorEntry)| {
        move |ix: &mut Index, _: &mut Vec<Vec<u8>>| {
            ix.tensors[i].from_header = false;
            f(&mut ix.tensors[i]);
        }
    };
    add("tensor moved by one byte", forge(&archive, explicit(t("small.bias"), |e| e.offset += 1)));
    add("tensor moved over another", forge(&archive, explicit(head, |e| e.offset -= 2)));
    add("tensor shorter", forge(&archive, explicit(t("blob"), |e| e.nbytes -= 1)));
    add("tensor renamed", forge(&archive, explicit(t("blob"), |e| e.name = "other".into())));
    add("header entry made explicit", forge(&archive, explicit(t("blob"), |_| {})));
    add(
        "programs of two tensors swapped",
        forge(&archive, |ix, _| {
            let p = ix.tensors[embed].program.clone();
            ix.tensors[embed].program = ix.tensors[head].program.clone();
            ix.tensors[head].program = p;
        }),
    );
    add("word width changed", forge(&archive, explicit(embed, |e| e.word_bits = 8)));
    add(
        "tensor removed",
        forge(&archive, |ix, p| {
            let k: usize = ix.tensors[..quant].iter().map(|t| t.chunks.len()).sum();
            let n = ix.tensors[quant].chunks.len();
            p.drain(k..k + n);
            ix.tensors.remove(quant);
        }),
    );

    let before = format!("{:?}", brevis::internals::index(&a));
    // Forgeries that keep the original file: an explicit copy of a header entry, a new name; and a
    // chunk's checksum, which a whole-file decode verifying the whole file's checksum (that of the
    // original, which still holds) leaves unread; the chunk's own decodes fail on it (below).
    let benign = ["header entry made explicit", "tensor renamed", "checksum of a chunk"];
    let mut bad = Vec::new();
    for (what, forged) in &cases {
        if Archive::open(forged).is_ok_and(|fa| format!("{:?}", brevis::internals::index(&fa)) == before) {
            bad.push(format!("{what}: the forgery changed nothing (test bug)"));
        }
        let o = decode(forged, &orig, &one_thread(true));
        if !(o == Outcome::Err || (o == Outcome::Original && benign.contains(&what.as_str()))) {
            bad.push(format!("{what}: {o:?}"));
        }
        if what == "checksum of a chunk" {
            let loose = decode(forged, &orig, &one_thread(false));
            let alone = Archive::open(forged).map(|fa| fa.decode_tensor(quant));
            if loose != Outcome::Err || !matches!(alone, Ok(Err(brevis::Error::Checksum(_)))) {
                bad.push(format!("{what}: without the whole-file checksum {loose:?}, the tensor alone {alone:?}"));
            }
        }
        // Per-tensor access: an error or some bytes, never a panic. (Tensors that read no payload
        // have no chunk checksum: a forged generator gives other bytes by design.)
        if let Ok(fa) = Archive::open(forged) {
            for i in 0..fa.len() {
                let r = catch_unwind(AssertUnwindSafe(|| fa.decode_tensor(i)));
                match r {
                    Err(_) => bad.push(format!("{what}: decode_tensor({i}) panicked")),
                    Ok(Ok(v))
                        if brevis::internals::index(&fa).tensors[i].program.reads_payload()
                            && v != a.decode_tensor(i).unwrap() =>
                    {
                        bad.push(format!("{what}: tensor {i} decodes to other bytes"))
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Random edits of the decoded index (with the meta frame and footer rebuilt around them): never
/// a panic, and a whole-file decode is an error or the original.
#[test]
fn forged_index_bytes_never_panic() {
    let orig = original();
    let archive = compressed(&orig);
    let meta = meta_of(&archive);
    let limit = DecodeOptions::default().with_threads(1).with_memory_limit(1 << 26).with_verify(true);
    let bad = sweep(4000, |round| {
        let mut rng = Rng(round as u64);
        let mut m = meta.clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(m.len() as u64) as usize;
            match rng.below(5) {
                0 => m[i] ^= 1 << rng.below(8),
                1 => m[i] = rng.next() as u8,
                2 => m[i] = [0x00, 0x7f, 0x80, 0xff, 0x01][rng.below(5) as usize],
                3 => {
                    let j = rng.below(m.len() as u64) as usize;
                    m.swap(i, j)
                }
                _ => {
                    if rng.below(2) == 0 {
                        m.remove(i);
                    } else {
                        m.insert(i, rng.next() as u8);
                    }
                }
            }
        }
        let a = with_meta(&archive, &m);
        match decode(&a, &orig, &limit) {
            Outcome::Err | Outcome::Original => {}
            o => return Some(format!("round {round}: {o:?}")),
        }
        let Ok(mut fa) = Archive::open_with_limit(&a, 1 << 26) else { return None };
        fa.set_memory_limit(1 << 26);
        for i in 0..fa.len() {
            if catch_unwind(AssertUnwindSafe(|| fa.decode_tensor(i))).is_err() {
                return Some(format!("round {round}: decode_tensor({i}) panicked"));
            }
        }
        None
    });
    assert!(bad.is_empty(), "{} failures, e.g. {:?}", bad.len(), &bad[..bad.len().min(8)]);
}

/// A forged `derive`: its reference tensor swapped for one of another dtype or too few elements
/// (the index's hash made to match), or its derivation swapped for another, decodes to a clear
/// error, never to wrong bytes.
#[test]
fn forged_derivations_are_errors() {
    use brevis::internals::dsl::ops::derive::{Derive, Kind};
    use brevis::internals::dsl::Op;
    let w: Vec<f32> = (0..4096).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 3000.0).collect();
    let f32s: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    let bf16s: Vec<u8> = w.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect();
    let ints: Vec<u8> = (0..4096u32).flat_map(|i| i.to_le_bytes()).collect();
    let reference = file(
        &[
            tensor("w", "F32", &[64, 64], f32s.clone()),
            tensor("ints", "I32", &[64, 64], ints.clone()),
            tensor("short", "F32", &[32, 64], f32s[..8192].to_vec()),
        ],
        None,
    );
    let variant = file(&[tensor("w", "BF16", &[64, 64], bf16s)], None);
    let archive = brevis::compress_with_ref(&variant, &reference, &Options::default()).unwrap();
    let d = DecodeOptions::default();
    assert_eq!(brevis::decompress_with_ref(&archive, &reference, &d).unwrap(), variant);
    let a = Archive::open(&archive).unwrap();
    assert_eq!(a.info(0).unwrap().program(), "derive(bf16)[copyref]");
    for (name, bytes, kind, want) in [
        ("ints", &ints[..], Kind::Bf16Rne, "F32, F16 or BF16"),
        ("short", &f32s[..8192], Kind::Bf16Rne, "elements"),
        ("w", &f32s[..], Kind::Bf16Trunc, ""),
    ] {
        let forged = forge(&archive, |index, _| {
            let t = &mut index.tensors[0];
            let r = t.reference.as_mut().unwrap();
            r.name = name.to_string();
            r.hash = xxh3_64(bytes);
            t.program.op = Op::Derive(Derive { kind });
        });
        let e = brevis::decompress_with_ref(&forged, &reference, &d).unwrap_err().to_string();
        assert!(e.contains(want), "{name} {kind:?}: {e}");
    }
    // A derivation of another word width does not parse.
    let forged = forge(&archive, |index, _| index.tensors[0].program.op = Op::Derive(Derive { kind: Kind::Q8_0 }));
    assert!(Archive::open(&forged).is_err());
}

/// Format version 13: a chunk of at most 64 KiB keeps the low 32 bits of its hash, a larger one
/// all 64; a flip of a stored bit fails that chunk's check either way, and the high half of a
/// short chunk's hash is not stored at all.
#[test]
fn short_and_long_chunk_checksums() {
    let mut rng = Rng(9);
    let f = file(
        &[
            tensor("small.weight", "F16", &[1000], data_for("F16", 1000, &mut rng, true)),
            tensor("large.weight", "F16", &[40_000], data_for("F16", 40_000, &mut rng, true)),
        ],
        None,
    );
    let archive = brevis::compress(&f, &Options::default().with_threads(1)).unwrap();
    let a = Archive::open(&archive).unwrap();
    let ix = brevis::internals::index(&a).clone();
    let (small, large) = (&ix.tensors[0].chunks[0], &ix.tensors[1].chunks[0]);
    assert!(
        container::short_check(ix.version, 16, small.elems) && !container::short_check(ix.version, 16, large.elems)
    );
    assert_eq!(small.checksum, Some(xxh3_64(&f[f.len() - 82_000..f.len() - 80_000]) & 0xFFFF_FFFF));
    assert_eq!(large.checksum, Some(xxh3_64(&f[f.len() - 80_000..])));
    let flip = |t: usize, bit: u32| {
        forge(&archive, |ix, _| {
            ix.tensors[t].chunks[0].checksum = ix.tensors[t].chunks[0].checksum.map(|h| h ^ 1 << bit)
        })
    };
    assert_eq!(flip(0, 40), archive, "a short chunk stores no high half");
    for (t, bit) in [(0, 0), (0, 31), (1, 0), (1, 40), (1, 63)] {
        let forged = flip(t, bit);
        let r = Archive::open(&forged).unwrap().decode_tensor(t);
        assert!(matches!(&r, Err(Error::Checksum(m)) if m.contains("chunk 0")), "tensor {t}, bit {bit}: {r:?}");
        // Without `verify`, a whole-file decode checks each chunk (with it, the whole file's
        // hash covers the intact bytes: a forged chunk checksum is benign there).
        assert!(brevis::decompress_with(&forged, &one_thread(false)).is_err(), "tensor {t}, bit {bit}");
    }
}

/// A header coded against the reference (residue model 3) that is forged: its frame damaged,
/// its lengths changed, or the reference it needs unnamed. Always a clear error, never other
/// bytes or a panic, also under random edits of the index.
#[test]
fn forged_header_deltas_are_errors() {
    let (master, variant) = support::gguf::header_pair();
    let archive = brevis::compress_with_ref(&variant, &master, &Options::default()).unwrap();
    let d = DecodeOptions::default().with_threads(1);
    let with_ref = |a: &[u8]| match catch_unwind(AssertUnwindSafe(|| brevis::decompress_with_ref(a, &master, &d))) {
        Err(_) => Outcome::Panic,
        Ok(Err(_)) => Outcome::Err,
        Ok(Ok(v)) if v == variant => Outcome::Original,
        Ok(Ok(_)) => Outcome::Other,
    };
    assert_eq!(with_ref(&forge(&archive, |_, _| {})), Outcome::Original);
    let frame_len =
        brevis::internals::index(&Archive::open(&archive).unwrap()).residue_delta.as_ref().unwrap().frame.len();
    for i in (0..frame_len).step_by(frame_len / 40 + 1) {
        let forged = forge(&archive, |ix, _| ix.residue_delta.as_mut().unwrap().frame[i] ^= 1 << (i % 8));
        assert_eq!(with_ref(&forged), Outcome::Err, "frame byte {i}");
    }
    for (what, edit) in [
        ("prefix one byte longer", (0, 1)),
        ("prefix one byte shorter", (0, -1)),
        ("prefix of the whole reference", (1, 0)),
    ] {
        let forged = forge(&archive, |ix, _| {
            let delta = ix.residue_delta.as_mut().unwrap();
            delta.prefix_len =
                if edit.0 == 1 { master.len() as u64 } else { delta.prefix_len.wrapping_add_signed(edit.1) };
        });
        assert_eq!(with_ref(&forged), Outcome::Err, "{what}");
    }
    // A residue length that does not add up, or a delta without the reference it needs, does
    // not open.
    assert!(Archive::open(&forge(&archive, |ix, _| ix.residue_delta.as_mut().unwrap().len += 1)).is_err());
    assert!(Archive::open(&forge(&archive, |ix, _| ix.reference = None)).is_err());
    let meta = meta_of(&archive);
    let bad = sweep(600, |round| {
        let mut rng = Rng(round as u64 + 77);
        let mut m = meta.clone();
        let i = rng.below(m.len() as u64) as usize;
        m[i] ^= 1 << rng.below(8);
        match with_ref(&with_meta(&archive, &m)) {
            Outcome::Err | Outcome::Original => None,
            o => Some(format!("byte {i}: {o:?}")),
        }
    });
    assert!(bad.is_empty(), "{} failures, e.g. {:?}", bad.len(), &bad[..bad.len().min(8)]);
}
