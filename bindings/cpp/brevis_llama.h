/* brevis_llama.h: load llama.cpp models from Brevis archives (`brevis compress model.gguf` writes
 * `model.gguf.brv`), from C or C++. Header-only (static inline functions); include it after
 * nothing in particular, with `brevis.h` (include/) and llama.cpp's `llama.h` on the include
 * path, and link with libbrevis and libllama.
 *
 *   struct llama_model *m = brevis_llama_load_model(path, llama_model_default_params(), NULL, NULL, &err);
 *
 * takes a GGUF file or an archive of one and returns what `llama_model_load_from_file` returns.
 * An archive is loaded through llama.cpp's own loader: `llama_model_load_from_file_ptr` reads the
 * GGUF header and then each tensor's bytes, straight into the buffer llama.cpp allocated for it
 * (CPU, repacked CPU types and GPU buffers alike: llama.cpp chooses, as for a file), from the
 * `FILE *` of `brevis_reader_fopen`, which decodes what is read (and decodes the next tensors
 * ahead on every core, in at most 16 MiB). Nothing is written anywhere: no file, no memfd, no
 * `/proc`; memory is llama.cpp's own buffers plus that working set. Memory mapping is off for an
 * archive (`params.load_mode` is set to `LLAMA_LOAD_MODE_NONE`: there is no file to map).
 *
 * A llama.cpp older than `llama_model_load_from_file_ptr`: define BREVIS_LLAMA_MEMFD before
 * including this header. Archives are then decoded whole into an anonymous in-memory file that
 * llama.cpp maps as `/proc/self/fd/N` (Linux only; `brevis_llama_load_model_memfd`, which says so
 * on stderr), and archives made against a reference cannot be loaded. */
#ifndef BREVIS_LLAMA_H
#define BREVIS_LLAMA_H

#include <brevis.h>
#include <llama.h>

#include <stdio.h>
#include <string.h>
#ifdef __linux__
#include <unistd.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the file at `path` starts with the Brevis archive magic. */
static inline int brevis_llama_is_archive(const char *path) {
    static const unsigned char magic[8] = {0x89, 'B', 'R', 'V', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t n;
    if (f == NULL) {
        return 0;
    }
    n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n == sizeof head && memcmp(head, magic, sizeof head) == 0;
}

/* Why an archive made against a reference could not be opened without one (or with another):
 * the reference it names, by size and hash, in a thread's own buffer. */
static inline const char *brevis_llama_reference_error(const char *path, const char *ref_path,
                                                        const brevis_options *opts) {
    static
#ifdef __cplusplus
        thread_local
#else
        _Thread_local
#endif
        char msg[320];
    brevis_file_identity original, reference;
    if (brevis_archive_file_identity(path, &original, &reference, opts) != BREVIS_OK || reference.size == 0) {
        return NULL;
    }
    snprintf(msg, sizeof msg,
             "%s the file it was made against: a file of %llu bytes with xxh3-64 %016llx (brevis inspect "
             "names it; pass it as ref_path)",
             ref_path == NULL ? "the archive can only be decoded with" : "the reference given is not",
             (unsigned long long)reference.size, (unsigned long long)reference.hash);
    return msg;
}

/* Sets `*error` (when not NULL) to `msg`; returns NULL. */
static inline struct llama_model *brevis_llama_fail(const char **error, const char *msg) {
    if (error != NULL) {
        *error = msg;
    }
    return NULL;
}

/* Loads an archive as BREVIS_LLAMA_MEMFD builds do: decoded whole into a sealed memfd that
 * llama.cpp maps through /proc/self/fd/N (Linux; no reference). */
static inline struct llama_model *brevis_llama_load_model_memfd(const char *path, struct llama_model_params params,
                                                         const brevis_options *opts, const char **error) {
#ifdef __linux__
    char in_memory[64];
    int fd = -1;
    int rc = brevis_decompress_file_to_memfd(path, opts, &fd);
    struct llama_model *model;
    fprintf(stderr, "brevis_llama: decoding %s whole into a memfd (the fallback for a llama.cpp without "
                    "llama_model_load_from_file_ptr)\n", path);
    if (rc != BREVIS_OK) {
        const char *why = rc == BREVIS_ERROR_INVALID_ARGUMENT ? brevis_llama_reference_error(path, NULL, opts) : NULL;
        return brevis_llama_fail(error, why != NULL ? why : brevis_error_string(rc));
    }
    snprintf(in_memory, sizeof in_memory, "/proc/self/fd/%d", fd);
    model = llama_model_load_from_file(in_memory, params);
    /* llama.cpp's mapping (or its own copy, without mmap) keeps what it needs. */
    close(fd);
    return model != NULL ? model : brevis_llama_fail(error, "llama.cpp could not load the model");
#else
    (void)path;
    (void)params;
    (void)opts;
    return brevis_llama_fail(error, "the memfd fallback needs Linux");
#endif
}

/* Loads the model at `path`: a GGUF file (llama_model_load_from_file, unchanged) or a Brevis
 * archive of one (see above). `ref_path`: the file an archive made with `brevis compress --ref`
 * was made against (the same file, or its archive), else NULL. `opts`: decoding options
 * (BREVIS_OPTION_MEMORY_LIMIT), NULL for the defaults. Returns NULL on failure and, when `error`
 * is not NULL, sets it to a message that lives until the next call on this thread: Brevis's
 * (`brevis_error_string`: a damaged archive is "checksum mismatch"), the reference the archive
 * needs, or "llama.cpp could not load the model" (llama.cpp logs why). */
static inline struct llama_model *brevis_llama_load_model(const char *path, struct llama_model_params params,
                                                   const char *ref_path, const brevis_options *opts,
                                                   const char **error) {
    if (!brevis_llama_is_archive(path)) {
        struct llama_model *model = llama_model_load_from_file(path, params);
        return model != NULL ? model : brevis_llama_fail(error, "llama.cpp could not load the model");
    }
#ifdef BREVIS_LLAMA_MEMFD
    if (ref_path != NULL) {
        return brevis_llama_fail(error, "an archive made against a reference needs llama_model_load_from_file_ptr");
    }
    return brevis_llama_load_model_memfd(path, params, opts, error);
#else
    {
        brevis_reader *reader = NULL;
        FILE *stream = NULL;
        struct llama_model *model;
        int rc = brevis_reader_open(path, ref_path, opts, &reader);
        if (rc != BREVIS_OK) {
            const char *why = rc == BREVIS_ERROR_INVALID_ARGUMENT ? brevis_llama_reference_error(path, ref_path, opts)
                                                                  : NULL;
            return brevis_llama_fail(error, why != NULL ? why : brevis_error_string(rc));
        }
        rc = brevis_reader_fopen(reader, &stream);
        if (rc != BREVIS_OK) {
            brevis_reader_free(reader);
            return brevis_llama_fail(error, brevis_error_string(rc));
        }
        params.load_mode = LLAMA_LOAD_MODE_NONE;
        model = llama_model_load_from_file_ptr(stream, params);
        fclose(stream);
        rc = brevis_reader_error(reader);
        brevis_reader_free(reader);
        if (rc != BREVIS_OK) {
            if (model != NULL) {
                llama_model_free(model);
            }
            return brevis_llama_fail(error, brevis_error_string(rc));
        }
        return model != NULL ? model : brevis_llama_fail(error, "llama.cpp could not load the model");
    }
#endif
}

#ifdef __cplusplus
}  // extern "C"
#endif

#endif /* BREVIS_LLAMA_H */
