//! Arbitrary tensors of every dtype in a safetensors file: compress, then decompress, must give
//! the identical bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

const DTYPES: [(&str, usize); 16] = [
    ("BOOL", 1), ("U8", 1), ("I8", 1), ("U16", 2), ("I16", 2), ("U32", 4), ("I32", 4), ("U64", 8),
    ("I64", 8), ("F16", 2), ("BF16", 2), ("F32", 4), ("F64", 8), ("F8_E4M3", 1), ("F8_E5M2", 1), ("Q4", 1),
];

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    // First byte: dtype and tensor count; the rest is split among the tensors.
    let (dtype, width) = DTYPES[data[0] as usize % DTYPES.len()];
    let count = 1 + (data[0] as usize / 16) % 3;
    let body = &data[1..];
    let per = body.len() / count / width * width;
    let mut header = String::from("{");
    let mut payload = Vec::new();
    for t in 0..count {
        let part = &body[t * per..(t + 1) * per];
        let (a, b) = (payload.len(), payload.len() + part.len());
        if t > 0 {
            header.push(',');
        }
        header += &format!(r#""t{t}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{a},{b}]}}"#, part.len() / width);
        payload.extend_from_slice(part);
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&payload);
    let copy = file.clone();
    let opts = brevis::Options::default().with_threads(1).with_chunk_bytes(64 + data.len() % 200);
    let archive = brevis::compress(&file, &opts).expect("compress never fails on a valid file");
    assert_eq!(file, copy, "compress modified its input");
    assert_eq!(brevis::decompress(&archive).expect("own archive decodes"), file);
    // Raw bytes too.
    let archive = brevis::compress(data, &opts).unwrap();
    assert_eq!(brevis::decompress(&archive).unwrap(), data);
});
