// Loading llama.cpp models from Brevis archives: `brevis_llama::load_model` takes a GGUF file or
// a Brevis archive of one (`brevis compress model.gguf` writes `model.gguf.brv`) and returns a
// `llama_model *`, as `llama_model_load_from_file` does.
//
// An archive is decoded into an anonymous in-memory file (`brevis_decompress_file_to_memfd`,
// Linux), which llama.cpp opens as `/proc/self/fd/N` and maps: the decoded model is never written
// to disk, and its pages are the ones llama.cpp uses, so loading takes about the memory of the
// model itself. Any other file goes to `llama_model_load_from_file` unchanged.
//
// Header-only; needs `brevis.h` (include/) and `llama.h` on the include path, and links with
// libbrevis and libllama. `bindings/cpp/llama_run.cpp` is a complete program that uses it.
#pragma once

#include <brevis.h>
#include <llama.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

namespace brevis_llama {

// Whether the file at `path` starts with the Brevis archive magic.
inline bool is_archive(const char *path) {
    static const unsigned char magic[8] = {0x89, 'B', 'R', 'V', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {0};
    FILE *f = std::fopen(path, "rb");
    if (f == nullptr) {
        return false;
    }
    size_t n = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
    return n == sizeof head && std::memcmp(head, magic, sizeof head) == 0;
}

// Loads the model at `path`: a GGUF file, or a Brevis archive of one (decoded into memory, see
// above; `opts` are its decoding options, NULL for the defaults). Returns NULL on failure and,
// when `error` is not NULL, sets it to a static message: Brevis's (`brevis_error_string`) or
// "llama.cpp could not load the model".
inline llama_model *load_model(const char *path, llama_model_params params, const brevis_options *opts = nullptr,
                               const char **error = nullptr) {
    if (!is_archive(path)) {
        llama_model *model = llama_model_load_from_file(path, params);
        if (model == nullptr && error != nullptr) {
            *error = "llama.cpp could not load the model";
        }
        return model;
    }
    int fd = -1;
    int rc = brevis_decompress_file_to_memfd(path, opts, &fd);
    if (rc != BREVIS_OK) {
        if (error != nullptr) {
            *error = brevis_error_string(rc);
        }
        return nullptr;
    }
    std::string in_memory = "/proc/self/fd/" + std::to_string(fd);
    llama_model *model = llama_model_load_from_file(in_memory.c_str(), params);
    // llama.cpp's mapping (or its own copy, without mmap) keeps what it needs.
    close(fd);
    if (model == nullptr && error != nullptr) {
        *error = "llama.cpp could not load the model";
    }
    return model;
}

}  // namespace brevis_llama
