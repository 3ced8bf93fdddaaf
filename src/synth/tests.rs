//! The chooser of the first release, kept as a reference point: a fixed list of candidate
//! programs per tensor. The search must be able to derive every one of them, so that its
//! results are never worse than this list's on the same sample.

use super::features::channel_len;
use super::twins::{fast_twin, lz_twin, raw_sign_twin, wider_head_twin, WIDER_HEAD};
use super::*;
use crate::dsl::ops::maps::Map;
use confirm::{CLOSE_PART, CONFIRM_NS};

/// Contexts worth trying for a symbol stream: none, the previous word, the word one channel back.
fn heads(shape: &[u64]) -> Vec<Node> {
    let mut v = vec![rans(), rans_prev()];
    if let Some(c) = channel_len(shape) {
        v.push(rans_back(c));
    }
    v
}

/// Leaves for the low mantissa bits: raw, or coded (they may be structured: constant,
/// rounded, few values); wide ones as byte planes.
fn low_leaves(lo: u32) -> Vec<Node> {
    match lo {
        0 => vec![raw()],
        1..=16 => vec![raw(), rans()],
        _ => {
            let planes = lo.div_ceil(8) as usize;
            vec![raw(), byteplanes(vec![rans(); planes])]
        }
    }
}

/// Programs for a float dtype with `e` exponent and `m` mantissa bits.
fn float_candidates(e: u32, m: u32, w: u32, shape: &[u64]) -> Vec<Node> {
    let ks: Vec<u32> = match w {
        8 => (0..=m).collect(),
        16 if e == 8 => vec![1, 2],
        16 => vec![2, 3],
        _ => vec![2],
    };
    let mut out = Vec::new();
    for k in ks {
        for head in heads(shape) {
            for lo in low_leaves(m - k) {
                out.push(fields(e, m, k, [head.clone(), raw(), lo]));
            }
        }
    }
    out
}

/// Byte planes of a `w`-bit word, most significant first; `ctx` gives each lower plane the
/// plane above as context.
fn planes_program(w: u32, first: Node, ctx: bool) -> Node {
    let p = w.div_ceil(8) as usize;
    byteplanes(
        (0..p)
            .map(|j| {
                if j == 0 {
                    first.clone()
                } else if ctx {
                    rans_side(j as u8 - 1)
                } else {
                    rans()
                }
            })
            .collect(),
    )
}

/// All candidate programs for a tensor (generators are handled by `choose`).
fn candidates(t: &TensorView) -> Vec<Node> {
    let w = t.word_bits;
    let mut out = vec![raw()];
    if w <= 16 {
        out.push(rans());
        out.push(rans_prev());
    }
    if let Some((e, m)) = t.dtype.float_layout() {
        if 1 + e + m == w {
            out.extend(float_candidates(e, m, w, t.shape));
        }
    }
    if w >= 16 {
        out.push(planes_program(w, rans(), false));
        out.push(planes_program(w, rans(), true));
        out.push(dict(raw(), rans()));
        out.push(dict(raw(), rans_prev()));
        if t.dtype.float_layout().is_none() {
            // Integers: differences, zigzag, then planes.
            out.push(delta(1, map(Map::ZigZag, planes_program(w, rans(), false))));
        }
    }
    let level = if t.bytes.len() <= 1 << 20 { 19 } else { 9 };
    out.push(zstd(level));
    out
}

/// Programs that read the reference, for a tensor with a match in it.
fn reference_candidates(t: &TensorView) -> Vec<Node> {
    let w = t.word_bits;
    let mut out = vec![copyref()];
    if w <= 16 {
        // How far a weight moves depends on its magnitude: condition on the reference's exponent.
        let (shift, bits) = match t.dtype.float_layout() {
            Some((e, m)) if 1 + e + m == w => (m as u8, e as u8),
            _ => (w as u8 / 2, w as u8 / 2),
        };
        out.push(subref(rans_ref(shift, bits)));
        out.push(subref(rans()));
        out.push(xorref(rans_ref(shift, bits)));
        out.push(xorref(rans()));
    } else {
        let (shift, bits) = match t.dtype.float_layout() {
            Some((e, m)) if 1 + e + m == w && e <= 16 => (m as u8, e as u8),
            _ => ((w - 8) as u8, 8),
        };
        let planes = |head: Node| {
            let p = w.div_ceil(8) as usize;
            byteplanes((0..p).map(|j| if j == 0 { head.clone() } else { rans_side(j as u8 - 1) }).collect())
        };
        out.push(subref(planes(rans_ref(shift, bits))));
        out.push(xorref(planes(rans_ref(shift, bits))));
    }
    out
}

