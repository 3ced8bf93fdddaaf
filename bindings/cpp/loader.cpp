// A llama.cpp-style loader on top of the Brevis C API: map an archive, list its tensors, decode
// each tensor straight into its own aligned buffer (the way a runtime fills its weight buffers),
// and check every byte against the original safetensors file. With --ref, the delta path: a
// fine-tuned checkpoint compressed against its base and restored with it, byte for byte.
//
//   loader ARCHIVE.brv ORIGINAL.safetensors
//   loader --ref BASE.safetensors TUNED.safetensors OUT.brv
//
// Build: c++ -std=c++17 loader.cpp $(pkg-config --cflags --libs brevis)   (see README.md)
// Built and run by tests/ffi_c.rs.

#include "brevis_cpp.hpp"

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace brevis_examples;

// Alignment of each tensor buffer: what SIMD kernels and GPU uploads want.
constexpr size_t kAlign = 64;

struct aligned_free {
    void operator()(uint8_t *p) const { std::free(p); }
};
using buffer = std::unique_ptr<uint8_t, aligned_free>;

buffer aligned_buffer(uint64_t n) {
    size_t size = (static_cast<size_t>(n) + kAlign - 1) / kAlign * kAlign;
    void *p = std::aligned_alloc(kAlign, size == 0 ? kAlign : size);
    if (!p) throw std::bad_alloc();
    return buffer(static_cast<uint8_t *>(p));
}

struct tensor {
    std::string name;
    std::string dtype;
    std::vector<uint64_t> shape;
    uint64_t nbytes, offset, compressed;
    buffer data;
};

std::string shape_string(const std::vector<uint64_t> &shape) {
    std::string s = "[";
    for (size_t d = 0; d < shape.size(); d++) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + "]";
}

// `src` compressed against the reference `ref` (its base checkpoint).
std::vector<uint8_t> compress_with_ref(const mapped_file &src, const mapped_file &ref) {
    std::vector<uint8_t> archive(brevis_compress_bound(src.size()));
    size_t n = 0;
    check(brevis_compress_with_ref(src.data(), src.size(), ref.data(), ref.size(), archive.data(), archive.size(),
                                   nullptr, &n),
          "compressing against the reference");
    archive.resize(n);
    return archive;
}

// The original of an archive made against the reference `ref`.
std::vector<uint8_t> decompress_with_ref(const std::vector<uint8_t> &archive, const mapped_file &ref) {
    uint64_t size = 0;
    check(brevis_decompressed_size(archive.data(), archive.size(), &size), "reading the archive's size");
    std::vector<uint8_t> original(static_cast<size_t>(size));
    size_t n = 0;
    check(brevis_decompress_with_ref(archive.data(), archive.size(), ref.data(), ref.size(), original.data(),
                                     original.size(), &n),
          "decompressing against the reference");
    original.resize(n);
    return original;
}

// --ref BASE TUNED OUT: TUNED compressed against BASE, written to OUT, restored with BASE and
// compared byte for byte; without the reference the archive must not decode.
int reference_round_trip(const char *base_path, const char *tuned_path, const char *out_path) {
    mapped_file base(base_path), tuned(tuned_path);
    std::vector<uint8_t> archive = compress_with_ref(tuned, base);
    std::vector<uint8_t> back = decompress_with_ref(archive, base);
    if (back.size() != tuned.size() || (!back.empty() && std::memcmp(back.data(), tuned.data(), back.size()) != 0)) {
        std::fprintf(stderr, "MISMATCH: the reference round trip changed the checkpoint\n");
        return 1;
    }
    size_t n = 0;
    int rc = brevis_decompress(archive.data(), archive.size(), back.data(), back.size(), &n);
    if (rc != BREVIS_ERROR_INVALID_ARGUMENT) {
        std::fprintf(stderr, "decoding without the reference returned %d, not BREVIS_ERROR_INVALID_ARGUMENT\n", rc);
        return 1;
    }
    FILE *f = std::fopen(out_path, "wb");
    if (!f || std::fwrite(archive.data(), 1, archive.size(), f) != archive.size() || std::fclose(f) != 0) {
        std::fprintf(stderr, "cannot write %s\n", out_path);
        return 1;
    }
    std::printf("reference round trip matches: %zu bytes against a reference of %zu bytes -> archive %zu bytes\n",
                tuned.size(), base.size(), archive.size());
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc == 5 && std::strcmp(argv[1], "--ref") == 0) {
        try {
            return reference_round_trip(argv[2], argv[3], argv[4]);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 1;
        }
    }
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s ARCHIVE.brv ORIGINAL.safetensors\n       %s --ref BASE TUNED OUT.brv\n",
                     argv[0], argv[0]);
        return 2;
    }
    try {
        std::printf("brevis %s (header %s)\n", brevis_version(), BREVIS_VERSION_STRING);
        mapped_file file(argv[1]), original(argv[2]);
        archive_ptr archive = open_archive(file);

        // The index: names, dtypes, shapes, sizes. Nothing is decoded yet.
        size_t count = brevis_archive_tensor_count(archive.get());
        std::vector<tensor> tensors(count);
        for (size_t i = 0; i < count; i++) {
            brevis_tensor_info info;
            check(brevis_archive_tensor_info(archive.get(), i, &info), "reading the index");
            tensor &t = tensors[i];
            t.name.assign(info.name, info.name_len);
            t.dtype = info.dtype;
            t.shape.assign(info.shape, info.shape + info.ndim);
            t.nbytes = info.nbytes;
            t.offset = info.offset;
            t.compressed = info.compressed_bytes;
            size_t j = 0;
            check(brevis_archive_find(archive.get(), t.name.c_str(), &j), "finding a tensor by name");
            std::printf("%4zu %-40s %-5s %-18s %10" PRIu64 " B -> %10" PRIu64 " B\n", i, t.name.c_str(),
                        t.dtype.c_str(), shape_string(t.shape).c_str(), t.nbytes, t.compressed);
        }

        // Decode every tensor into its own aligned buffer; the archive handle is shared by the
        // worker threads (it is immutable once opened).
        std::atomic<size_t> next{0};
        std::atomic<int> error{BREVIS_OK};
        auto worker = [&] {
            for (size_t i; (i = next++) < count;) {
                tensor &t = tensors[i];
                t.data = aligned_buffer(t.nbytes);
                int rc = brevis_archive_decode_tensor(archive.get(), i, t.data.get(), t.nbytes);
                if (rc != BREVIS_OK) error = rc;
            }
        };
        unsigned n_threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
        std::vector<std::thread> pool;
        for (unsigned k = 0; k < n_threads; k++) pool.emplace_back(worker);
        for (auto &th : pool) th.join();
        check(error, "decoding a tensor");

        // Every byte against the original file.
        uint64_t total = 0;
        for (const tensor &t : tensors) {
            if (reinterpret_cast<uintptr_t>(t.data.get()) % kAlign != 0) throw std::runtime_error("misaligned");
            if (t.offset + t.nbytes > original.size() ||
                (t.nbytes > 0 && std::memcmp(t.data.get(), original.data() + t.offset, t.nbytes) != 0)) {
                std::fprintf(stderr, "MISMATCH: tensor %s\n", t.name.c_str());
                return 1;
            }
            total += t.nbytes;
        }
        std::printf("all tensors match: %zu tensors, %" PRIu64 " bytes, archive %zu bytes, original %zu bytes\n",
                    count, total, file.size(), original.size());
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
