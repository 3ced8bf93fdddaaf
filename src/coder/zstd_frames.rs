//! zstd frames: the LZ leaf's coder (`dsl::ops::lz`), one frame per stream.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Mutex;

/// zstd on a byte stream (the LZ leaf for long repeats): one zstd frame, appended to `out`.
/// Each thread keeps its compressor for the last level it used: making one (its tables and
/// windows, zeroed) took about a tenth of the zstd time in the search's estimates of small
/// streams. Within [`with_zstd_memo`], a stream framed before at the same level is not
/// compressed again.
pub fn zstd_encode(bytes: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    let key = (bytes.len() >= MEMO_MIN).then(|| (level, crate::hash::xxh3_64(bytes)));
    if let Some(frame) = key.and_then(|k| memo_get(k, bytes)) {
        out.extend_from_slice(&frame);
        return Ok(());
    }
    let start = out.len();
    compress(bytes, level, out)?;
    if let Some(k) = key {
        memo_put(k, bytes, &out[start..]);
    }
    Ok(())
}

fn compress(bytes: &[u8], level: i32, out: &mut Vec<u8>) -> Result<()> {
    thread_local! {
        static ENCODER: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
            const { std::cell::RefCell::new(None) };
    }
    ENCODER.with(|e| -> Result<()> {
        let mut e = e.borrow_mut();
        let z = match &mut *e {
            Some((l, z)) if *l == level => z,
            slot => &mut slot.insert((level, zstd::bulk::Compressor::new(level)?)).1,
        };
        out.extend_from_slice(&z.compress(bytes)?);
        Ok(())
    })
}

thread_local! {
    /// Each thread's zstd decoder, reused: creating one costs about as much as decoding the
    /// few kilobytes of a `dict` table.
    static ZSTD_DECODER: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decodes `input` (exactly one zstd frame) into exactly `n` bytes.
pub fn zstd_decode(input: &[u8], n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    let got = ZSTD_DECODER.with(|cell| -> Result<usize> {
        let mut slot = cell.borrow_mut();
        let dec = match &mut *slot {
            Some(d) => d,
            empty => empty.insert(zstd::bulk::Decompressor::new()?),
        };
        // `decompress_to_buffer` never writes past the capacity: a forged frame cannot grow
        // memory. A frame that fails leaves the decoder ready for the next one (each call starts
        // a new frame).
        dec.decompress_to_buffer(input, &mut out).map_err(|e| Error::corrupt(format!("zstd: {e}")))
    })?;
    if got != n {
        return Err(Error::corrupt("zstd: wrong decoded length"));
    }
    Ok(out)
}

/// Streams shorter than this are compressed again rather than looked up.
const MEMO_MIN: usize = 1 << 10;
/// Bytes of streams and frames that [`with_zstd_memo`] keeps at most; past it, it starts over.
const MEMO_MAX: usize = 16 << 20;

/// The frames made within [`with_zstd_memo`]: (level, hash of the stream) to the stream and its
/// frame. A hit compares the streams, so a hash collision costs a compression, never a frame.
#[derive(Default)]
struct Memo {
    users: usize,
    bytes: usize,
    frames: HashMap<(i32, u64), (Vec<u8>, Vec<u8>)>,
}

static MEMO: Mutex<Option<Memo>> = Mutex::new(None);

fn memo() -> std::sync::MutexGuard<'static, Option<Memo>> {
    MEMO.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` with the zstd frames it makes kept, up to [`MEMO_MAX`] bytes, until the last call
/// running drops them. A compression frames the same stream at the same level more than once:
/// a small tensor is its own sample, so the frame that sized a finalist is the one written.
/// At `--level fast`, that was half of whisper-base's 288 zstd frames at level 19.
pub fn with_zstd_memo<R>(f: impl FnOnce() -> R) -> R {
    /// Leaves the memo, also when `f` panics.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let mut m = memo();
            if let Some(memo) = m.as_mut() {
                memo.users -= 1;
                if memo.users == 0 {
                    *m = None;
                }
            }
        }
    }
    memo().get_or_insert_with(Memo::default).users += 1;
    let _leave = Leave;
    f()
}

fn memo_get(key: (i32, u64), bytes: &[u8]) -> Option<Vec<u8>> {
    let m = memo();
    let (stream, frame) = m.as_ref()?.frames.get(&key)?;
    (stream[..] == *bytes).then(|| frame.clone())
}

fn memo_put(key: (i32, u64), bytes: &[u8], frame: &[u8]) {
    let mut m = memo();
    let Some(memo) = m.as_mut() else { return };
    let size = bytes.len() + frame.len();
    if size > MEMO_MAX / 4 {
        return;
    }
    if memo.bytes + size > MEMO_MAX {
        memo.frames.clear();
        memo.bytes = 0;
    }
    if memo.frames.insert(key, (bytes.to_vec(), frame.to_vec())).is_none() {
        memo.bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the memo, a stream framed again at the same level gets the frame it got the first
    /// time, and at another level its own; the memo is gone once the last call in it returns.
    #[test]
    fn a_kept_frame_is_the_frame() {
        let stream: Vec<u8> = (0..50_000u32).map(|i| (i * i % 251) as u8).collect();
        let frame = |level| {
            let mut out = vec![7u8];
            zstd_encode(&stream, level, &mut out).unwrap();
            out
        };
        let plain = [frame(3), frame(19)];
        with_zstd_memo(|| {
            with_zstd_memo(|| assert_eq!([frame(3), frame(19)], plain));
            assert!(memo().as_ref().is_some_and(|m| m.frames.len() == 2), "kept while a call runs");
            assert_eq!([frame(3), frame(19), frame(3)], [&plain[..], &plain[..1]].concat()[..]);
        });
        assert!(memo().is_none() || memo().as_ref().is_some_and(|m| m.users > 0));
        assert_eq!(zstd_decode(&plain[1][1..], stream.len()).unwrap(), stream);
    }
}
