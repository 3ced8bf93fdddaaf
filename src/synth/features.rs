//! Tensor features that condition the production prior: dtype, rank, size class, and a role
//! guessed from generic words in the tensor's name (embed, norm, bias, attention, conv, mlp).
//! Nothing here is keyed on particular names, files or hashes: only on common vocabulary.

use crate::tensor::DType;

/// Elements per output channel: the product of the dimensions after the first, when the
/// tensor has more than one channel. Scales differ most between channels, so the word one
/// channel back is the best context for an exponent.
pub fn channel_len(shape: &[u64]) -> Option<u64> {
    match shape {
        [c, rest @ ..] if *c > 1 && !rest.is_empty() => {
            let l: u64 = rest.iter().product();
            (l > 1).then_some(l)
        }
        _ => None,
    }
}

/// Most channels apart that [`channel_lag`] looks.
const MAX_LAG_CHANNELS: u64 = 8;

/// A period of several channels at which the words' top bits (the top byte: sign and exponent)
/// repeat clearly more often than one channel or one word back, found on the screen `s` (a few
/// contiguous runs of the tensor): the x, y and z rows of a landmark head's kernel, three
/// channels apart, share their scales. The lag of 2 to 8 channels whose top bytes match most
/// often wins if they match at least a quarter more often than one channel and one word back;
/// None otherwise.
pub fn channel_lag(s: &crate::dsl::stream::Stream, channel: u64) -> Option<u64> {
    let n = s.len();
    let top = s.ty.bits.saturating_sub(8);
    let rate = |d: usize| -> f64 {
        let m = (d..n).filter(|&i| s.get(i) >> top == s.get(i - d) >> top).count();
        m as f64 / (n - d) as f64
    };
    if channel < 2 || 2 * channel as usize >= n / 2 {
        return None;
    }
    let base = rate(1).max(rate(channel as usize));
    (2..=MAX_LAG_CHANNELS)
        .map(|k| k * channel)
        .filter(|&d| (d as usize) < n / 2)
        .map(|d| (rate(d as usize), d))
        .fold(None, |best: Option<(f64, u64)>, (r, d)| match best {
            Some((b, _)) if b >= r => best,
            _ => Some((r, d)),
        })
        .filter(|&(r, _)| r >= 1.25 * base)
        .map(|(_, d)| d)
}

/// What a tensor is for, as far as generic words in its name tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Embed,
    Norm,
    Bias,
    Attn,
    Conv,
    Mlp,
    Other,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Embed => "embed",
            Role::Norm => "norm",
            Role::Bias => "bias",
            Role::Attn => "attn",
            Role::Conv => "conv",
            Role::Mlp => "mlp",
            Role::Other => "other",
        }
    }
}

/// Guesses a tensor's role from the words of its name (split at anything not alphanumeric and
/// at letter/digit boundaries). Norm layers come first (their biases are norm parameters too),
/// then biases, embeddings, attention, convolutions and dense layers.
pub fn role_of(name: &str) -> Role {
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphabetic()).filter(|w| !w.is_empty()).collect();
    let any = |f: &dyn Fn(&str) -> bool| words.iter().any(|w| f(w));
    let last = words.last().copied().unwrap_or("");
    if any(&|w| {
        w.contains("norm")
            || matches!(w, "ln" | "bn" | "gn" | "running" | "batches" | "scale" | "gamma" | "beta")
            || w.starts_with("layernorm")
    }) {
        return Role::Norm;
    }
    if matches!(last, "b") || any(&|w| w == "bias" || w == "biases") {
        return Role::Bias;
    }
    if any(&|w| w.contains("embed") || matches!(w, "wte" | "wpe" | "tok" | "pos" | "position" | "positional")) {
        return Role::Embed;
    }
    if any(&|w| {
        w.contains("attn")
            || w.contains("attention")
            || matches!(w, "q" | "k" | "v" | "o" | "qkv" | "query" | "key" | "value" | "wq" | "wk" | "wv" | "wo")
    }) {
        return Role::Attn;
    }
    if any(&|w| w.contains("conv")) {
        return Role::Conv;
    }
    if any(&|w| {
        w.contains("mlp")
            || matches!(w, "fc" | "ffn" | "ff" | "dense" | "intermediate" | "linear" | "proj" | "feed" | "forward")
    }) {
        return Role::Mlp;
    }
    Role::Other
}

/// The tensor-level part of a prior context.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Features {
    /// The dtype's name ("BF16", "F32", "bytes" for regions that are not tensors; "+ref" when
    /// coded against a reference).
    pub dtype: String,
    /// Number of dimensions, capped at 4.
    pub rank: usize,
    /// Element count class: 0 below 2^10, 1 below 2^14, 2 below 2^18, 3 from 2^18.
    pub size: usize,
    pub role: Role,
}

impl Features {
    /// `reference`: the tensor is coded against a reference (its dtype then reads "BF16+ref":
    /// such tensors learn and use their own statistics).
    pub fn new(name: &str, dtype: &DType, shape: &[u64], elems: usize, reference: bool) -> Features {
        let mut dtype = match dtype {
            DType::Other(s) if s.is_empty() => "bytes".to_string(),
            d => d.name().to_string(),
        };
        if reference {
            dtype.push_str("+ref");
        }
        let size = match elems {
            0..=1023 => 0,
            1024..=16383 => 1,
            16384..=262143 => 2,
            _ => 3,
        };
        Features { dtype, rank: shape.len().min(4), size, role: role_of(name) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_from_generic_words() {
        assert_eq!(role_of("encoder.layer.0.attention.self.query.weight"), Role::Attn);
        assert_eq!(role_of("encoder.layer.0.attention.output.LayerNorm.bias"), Role::Norm);
        assert_eq!(role_of("embeddings.word_embeddings.weight"), Role::Embed);
        assert_eq!(role_of("conv1.bias"), Role::Bias);
        assert_eq!(role_of("body.0.rdb1.conv1.weight"), Role::Conv);
        assert_eq!(role_of("model.layers.3.mlp.up_proj.weight"), Role::Mlp);
        assert_eq!(role_of("bn1.running_var"), Role::Norm);
        assert_eq!(role_of("decoder.layer_norm.gamma"), Role::Norm);
        assert_eq!(role_of("lstm_cell.bias_ih"), Role::Bias);
        assert_eq!(role_of("x"), Role::Other);
    }
}
