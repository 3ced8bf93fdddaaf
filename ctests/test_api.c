/* Tests of the C API, written against include/brevis.h only and linked with -lbrevis (static or
 * shared). Every entry point (tests/ffi_header.rs checks that each function the header declares is
 * called here), and its error paths: NULL pointers, too-small buffers, truncated and damaged
 * archives, bad option keys and values, memory limits, a panic inside the library.
 *
 *   test_api FILE TMPDIR [quick] [release]
 *
 * FILE is any file (a safetensors checkpoint gets the most coverage); TMPDIR a writable folder
 * for the file helpers. "quick" skips the slow part (the tiny-chunk compression), for runs under
 * valgrind. "release" is for a library built by `cargo build --release`, which has no test hook:
 * the hook's key must then be rejected, and the panic checks are left out. Prints one line per
 * failed check and "N passed, M failed"; exits non-zero on failure. Built and run by
 * tests/ffi_c.rs (and, with "release", by tests/ffi_release.rs). */

/* opendir/readdir (POSIX) under -std=c99. */
#define _POSIX_C_SOURCE 200809L

#include <brevis.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (cond) {                                                         \
            passed++;                                                       \
        } else {                                                            \
            failed++;                                                       \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                   \
    } while (0)

/* A call that must return `code`, with a readable failure. */
#define EXPECT(code, call)                                                              \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ == (code)) {                                                            \
            passed++;                                                                   \
        } else {                                                                        \
            failed++;                                                                   \
            fprintf(stderr, "%s:%d: FAILED: %s returned %d (%s), expected %d (%s)\n", __FILE__, \
                    __LINE__, #call, rc_, brevis_error_string(rc_), (int)(code),        \
                    brevis_error_string(code));                                         \
        }                                                                               \
    } while (0)

/* Not in the header on purpose: the test-only key that makes the library panic. It exists only in
 * the builds `cargo test` makes (the `test-hooks` feature); a release build rejects it. */
#define TEST_PANIC_KEY ((brevis_option)0x7e570001)

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Whether `path` exists. */
static int exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* Entries of folder `dir` whose name starts with `prefix` (-1 if it cannot be read). */
static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Whether the file at `path` holds exactly `data[0..n)`. */
static int file_is(const char *path, const unsigned char *data, size_t n) {
    size_t m = 0;
    unsigned char *got = read_file(path, &m);
    int same = got != NULL && m == n && memcmp(got, data, n) == 0;
    free(got);
    return same;
}

/* A fine-tuned copy of a checkpoint: the lowest bit of every 7th byte after the safetensors
 * header flipped (from the start when `orig` is not safetensors). Caller frees. */
static unsigned char *nudged(const unsigned char *orig, size_t n) {
    size_t start = 0;
    if (n >= 8) {
        uint64_t h = 0;
        for (int i = 7; i >= 0; i--) h = h << 8 | orig[i];
        if (h <= n - 8) start = 8 + (size_t)h;
    }
    unsigned char *out = malloc(n);
    memcpy(out, orig, n);
    for (size_t i = start; i < n; i += 7) out[i] ^= 1;
    return out;
}

static void test_version_and_errors(void) {
    char expect[64];
    snprintf(expect, sizeof expect, "%d.%d.%d", BREVIS_VERSION_MAJOR, BREVIS_VERSION_MINOR,
             BREVIS_VERSION_PATCH);
    CHECK(strcmp(brevis_version(), BREVIS_VERSION_STRING) == 0);
    CHECK(strcmp(brevis_version(), expect) == 0);
    CHECK(brevis_version_number() == BREVIS_VERSION_NUMBER);
    CHECK(BREVIS_VERSION_NUMBER ==
          BREVIS_VERSION_MAJOR * 10000 + BREVIS_VERSION_MINOR * 100 + BREVIS_VERSION_PATCH);

    const char *unknown = brevis_error_string(12345);
    CHECK(unknown != NULL && strcmp(unknown, brevis_error_string(1)) == 0);
    for (int c = BREVIS_OK; c >= BREVIS_ERROR_PANIC; c--) {
        const char *m = brevis_error_string(c);
        CHECK(m != NULL && strlen(m) > 0 && strcmp(m, unknown) != 0);
        for (int d = c + 1; d <= BREVIS_OK; d++) CHECK(strcmp(m, brevis_error_string(d)) != 0);
    }
    /* The codes are fixed forever. */
    CHECK(BREVIS_OK == 0 && BREVIS_ERROR_NULL_POINTER == -1 && BREVIS_ERROR_INVALID_ARGUMENT == -2 &&
          BREVIS_ERROR_DST_TOO_SMALL == -3 && BREVIS_ERROR_CORRUPT == -4 &&
          BREVIS_ERROR_UNSUPPORTED == -5 && BREVIS_ERROR_CHECKSUM == -6 &&
          BREVIS_ERROR_LIMIT == -7 && BREVIS_ERROR_IO == -8 && BREVIS_ERROR_NOT_FOUND == -9 &&
          BREVIS_ERROR_PANIC == -10);
    CHECK(BREVIS_OPTION_THREADS == 1 && BREVIS_OPTION_CHUNK_BYTES == 2 &&
          BREVIS_OPTION_SAMPLE_ELEMS == 3 && BREVIS_OPTION_MEMORY_LIMIT == 4 &&
          BREVIS_OPTION_VERIFY == 5 && BREVIS_OPTION_LEVEL == 6 && BREVIS_OPTION_PRESERVE == 7);
}

