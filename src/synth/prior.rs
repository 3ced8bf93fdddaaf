//! The production prior: a probabilistic grammar P(production | context) that orders and prunes
//! the search. A context is the hole's stream width, its parent production (with the child's
//! position), and the tensor's features (dtype, rank, size class, role). Counts come from the
//! programs that a wider search picks on a sample of tensors; estimates back off from the full
//! context to coarser ones, down to a uniform distribution over the productions that apply, so
//! unseen contexts still work. The prior only steers the search: it is never needed to decode.

use super::features::Features;
use std::collections::BTreeMap;

/// Backoff levels, most specific first: which parts of the context each one keeps.
pub const LEVELS: [&str; 5] =
    ["bits|parent|dtype|rank|size|role", "bits|parent|dtype|role", "bits|parent|dtype", "bits|parent", "parent"];

/// Share of every probability that goes to the uniform distribution, whatever the counts say.
pub const FLOOR: f64 = 0.02;

/// Counts are multiples of 1/UNIT (stored in JSON as integers).
const UNIT: f64 = (1u64 << 20) as f64;

/// Productions less likely than this are pruned (never evaluated).
pub const PRUNE_BELOW: f64 = 1e-3;

/// Where a hole sits: everything a production's probability is conditioned on.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// Width of the hole's stream.
    pub bits: u32,
    /// The parent production's label and the child's position ("fields(k1)#0"), or "root".
    pub parent: &'a str,
    pub features: &'a Features,
}

impl Context<'_> {
    /// The key of this context at backoff level `level` (see [`LEVELS`]).
    pub fn key(&self, level: usize) -> String {
        let f = self.features;
        match level {
            0 => format!("{}|{}|{}|{}|{}|{}", self.bits, self.parent, f.dtype, f.rank, f.size, f.role.name()),
            1 => format!("{}|{}|{}|{}", self.bits, self.parent, f.dtype, f.role.name()),
            2 => format!("{}|{}|{}", self.bits, self.parent, f.dtype),
            3 => format!("{}|{}", self.bits, self.parent),
            _ => self.parent.to_string(),
        }
    }
}

/// Production counts per context, at every backoff level. An empty prior is uniform.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prior {
    /// `counts[level][context key][production label]`.
    counts: Vec<BTreeMap<String, BTreeMap<String, f64>>>,
    /// Tensors whose programs were counted.
    pub tensors: u64,
    /// A prior whose probabilities are averaged with this one's, so that a production either
    /// favours keeps at least half its probability (the built-in prior beside one learned from
    /// a few tensors of the input). Not part of the JSON form.
    pub blend: Option<std::sync::Arc<Prior>>,
}

impl Prior {
    /// The uniform prior: every production that applies to a hole is equally likely.
    pub fn uniform() -> Prior {
        Prior { counts: vec![BTreeMap::new(); LEVELS.len()], tensors: 0, blend: None }
    }

    /// Whether the prior has no counts (every production that applies is equally likely).
    pub fn is_uniform(&self) -> bool {
        !self.has_counts() && self.blend.as_ref().is_none_or(|b| b.is_uniform())
    }

    /// Whether this prior holds counts of its own (its blend aside).
    fn has_counts(&self) -> bool {
        self.counts.iter().any(|l| !l.is_empty())
    }

    /// Counts one use of production `label` in context `ctx`.
    pub(crate) fn observe(&mut self, ctx: &Context, label: &str, weight: f64) {
        if self.counts.len() != LEVELS.len() {
            self.counts = vec![BTreeMap::new(); LEVELS.len()];
        }
        // Counts are kept in units of 1/UNIT, so they add up exactly and survive JSON as integers.
        let weight = (weight * UNIT).round() / UNIT;
        if weight <= 0.0 {
            return;
        }
        for (level, table) in self.counts.iter_mut().enumerate() {
            *table.entry(ctx.key(level)).or_default().entry(label.to_string()).or_insert(0.0) += weight;
        }
    }

    /// Adds another prior's counts to this one.
    pub fn merge(&mut self, other: &Prior) {
        if self.counts.len() != LEVELS.len() {
            self.counts = vec![BTreeMap::new(); LEVELS.len()];
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            for (ctx, labels) in theirs {
                let m = mine.entry(ctx.clone()).or_default();
                for (l, c) in labels {
                    *m.entry(l.clone()).or_insert(0.0) += c;
                }
            }
        }
        self.tensors += other.tensors;
    }

    /// Probabilities of the productions `labels` (the ones that apply to a hole), which sum to 1.
    /// Backoff: the finest level with counts for this context is interpolated with the next
    /// coarser level that has counts, and that one with the uniform distribution (each time
    /// Witten-Bell: the coarser estimate weighs as much as the number of distinct productions
    /// seen, plus one); a floor keeps every production possible. With a [`Prior::blend`], the
    /// average of the two priors' probabilities.
    pub(crate) fn probabilities(&self, ctx: &Context, labels: &[String]) -> Vec<f64> {
        let n = labels.len();
        if n == 0 {
            return Vec::new();
        }
        match &self.blend {
            Some(b) => {
                let theirs = b.probabilities(ctx, labels);
                self.own_probabilities(ctx, labels).iter().zip(&theirs).map(|(a, b)| 0.5 * (a + b)).collect()
            }
            None => self.own_probabilities(ctx, labels),
        }
    }

