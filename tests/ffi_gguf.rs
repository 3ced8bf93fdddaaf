//! GGUF access through the C API, called from Rust: the header bytes a GGUF parser reads, each
//! tensor's ggml type, GGUF dimensions and data offset, and each tensor decoded into place in a
//! data section (aligned or not); what is not GGUF says so. The C++ loader example
//! (bindings/cpp/gguf_loader.cpp, run by tests/ffi_c.rs) does the same from C++.

mod support;

use brevis::internals::ffi::*;
use std::ffi::{c_int, CStr};
use std::mem::MaybeUninit;
use std::ptr::{null, null_mut};
use support::gguf::*;

fn compress(src: &[u8]) -> Vec<u8> {
    brevis::compress(src, &brevis::Options::default().with_threads(2)).unwrap()
}

/// A handle on `arc` (which must outlive it).
fn open(arc: &[u8]) -> *mut brevis_archive {
    let mut a = null_mut();
    assert_eq!(unsafe { brevis_archive_open(arc.as_ptr(), arc.len(), &mut a) }, BREVIS_OK);
    a
}

fn header(a: *const brevis_archive) -> Result<brevis_gguf_header, c_int> {
    let mut h = MaybeUninit::<brevis_gguf_header>::uninit();
    match unsafe { brevis_archive_gguf_header(a, h.as_mut_ptr()) } {
        BREVIS_OK => Ok(unsafe { h.assume_init() }),
        rc => Err(rc),
    }
}

fn tensor_info(a: *const brevis_archive, i: usize) -> brevis_tensor_info {
    let mut t = MaybeUninit::<brevis_tensor_info>::uninit();
    assert_eq!(unsafe { brevis_archive_tensor_info(a, i, t.as_mut_ptr()) }, BREVIS_OK);
    unsafe { t.assume_init() }
}

fn gguf_info(a: *const brevis_archive, i: usize) -> Result<brevis_gguf_tensor_info, c_int> {
    let mut g = MaybeUninit::<brevis_gguf_tensor_info>::uninit();
    match unsafe { brevis_archive_gguf_tensor_info(a, i, g.as_mut_ptr()) } {
        BREVIS_OK => Ok(unsafe { g.assume_init() }),
        rc => Err(rc),
    }
}

/// What a loader does: the header, then every tensor decoded into a data section that starts
/// `skew` bytes past an alignment boundary, each at its offset; returns header + data section,
/// and checks each tensor's GGUF description against `m`.
fn load(a: *const brevis_archive, m: &Gguf, skew: usize) -> Vec<u8> {
    let h = header(a).unwrap();
    assert_eq!((h.version, h.alignment, h.size as u64), (m.version, m.alignment, m.data_start()));
    let head = unsafe { std::slice::from_raw_parts(h.data, h.size) }.to_vec();
    let mut out = head.clone();
    let data_len = m.bytes().len() - h.size;
    let mut section = vec![m.pad; data_len + skew + 64];
    let base = section.as_ptr().align_offset(64) + skew;
    let offsets = m.data_offsets();
    let count = unsafe { brevis_archive_tensor_count(a) };
    let mut seen = 0;
    for i in 0..count {
        let t = tensor_info(a, i);
        let name = unsafe { CStr::from_ptr(t.name) }.to_str().unwrap();
        let Some(k) = m.tensors.iter().position(|x| x.name == name) else {
            assert_eq!((name, gguf_info(a, i).err()), ("", Some(BREVIS_ERROR_NOT_FOUND)), "a byte region");
            continue;
        };
        let (want, g) = (&m.tensors[k], gguf_info(a, i).unwrap());
        assert_eq!((g.ggml_type, g.n_dims as usize, g.data_offset), (want.ty, want.dims.len(), offsets[k]), "{name}");
        let mut ne = [1u64; 4];
        ne[..want.dims.len()].copy_from_slice(&want.dims);
        assert_eq!(g.ne, ne, "{name}");
        // A 0-dimensional tensor may have no shape array (a null pointer).
        let shape: &[u64] = if t.ndim == 0 { &[] } else { unsafe { std::slice::from_raw_parts(t.shape, t.ndim) } };
        assert!(shape.iter().rev().eq(&want.dims), "{name}: shape {shape:?}, slowest first");
        assert_eq!(t.offset, h.size as u64 + g.data_offset, "{name}");
        let dst = &mut section[base + g.data_offset as usize..];
        assert_eq!(unsafe { brevis_archive_decode_tensor(a, i, dst.as_mut_ptr(), dst.len()) }, BREVIS_OK);
        seen += 1;
    }
    assert_eq!(seen, m.tensors.len());
    out.extend_from_slice(&section[base..base + data_len]);
    out
}

