// Shared by the C++ examples (loader.cpp, gguf_loader.cpp): errors as exceptions, a read-only
// memory map of a file, and the archive handle as a unique_ptr. Standard library, POSIX and
// brevis.h only.

#ifndef BREVIS_EXAMPLES_BREVIS_CPP_HPP
#define BREVIS_EXAMPLES_BREVIS_CPP_HPP

#include <brevis.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace brevis_examples {

struct brevis_error : std::runtime_error {
    int code;
    brevis_error(const std::string &what, int c)
        : std::runtime_error(what + ": " + brevis_error_string(c)), code(c) {}
};

inline void check(int rc, const char *what) {
    if (rc != BREVIS_OK) throw brevis_error(what, rc);
}

// A read-only memory map of a whole file.
class mapped_file {
  public:
    explicit mapped_file(const char *path) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) throw std::runtime_error(std::string("cannot open ") + path);
        struct stat st;
        if (fstat(fd, &st) != 0) {
            close(fd);
            throw std::runtime_error(std::string("cannot stat ") + path);
        }
        size_ = static_cast<size_t>(st.st_size);
        if (size_ > 0) {
            void *p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                close(fd);
                throw std::runtime_error(std::string("cannot map ") + path);
            }
            data_ = static_cast<const uint8_t *>(p);
        }
        close(fd);
    }
    ~mapped_file() {
        if (data_) munmap(const_cast<uint8_t *>(data_), size_);
    }
    mapped_file(const mapped_file &) = delete;
    mapped_file &operator=(const mapped_file &) = delete;
    const uint8_t *data() const { return data_; }
    size_t size() const { return size_; }

  private:
    const uint8_t *data_ = nullptr;
    size_t size_ = 0;
};

// The archive handle; it borrows the mapped bytes, which outlive it.
struct archive_deleter {
    void operator()(brevis_archive *a) const { brevis_archive_free(a); }
};
using archive_ptr = std::unique_ptr<brevis_archive, archive_deleter>;

inline archive_ptr open_archive(const mapped_file &f) {
    brevis_archive *a = nullptr;
    check(brevis_archive_open(f.data(), f.size(), &a), "opening the archive");
    return archive_ptr(a);
}

}  // namespace brevis_examples

#endif
