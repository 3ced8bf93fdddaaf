// A llama.cpp-style GGUF loader on top of the Brevis C API: map an archive of a GGUF file, get
// the GGUF header bytes (header, metadata key/values, tensor infos: what gguf_init_from_file
// parses), parse the tensor infos from them as a GGUF loader does, allocate the data section
// aligned to the file's alignment, decode each tensor into place at its offset (several threads
// share the archive handle), and compare every byte of header + data section with the original
// .gguf file.
//
//   gguf_loader ARCHIVE.brv ORIGINAL.gguf
//
// Build: c++ -std=c++17 -pthread gguf_loader.cpp $(pkg-config --cflags --libs brevis)
// (see README.md). Built and run by tests/ffi_c.rs.

#include "brevis_cpp.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

namespace {

using namespace brevis_examples;

// One tensor info of the GGUF header: name, dimensions (fastest first), ggml type, offset in the
// data section.
struct gguf_tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
};

struct gguf_file {
    uint32_t version = 0;
    uint64_t alignment = 32;
    uint64_t data_start = 0;
    std::vector<gguf_tensor> tensors;
};

// Reads the GGUF header (ggml's docs/gguf.md) with every read bounds-checked.
class gguf_reader {
  public:
    gguf_reader(const uint8_t *p, size_t n) : p_(p), n_(n) {}

    const uint8_t *take(uint64_t k) {
        if (k > n_ - pos_) throw std::runtime_error("GGUF header: truncated");
        const uint8_t *at = p_ + pos_;
        pos_ += static_cast<size_t>(k);
        return at;
    }
    template <typename T> T get() {
        T v;
        std::memcpy(&v, take(sizeof v), sizeof v);  // GGUF is little-endian, as is this host
        return v;
    }
    std::string string() {
        uint64_t len = get<uint64_t>();
        const uint8_t *s = take(len);
        return std::string(reinterpret_cast<const char *>(s), static_cast<size_t>(len));
    }
    // Skips one metadata value of type `type` (arrays may nest).
    void skip_value(uint32_t type, int depth) {
        static const uint64_t fixed[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type > 12 || depth > 16) throw std::runtime_error("GGUF header: bad metadata value type");
        if (type == 8) {
            string();
        } else if (type == 9) {
            uint32_t et = get<uint32_t>();
            uint64_t count = get<uint64_t>();
            if (et <= 12 && fixed[et] != 0) {
                if (count > (n_ - pos_) / fixed[et]) throw std::runtime_error("GGUF header: array too long");
                take(count * fixed[et]);
            } else {
                for (uint64_t i = 0; i < count; i++) skip_value(et, depth + 1);
            }
        } else {
            take(fixed[type]);
        }
    }
    size_t pos() const { return pos_; }

  private:
    const uint8_t *p_;
    size_t n_, pos_ = 0;
};

gguf_file parse_gguf(const uint8_t *p, size_t n) {
    gguf_reader r(p, n);
    if (std::memcmp(r.take(4), "GGUF", 4) != 0) throw std::runtime_error("GGUF header: no magic");
    gguf_file f;
    f.version = r.get<uint32_t>();
    uint64_t n_tensors = r.get<uint64_t>(), n_kv = r.get<uint64_t>();
    for (uint64_t i = 0; i < n_kv; i++) {
        std::string key = r.string();
        uint32_t type = r.get<uint32_t>();
        if (key == "general.alignment" && type == 4) {
            f.alignment = r.get<uint32_t>();
        } else {
            r.skip_value(type, 0);
        }
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor t;
        t.name = r.string();
        uint32_t n_dims = r.get<uint32_t>();
        if (n_dims > 4) throw std::runtime_error("GGUF header: more than 4 dimensions");
        for (uint32_t d = 0; d < n_dims; d++) t.ne.push_back(r.get<uint64_t>());
        t.type = r.get<uint32_t>();
        t.offset = r.get<uint64_t>();
        f.tensors.push_back(t);
    }
    if (f.alignment == 0 || (f.alignment & (f.alignment - 1)) != 0) throw std::runtime_error("GGUF: bad alignment");
    f.data_start = (r.pos() + f.alignment - 1) / f.alignment * f.alignment;
    return f;
}

// Bytes of a tensor of ggml type `type` (ggml's block sizes), or 0 for a type not listed here
// (then the archive's size is taken).
uint64_t ggml_nbytes(uint32_t type, const std::vector<uint64_t> &ne) {
    struct block { uint32_t type; uint64_t elems, bytes; };
    static const block blocks[] = {
        {0, 1, 4},      {1, 1, 2},     {2, 32, 18},    {3, 32, 20},    {6, 32, 22},    {7, 32, 24},
        {8, 32, 34},    {9, 32, 36},   {10, 256, 84},  {11, 256, 110}, {12, 256, 144}, {13, 256, 176},
        {14, 256, 210}, {15, 256, 292}, {24, 1, 1},    {25, 1, 2},     {26, 1, 4},     {27, 1, 8},
        {28, 1, 8},     {30, 1, 2},    {39, 32, 17},
    };
    uint64_t elems = 1;
    for (uint64_t d : ne) elems *= d;
    for (const block &b : blocks)
        if (b.type == type) return elems / b.elems * b.bytes;
    return 0;
}

struct aligned_free {
    void operator()(uint8_t *p) const { std::free(p); }
};