static void test_options(void) {
    brevis_options *o = brevis_options_new();
    CHECK(o != NULL);
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 0));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 2));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_THREADS, -1));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_THREADS, 1 << 20));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, 1));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, 64 << 20));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, 0));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT,
           brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, (64 << 20) + 1));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_SAMPLE_ELEMS, 4096));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_SAMPLE_ELEMS, 0));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_MEMORY_LIMIT, 0));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_MEMORY_LIMIT, -5));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_VERIFY, 0));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_VERIFY, 1));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_LEVEL, 1));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_LEVEL, 3));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_LEVEL, 0));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_LEVEL, 4));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_LEVEL, 2));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 0));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 1));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 2));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_PRESERVE, -1));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, BREVIS_OPTION_VERIFY, 2));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, (brevis_option)0, 1));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, (brevis_option)99, 1));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, (brevis_option)-7, 1));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_options_set(NULL, BREVIS_OPTION_THREADS, 1));
    brevis_options_free(o);
    brevis_options_free(NULL);
}

/* Whole-buffer compression and decompression of `orig`; returns the archive (caller frees). */
static unsigned char *test_buffers(const unsigned char *orig, size_t n, size_t *archive_size) {
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 2));

    size_t bound = brevis_compress_bound(n);
    CHECK(bound >= n && brevis_compress_bound(0) > 0);
    CHECK(brevis_compress_bound((size_t)-1) == (size_t)-1);
    unsigned char *arc = malloc(bound);
    size_t size = 0, sentinel = 777;
    EXPECT(BREVIS_OK, brevis_compress(orig, n, arc, bound, o, &size));
    CHECK(size > 0 && size <= bound);
    /* NULL options are the defaults: the same archive. */
    unsigned char *arc2 = malloc(bound);
    size_t size2 = 0;
    EXPECT(BREVIS_OK, brevis_compress(orig, n, arc2, bound, NULL, &size2));
    CHECK(size2 == size && memcmp(arc, arc2, size) == 0);
    free(arc2);

    /* Errors leave the out-pointer alone. */
    EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_compress(orig, n, arc, size - 1, o, &sentinel));
    EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_compress(orig, n, NULL, 0, o, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress(NULL, n, arc, bound, o, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress(orig, n, NULL, bound, o, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress(orig, n, arc, bound, o, NULL));
    CHECK(sentinel == 777);

    /* An empty input (NULL, 0) is a valid file. */
    unsigned char small[4096];
    size_t empty_size = 0;
    EXPECT(BREVIS_OK, brevis_compress(NULL, 0, small, sizeof small, NULL, &empty_size));
    uint64_t orig_size = 1;
    EXPECT(BREVIS_OK, brevis_decompressed_size(small, empty_size, &orig_size));
    CHECK(orig_size == 0);
    size_t got = 1;
    EXPECT(BREVIS_OK, brevis_decompress(small, empty_size, NULL, 0, &got));
    CHECK(got == 0);

    /* Tiny and incompressible inputs fit the bound. */
    unsigned char noise[300], out[8192];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    for (size_t k = 1; k <= sizeof noise; k += 37) {
        size_t s = 0;
        EXPECT(BREVIS_OK, brevis_compress(noise, k, out, brevis_compress_bound(k), NULL, &s));
        CHECK(s <= brevis_compress_bound(k));
    }

    /* Decompressed size. */
    uint64_t u = 0;
    EXPECT(BREVIS_OK, brevis_decompressed_size(arc, size, &u));
    CHECK(u == n);
    uint64_t usent = 777;
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompressed_size(NULL, size, &usent));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompressed_size(arc, size, NULL));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompressed_size(arc, size / 2, &usent));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompressed_size(orig, n, &usent));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompressed_size(arc, 0, &usent));
    CHECK(usent == 777);

    /* Decompression. */
    unsigned char *back = malloc(n + 1);
    size_t back_size = 0;
    EXPECT(BREVIS_OK, brevis_decompress(arc, size, back, n, &back_size));
    CHECK(back_size == n && memcmp(back, orig, n) == 0);
    memset(back, 0, n);
    EXPECT(BREVIS_OK, brevis_decompress_with_options(arc, size, back, n + 1, o, &back_size));
    CHECK(back_size == n && memcmp(back, orig, n) == 0);
    EXPECT(BREVIS_OK, brevis_decompress_with_options(arc, size, back, n, NULL, &back_size));
    sentinel = 777;
    EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_decompress(arc, size, back, n - 1, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress(NULL, size, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress(arc, size, NULL, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress(arc, size, back, n, NULL));
    for (size_t cut = 0; cut < size; cut += 1 + size / 7)
        EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress(arc, cut, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress(arc, size - 1, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress(orig, n, back, n, &sentinel));
    /* A flipped byte anywhere: an error code, never a crash. */
    unsigned char *bad = malloc(size);
    for (size_t at = 0; at < size; at += 1 + size / 13) {
        memcpy(bad, arc, size);
        bad[at] ^= 0x5a;
        int rc = brevis_decompress(bad, size, back, n, &sentinel);
        CHECK(rc < 0 && rc >= BREVIS_ERROR_PANIC && rc != BREVIS_ERROR_PANIC);
    }
    free(bad);
    CHECK(sentinel == 777);
    /* The memory limit bounds what reading the index may allocate. */
    brevis_options *lim = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_MEMORY_LIMIT, 0));
    int rc = brevis_decompress_with_options(arc, size, back, n, lim, &sentinel);
    CHECK(rc == BREVIS_OK || rc == BREVIS_ERROR_LIMIT);
    brevis_options_free(lim);

    free(back);
    brevis_options_free(o);
    *archive_size = size;
    return arc;
}

