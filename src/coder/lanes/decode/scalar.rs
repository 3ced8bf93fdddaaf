//! The scalar decoder: 32 lanes unrolled, branch-free refills.

use super::{EscReader, Input, Lanes, Tables, CTX_BACK, CTX_NONE};
use crate::coder::lanes::{L, LANES};
use crate::error::{Error, Result};

/// Decodes one symbol with state `x` (`prev`: the lane's context index, replaced by the symbol's);
/// `pos` is the next word.
#[inline(always)]
pub(super) fn scalar_step<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    x: &mut u32,
    prev: &mut u8,
    pos: &mut usize,
    o: &mut u16,
) -> Result<()> {
    let mut slot = (*x & ((1u32 << t.prec) - 1)) as usize;
    if CTX != CTX_NONE {
        slot += t.class_off[*prev as usize] as usize;
    }
    debug_assert!(slot < t.tab.len());
    // SAFETY: `tab` has `classes << prec` entries; `x & mask < 2^prec` and the class offset is
    // at most `(classes - 1) << prec`.
    let e = unsafe { *t.tab.get_unchecked(slot) };
    let idx = e >> 24;
    let y = ((e & 0xFFF) + 1).wrapping_mul(*x >> t.prec).wrapping_add((e >> 12) & 0xFFF);
    // Branch-free refill: a word is needed about half the time, at random.
    let need = (y < L) as u32;
    let w = inp.word(*pos);
    *x = (y << (need << 4)) | (w & need.wrapping_neg());
    *pos += need as usize;
    *o = if MAPPED { t.map[idx as usize] as u16 } else { t.base.wrapping_add(idx as u16) };
    if ESC && idx == t.esc_idx {
        *o = esc.next()?;
    }
    if CTX != CTX_NONE {
        *prev = idx as u8;
    }
    Ok(())
}

/// Decodes symbols `from..` (`from` a multiple of 32) one at a time: whole steps (32 lanes
/// unrolled), then the last partial step.
#[inline(always)]
pub(super) fn scalar_run<const MAPPED: bool, const ESC: bool, const CTX: u8>(
    t: &Tables,
    inp: &Input,
    esc: &mut EscReader,
    st: &mut Lanes,
    out: &mut [u16],
    from: usize,
) -> Result<()> {
    debug_assert!(from.is_multiple_of(LANES));
    let (mut x, mut prev, mut pos) = (st.x, st.prev, st.pos);
    let ring = &mut st.ring;
    debug_assert!(CTX != CTX_BACK || (!ring.is_empty() && ring.len().is_multiple_of(LANES)));
    // Row of the current step in `ring`.
    let mut row = st.row;
    let mut steps = out[from..].chunks_exact_mut(LANES);
    for step in &mut steps {
        let ctx: &mut [u8; LANES] =
            if CTX == CTX_BACK { (&mut ring[row..row + LANES]).try_into().expect("a row") } else { &mut prev };
        for lane in 0..LANES {
            scalar_step::<MAPPED, ESC, CTX>(t, inp, esc, &mut x[lane], &mut ctx[lane], &mut pos, &mut step[lane])?;
        }
        if CTX == CTX_BACK {
            row += LANES;
            if row == ring.len() {
                row = 0;
            }
        }
        // A damaged block fails here rather than after decoding the rest of `out` from
        // repeated words.
        if pos > inp.nwords {
            return Err(Error::corrupt("lanes: data ends early"));
        }
    }
    let ctx: &mut [u8; LANES] =
        if CTX == CTX_BACK { (&mut ring[row..row + LANES]).try_into().expect("a row") } else { &mut prev };
    for (lane, o) in steps.into_remainder().iter_mut().enumerate() {
        scalar_step::<MAPPED, ESC, CTX>(t, inp, esc, &mut x[lane], &mut ctx[lane], &mut pos, o)?;
    }
    (st.x, st.prev, st.pos, st.row) = (x, prev, pos, row);
    Ok(())
}