/// Whether the search can build `program` for this tensor: every node is a production that
/// applies to its hole .
fn derivable(t: &TensorView, program: &Node, depth: usize) -> bool {
    let ty = Ty::u(t.word_bits);
    let read = |b: &Bytes| b.read_all().ok().and_then(|b| Stream::from_le_bytes(ty, &b).ok());
    let Some(whole) = read(&t.bytes) else { return false };
    let reference = t.reference.as_ref().and_then(read);
    let tctx = tensor_ctx(t, reference.is_some(), &SearchOptions { depth, ..SearchOptions::new(0) });
    // A recursive walk that carries its place in the program.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        t: &TensorCtx,
        p: &Node,
        parts: &[Stream],
        idx: usize,
        depth: usize,
        parent: &str,
        aligned: bool,
        r: Option<&Stream>,
    ) -> bool {
        let hole = grammar::HoleView {
            stream: &parts[idx],
            siblings: &parts[..idx],
            depth,
            parent_label: parent,
            aligned,
            repeats: grammar::estimate(&parts[idx], 5).repeats(),
        };
        let prods = grammar::productions(t, &hole);
        let Some(prod) =
            prods.iter().find(|q| Node::leaf(q.op.clone()).to_bytes() == Node::leaf(p.op.clone()).to_bytes())
        else {
            return false;
        };
        match grammar::apply(prod, &hole, r) {
            grammar::Outcome::Fail => false,
            grammar::Outcome::Leaf(_) => p.children.is_empty(),
            grammar::Outcome::Split(_, kids) => {
                let is_dict = matches!(p.op, Op::Dict(_));
                let is_sparse = matches!(p.op, Op::Sparse(_));
                let is_palette = matches!(p.op, Op::Palette(_));
                kids.len() == p.children.len()
                    && p.children.iter().enumerate().all(|(i, c)| {
                        // A dict's table, sparse's parts and a palette's counts, lows and gaps
                        // are not element-aligned.
                        let unaligned = is_sparse || (is_dict && i == 0) || (is_palette && i < 3);
                        let al = aligned && !unaligned;
                        walk(t, c, &kids, i, depth + 1, &prod.label, al, r)
                    })
            }
        }
    }
    walk(&tctx, program, std::slice::from_ref(&whole), 0, 0, "", true, reference.as_ref())
}

/// `n` pseudo-random bytes from `seed`, each masked by `mask`.
fn random_bytes(mut seed: u64, n: usize, mask: u8) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u8 & mask
        })
        .collect()
}

/// Words of a dtype: a normal-ish float pattern for floats, small integers otherwise.
fn data_for(dt: &DType, n: usize, seed: &mut u64) -> Vec<u8> {
    let w = dt.bits().unwrap() as usize / 8;
    let mut next = || {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 33
    };
    (0..n)
        .flat_map(|_| {
            let r = next();
            let v: u64 = match dt.float_layout() {
                // A sign, an exponent in a band below the bias, a random mantissa.
                Some((e, m)) => {
                    let bias = (1u64 << (e - 1)) - 1;
                    ((r & 1) << (e + m)) | ((bias - 1 - (r >> 1) % 6) << m) | ((r >> 4) & ((1u64 << m) - 1))
                }
                None => r % 200,
            };
            v.to_le_bytes()[..w].to_vec()
        })
        .collect()
}

#[test]
fn first_release_candidates_are_derivable() {
    let mut seed = 3u64;
    let cases: Vec<(DType, Vec<u64>)> = vec![
        (DType::BF16, vec![64, 96]),
        (DType::F16, vec![16, 8, 3, 3]),
        (DType::F32, vec![48, 40]),
        (DType::F8E4M3, vec![512]),
        (DType::I64, vec![300]),
        (DType::I32, vec![20, 30]),
        (DType::U8, vec![1000]),
    ];
    for (dt, shape) in cases {
        let n: u64 = shape.iter().product();
        let data = data_for(&dt, n as usize, &mut seed);
        let reference = data_for(&dt, n as usize, &mut seed);
        let w = dt.bits().unwrap();
        let mut t =
            TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: w, bytes: (&data).into(), reference: None };
        for c in candidates(&t) {
            assert!(derivable(&t, &c, DEFAULT_DEPTH), "{}: {c} is not derivable", dt.name());
        }
        t.reference = Some((&reference).into());
        for c in reference_candidates(&t).into_iter().filter(|c| c.to_string() != "copyref") {
            assert!(derivable(&t, &c, DEFAULT_DEPTH), "{}: {c} is not derivable", dt.name());
        }
    }
}