/* Compression with one-byte chunks gives an archive far bigger than the input: it must still fit
 * in brevis_compress_bound. */
static void test_bound_with_tiny_chunks(void) {
    unsigned char in[5000];
    unsigned x = 7;
    for (size_t i = 0; i < sizeof in; i++) in[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, 1));
    size_t bound = brevis_compress_bound(sizeof in), size = 0, got = 0;
    unsigned char *arc = malloc(bound), back[sizeof in];
    EXPECT(BREVIS_OK, brevis_compress(in, sizeof in, arc, bound, o, &size));
    CHECK(size <= bound);
    EXPECT(BREVIS_OK, brevis_decompress(arc, size, back, sizeof back, &got));
    CHECK(got == sizeof in && memcmp(back, in, sizeof in) == 0);
    free(arc);
    brevis_options_free(o);
}

/* The loader's path: open, list, find, decode each tensor into its own buffer. */
static void test_archive(const unsigned char *orig, size_t n, const unsigned char *arc, size_t size) {
    brevis_archive *a = NULL, *sent = (brevis_archive *)&sent;
    EXPECT(BREVIS_OK, brevis_archive_open(arc, size, &a));
    CHECK(a != NULL);
    size_t count = brevis_archive_tensor_count(a);
    CHECK(count > 0);
    CHECK(brevis_archive_tensor_count(NULL) == 0);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        brevis_tensor_info info;
        EXPECT(BREVIS_OK, brevis_archive_tensor_info(a, i, &info));
        CHECK(info.name != NULL && info.dtype != NULL && strlen(info.name) == info.name_len);
        CHECK(info.offset + info.nbytes <= n);
        CHECK((info.ndim == 0) == (info.shape == NULL));
        for (size_t d = 0; d < info.ndim; d++) CHECK(info.shape[d] < ((uint64_t)1 << 48));
        total += info.nbytes;
        size_t j = (size_t)-1;
        EXPECT(BREVIS_OK, brevis_archive_find(a, info.name, &j));
        CHECK(j <= i); /* the first tensor of that name */
        unsigned char *buf = malloc(info.nbytes + 1);
        EXPECT(BREVIS_OK, brevis_archive_decode_tensor(a, i, buf, info.nbytes));
        CHECK(memcmp(buf, orig + info.offset, info.nbytes) == 0);
        EXPECT(BREVIS_OK, brevis_archive_decode_tensor(a, i, buf, info.nbytes + 1));
        if (info.nbytes > 0) {
            EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_archive_decode_tensor(a, i, buf, info.nbytes - 1));
            EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_decode_tensor(a, i, NULL, info.nbytes));
        }
        free(buf);
    }
    CHECK(total <= n);
    brevis_tensor_info info;
    memset(&info, 0xab, sizeof info);
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_archive_tensor_info(a, count, &info));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_tensor_info(NULL, 0, &info));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_tensor_info(a, 0, NULL));
    CHECK(info.nbytes == 0xababababababababULL);
    size_t idx = 777;
    EXPECT(BREVIS_ERROR_NOT_FOUND, brevis_archive_find(a, "no such tensor, surely", &idx));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_find(a, NULL, &idx));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_find(NULL, "x", &idx));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_find(a, "x", NULL));
    CHECK(idx == 777);
    unsigned char one;
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_archive_decode_tensor(a, count, &one, 1));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_decode_tensor(NULL, 0, &one, 1));
    /* The GGUF calls on a file that is not GGUF (GGUF files: bindings/cpp/gguf_loader.cpp). */
    brevis_gguf_header gh;
    brevis_gguf_tensor_info gt;
    memset(&gt, 0xab, sizeof gt);
    if (n < 4 || memcmp(orig, "GGUF", 4) != 0) {
        EXPECT(BREVIS_ERROR_NOT_FOUND, brevis_archive_gguf_header(a, &gh));
        if (count > 0) EXPECT(BREVIS_ERROR_NOT_FOUND, brevis_archive_gguf_tensor_info(a, 0, &gt));
    }
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_gguf_header(NULL, &gh));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_gguf_header(a, NULL));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_archive_gguf_tensor_info(a, count, &gt));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_gguf_tensor_info(NULL, 0, &gt));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_gguf_tensor_info(a, 0, NULL));
    CHECK(gt.data_offset == 0xababababababababULL);
    brevis_archive_free(a);
    brevis_archive_free(NULL);

    /* Truncated or foreign archives do not open; the out-pointer is left alone. */
    brevis_archive *b = sent;
    for (size_t cut = 0; cut < size; cut += 1 + size / 11)
        EXPECT(BREVIS_ERROR_CORRUPT, brevis_archive_open(arc, cut, &b));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_archive_open(orig, n, &b));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_open(NULL, size, &b));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_open(arc, size, NULL));
    CHECK(b == sent);

    /* A damaged tensor payload: decoding that tensor fails with a code. */
    unsigned char *bad = malloc(size);
    memcpy(bad, arc, size);
    bad[size / 3] ^= 0xff;
    brevis_archive *c = NULL;
    if (brevis_archive_open(bad, size, &c) == BREVIS_OK) {
        int errors = 0;
        for (size_t i = 0; i < brevis_archive_tensor_count(c); i++) {
            brevis_tensor_info t;
            EXPECT(BREVIS_OK, brevis_archive_tensor_info(c, i, &t));
            unsigned char *buf = malloc(t.nbytes + 1);
            int rc = brevis_archive_decode_tensor(c, i, buf, t.nbytes);
            CHECK(rc == BREVIS_OK || (rc < 0 && rc != BREVIS_ERROR_PANIC));
            /* Decoded without an error means exact, copies of a damaged tensor included. */
            if (rc == BREVIS_OK) CHECK(memcmp(buf, orig + t.offset, t.nbytes) == 0);
            errors += rc != BREVIS_OK;
            free(buf);
        }
        CHECK(errors > 0);
        brevis_archive_free(c);
    }
    free(bad);
}

