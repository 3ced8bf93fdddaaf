// Package brevis is the Go binding of Brevis, lossless compression of safetensors checkpoints.
// It calls the C library (libbrevis) through cgo and uses the standard library only.
//
// Build the library first (cargo build --release), then point cgo at it:
//
//	CGO_LDFLAGS="-L$REPO/target/release -Wl,-rpath,$REPO/target/release" go test
//
// Errors of the library are *Error values; compare them with errors.Is against ErrCorrupt,
// ErrNotFound, and the other Err* values.
package brevis

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -lbrevis
#include <stdlib.h>
#include <brevis.h>
*/
import "C"

import (
	"unsafe"
)

// Error is a status code of the library (a BREVIS_ERROR_* value of brevis.h).
type Error struct {
	Code int
	Op   string
}

func (e *Error) Error() string {
	msg := C.GoString(C.brevis_error_string(C.int(e.Code)))
	if e.Op != "" {
		return "brevis: " + e.Op + ": " + msg
	}
	return "brevis: " + msg
}

// Is matches any *Error with the same code, so that errors.Is(err, brevis.ErrCorrupt) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The library's error codes, for errors.Is.
var (
	ErrNullPointer     = &Error{Code: C.BREVIS_ERROR_NULL_POINTER}
	ErrInvalidArgument = &Error{Code: C.BREVIS_ERROR_INVALID_ARGUMENT}
	ErrDstTooSmall     = &Error{Code: C.BREVIS_ERROR_DST_TOO_SMALL}
	ErrCorrupt         = &Error{Code: C.BREVIS_ERROR_CORRUPT}
	ErrUnsupported     = &Error{Code: C.BREVIS_ERROR_UNSUPPORTED}
	ErrChecksum        = &Error{Code: C.BREVIS_ERROR_CHECKSUM}
	ErrLimit           = &Error{Code: C.BREVIS_ERROR_LIMIT}
	ErrIO              = &Error{Code: C.BREVIS_ERROR_IO}
	ErrNotFound        = &Error{Code: C.BREVIS_ERROR_NOT_FOUND}
	ErrInternal        = &Error{Code: C.BREVIS_ERROR_PANIC}
)

func check(rc C.int, op string) error {
	if rc == C.BREVIS_OK {
		return nil
	}
	return &Error{Code: int(rc), Op: op}
}

// Options are settings for one call; the zero value (or a nil *Options) means the defaults.
type Options struct {
	Threads     int   // worker threads; 0: every core
	ChunkBytes  int   // bytes of original data per chunk; 0: the default (1 MiB)
	SampleElems int   // search budget, elements per tensor; 0: the default
	MemoryLimit int64 // memory limit in bytes (BREVIS_OPTION_MEMORY_LIMIT); 0: the default
	NoVerify    bool  // skip the whole-file checksum on decompression
	Level       int   // compression level: 1 fast, 2 default, 3 max (smallest); 0: the default
}

// handle returns a brevis_options handle for o (nil for the defaults); free it with free.
func (o *Options) handle() (*C.brevis_options, error) {
	if o == nil || *o == (Options{}) {
		return nil, nil
	}
	h := C.brevis_options_new()
	set := func(key C.brevis_option, v int64) error {
		return check(C.brevis_options_set(h, key, C.int64_t(v)), "options")
	}
	var err error
	if o.Threads != 0 {
		err = set(C.BREVIS_OPTION_THREADS, int64(o.Threads))
	}
	if err == nil && o.ChunkBytes != 0 {
		err = set(C.BREVIS_OPTION_CHUNK_BYTES, int64(o.ChunkBytes))
	}
	if err == nil && o.SampleElems != 0 {
		err = set(C.BREVIS_OPTION_SAMPLE_ELEMS, int64(o.SampleElems))
	}
	if err == nil && o.MemoryLimit != 0 {
		err = set(C.BREVIS_OPTION_MEMORY_LIMIT, o.MemoryLimit)
	}
	if err == nil && o.NoVerify {
		err = set(C.BREVIS_OPTION_VERIFY, 0)
	}
	if err == nil && o.Level != 0 {
		err = set(C.BREVIS_OPTION_LEVEL, int64(o.Level))
	}
	if err != nil {
		C.brevis_options_free(h)
		return nil, err
	}
	return h, nil
}

// ptr is the address of b's first byte, or nil for an empty slice.
func ptr(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&b[0]))
}