/// The LZ twin codes the entropy-coded head of a root float or byte split with `zstd(19)`, and
/// leaves other programs alone.
#[test]
fn lz_twins() {
    let twin = |p: Node| lz_twin(&p).map(|t| t.to_string());
    assert_eq!(
        twin(fields(5, 10, 1, [huffman(), raw(), raw()])),
        Some(fields(5, 10, 1, [zstd(19), raw(), raw()]).to_string())
    );
    assert_eq!(twin(byteplanes(vec![lanes(), raw()])), Some(byteplanes(vec![zstd(19), raw()]).to_string()));
    assert_eq!(twin(fields(5, 10, 1, [raw(), huffman(), raw()])), None);
    assert_eq!(twin(byteplanes(vec![zstd(19), raw()])), None);
    assert_eq!(twin(rans()), None);
}

/// The fast twin swaps each entropy leaf for the `lanes` leaf of the same context, and leaves
/// programs without such a leaf (or with a context no lane can see) alone.
#[test]
fn fast_twins() {
    let twin = |p: Node| fast_twin(&p).map(|t| t.to_string());
    assert_eq!(
        twin(fields(8, 23, 4, [rans_prev(), huffman(), dict(delta(1, zstd(9)), raw())])),
        Some(fields(8, 23, 4, [lanes_adj(), lanes(), dict(delta(1, zstd(9)), raw())]).to_string())
    );
    assert_eq!(
        twin(byteplanes(vec![rans_back(512), raw()])),
        Some(byteplanes(vec![lanes_back(512), raw()]).to_string())
    );
    assert_eq!(twin(rans()), Some(lanes().to_string()));
    assert_eq!(twin(byteplanes(vec![rans_back(48), raw()])), None);
    assert_eq!(twin(fields(8, 7, 3, [lanes(), raw(), raw()])), None);
    assert_eq!(twin(raw()), None);
}

/// The raw-sign twin stores each `fields` sign part raw where an entropy leaf codes it, at any
/// depth, and leaves programs without one alone.
#[test]
fn raw_sign_twins() {
    let twin = |p: Node| raw_sign_twin(&p).map(|t| t.to_string());
    assert_eq!(
        twin(fields(8, 23, 4, [lanes_adj(), lanes_adj(), dict(delta(1, zstd(9)), raw())])),
        Some(fields(8, 23, 4, [lanes_adj(), raw(), dict(delta(1, zstd(9)), raw())]).to_string())
    );
    assert_eq!(
        twin(delta(1, fields(5, 10, 1, [huffman(), rans(), raw()]))),
        Some(delta(1, fields(5, 10, 1, [huffman(), raw(), raw()])).to_string())
    );
    assert_eq!(twin(fields(5, 10, 1, [lanes(), raw(), lanes()])), None);
    assert_eq!(twin(fields(5, 10, 1, [lanes(), konst(0), raw()])), None);
    assert_eq!(twin(byteplanes(vec![lanes(), lanes()])), None);
}

/// The wider-head twin moves `WIDER_HEAD` mantissa bits into the head of each float split whose
/// head is an entropy leaf, up to the widest split the search offers, and keeps the children.
#[test]
fn wider_head_twins() {
    let twin = |p: Node| wider_head_twin(&p).map(|t| t.to_string());
    let k = 3;
    assert_eq!(
        twin(sparse(8, rans_pop(16), fields(5, 10, k, [lanes(), raw(), raw()]))),
        Some(sparse(8, rans_pop(16), fields(5, 10, k + WIDER_HEAD, [lanes(), raw(), raw()])).to_string())
    );
    // bf16's head holds at most 7 mantissa bits; a head already that wide has no twin.
    assert_eq!(
        twin(fields(8, 7, 6, [huffman(), raw(), raw()])),
        Some(fields(8, 7, 7, [huffman(), raw(), raw()]).to_string())
    );
    assert_eq!(twin(fields(8, 7, 7, [huffman(), raw(), raw()])), None);
    // A head that is not an entropy leaf is left as it is.
    assert_eq!(twin(fields(5, 10, 1, [byteplanes(vec![huffman(), raw()]), raw(), raw()])), None);
    assert_eq!(twin(rans()), None);
}

