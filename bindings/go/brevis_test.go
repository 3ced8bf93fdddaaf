package brevis

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fixture(t *testing.T) []byte {
	path := os.Getenv("BREVIS_FIXTURE")
	if path == "" {
		path = filepath.Join("..", "..", "tests", "fixtures", "silero_vad_16k.safetensors")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tensors parses the safetensors header: name -> data bytes.
func tensors(t *testing.T, f []byte) map[string][]byte {
	n := binary.LittleEndian.Uint64(f[:8])
	var h map[string]json.RawMessage
	if err := json.Unmarshal(f[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, raw := range h {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DataOffsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		out[name] = f[8+n+e.DataOffsets[0] : 8+n+e.DataOffsets[1]]
	}
	return out
}

func TestVersion(t *testing.T) {
	if v := Version(); v == "" {
		t.Fatal("empty version")
	}
}

func TestBytesRoundTrip(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("brevis "), 1000)} {
		packed, err := Compress(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(packed) > CompressBound(len(data)) {
			t.Fatalf("archive of %d bytes above the bound", len(packed))
		}
		back, err := Decompress(packed, &Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, data) {
			t.Fatal("round trip changed the data")
		}
	}
}

func TestCheckpointAndArchive(t *testing.T) {
	orig := fixture(t)
	packed, err := Compress(orig, &Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(packed) >= len(orig) {
		t.Fatalf("no gain: %d -> %d", len(orig), len(packed))
	}
	back, err := Decompress(packed, nil)
	if err != nil || !bytes.Equal(back, orig) {
		t.Fatalf("round trip failed: %v", err)
	}
	// Levels: every level round-trips, max is the smallest, and 4 is refused.
	fast, err1 := Compress(orig, &Options{Level: 1})
	smallest, err2 := Compress(orig, &Options{Level: 3})
	if err1 != nil || err2 != nil || len(smallest) > len(fast) {
		t.Fatalf("levels: %v %v, fast %d bytes, max %d", err1, err2, len(fast), len(smallest))
	}
	if back, err := Decompress(fast, nil); err != nil || !bytes.Equal(back, orig) {
		t.Fatalf("level 1 round trip failed: %v", err)
	}
	if _, err := Compress(orig, &Options{Level: 4}); err == nil {
		t.Fatal("level 4 was accepted")
	}

	want := tensors(t, orig)
	a, err := OpenArchive(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != len(want) {
		t.Fatalf("%d tensors, want %d", a.Len(), len(want))
	}
	name := a.Info(a.Len() - 1).Name
	got, err := a.TensorByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[name]) {
		t.Fatalf("tensor %s differs", name)
	}
	for i := 0; i < a.Len(); i++ {
		info := a.Info(i)
		b, err := a.Tensor(i)
		if err != nil || !bytes.Equal(b, want[info.Name]) || !bytes.Equal(b, orig[info.Offset:info.Offset+info.NBytes]) {
			t.Fatalf("tensor %d (%s): %v", i, info.Name, err)
		}
		if info.DType == "" || len(info.Shape) == 0 {
			t.Fatalf("tensor %s: no dtype or shape", info.Name)
		}
	}
}

func TestErrors(t *testing.T) {
	orig := fixture(t)
	packed, err := Compress(orig[:100000], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(packed[:len(packed)/2], nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated archive: %v", err)
	}
	var e *Error
	if _, err := OpenArchive(orig); !errors.As(err, &e) || e.Code != -4 {
		t.Fatalf("not an archive: %v", err)
	}
	if _, err := Compress([]byte("x"), &Options{ChunkBytes: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad option: %v", err)
	}
	a, err := OpenArchive(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.TensorByName("no such tensor"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := a.DecodeInto(0, make([]byte, 1)); a.Info(0).NBytes > 1 && !errors.Is(err, ErrDstTooSmall) {
		t.Fatalf("small buffer: %v", err)
	}
	if _, err := a.Tensor(a.Len()); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("index past the end: %v", err)
	}
	a.Close()
	if _, err := a.DecodeInto(0, nil); err == nil {
		t.Fatal("decode after Close")
	}
}

// nudged is a fine-tuned copy of a safetensors checkpoint: the lowest bit of every 7th byte of
// its data flipped (tests/support/tools.rs derives it the same way).
func nudged(f []byte) []byte {
	out := append([]byte(nil), f...)
	for i := 8 + binary.LittleEndian.Uint64(f[:8]); i < uint64(len(out)); i += 7 {
		out[i] ^= 1
	}
	return out
}

func TestReferenceRoundTrip(t *testing.T) {
	base := fixture(t)
	tuned := nudged(base)
	packed, err := CompressWithRef(tuned, base, &Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Compress(tuned, &Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(packed) >= len(plain) {
		t.Fatalf("the reference did not help: %d bytes against it, %d without", len(packed), len(plain))
	}
	back, err := DecompressWithRef(packed, base, &Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, tuned) {
		t.Fatal("the reference round trip changed the checkpoint")
	}
	if _, err := Decompress(packed, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("without the reference: %v", err)
	}
	if _, err := DecompressWithRef(packed, tuned, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("another reference: %v", err)
	}
	if _, err := DecompressWithRef(packed, base, &Options{MemoryLimit: 16}); !errors.Is(err, ErrLimit) {
		t.Fatalf("memory limit: %v", err)
	}
}

func TestArchiveWithOptions(t *testing.T) {
	orig := fixture(t)
	packed, err := Compress(orig, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := OpenArchiveWithOptions(packed, &Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	largest := 0
	for i := 0; i < a.Len(); i++ {
		info := a.Info(i)
		b, err := a.Tensor(i)
		if err != nil || !bytes.Equal(b, orig[info.Offset:info.Offset+info.NBytes]) {
			t.Fatalf("tensor %d (%s): %v", i, info.Name, err)
		}
		if info.NBytes > a.Info(largest).NBytes {
			largest = i
		}
	}
	a.Close()
	limited, err := OpenArchiveWithOptions(packed, &Options{Threads: 2, MemoryLimit: int64(a.Info(largest).NBytes) - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	if _, err := limited.Tensor(largest); !errors.Is(err, ErrLimit) {
		t.Fatalf("a tensor above the memory limit: %v", err)
	}
}