int load(const char *archive_path, const char *original_path) {
    mapped_file file(archive_path), original(original_path);
    archive_ptr archive = open_archive(file);

    // The header bytes, parsed as a GGUF loader parses a file's first bytes.
    brevis_gguf_header h;
    check(brevis_archive_gguf_header(archive.get(), &h), "getting the GGUF header");
    gguf_file g = parse_gguf(h.data, h.size);
    if (g.data_start != h.size || g.alignment != h.alignment || g.version != h.version)
        throw std::runtime_error("the parsed header disagrees with brevis_gguf_header");

    // The archive's entries by their offset in the file; byte regions have no GGUF info.
    std::map<uint64_t, size_t> by_offset;
    size_t count = brevis_archive_tensor_count(archive.get());
    for (size_t i = 0; i < count; i++) {
        brevis_tensor_info info;
        check(brevis_archive_tensor_info(archive.get(), i, &info), "reading the index");
        if (info.name_len > 0) by_offset[info.offset] = i;
    }

    // Each tensor of the header: its entry, checked against what the header says.
    struct job { uint64_t offset, nbytes; size_t index; };
    std::vector<job> jobs;
    uint64_t data_size = 0;
    for (const gguf_tensor &t : g.tensors) {
        auto it = by_offset.find(h.size + t.offset);
        if (it == by_offset.end()) throw std::runtime_error("no archive entry for tensor " + t.name);
        brevis_tensor_info info;
        brevis_gguf_tensor_info gi;
        check(brevis_archive_tensor_info(archive.get(), it->second, &info), "reading the index");
        check(brevis_archive_gguf_tensor_info(archive.get(), it->second, &gi), "reading a GGUF tensor info");
        bool same = std::string(info.name, info.name_len) == t.name && gi.ggml_type == t.type &&
                    gi.n_dims == t.ne.size() && gi.data_offset == t.offset &&
                    std::equal(t.ne.begin(), t.ne.end(), gi.ne);
        for (size_t d = 0; d < info.ndim; d++) same = same && info.shape[d] == t.ne[info.ndim - 1 - d];
        uint64_t want = ggml_nbytes(t.type, t.ne);
        if (!same || info.ndim != t.ne.size() || (want != 0 && want != info.nbytes))
            throw std::runtime_error("the archive describes tensor " + t.name + " otherwise than the header");
        std::printf("%-40s type %2u %-8s ne [", t.name.c_str(), t.type, info.dtype);
        for (size_t d = 0; d < t.ne.size(); d++) std::printf("%s%" PRIu64, d ? ", " : "", t.ne[d]);
        std::printf("] at +%" PRIu64 ", %" PRIu64 " B\n", t.offset, info.nbytes);
        jobs.push_back({t.offset, info.nbytes, it->second});
        data_size = std::max(data_size, t.offset + info.nbytes);
    }

    // The data section, zeroed (padding) and aligned as the file's is; each tensor decoded in
    // place at its offset, by a few threads sharing the handle.
    data_size = (data_size + g.alignment - 1) / g.alignment * g.alignment;
    size_t alloc_align = std::max<size_t>(static_cast<size_t>(g.alignment), 64);
    size_t alloc_size = (static_cast<size_t>(data_size) + alloc_align - 1) / alloc_align * alloc_align;
    std::unique_ptr<uint8_t, aligned_free> data(
        static_cast<uint8_t *>(std::aligned_alloc(alloc_align, alloc_size == 0 ? alloc_align : alloc_size)));
    if (!data) throw std::bad_alloc();
    std::memset(data.get(), 0, alloc_size);
    std::atomic<size_t> next{0};
    std::atomic<int> error{BREVIS_OK};
    auto worker = [&] {
        for (size_t k; (k = next++) < jobs.size();) {
            uint8_t *dst = data.get() + jobs[k].offset;
            if (reinterpret_cast<uintptr_t>(dst) % g.alignment != 0) error = BREVIS_ERROR_INVALID_ARGUMENT;
            int rc = brevis_archive_decode_tensor(archive.get(), jobs[k].index, dst, jobs[k].nbytes);
            if (rc != BREVIS_OK) error = rc;
        }
    };
    unsigned n_threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < n_threads; k++) pool.emplace_back(worker);
    for (auto &th : pool) th.join();
    check(error, "decoding a tensor in place");

    // Every byte of header + data section against the original file.
    if (original.size() != h.size + data_size) {
        std::fprintf(stderr, "MISMATCH: header %zu + data section %" PRIu64 " bytes, original %zu bytes\n", h.size,
                     data_size, original.size());
        return 1;
    }
    if (std::memcmp(h.data, original.data(), h.size) != 0 ||
        (data_size > 0 && std::memcmp(data.get(), original.data() + h.size, data_size) != 0)) {
        std::fprintf(stderr, "MISMATCH: the loaded file differs from the original\n");
        return 1;
    }
    std::printf("every byte matches: GGUF v%u, %zu tensors, header %zu bytes, data section %" PRIu64
                " bytes (alignment %" PRIu64 "), archive %zu bytes\n",
                g.version, g.tensors.size(), h.size, data_size, g.alignment, file.size());
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s ARCHIVE.brv ORIGINAL.gguf\n", argv[0]);
        return 2;
    }
    try {
        return load(argv[1], argv[2]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