/// The program (its position in `programs`) kept for `t` where `ranked` is the ranking on the
/// sample and a check named `named` to compare with its winner: those and the winner, encoded over
/// the whole tensor, as the compressor does (`choose_whole`).
fn kept(
    t: &TensorView,
    opts: &SearchOptions,
    programs: &[&Node],
    ranked: &[(usize, usize)],
    named: Vec<usize>,
) -> usize {
    let candidates: Vec<usize> = std::iter::once(ranked[0].1).chain(named).collect();
    let nodes: Vec<&Node> = candidates.iter().map(|&k| programs[k]).collect();
    candidates[choose_whole(t, opts, &nodes, false).unwrap()]
}

/// Slower finalists ranked just behind the winner on the sample are compared with it over the
/// tensor, and the one that costs least there is kept; one ranked further behind, a faster one
/// or a copy of the winner is not compared; only at a level that asks for the checks, on a
/// tensor larger than the sample.
#[test]
fn close_finalists_are_compared_over_the_tensor() {
    let (dt, n) = (DType::U8, 1usize << 20);
    let shape = [n as u64];
    // Independent two-bit symbols: `rans` codes them in a quarter of `raw`'s bytes, and the
    // previous symbol as a context only adds tables.
    let skewed = random_bytes(11, n, 3);
    let opts = SearchOptions { sample_elems: 1 << 14, chunk_elems: 1 << 16, ..SearchOptions::new(n) };
    let first = |ranked: &[(usize, usize)], programs: &[&Node], opts: &SearchOptions| {
        let t =
            TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: 8, bytes: (&skewed).into(), reference: None };
        let named = Confirm { t: &t, opts, programs, sample_elems: opts.sample_elems }.close_finalists(ranked);
        kept(&t, opts, programs, ranked, named)
    };
    let ns = |p: &Node| crate::dsl::cost::program_ns(p, Ty::u(8));
    let (fast, small, context) = (raw(), rans(), rans_prev());
    assert!(ns(&fast) < ns(&small) && ns(&small) < ns(&context));
    let close = [(1000, 0), (1000 + 1000 / CLOSE_PART, 1), (1000 + 1000 / CLOSE_PART, 2)];
    assert_eq!(first(&close, &[&fast, &fast, &small], &opts), 2, "the smaller one, past a copy of the winner");
    assert_eq!(first(&close, &[&small, &context, &context], &opts), 0, "the winner stays where it is smaller");
    assert_eq!(first(&close, &[&context, &small, &small], &opts), 0, "a faster finalist is not compared");
    let far = [(1000, 0), (1001 + 1000 / CLOSE_PART, 1)];
    assert_eq!(first(&far, &[&fast, &small], &opts), 0, "a finalist further behind is not compared");
    assert_eq!(first(&close, &[&fast, &fast, &small], &SearchOptions { confirm_whole: false, ..opts.clone() }), 0);
    assert_eq!(first(&close, &[&fast, &fast, &small], &SearchOptions { sample_elems: n, ..opts.clone() }), 0);
}

/// A winner on the sample that decodes slower than a finalist ranked below it gives way where
/// the finalist costs less over the whole tensor, and is kept where it does not; only
/// at a level that asks for the check, with a decode price, on a tensor much larger than the
/// sample.
#[test]
fn slow_winner_is_checked_over_the_whole_tensor() {
    let (dt, n) = (DType::U8, 1usize << 20);
    let shape = [n as u64];
    let (noise, skewed) = (random_bytes(7, n, 0xff), random_bytes(8, n, 3));
    let (slow, fast) = (rans(), raw());
    assert!(
        crate::dsl::cost::program_ns(&slow, Ty::u(8)) >= crate::dsl::cost::program_ns(&fast, Ty::u(8)) + CONFIRM_NS
    );
    let opts = SearchOptions { sample_elems: 1 << 14, decode_weight: 0.0025, ..SearchOptions::new(n) };
    let first = |data: &Vec<u8>, opts: &SearchOptions| {
        let t = TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: 8, bytes: data.into(), reference: None };
        let ranked = [(100, 0), (101, 1)];
        let programs: &[&Node] = &[&slow, &fast];
        let named = Confirm { t: &t, opts, programs, sample_elems: opts.sample_elems }.slow_winner(&ranked);
        kept(&t, opts, programs, &ranked, named.into_iter().collect())
    };
    assert_eq!(first(&noise, &opts), 1, "raw costs less than rans on noise");
    assert_eq!(first(&skewed, &opts), 0, "rans saves far more than its price on 2-bit symbols");
    assert_eq!(first(&noise, &SearchOptions { confirm_whole: false, ..opts.clone() }), 0);
    assert_eq!(first(&noise, &SearchOptions { decode_weight: 0.0, ..opts.clone() }), 0);
    assert_eq!(first(&noise, &SearchOptions { sample_elems: n / 4, ..opts.clone() }), 0);
}