/* Compression against a reference (the original) of a fine-tuned copy, and back. */
static void test_reference(const unsigned char *orig, size_t n) {
    unsigned char *tuned = nudged(orig, n);
    size_t bound = brevis_compress_bound(n), size = 0, sentinel = 777;
    unsigned char *arc = malloc(bound), *back = malloc(n);
    EXPECT(BREVIS_OK, brevis_compress_with_ref(tuned, n, orig, n, arc, bound, NULL, &size));
    CHECK(size > 0 && size <= bound);
    size_t got = 0;
    EXPECT(BREVIS_OK, brevis_decompress_with_ref(arc, size, orig, n, back, n, &got));
    CHECK(got == n && memcmp(back, tuned, n) == 0);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 2));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_VERIFY, 1));
    memset(back, 0, n);
    got = 0;
    EXPECT(BREVIS_OK, brevis_decompress_with_ref_and_options(arc, size, orig, n, back, n, o, &got));
    CHECK(got == n && memcmp(back, tuned, n) == 0);
    EXPECT(BREVIS_OK, brevis_decompress_with_ref_and_options(arc, size, orig, n, back, n, NULL, &got));
    /* Options of compression: the same archive with 1 thread as with the defaults. */
    unsigned char *arc1 = malloc(bound);
    size_t size1 = 0;
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 1));
    EXPECT(BREVIS_OK, brevis_compress_with_ref(tuned, n, orig, n, arc1, bound, o, &size1));
    CHECK(size1 == size && memcmp(arc1, arc, size) == 0);
    free(arc1);

    /* The memory limit bounds what reading the index may allocate. */
    brevis_options *lim = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_MEMORY_LIMIT, 16));
    EXPECT(BREVIS_ERROR_LIMIT, brevis_decompress_with_ref_and_options(arc, size, orig, n, back, n, lim, &sentinel));
    brevis_options_free(lim);
    /* Without the reference, or with another one: an error, nothing written. */
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_decompress(arc, size, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_decompress_with_ref(arc, size, tuned, n, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT,
           brevis_decompress_with_ref_and_options(arc, size, tuned, n, back, n, o, &sentinel));
    EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_decompress_with_ref(arc, size, orig, n, back, n - 1, &sentinel));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress_with_ref(arc, size - 1, orig, n, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_with_ref(arc, size, NULL, n, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_with_ref(NULL, size, orig, n, back, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_with_ref(arc, size, orig, n, NULL, n, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_with_ref(arc, size, orig, n, back, n, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER,
           brevis_decompress_with_ref_and_options(arc, size, NULL, n, back, n, o, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER,
           brevis_decompress_with_ref_and_options(arc, size, orig, n, back, n, o, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_with_ref(tuned, n, NULL, n, arc, bound, NULL, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_with_ref(NULL, n, orig, n, arc, bound, NULL, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_with_ref(tuned, n, orig, n, NULL, bound, NULL, &sentinel));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_with_ref(tuned, n, orig, n, arc, bound, NULL, NULL));
    EXPECT(BREVIS_ERROR_DST_TOO_SMALL, brevis_compress_with_ref(tuned, n, orig, n, arc, size - 1, NULL, &sentinel));
    CHECK(sentinel == 777);
    brevis_options_free(o);
    free(back);
    free(arc);
    free(tuned);
}

/* Threads of this process whose name starts with `prefix` (-1 where /proc/self/task cannot be
 * read: not Linux). */
static int threads_named(const char *prefix) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[512], name[64] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        n += fgets(name, sizeof name, f) != NULL && strncmp(name, prefix, strlen(prefix)) == 0;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* An archive handle opened with settings: its memory limit and its own pool of threads. */
static void test_archive_with_options(const unsigned char *orig, const unsigned char *arc, size_t size) {
    brevis_archive *a = NULL, *sent = (brevis_archive *)&sent, *b = sent;
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 3));
    /* The handle's own pool: three threads named brevis-archive-N, running when the call returns
     * (no other handle with a pool is open). */
    CHECK(threads_named("brevis-archive") <= 0);
    EXPECT(BREVIS_OK, brevis_archive_open_with_options(arc, size, o, &a));
    int pool = threads_named("brevis-archive");
    CHECK(pool == 3 || pool == -1);
    size_t count = brevis_archive_tensor_count(a), largest = 0;
    uint64_t largest_bytes = 0;
    for (size_t i = 0; i < count; i++) {
        brevis_tensor_info info;
        EXPECT(BREVIS_OK, brevis_archive_tensor_info(a, i, &info));
        unsigned char *buf = malloc(info.nbytes + 1);
        EXPECT(BREVIS_OK, brevis_archive_decode_tensor(a, i, buf, info.nbytes));
        CHECK(memcmp(buf, orig + info.offset, info.nbytes) == 0);
        free(buf);
        if (info.nbytes > largest_bytes) largest = i, largest_bytes = info.nbytes;
    }
    brevis_archive_free(a);

    /* A memory limit below the largest tensor: that tensor fails with BREVIS_ERROR_LIMIT, the
     * others decode. */
    CHECK(largest_bytes > 1);
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_MEMORY_LIMIT, (int64_t)largest_bytes - 1));
    EXPECT(BREVIS_OK, brevis_archive_open_with_options(arc, size, o, &a));
    unsigned char *buf = malloc(largest_bytes);
    EXPECT(BREVIS_ERROR_LIMIT, brevis_archive_decode_tensor(a, largest, buf, largest_bytes));
    for (size_t i = 0; i < count; i++) {
        brevis_tensor_info info;
        EXPECT(BREVIS_OK, brevis_archive_tensor_info(a, i, &info));
        if (info.nbytes < largest_bytes) EXPECT(BREVIS_OK, brevis_archive_decode_tensor(a, i, buf, info.nbytes));
    }
    free(buf);
    brevis_archive_free(a);

    /* A limit too small for the index: the archive does not open. */
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_MEMORY_LIMIT, 16));
    EXPECT(BREVIS_ERROR_LIMIT, brevis_archive_open_with_options(arc, size, o, &b));
    /* NULL options are the defaults; NULL pointers and damaged archives are errors. */
    EXPECT(BREVIS_OK, brevis_archive_open_with_options(arc, size, NULL, &a));
    CHECK(brevis_archive_tensor_count(a) == count);
    brevis_archive_free(a);
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_open_with_options(NULL, size, o, &b));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_open_with_options(arc, size, o, NULL));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_archive_open_with_options(arc, size / 2, NULL, &b));
    CHECK(b == sent);
    brevis_options_free(o);
}

