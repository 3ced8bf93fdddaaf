//! Tolerant safetensors layout: which byte ranges of a file are tensors. Everything else (the
//! length prefix, the JSON header, padding, gaps, trailing bytes) is residue, kept verbatim by the
//! container. Anything that is not a consistent safetensors file yields `Err(reason)`, and the
//! caller codes the file as one byte stream instead: a valid input file is never an error.

use super::DType;

#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpan {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
}

impl TensorSpan {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Width of the root stream's words: the element width when the byte size agrees with the
    /// dtype and shape, else 8 (bytes).
    pub fn word_bits(&self) -> u32 {
        match self.dtype.bits() {
            Some(b) if self.shape_consistent() => b,
            _ => 8,
        }
    }

    fn shape_consistent(&self) -> bool {
        let Some(bits) = self.dtype.bits() else {
            return false;
        };
        let elems = self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        matches!(elems.and_then(|e| e.checked_mul(bits as u64 / 8)), Some(b) if b == self.len())
    }
}

/// Largest JSON header accepted (the safetensors crate uses 100 MB too).
pub const MAX_HEADER: u64 = 100_000_000;

/// Tensor spans sorted by offset, or why the file is not (consistent) safetensors.
pub fn layout(file: &[u8]) -> Result<Vec<TensorSpan>, String> {
    layout_from_prefix(file, file.len() as u64)
}

/// The layout from the start of a file (at least its length prefix and JSON header) and the
/// file's total length. The archive reader uses it to rebuild tensor entries from the header
/// kept in the residue instead of storing them twice.
pub fn layout_from_prefix(file: &[u8], file_len: u64) -> Result<Vec<TensorSpan>, String> {
    if file.len() < 8 {
        return Err("shorter than a safetensors length prefix".into());
    }
    let n = u64::from_le_bytes(file[..8].try_into().unwrap());
    if n > MAX_HEADER || 8 + n > file.len() as u64 || file.len() as u64 > file_len {
        return Err("header length out of range".into());
    }
    let header = &file[8..8 + n as usize];
    let json: serde_json::Value = serde_json::from_slice(header).map_err(|e| format!("header is not JSON: {e}"))?;
    let obj = json.as_object().ok_or("header is not a JSON object")?;
    let data_start = 8 + n;
    let mut spans = Vec::with_capacity(obj.len());
    for (name, v) in obj {
        if name == "__metadata__" {
            continue;
        }
        let t = v.as_object().ok_or_else(|| format!("tensor {name:?} is not an object"))?;
        let dtype = t.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| format!("tensor {name:?} has no dtype"))?;
        let shape = t
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| format!("tensor {name:?} has no shape"))?
            .iter()
            .map(|d| d.as_u64())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| format!("tensor {name:?} has a bad shape"))?;
        let offs = t
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .filter(|o| o.len() == 2)
            .and_then(|o| Some((o[0].as_u64()?, o[1].as_u64()?)))
            .ok_or_else(|| format!("tensor {name:?} has bad data_offsets"))?;
        let (a, b) = offs;
        if a > b || b.checked_add(data_start).is_none_or(|e| e > file_len) {
            return Err(format!("tensor {name:?}: offsets out of range"));
        }
        spans.push(TensorSpan {
            name: name.clone(),
            dtype: DType::parse(dtype),
            shape,
            start: data_start + a,
            end: data_start + b,
        });
    }
    spans.sort_by_key(|s| (s.start, s.end));
    for w in spans.windows(2) {
        if w[1].start < w[0].end {
            return Err(format!("tensors {:?} and {:?} overlap", w[0].name, w[1].name));
        }
    }
    Ok(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn parses_gaps_and_odd_dtypes() {
        let h = r#"{"__metadata__":{"a":"b"},"w":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"x":{"dtype":"Q4_K","shape":[3],"data_offsets":[0,3]}}"#;
        let f = file(h, &[0u8; 20]);
        let s = layout(&f).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "x");
        assert_eq!(s[0].word_bits(), 8);
        assert_eq!(s[1].word_bits(), 16);
        // The safetensors crate rejects the gap and the unknown dtype; we do not.
        assert!(::safetensors::SafeTensors::deserialize(&f).is_err());
    }

    #[test]
    fn agrees_with_the_safetensors_crate_on_valid_files() {
        let h = r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}}"#;
        let f = file(h, &[7u8; 24]);
        let ours = layout(&f).unwrap();
        let theirs = ::safetensors::SafeTensors::deserialize(&f).unwrap();
        for s in &ours {
            let t = theirs.tensor(&s.name).unwrap();
            assert_eq!(t.shape().iter().map(|&d| d as u64).collect::<Vec<_>>(), s.shape);
            assert_eq!(t.data().len() as u64, s.len());
            assert_eq!(s.word_bits(), s.dtype.bits().unwrap());
        }
    }

    #[test]
    fn rejects_lies() {
        let over = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#;
        assert!(layout(&file(over, &[0; 6])).unwrap_err().contains("overlap"));
        let out = r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,400]}}"#;
        assert!(layout(&file(out, &[0; 6])).is_err());
        assert!(layout(b"\xff\xff\xff\xff\xff\xff\xff\xff").is_err());
        assert!(layout(b"").is_err());
        assert!(layout(&file("[1,2]", &[])).is_err());
    }
}