/// A winner with an LZ leaf gives way to its literal twin (`lanes` for `zstd`) where the twin
/// costs less over the tensor, wherever the twin ranked on the sample, and is kept where it
/// does not; only at a level that asks for the check, on a tensor much larger than the sample,
/// and for a winner that has an LZ leaf.
#[test]
fn lz_winner_is_checked_over_the_tensor() {
    let (dt, n) = (DType::U8, 1usize << 20);
    let shape = [n as u64];
    // Binomial symbols (the bits set in a random byte): no repeats for LZ, and probabilities
    // that its Huffman-coded literals round where `lanes` does not.
    let binomial: Vec<u8> = random_bytes(12, n, 0xff).iter().map(|b| b.count_ones() as u8).collect();
    // A block of noise over and over: LZ copies it, `lanes` codes every byte.
    let repeats: Vec<u8> = random_bytes(13, 4096, 0xff).iter().copied().cycle().take(n).collect();
    let (lz, literal) = (zstd(9), lanes());
    assert_eq!(twins::literal_twin(&lz), Some(literal.clone()));
    assert_eq!(twins::literal_twin(&rans()), None);
    let opts = SearchOptions { sample_elems: 1 << 14, chunk_elems: 1 << 16, ..SearchOptions::new(n) };
    let first = |data: &Vec<u8>, programs: &[&Node], opts: &SearchOptions| {
        let t = TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: 8, bytes: data.into(), reference: None };
        let ranked = [(100, 0), (150, 1), (200, 2)];
        let named = Confirm { t: &t, opts, programs, sample_elems: opts.sample_elems }.lz_winner(&ranked);
        kept(&t, opts, programs, &ranked, named.into_iter().collect())
    };
    let programs: &[&Node] = &[&lz, &raw(), &literal];
    assert_eq!(first(&binomial, programs, &opts), 2, "lanes is smaller on binomial symbols");
    assert_eq!(first(&repeats, programs, &opts), 0, "zstd copies the repeats");
    assert_eq!(first(&binomial, &[&rans(), &raw(), &literal], &opts), 0, "no LZ leaf, no check");
    assert_eq!(first(&binomial, &[&lz, &raw(), &rans()], &opts), 0, "no twin ranked, no check");
    assert_eq!(first(&binomial, programs, &SearchOptions { confirm_whole: false, ..opts.clone() }), 0);
    assert_eq!(first(&binomial, programs, &SearchOptions { sample_elems: n / 4, ..opts.clone() }), 0);
}

/// A tensor of the same kind as an earlier one compares twice as many of that tensor's ranked
/// programs as the level keeps finalists: a runner-up (here the third) can win on its data, one
/// ranked further down is not tried.
#[test]
fn reuse_compares_twice_the_finalists() {
    let (dt, n) = (DType::U8, 1usize << 16);
    let shape = [n as u64];
    let skewed = random_bytes(5, n, 3);
    let t = TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: 8, bytes: (&skewed).into(), reference: None };
    let opts = SearchOptions { finalists: 2, ..SearchOptions::new(n) };
    let pick = |candidates: &[Node]| choose_among(&t, &opts, candidates).unwrap().program;
    assert_eq!(pick(&[raw(), raw(), rans()]), rans(), "the runner-up that is smaller on this tensor");
    assert_eq!(pick(&[raw(), raw(), raw(), raw(), rans()]), raw(), "the fifth is past twice the finalists");
}

/// Rows of `ch` words in groups of three (a landmark head's x, y and z rows): each word's top
/// byte is its column's scale for the row's coordinate, give or take a little (so that LZ finds
/// no repeats), so rows three apart share it, and the low byte is noise.
fn xyz_rows(ch: usize, rows: usize, seed: u64) -> Vec<u8> {
    let scales: Vec<u8> = random_bytes(seed, 3 * ch, 7).iter().map(|s| 4 * s).collect();
    let (noise, jitter) = (random_bytes(seed + 1, ch * rows, 0xff), random_bytes(seed + 2, ch * rows, 3));
    (0..ch * rows).flat_map(|i| [noise[i], scales[(i / ch) % 3 * ch + i % ch] + jitter[i]]).collect()
}

