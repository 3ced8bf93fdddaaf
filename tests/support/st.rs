//! Builds safetensors files byte by byte (8-byte LE header length, JSON header with
//! dtype/shape/data_offsets and optional `__metadata__`, padded with spaces to a multiple of 8,
//! then the data), and makes test data. The one builder of every test: integration tests reach
//! it as `support::st`, the unit tests of src/ffi/codec.rs include this file by path.
#![allow(dead_code)]

/// SplitMix64.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// Roughly normal, mean 0, standard deviation `sd` (sum of uniforms).
    pub fn normal(&mut self, sd: f64) -> f64 {
        let s: f64 = (0..4).map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64).sum();
        (s - 2.0) * sd * 1.732
    }
}

/// One tensor of a file in the standard layout.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

pub fn tensor(name: &str, dtype: &str, shape: &[u64], data: Vec<u8>) -> Tensor {
    Tensor { name: name.to_string(), dtype: dtype.to_string(), shape: shape.to_vec(), data }
}

/// A header entry with explicit offsets (relative to the start of the data, as in safetensors).
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub offsets: (u64, u64),
}

pub fn entry(name: &str, dtype: &str, shape: &[u64], offsets: (u64, u64)) -> Entry {
    Entry { name: name.to_string(), dtype: dtype.to_string(), shape: shape.to_vec(), offsets }
}

/// The JSON header (unpadded).
pub fn header_json(entries: &[Entry], metadata: Option<&[(&str, &str)]>) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let mut parts = Vec::new();
    if let Some(md) = metadata {
        let kv: Vec<String> = md.iter().map(|(k, v)| format!("{}:{}", q(k), q(v))).collect();
        parts.push(format!("\"__metadata__\":{{{}}}", kv.join(",")));
    }
    for e in entries {
        let shape: Vec<String> = e.shape.iter().map(|d| d.to_string()).collect();
        parts.push(format!(
            "{}:{{\"dtype\":{},\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            q(&e.name),
            q(&e.dtype),
            shape.join(","),
            e.offsets.0,
            e.offsets.1
        ));
    }
    format!("{{{}}}", parts.join(","))
}

/// A file from a raw header string (padded with spaces to a multiple of 8) and the data bytes.
pub fn file_from_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut f = (h.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(&h);
    f.extend_from_slice(data);
    f
}

/// A file with explicit offsets and data (gaps, lies and trailing bytes are up to the caller).
pub fn file_with_entries(entries: &[Entry], metadata: Option<&[(&str, &str)]>, data: &[u8]) -> Vec<u8> {
    file_from_header(&header_json(entries, metadata), data)
}

/// A standard safetensors file: the tensors' data back to back, in the order given.
pub fn file(tensors: &[Tensor], metadata: Option<&[(&str, &str)]>) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for t in tensors {
        let a = data.len() as u64;
        data.extend_from_slice(&t.data);
        entries.push(Entry {
            name: t.name.clone(),
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
            offsets: (a, data.len() as u64),
        });
    }
    file_with_entries(&entries, metadata, &data)
}

/// Start of the data section of a file made by this module.
pub fn data_start(file: &[u8]) -> usize {
    8 + u64::from_le_bytes(file[..8].try_into().unwrap()) as usize
}

/// Every dtype the library knows, with its element width in bytes.
pub const DTYPES: [(&str, usize); 15] = [
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("U16", 2),
    ("I16", 2),
    ("U32", 4),
    ("I32", 4),
    ("U64", 8),
    ("I64", 8),
    ("F16", 2),
    ("BF16", 2),
    ("F32", 4),
    ("F64", 8),
    ("F8_E4M3", 1),
    ("F8_E5M2", 1),
];

/// (exponent, mantissa) bits of the float dtypes.
pub fn float_layout(dtype: &str) -> Option<(u32, u32)> {
    Some(match dtype {
        "F16" => (5, 10),
        "BF16" => (8, 7),
        "F32" => (8, 23),
        "F64" => (11, 52),
        "F8_E4M3" => (4, 3),
        "F8_E5M2" => (5, 2),
        _ => return None,
    })
}

/// Special values of a float layout as bit patterns: ±0, ±inf, quiet and signalling NaNs with
/// payloads, subnormals, extremes.
pub fn float_specials(e: u32, m: u32) -> Vec<u64> {
    let sign = 1u64 << (e + m);
    let exp_all = ((1u64 << e) - 1) << m;
    let mant_all = (1u64 << m) - 1;
    let quiet = 1u64 << (m - 1);
    let mut v = vec![
        0,
        sign,
        exp_all,
        sign | exp_all,
        exp_all | quiet,
        sign | exp_all | quiet,
        exp_all | quiet | 1,
        exp_all | mant_all,
        sign | exp_all | mant_all,
        1,
        mant_all,
        sign | 1,
        sign | mant_all,
        1 << m,
        (exp_all - (1 << m)) | mant_all,
        sign | (exp_all - (1 << m)) | mant_all,
    ];
    if m >= 2 {
        v.push(exp_all | 1); // signalling NaN, payload 1
        v.push(sign | exp_all | (quiet >> 1)); // signalling NaN, top payload bit
        v.push(exp_all | (mant_all >> 1)); // signalling NaN, all payload bits
    }
    v
}

/// Little-endian bytes of `n` words of `width` bytes from `f(i)`.
pub fn words(width: usize, n: usize, mut f: impl FnMut(usize) -> u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(width * n);
    for i in 0..n {
        out.extend_from_slice(&f(i).to_le_bytes()[..width]);
    }
    out
}

/// Plausible data of a dtype: weights for floats, small ints for integers, 0/1 for BOOL. With
/// `specials`, float special values (NaN payloads, infinities, -0, subnormals) are spread over
/// the tensor.
pub fn data_for(dtype: &str, n: usize, rng: &mut Rng, specials: bool) -> Vec<u8> {
    let width = DTYPES.iter().find(|d| d.0 == dtype).map_or(1, |d| d.1);
    let mut v = match dtype {
        "BOOL" => words(1, n, |_| rng.below(2)),
        "F32" => words(4, n, |_| (rng.normal(0.02) as f32).to_bits() as u64),
        "F64" => words(8, n, |_| rng.normal(0.02).to_bits()),
        "F16" => words(2, n, |_| half::f16::from_f64(rng.normal(0.05)).to_bits() as u64),
        "BF16" => words(2, n, |_| half::bf16::from_f64(rng.normal(0.05)).to_bits() as u64),
        "F8_E4M3" | "F8_E5M2" => {
            // Exponents in a band below the bias, random sign and mantissa.
            let (e, m) = float_layout(dtype).unwrap();
            let bias = (1u64 << (e - 1)) - 1;
            words(1, n, |_| (rng.below(2) << (e + m)) | ((bias - rng.below(4)) << m) | rng.below(1 << m))
        }
        "I8" | "I16" | "I32" | "I64" => words(width, n, |_| (rng.below(200) as i64 - 100) as u64),
        _ => words(width, n, |_| rng.below(1000)),
    };
    if specials && n > 0 {
        if let Some((e, m)) = float_layout(dtype) {
            let sp = float_specials(e, m);
            for (i, s) in sp.iter().cycle().take(n.min(3 * sp.len())).enumerate() {
                let at = (i * 7919) % n;
                v[at * width..(at + 1) * width].copy_from_slice(&s.to_le_bytes()[..width]);
            }
        }
    }
    v
}
