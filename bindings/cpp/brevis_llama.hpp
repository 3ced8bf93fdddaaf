// Loading llama.cpp models from Brevis archives, in C++: `brevis_llama::load_model(path, params)`
// takes a GGUF file or a Brevis archive of one (`brevis compress model.gguf` writes
// `model.gguf.brv`) and returns a `llama_model *`, as `llama_model_load_from_file` does.
//
// An archive is loaded through llama.cpp's own loader (`llama_model_load_from_file_ptr`) from a
// stream that decodes what llama.cpp reads, straight into the buffers llama.cpp allocated:
// nothing is written to disk or to a memfd. `brevis_llama.h` (the same, for C) says how.
//
// Header-only; needs `brevis.h` (include/) and `llama.h` on the include path, and links with
// libbrevis and libllama. `bindings/cpp/llama_run.cpp` is a complete program that uses it.
#pragma once

#include "brevis_llama.h"

namespace brevis_llama {

// Whether the file at `path` starts with the Brevis archive magic.
inline bool is_archive(const char *path) {
    return brevis_llama_is_archive(path) != 0;
}

// Loads the model at `path`: a GGUF file, or a Brevis archive of one. `ref_path`: the reference
// an archive made with `brevis compress --ref` needs (NULL for none); `opts`: decoding options
// (NULL for the defaults). Returns NULL on failure and, when `error` is not NULL, sets it to a
// message (see `brevis_llama_load_model`).
inline llama_model *load_model(const char *path, llama_model_params params, const char *ref_path = nullptr,
                               const brevis_options *opts = nullptr, const char **error = nullptr) {
    return brevis_llama_load_model(path, params, ref_path, opts, error);
}

// The fallback for a llama.cpp without `llama_model_load_from_file_ptr`: the archive decoded
// whole into a memfd that llama.cpp maps as `/proc/self/fd/N` (Linux; no reference).
inline llama_model *load_model_memfd(const char *path, llama_model_params params, const brevis_options *opts = nullptr,
                                     const char **error = nullptr) {
    return brevis_llama_load_model_memfd(path, params, opts, error);
}

}  // namespace brevis_llama