// Version is the library's version, "MAJOR.MINOR.PATCH".
func Version() string {
	return C.GoString(C.brevis_version())
}

// CompressBound is the largest archive Compress can return for n bytes of input.
func CompressBound(n int) int {
	return int(C.brevis_compress_bound(C.size_t(n)))
}

// Compress compresses src (any file; safetensors gets a program per tensor).
func Compress(src []byte, opts *Options) ([]byte, error) {
	return compress("compress", src, opts, func(dst []byte, h *C.brevis_options, n *C.size_t) C.int {
		return C.brevis_compress(ptr(src), C.size_t(len(src)), ptr(dst), C.size_t(len(dst)), h, n)
	})
}

// compress lets call write an archive of src into a buffer of CompressBound bytes.
func compress(op string, src []byte, opts *Options, call func(dst []byte, h *C.brevis_options, n *C.size_t) C.int) ([]byte, error) {
	h, err := opts.handle()
	if err != nil {
		return nil, err
	}
	defer C.brevis_options_free(h)
	dst := make([]byte, CompressBound(len(src)))
	var n C.size_t
	if err := check(call(dst, h, &n), op); err != nil {
		return nil, err
	}
	return dst[:n:n], nil
}

// DecompressedSize is the size of the file archive decompresses to (reads only its index).
func DecompressedSize(archive []byte) (uint64, error) {
	var n C.uint64_t
	if err := check(C.brevis_decompressed_size(ptr(archive), C.size_t(len(archive)), &n), "decompressed size"); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// Decompress restores the original bytes of archive.
func Decompress(archive []byte, opts *Options) ([]byte, error) {
	return decompress("decompress", archive, opts, func(dst []byte, h *C.brevis_options, n *C.size_t) C.int {
		return C.brevis_decompress_with_options(ptr(archive), C.size_t(len(archive)), ptr(dst), C.size_t(len(dst)), h, n)
	})
}

// CompressWithRef compresses src against the reference checkpoint ref (a safetensors file, or an
// archive of one): tensors that match one of the reference (a fine-tune of its base) are coded
// against it where that is smaller. Decompressing needs the same reference (DecompressWithRef).
func CompressWithRef(src, ref []byte, opts *Options) ([]byte, error) {
	return compress("compress with reference", src, opts, func(dst []byte, h *C.brevis_options, n *C.size_t) C.int {
		return C.brevis_compress_with_ref(ptr(src), C.size_t(len(src)), ptr(ref), C.size_t(len(ref)), ptr(dst), C.size_t(len(dst)), h, n)
	})
}

// DecompressWithRef restores an archive made by CompressWithRef, given the same reference; a
// missing or different reference is an error matching ErrInvalidArgument.
func DecompressWithRef(archive, ref []byte, opts *Options) ([]byte, error) {
	return decompress("decompress with reference", archive, opts, func(dst []byte, h *C.brevis_options, n *C.size_t) C.int {
		return C.brevis_decompress_with_ref_and_options(ptr(archive), C.size_t(len(archive)), ptr(ref), C.size_t(len(ref)),
			ptr(dst), C.size_t(len(dst)), h, n)
	})
}

// decompress sizes the output of archive, checks it against the memory limit, and lets call
// decode into it.
func decompress(op string, archive []byte, opts *Options, call func(dst []byte, h *C.brevis_options, n *C.size_t) C.int) ([]byte, error) {
	size, err := DecompressedSize(archive)
	if err != nil {
		return nil, err
	}
	if opts != nil && opts.MemoryLimit != 0 && size > uint64(opts.MemoryLimit) {
		return nil, &Error{Code: C.BREVIS_ERROR_LIMIT, Op: op}
	}
	h, err := opts.handle()
	if err != nil {
		return nil, err
	}
	defer C.brevis_options_free(h)
	dst := make([]byte, size)
	var n C.size_t
	if err := check(call(dst, h, &n), op); err != nil {
		return nil, err
	}
	return dst[:n], nil
}

// TensorInfo describes one tensor of an archive.
type TensorInfo struct {
	Name            string
	DType           string // the safetensors dtype: "F32", "BF16", ...
	Shape           []uint64
	NBytes          uint64 // size of the tensor's data
	Offset          uint64 // offset of the data in the original file
	CompressedBytes uint64
}

// Archive gives random access to the tensors of an archive. It keeps its own copy of the
// archive bytes in C memory (cgo forbids C from holding Go memory); call Close to release it.
// Its methods may be called from several goroutines at once.
type Archive struct {
	h    *C.brevis_archive
	data unsafe.Pointer
	info []TensorInfo
}

// OpenArchive opens an archive, checking its header and index.
func OpenArchive(archive []byte) (*Archive, error) {
	return OpenArchiveWithOptions(archive, nil)
}

// OpenArchiveWithOptions opens an archive with settings that it keeps: MemoryLimit bounds the
// index and the largest tensor it decodes (an error matching ErrLimit above it); Threads > 0
// gives it its own pool of that many threads to decode tensors in (0: one thread per core,
// shared).
func OpenArchiveWithOptions(archive []byte, opts *Options) (*Archive, error) {
	o, err := opts.handle()
	if err != nil {
		return nil, err
	}
	defer C.brevis_options_free(o)
	data := C.CBytes(archive) // a non-nil pointer even for an empty slice
	var h *C.brevis_archive
	if err := check(C.brevis_archive_open_with_options((*C.uint8_t)(data), C.size_t(len(archive)), o, &h), "open archive"); err != nil {
		C.free(data)
		return nil, err
	}
	a := &Archive{h: h, data: data}
	n := int(C.brevis_archive_tensor_count(h))
	a.info = make([]TensorInfo, n)
	for i := 0; i < n; i++ {
		var t C.brevis_tensor_info
		if err := check(C.brevis_archive_tensor_info(h, C.size_t(i), &t), "tensor info"); err != nil {
			a.Close()
			return nil, err
		}
		shape := make([]uint64, int(t.ndim))
		if t.ndim > 0 {
			copy(shape, unsafe.Slice((*uint64)(unsafe.Pointer(t.shape)), int(t.ndim)))
		}
		a.info[i] = TensorInfo{
			Name:            C.GoStringN(t.name, C.int(t.name_len)),
			DType:           C.GoString(t.dtype),
			Shape:           shape,
			NBytes:          uint64(t.nbytes),
			Offset:          uint64(t.offset),
			CompressedBytes: uint64(t.compressed_bytes),
		}
	}
	return a, nil
}

// Close releases the archive; calling it again does nothing.
func (a *Archive) Close() error {
	if a.h != nil {
		C.brevis_archive_free(a.h)
		C.free(a.data)
		a.h, a.data = nil, nil
	}
	return nil
}

// Len is the number of tensors.
func (a *Archive) Len() int { return len(a.info) }

// Info describes tensor i (0 <= i < Len()).
func (a *Archive) Info(i int) TensorInfo { return a.info[i] }

// Find is the index of the first tensor named name; an error matching ErrNotFound if none.
func (a *Archive) Find(name string) (int, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var i C.size_t
	if err := check(C.brevis_archive_find(a.h, cname, &i), "find "+name); err != nil {
		return -1, err
	}
	return int(i), nil
}

// DecodeInto decodes tensor i into dst (at least Info(i).NBytes long) and returns the bytes
// written.
func (a *Archive) DecodeInto(i int, dst []byte) (int, error) {
	if a.h == nil {
		return 0, &Error{Code: C.BREVIS_ERROR_NULL_POINTER, Op: "archive is closed"}
	}
	if i < 0 || i >= len(a.info) {
		return 0, &Error{Code: C.BREVIS_ERROR_INVALID_ARGUMENT, Op: "decode tensor"}
	}
	if err := check(C.brevis_archive_decode_tensor(a.h, C.size_t(i), ptr(dst), C.size_t(len(dst))), "decode "+a.info[i].Name); err != nil {
		return 0, err
	}
	return int(a.info[i].NBytes), nil
}

// Tensor decodes tensor i into a new slice.
func (a *Archive) Tensor(i int) ([]byte, error) {
	if i < 0 || i >= len(a.info) {
		return nil, &Error{Code: C.BREVIS_ERROR_INVALID_ARGUMENT, Op: "decode tensor"}
	}
	dst := make([]byte, a.info[i].NBytes)
	_, err := a.DecodeInto(i, dst)
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// TensorByName decodes the tensor named name.
func (a *Archive) TensorByName(name string) ([]byte, error) {
	i, err := a.Find(name)
	if err != nil {
		return nil, err
	}
	return a.Tensor(i)
}