static void test_files(const char *path, const unsigned char *orig, size_t n, const char *tmp) {
    char arc[4096], back[4096], missing[4096], bad_arc[4096];
    snprintf(arc, sizeof arc, "%s/c-api.brv", tmp);
    snprintf(back, sizeof back, "%s/c-api.out", tmp);
    snprintf(missing, sizeof missing, "%s/does-not-exist/x", tmp);
    snprintf(bad_arc, sizeof bad_arc, "%s/c-api-damaged.brv", tmp);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_THREADS, 1));
    EXPECT(BREVIS_OK, brevis_compress_file(path, arc, o));
    CHECK(file_is(path, orig, n)); /* the input is never modified */
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, NULL));
    CHECK(file_is(back, orig, n));
    /* The file's archive is the buffer's, and the settings are honoured: a memory limit below the
     * file's size, two threads; the output streams to the file, so the limit does not refuse it. */
    size_t bound = brevis_compress_bound(n), size = 0, m = 0;
    unsigned char *buf = malloc(bound);
    EXPECT(BREVIS_OK, brevis_compress(orig, n, buf, bound, NULL, &size));
    brevis_options *lim = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_MEMORY_LIMIT, n > 1 ? (int64_t)n - 1 : 1));
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_THREADS, 2));
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_PRESERVE, 0)); /* no file metadata */
    EXPECT(BREVIS_OK, brevis_compress_file(path, arc, lim));
    CHECK(file_is(arc, buf, size));
    remove(back);
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, lim));
    CHECK(file_is(back, orig, n));
    /* A limit too small for the index: BREVIS_ERROR_LIMIT, and the existing output is unchanged. */
    EXPECT(BREVIS_OK, brevis_options_set(lim, BREVIS_OPTION_MEMORY_LIMIT, 16));
    EXPECT(BREVIS_ERROR_LIMIT, brevis_decompress_file(arc, back, lim));
    CHECK(file_is(back, orig, n));
    brevis_options_free(lim);

    /* A damaged payload fails after part of the output was written: nothing is left behind. */
    unsigned char *arc_bytes = read_file(arc, &m);
    CHECK(arc_bytes != NULL && m == size);
    if (arc_bytes != NULL && m > 64) {
        arc_bytes[m / 3] ^= 0xff;
        FILE *f = fopen(bad_arc, "wb");
        CHECK(f != NULL && fwrite(arc_bytes, 1, m, f) == m);
        if (f) fclose(f);
        remove(back);
        int rc = brevis_decompress_file(bad_arc, back, o);
        CHECK(rc < 0 && rc != BREVIS_ERROR_PANIC);
        CHECK(!exists(back));
        remove(bad_arc);
    }
    free(arc_bytes);
    free(buf);

    EXPECT(BREVIS_ERROR_IO, brevis_compress_file(missing, arc, o));
    EXPECT(BREVIS_ERROR_IO, brevis_compress_file(path, missing, o));
    EXPECT(BREVIS_ERROR_IO, brevis_decompress_file(missing, back, o));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress_file(path, back, o));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_file(NULL, arc, o));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_file(path, NULL, o));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_file(NULL, back, o));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_file(arc, NULL, o));
    CHECK(count_entries(tmp, ".brevis-") == 0); /* no temporary file left by any call */
    brevis_options_free(o);
    remove(arc);
    remove(back);
}

/* Families through files: a fine-tuned copy coded against the checkpoint's file and restored
 * against it; a copy of the checkpoint is coded against it (the family choice); the identities an
 * archive records; errors leave nothing behind. */