/// `channel_lag` finds the period of three channels, and nothing in noise or where one
/// channel back is as good.
#[test]
fn channel_lag_finds_rows_three_apart() {
    let ch = 64;
    let stream = |b: &[u8]| Stream::from_le_bytes(Ty::u(16), b).unwrap();
    assert_eq!(features::channel_lag(&stream(&xyz_rows(ch, 128, 3)), ch as u64), Some(3 * ch as u64));
    assert_eq!(features::channel_lag(&stream(&random_bytes(4, 2 * ch * 128, 0xff)), ch as u64), None);
    // The same scale in every row: one channel back predicts as well as three.
    let same: Vec<u8> = xyz_rows(ch, 128, 5).chunks(2).enumerate().flat_map(|(i, w)| [w[0], (i % ch) as u8]).collect();
    assert_eq!(features::channel_lag(&stream(&same), ch as u64), None);
}

/// The search offers the lag as a `back` context: on rows three apart it codes the top bytes
/// against the row three back.
#[test]
fn the_search_codes_against_the_lag() {
    let (dt, ch, rows) = (DType::F16, 64usize, 1024usize);
    let shape = [rows as u64, ch as u64];
    let data = xyz_rows(ch, rows, 9);
    let t = TensorView { name: "w", dtype: &dt, shape: &shape, word_bits: 16, bytes: (&data).into(), reference: None };
    let p = choose(&t, &SearchOptions::new(rows * ch)).unwrap().program.to_string();
    assert!(p.contains(&format!("back {}", 3 * ch)), "{p}");
}

/// The LZ probe runs on streams of at least `LZ_PROBE_MIN` bytes: a repeated pattern is seen
/// there, and a shorter stream's LZ estimate is its raw size.
#[test]
fn the_lz_probe_skips_short_streams() {
    let pattern = |bytes: usize| {
        let b: Vec<u8> = (0..bytes).map(|i| [3u8, 141, 59, 26, 5, 35, 89, 79][i % 8]).collect();
        grammar::estimate(&Stream::from_le_bytes(Ty::u(16), &b).unwrap(), 5)
    };
    let short = pattern(grammar::LZ_PROBE_MIN - 2);
    assert_eq!(short.lz.to_bits(), short.raw.to_bits());
    let long = pattern(4 * grammar::LZ_PROBE_MIN);
    assert!(long.lz < long.raw / 4.0, "{} of {}", long.lz, long.raw);
}

/// Small tensors of one dtype, shape and role are of one kind only where the top bits of their
/// words agree (always 0, always 1, or both): a norm's positive scales and its shifts are not.
/// A large tensor's kind does not read its words.
#[test]
fn a_small_tensors_kind_holds_its_sign() {
    let (dt, shape) = (DType::F32, [384u64]);
    let words = |f: &dyn Fn(usize) -> f32| -> Vec<u8> { (0..384).flat_map(|i| f(i).to_le_bytes()).collect() };
    let (pos, neg) = (words(&|i| 1.0 + i as f32 / 512.0), words(&|i| -1.0 - i as f32 / 256.0));
    let (mixed, pos2) = (words(&|i| (i as f32 - 190.5) / 64.0), words(&|i| 0.5 + i as f32 / 300.0));
    let view = |name: &'static str, b: &Vec<u8>| -> Option<String> {
        let t = TensorView { name, dtype: &dt, shape: &shape, word_bits: 32, bytes: b.into(), reference: None };
        kind(&t, 1)
    };
    let k = |b: &Vec<u8>| view("blk.0.ffn_norm.weight", b).unwrap();
    assert_eq!(k(&pos), k(&pos2));
    assert_ne!(k(&pos), k(&mixed));
    assert_ne!(k(&pos), k(&neg));
    assert_ne!(k(&neg), k(&mixed));
    assert_eq!(view("blk.1.ffn_norm.bias", &mixed), Some(k(&mixed)), "the same role");
    let big_shape = [REUSE_MIN_ELEMS as u64];
    let big = |v: f32| -> Vec<u8> { (0..REUSE_MIN_ELEMS).flat_map(|_| v.to_le_bytes()).collect() };
    let (a, b) = (big(1.0), big(-1.0));
    let big_kind = |b: &Vec<u8>| {
        let t =
            TensorView { name: "w", dtype: &dt, shape: &big_shape, word_bits: 32, bytes: b.into(), reference: None };
        kind(&t, 1)
    };
    assert_eq!(big_kind(&a), big_kind(&b));
}