#[test]
fn a_loader_rebuilds_gguf_files_from_the_header_and_tensors() {
    for (version, alignment, vocab) in [(3, 32, 10), (2, 64, 20000), (3, 8, 300)] {
        let m = loader_model(version, alignment, vocab, 0xA5);
        let f = m.bytes();
        let arc = compress(&f);
        let a = open(&arc);
        for skew in [0, 1, 3] {
            assert!(load(a, &m, skew) == f, "v{version} alignment {alignment}, data section {skew} bytes off");
        }
        // The header comes from the index: the same bytes at every call.
        assert_eq!(header(a).unwrap().data, header(a).unwrap().data);
        let count = unsafe { brevis_archive_tensor_count(a) };
        assert_eq!(gguf_info(a, count).err(), Some(BREVIS_ERROR_INVALID_ARGUMENT));
        assert_eq!(unsafe { brevis_archive_gguf_header(a, null_mut()) }, BREVIS_ERROR_NULL_POINTER);
        let mut g = MaybeUninit::uninit();
        assert_eq!(unsafe { brevis_archive_gguf_header(null(), g.as_mut_ptr()) }, BREVIS_ERROR_NULL_POINTER);
        let mut g = MaybeUninit::uninit();
        assert_eq!(unsafe { brevis_archive_gguf_tensor_info(null(), 0, g.as_mut_ptr()) }, BREVIS_ERROR_NULL_POINTER);
        assert_eq!(unsafe { brevis_archive_gguf_tensor_info(a, 0, null_mut()) }, BREVIS_ERROR_NULL_POINTER);
        unsafe { brevis_archive_free(a) };
    }
}

/// A gap of more than 64 KiB between two tensors is a byte region: an entry with an empty name
/// that has no GGUF tensor info; the tensors around it are found.
#[test]
fn a_long_gap_is_a_region_without_gguf_info() {
    let mut m = loader_model(3, 32, 10, 0);
    // After the F32 norm (a tensor of an unknown type would extend over the gap).
    let offsets = m.data_offsets().iter().enumerate().map(|(k, &o)| if k >= 3 { o + (100 << 10) } else { o }).collect();
    m.offsets = Some(offsets);
    let f = m.bytes();
    let arc = compress(&f);
    let a = open(&arc);
    let count = unsafe { brevis_archive_tensor_count(a) };
    assert_eq!(count, m.tensors.len() + 1, "the gap is an entry");
    assert!(load(a, &m, 0) == f);
    unsafe { brevis_archive_free(a) };
}

/// Safetensors files, other files, and GGUF files coded as bytes have no GGUF header.
#[test]
fn what_is_not_gguf_says_so() {
    let st = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/silero_vad_16k.safetensors")).unwrap();
    let mut broken = loader_model(3, 32, 10, 0).bytes();
    broken[4] = 9; // GGUF version 9: coded as bytes
    let not_gguf: [(&str, Vec<u8>); 4] = [
        ("safetensors", st),
        ("bytes", (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect()),
        ("GGUF of version 9", broken),
        ("empty", Vec::new()),
    ];
    for (what, f) in not_gguf {
        let arc = compress(&f);
        let a = open(&arc);
        assert_eq!(header(a).err(), Some(BREVIS_ERROR_NOT_FOUND), "{what}");
        if unsafe { brevis_archive_tensor_count(a) } > 0 {
            assert_eq!(gguf_info(a, 0).err(), Some(BREVIS_ERROR_NOT_FOUND), "{what}");
        }
        unsafe { brevis_archive_free(a) };
    }
}

/// The library's view (`Archive::gguf`) agrees with the file for the reference writer's layout
/// of dimensions: GGUF order, fastest first.
#[test]
fn the_library_view_matches_the_file() {
    let m = loader_model(3, 32, 10, 0);
    let arc = compress(&m.bytes());
    let archive = brevis::Archive::open(&arc).unwrap();
    let view = archive.gguf().unwrap().expect("a GGUF original");
    assert!(view.header == m.bytes()[..m.data_start() as usize]);
    let dims: Vec<Vec<u64>> = view.tensors.iter().flatten().map(|t| t.dims.clone()).collect();
    assert_eq!(dims, m.tensors.iter().map(|t| t.dims.clone()).collect::<Vec<_>>());
}