static void test_family_files(const char *path, const unsigned char *orig, size_t n, const char *tmp) {
    char tuned_path[4096], copy[4096], arc[4096], back[4096], missing[4096];
    snprintf(tuned_path, sizeof tuned_path, "%s/c-api-tuned", tmp);
    snprintf(copy, sizeof copy, "%s/c-api-copy", tmp);
    snprintf(arc, sizeof arc, "%s/c-api-tuned.brv", tmp);
    snprintf(back, sizeof back, "%s/c-api-tuned.back", tmp);
    snprintf(missing, sizeof missing, "%s/does-not-exist/x", tmp);
    unsigned char *tuned = nudged(orig, n);
    FILE *f = fopen(tuned_path, "wb");
    CHECK(f != NULL && fwrite(tuned, 1, n, f) == n);
    if (f) fclose(f);
    f = fopen(copy, "wb");
    CHECK(f != NULL && fwrite(orig, 1, n, f) == n);
    if (f) fclose(f);
    EXPECT(BREVIS_OK, brevis_compress_file_with_ref(tuned_path, path, arc, NULL));
    CHECK(file_is(path, orig, n)); /* neither input is modified */
    EXPECT(BREVIS_OK, brevis_decompress_file_with_ref(arc, path, back, NULL));
    CHECK(file_is(back, tuned, n));
    brevis_file_identity original = {0, 0}, reference = {0, 0};
    EXPECT(BREVIS_OK, brevis_archive_file_identity(arc, &original, &reference, NULL));
    CHECK(original.size == n && reference.size == n && original.hash != reference.hash);
    /* Restored against another file: an error, nothing written. */
    remove(back);
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_decompress_file_with_ref(arc, tuned_path, back, NULL));
    CHECK(!exists(back));
    EXPECT(BREVIS_ERROR_IO, brevis_decompress_file_with_ref(arc, missing, back, NULL));
    EXPECT(BREVIS_ERROR_IO, brevis_compress_file_with_ref(tuned_path, missing, arc, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_compress_file_with_ref(tuned_path, NULL, arc, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_archive_file_identity(arc, NULL, &reference, NULL));
    /* The family choice: the copy is coded against the checkpoint (it predicts all of it) when the
     * checkpoint has tensors, the checkpoint alone. */
    const char *paths[2] = {path, copy};
    int64_t refs[2] = {7, 7};
    EXPECT(BREVIS_OK, brevis_family_references(paths, 2, refs, NULL));
    CHECK(refs[0] == -1 && (refs[1] == 0 || refs[1] == -1));
    EXPECT(BREVIS_OK, brevis_family_references(NULL, 0, NULL, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_family_references(paths, 2, NULL, NULL));
    const char *gone[1] = {missing};
    EXPECT(BREVIS_ERROR_IO, brevis_family_references(gone, 1, refs, NULL));
    CHECK(count_entries(tmp, ".brevis-") == 0);
    remove(tuned_path);
    remove(copy);
    remove(arc);
    remove(back);
    free(tuned);
}

/* brevis_decompress_file_to_memfd: the original in an anonymous in-memory file, complete and sealed
 * against writes and size changes, also read through /proc/self/fd/N (what llama.cpp opens); on an
 * error *fd_out is unchanged. */
static void test_memfd(const char *path, const unsigned char *orig, size_t n, const char *tmp) {
    char arc[4096], missing[4096], proc[64];
    snprintf(arc, sizeof arc, "%s/c-api-memfd.brv", tmp);
    snprintf(missing, sizeof missing, "%s/does-not-exist/x", tmp);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 0));
    EXPECT(BREVIS_OK, brevis_compress_file(path, arc, o));
    int fd = -7;
    EXPECT(BREVIS_OK, brevis_decompress_file_to_memfd(arc, NULL, &fd));
    CHECK(fd >= 0);
    if (fd >= 0) {
        unsigned char *back = malloc(n + 1);
        size_t got = 0;
        ssize_t r;
        while (back != NULL && got <= n && (r = pread(fd, back + got, n + 1 - got, (off_t)got)) > 0) got += (size_t)r;
        CHECK(back != NULL && got == n && memcmp(back, orig, n) == 0);
        free(back);
        CHECK(pwrite(fd, "x", 1, 0) < 0); /* sealed */
        CHECK(ftruncate(fd, 0) < 0);
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        size_t m = 0;
        unsigned char *again = read_file(proc, &m);
        CHECK(again != NULL && m == n && memcmp(again, orig, n) == 0);
        free(again);
        close(fd);
    }
    fd = -7;
    EXPECT(BREVIS_ERROR_IO, brevis_decompress_file_to_memfd(missing, NULL, &fd));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_decompress_file_to_memfd(path, NULL, &fd)); /* not an archive */
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_MEMORY_LIMIT, (int64_t)n - 1));
    EXPECT(BREVIS_ERROR_LIMIT, brevis_decompress_file_to_memfd(arc, o, &fd));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_file_to_memfd(NULL, NULL, &fd));
    CHECK(fd == -7);
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_decompress_file_to_memfd(arc, NULL, NULL));
    brevis_options_free(o);
    remove(arc);
}

/* brevis_reader: reads of the original at any offset and through a FILE *, which decode only
 * what they cover; with small chunks a read crosses many of them. A damaged archive is an error
 * of the read, which brevis_reader_error keeps. */