    /// [`Prior::probabilities`] from this prior's counts alone.
    fn own_probabilities(&self, ctx: &Context, labels: &[String]) -> Vec<f64> {
        let n = labels.len();
        let uniform = 1.0 / n as f64;
        if !self.has_counts() {
            return vec![uniform; n];
        }
        let counts: Vec<Vec<f64>> = (0..self.counts.len())
            .filter_map(|level| {
                let table = self.counts[level].get(&ctx.key(level))?;
                let c: Vec<f64> = labels.iter().map(|l| table.get(l).copied().unwrap_or(0.0)).collect();
                (c.iter().sum::<f64>() > 0.0).then_some(c)
            })
            .take(2)
            .collect();
        let mut p = vec![uniform; n];
        for c in counts.iter().rev() {
            let total: f64 = c.iter().sum();
            let beta = 1.0 + c.iter().filter(|&&x| x > 0.0).count() as f64;
            for (pi, ci) in p.iter_mut().zip(c) {
                *pi = (ci + beta * *pi) / (total + beta);
            }
        }
        p.iter().map(|&x| (1.0 - FLOOR) * x + FLOOR * uniform).collect()
    }

    /// The JSON form (`brevis prior learn -o FILE`, `brevis compress --prior FILE`).
    pub fn to_json(&self) -> String {
        use serde_json::{json, Map, Value};
        let mut levels = Map::new();
        for (name, table) in LEVELS.iter().zip(&self.counts) {
            let mut t = Map::new();
            for (ctx, labels) in table {
                let l: Map<String, Value> =
                    labels.iter().map(|(k, v)| (k.clone(), json!((v * UNIT).round() as u64))).collect();
                t.insert(ctx.clone(), Value::Object(l));
            }
            levels.insert(name.to_string(), Value::Object(t));
        }
        let v = json!({
            "format": "brevis-prior",
            "version": 1,
            "tensors": self.tensors,
            "floor": FLOOR,
            "unit": UNIT as u64,
            "counts": Value::Object(levels),
        });
        serde_json::to_string_pretty(&v).unwrap()
    }

    /// Reads a prior written by [`Prior::to_json`] (`brevis prior learn`).
    pub fn from_json(s: &str) -> Result<Prior, String> {
        let v: serde_json::Value = serde_json::from_str(s).map_err(|e| format!("not a prior: {e}"))?;
        if v.get("format").and_then(|f| f.as_str()) != Some("brevis-prior") {
            return Err("not a prior: missing \"format\": \"brevis-prior\"".into());
        }
        if v.get("version").and_then(|f| f.as_u64()) != Some(1) {
            return Err("unsupported prior version".into());
        }
        let mut p = Prior::uniform();
        p.tensors = v.get("tensors").and_then(|t| t.as_u64()).unwrap_or(0);
        let counts = v.get("counts").and_then(|c| c.as_object()).ok_or("prior: missing \"counts\"")?;
        for (level, name) in LEVELS.iter().enumerate() {
            let Some(table) = counts.get(*name) else { continue };
            let table = table.as_object().ok_or("prior: a level is not an object")?;
            for (ctx, labels) in table {
                let labels = labels.as_object().ok_or("prior: a context is not an object")?;
                let m = p.counts[level].entry(ctx.clone()).or_default();
                for (l, c) in labels {
                    let c = c.as_u64().ok_or("prior: a count is not a non-negative integer")?;
                    m.insert(l.clone(), c as f64 / UNIT);
                }
            }
        }
        Ok(p)
    }

    /// Number of (context, production) pairs at the most specific level.
    pub fn len(&self) -> usize {
        self.counts.first().map_or(0, |t| t.values().map(|m| m.len()).sum())
    }

    /// Whether it counts no pair.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::features::Role;

    fn feats() -> Features {
        Features { dtype: "BF16".into(), rank: 2, size: 3, role: Role::Attn }
    }

    #[test]
    fn backoff_and_json() {
        let f = feats();
        let ctx = Context { bits: 16, parent: "root", features: &f };
        let labels: Vec<String> = ["raw", "rans", "fields(k1)"].iter().map(|s| s.to_string()).collect();
        let u = Prior::uniform().probabilities(&ctx, &labels);
        assert!(u.iter().all(|&p| (p - 1.0 / 3.0).abs() < 1e-12));
        let mut p = Prior::uniform();
        for _ in 0..10 {
            p.observe(&ctx, "fields(k1)", 1.0);
        }
        let q = p.probabilities(&ctx, &labels);
        assert!((q.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(q[2] > 0.9 && q[0] > 0.0);
        // An unseen context of the same parent backs off to the coarser levels.
        let g = Features { dtype: "F16".into(), ..f.clone() };
        let other = Context { bits: 16, parent: "root", features: &g };
        assert!(p.probabilities(&other, &labels)[2] > 0.5);
        let back = Prior::from_json(&p.to_json()).unwrap();
        assert_eq!(back.probabilities(&ctx, &labels), q);
    }

    /// A blended prior averages the two estimates: what either favours keeps half its weight.
    #[test]
    fn blend_averages_both_priors() {
        let f = feats();
        let ctx = Context { bits: 16, parent: "root", features: &f };
        let labels: Vec<String> = ["raw", "rans", "fields(k1)"].iter().map(|s| s.to_string()).collect();
        let (mut a, mut b) = (Prior::uniform(), Prior::uniform());
        for _ in 0..10 {
            a.observe(&ctx, "rans", 1.0);
            b.observe(&ctx, "fields(k1)", 1.0);
        }
        let (pa, pb) = (a.probabilities(&ctx, &labels), b.probabilities(&ctx, &labels));
        a.blend = Some(std::sync::Arc::new(b));
        let p = a.probabilities(&ctx, &labels);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        for i in 0..3 {
            assert_eq!(p[i].to_bits(), (0.5 * (pa[i] + pb[i])).to_bits());
        }
        assert!(p[1] > 0.45 && p[2] > 0.45 && p[0] < 0.1);
        assert!(!a.is_uniform());
    }
}