static void test_reader(const char *path, const unsigned char *orig, size_t n, const char *tmp) {
    char arc[4096], missing[4096];
    snprintf(arc, sizeof arc, "%s/c-api-reader.brv", tmp);
    snprintf(missing, sizeof missing, "%s/does-not-exist/x", tmp);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 0));
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_CHUNK_BYTES, 4096));
    EXPECT(BREVIS_OK, brevis_compress_file(path, arc, o));
    brevis_reader *r = NULL;
    EXPECT(BREVIS_OK, brevis_reader_open(arc, NULL, NULL, &r));
    CHECK(r != NULL);
    uint64_t size = 0;
    EXPECT(BREVIS_OK, brevis_reader_size(r, &size));
    CHECK(size == n);
    unsigned char *back = malloc(n + 1);
    /* Ranges of many lengths at many offsets, each compared with the original. */
    unsigned long long x = 88172645463325252ULL;
    for (int i = 0; i < 200 && back != NULL; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t at = (size_t)(x % n), len = (size_t)((x >> 20) % (i % 3 == 0 ? 70000 : 300));
        if (len > n - at) len = n - at;
        EXPECT(BREVIS_OK, brevis_reader_read_at(r, at, back, len));
        CHECK(memcmp(back, orig + at, len) == 0);
    }
    EXPECT(BREVIS_OK, brevis_reader_read_at(r, 0, back, n));
    CHECK(memcmp(back, orig, n) == 0);
    EXPECT(BREVIS_OK, brevis_reader_read_at(r, n, back, 0));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_reader_read_at(r, n - 1, back, 2));
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_reader_read_at(r, UINT64_MAX, back, 1));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_read_at(r, 0, NULL, 1));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_read_at(NULL, 0, back, 1));
#ifdef __linux__
    FILE *f = NULL;
    EXPECT(BREVIS_OK, brevis_reader_fopen(r, &f));
    CHECK(f != NULL);
    if (f != NULL && back != NULL) {
        memset(back, 0, n + 1);
        CHECK(fread(back, 1, n + 1, f) == n && feof(f) && memcmp(back, orig, n) == 0);
        CHECK(fseeko(f, 0, SEEK_END) == 0 && ftello(f) == (off_t)n);
        CHECK(fseeko(f, (off_t)(n / 3), SEEK_SET) == 0 && ftello(f) == (off_t)(n / 3));
        size_t rest = n - n / 3;
        CHECK(fread(back, 1, rest, f) == rest && memcmp(back, orig + n / 3, rest) == 0);
        CHECK(fseeko(f, -1, SEEK_SET) != 0);
        CHECK(fwrite("x", 1, 1, f) == 0); /* read-only */
        CHECK(fclose(f) == 0);
    }
    EXPECT(BREVIS_OK, brevis_reader_error(r));
#else
    FILE *f = NULL;
    EXPECT(BREVIS_ERROR_UNSUPPORTED, brevis_reader_fopen(r, &f));
#endif
    brevis_reader_free(r);
    brevis_reader_free(NULL);
    EXPECT(BREVIS_OK, brevis_reader_error(NULL));
    r = NULL;
    EXPECT(BREVIS_ERROR_IO, brevis_reader_open(missing, NULL, NULL, &r));
    EXPECT(BREVIS_ERROR_CORRUPT, brevis_reader_open(path, NULL, NULL, &r)); /* not an archive */
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_open(NULL, NULL, NULL, &r));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_open(arc, NULL, NULL, NULL));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_size(NULL, &size));
    EXPECT(BREVIS_ERROR_NULL_POINTER, brevis_reader_fopen(NULL, &f));
    CHECK(r == NULL);
    /* A payload byte flipped (the archive's middle): the read of that part fails. */
    size_t m = 0;
    unsigned char *bytes = read_file(arc, &m);
    if (bytes != NULL && m > 64) {
        bytes[m / 2] ^= 0x20;
        FILE *w = fopen(arc, "wb");
        CHECK(w != NULL && fwrite(bytes, 1, m, w) == m && fclose(w) == 0);
        if (brevis_reader_open(arc, NULL, NULL, &r) == BREVIS_OK) {
            int rc = brevis_reader_read_at(r, 0, back, n);
            CHECK(rc == BREVIS_ERROR_CHECKSUM || rc == BREVIS_ERROR_CORRUPT);
#ifdef __linux__
            if (brevis_reader_fopen(r, &f) == BREVIS_OK) {
                CHECK(fread(back, 1, n, f) < n && ferror(f));
                fclose(f);
                rc = brevis_reader_error(r);
                CHECK(rc == BREVIS_ERROR_CHECKSUM || rc == BREVIS_ERROR_CORRUPT);
            }
#endif
            brevis_reader_free(r);
        }
    }
    free(bytes);
    free(back);
    brevis_options_free(o);
    remove(arc);
}

/* Whether `path` has permission bits `mode` and, when `mtime` is not 0, that modification time. */
static int attrs_are(const char *path, mode_t mode, time_t mtime) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if ((st.st_mode & 0777) != mode) {
        fprintf(stderr, "%s: mode %o, expected %o\n", path, (unsigned)(st.st_mode & 0777), (unsigned)mode);
        return 0;
    }
    return mtime == 0 || st.st_mtime == mtime;
}

/* The file functions give outputs the input's permission bits (under the umask) and mtime, and
 * decompression the original's as the archive records them; BREVIS_OPTION_PRESERVE 0 does not. */
static void test_preserve(const unsigned char *orig, size_t n, const char *tmp) {
    char in[4096], arc[4096], back[4096];
    snprintf(in, sizeof in, "%s/c-api-meta.in", tmp);
    snprintf(arc, sizeof arc, "%s/c-api-meta.brv", tmp);
    snprintf(back, sizeof back, "%s/c-api-meta.out", tmp);
    FILE *f = fopen(in, "wb");
    CHECK(f != NULL && fwrite(orig, 1, n < 5000 ? n : 5000, f) == (n < 5000 ? n : 5000));
    if (f) fclose(f);
    const time_t then = 1500000000; /* 2017-07-14 */
    struct timespec times[2] = {{then, 0}, {then, 0}};
    CHECK(chmod(in, 0640) == 0 && utimensat(AT_FDCWD, in, times, 0) == 0);
    mode_t old = umask(022);
    EXPECT(BREVIS_OK, brevis_compress_file(in, arc, NULL));
    CHECK(attrs_are(arc, 0640, then));
    /* The archive copied around: another mode and time; the original's come back. */
    CHECK(chmod(arc, 0600) == 0 && utimensat(AT_FDCWD, arc, NULL, 0) == 0);
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, NULL));
    CHECK(attrs_are(back, 0640, then));
    umask(077);
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, NULL));
    CHECK(attrs_are(back, 0600, then));
    /* Off: plain new files (0666 under the umask, now), and nothing recorded. */
    umask(022);
    brevis_options *o = brevis_options_new();
    EXPECT(BREVIS_OK, brevis_options_set(o, BREVIS_OPTION_PRESERVE, 0));
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, o));
    CHECK(attrs_are(back, 0644, 0));
    struct stat st;
    CHECK(stat(back, &st) == 0 && st.st_mtime > then);
    EXPECT(BREVIS_OK, brevis_compress_file(in, arc, o));
    CHECK(attrs_are(arc, 0644, 0));
    EXPECT(BREVIS_OK, brevis_decompress_file(arc, back, NULL)); /* no record: the archive's */
    CHECK(attrs_are(back, 0644, 0) && stat(back, &st) == 0 && st.st_mtime > then);
    brevis_options_free(o);
    umask(old);
    remove(in);
    remove(arc);
    remove(back);
}

/* A panic inside the library (a worker thread, through the test-only key) is an error code. */
static void test_panic(const char *path, const unsigned char *orig, size_t n, const char *tmp) {
    brevis_options *o = brevis_options_new();
    fprintf(stderr, "test_api: the library's panic messages below are expected\n");
    EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, TEST_PANIC_KEY, 2));
    EXPECT(BREVIS_OK, brevis_options_set(o, TEST_PANIC_KEY, 1));
    size_t bound = brevis_compress_bound(n), size = 777;
    unsigned char *arc = malloc(bound);
    EXPECT(BREVIS_ERROR_PANIC, brevis_compress(orig, n, arc, bound, o, &size));
    CHECK(size == 777);
    EXPECT(BREVIS_ERROR_PANIC, brevis_decompress_with_options(NULL, 0, arc, bound, o, &size));
    EXPECT(BREVIS_ERROR_PANIC, brevis_compress_with_ref(orig, n, orig, n, arc, bound, o, &size));
    EXPECT(BREVIS_ERROR_PANIC, brevis_decompress_with_ref_and_options(NULL, 0, orig, n, arc, bound, o, &size));
    CHECK(size == 777);
    brevis_archive *a = NULL;
    EXPECT(BREVIS_ERROR_PANIC, brevis_archive_open_with_options(NULL, 0, o, &a));
    CHECK(a == NULL);
    char out[4096];
    snprintf(out, sizeof out, "%s/c-api-panic.brv", tmp);
    EXPECT(BREVIS_ERROR_PANIC, brevis_compress_file(path, out, o));
    EXPECT(BREVIS_ERROR_PANIC, brevis_decompress_file(path, out, o));
    CHECK(!exists(out) && count_entries(tmp, ".brevis-") == 0);
    /* The library still works afterwards. */
    EXPECT(BREVIS_OK, brevis_options_set(o, TEST_PANIC_KEY, 0));
    EXPECT(BREVIS_OK, brevis_compress(orig, n < 1000 ? n : 1000, arc, bound, o, &size));
    free(arc);
    brevis_options_free(o);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILE TMPDIR [quick] [release]\n", argv[0]);
        return 2;
    }
    int quick = 0, release = 0;
    for (int i = 3; i < argc; i++) {
        quick |= strcmp(argv[i], "quick") == 0;
        release |= strcmp(argv[i], "release") == 0;
    }
    size_t n = 0;
    unsigned char *orig = read_file(argv[1], &n);
    if (!orig || n < 2) {
        fprintf(stderr, "cannot read %s (or it is shorter than 2 bytes)\n", argv[1]);
        return 2;
    }
    test_version_and_errors();
    test_options();
    size_t size = 0;
    unsigned char *arc = test_buffers(orig, n, &size);
    test_archive(orig, n, arc, size);
    test_archive_with_options(orig, arc, size);
    test_reference(orig, n);
    test_files(argv[1], orig, n, argv[2]);
    test_family_files(argv[1], orig, n, argv[2]);
    test_memfd(argv[1], orig, n, argv[2]);
    test_reader(argv[1], orig, n, argv[2]);
    test_preserve(orig, n, argv[2]);
    if (release) {
        /* No test hook in a release library: its key is unknown. */
        brevis_options *o = brevis_options_new();
        EXPECT(BREVIS_ERROR_INVALID_ARGUMENT, brevis_options_set(o, TEST_PANIC_KEY, 1));
        brevis_options_free(o);
    } else {
        test_panic(argv[1], orig, n, argv[2]);
    }
    if (!quick) test_bound_with_tiny_chunks();
    free(arc);
    free(orig);
    printf("c api: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
