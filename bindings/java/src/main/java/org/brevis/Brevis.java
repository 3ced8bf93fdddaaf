package org.brevis;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.LongByReference;
import java.util.Arrays;

/**
 * Brevis: lossless compression of safetensors checkpoints. Static entry points for whole
 * buffers; {@link Archive} reads one tensor at a time. Library errors are thrown as
 * {@link BrevisException}. The native library is found by JNA ({@code -Djna.library.path=DIR}).
 */
public final class Brevis {
    private Brevis() {}

    /** Settings for one call; the defaults when left alone. */
    public static final class Options {
        int threads = -1;
        int chunkBytes = -1;
        int sampleElems = -1;
        long memoryLimit = -1;
        int verify = -1;
        int level = -1;

        /** Worker threads; 0 uses every core. */
        public Options threads(int n) { threads = n; return this; }
        /** Bytes of original data per chunk (1 to 64 MiB). */
        public Options chunkBytes(int n) { chunkBytes = n; return this; }
        /** Search budget: elements of each tensor on which programs are compared. */
        public Options sampleElems(int n) { sampleElems = n; return this; }
        /** Memory limit, in bytes (BREVIS_OPTION_MEMORY_LIMIT). */
        public Options memoryLimit(long n) { memoryLimit = n; return this; }
        /** Whether decompression checks the whole-file checksum. */
        public Options verify(boolean v) { verify = v ? 1 : 0; return this; }
        /** Compression level: 1 fast (fastest to decode), 2 default, 3 max (smallest). */
        public Options level(int n) { level = n; return this; }

        /** A brevis_options handle (null for the defaults); free it with brevis_options_free. */
        Pointer handle() {
            Pointer h = Native.LIB.brevis_options_new();
            try {
                set(h, 1, threads);
                set(h, 2, chunkBytes);
                set(h, 3, sampleElems);
                set(h, 4, memoryLimit);
                set(h, 5, verify);
                set(h, 6, level);
            } catch (BrevisException e) {
                Native.LIB.brevis_options_free(h);
                throw e;
            }
            return h;
        }

        private static void set(Pointer h, int key, long value) {
            if (value != -1) {
                BrevisException.check(Native.LIB.brevis_options_set(h, key, value), "option " + key);
            }
        }
    }

    /** The library's version, "MAJOR.MINOR.PATCH". */
    public static String version() {
        return Native.LIB.brevis_version();
    }

    /** The largest archive {@link #compress} can return for {@code n} bytes of input. */
    public static long compressBound(long n) {
        return Native.LIB.brevis_compress_bound(n);
    }

    public static byte[] compress(byte[] src) {
        return compress(src, null);
    }

    /** Compresses {@code src} (any file; safetensors gets a program per tensor). */
    public static byte[] compress(byte[] src, Options opts) {
        byte[] dst = new byte[outputSize(compressBound(src.length), "compress")];
        LongByReference n = new LongByReference();
        Pointer h = opts == null ? null : opts.handle();
        try {
            BrevisException.check(Native.LIB.brevis_compress(src, src.length, dst, dst.length, h, n), "compress");
        } finally {
            Native.LIB.brevis_options_free(h);
        }
        return Arrays.copyOf(dst, (int) n.getValue());
    }

    /** The size of the file {@code archive} decompresses to (reads only its index). */
    public static long decompressedSize(byte[] archive) {
        LongByReference n = new LongByReference();
        BrevisException.check(Native.LIB.brevis_decompressed_size(archive, archive.length, n), "decompressedSize");
        return n.getValue();
    }

    public static byte[] decompress(byte[] archive) {
        return decompress(archive, null);
    }

    /** Restores the original bytes of {@code archive}. */
    public static byte[] decompress(byte[] archive, Options opts) {
        return decompress("decompress", archive, opts, (dst, h, n) ->
                Native.LIB.brevis_decompress_with_options(archive, archive.length, dst, dst.length, h, n));
    }

    /**
     * Compresses {@code src} against the reference checkpoint {@code reference} (a safetensors
     * file, or an archive of one): tensors that match one of the reference (a fine-tune of its
     * base) are coded against it where that is smaller. Decompressing needs the same reference.
     */
    public static byte[] compressWithRef(byte[] src, byte[] reference, Options opts) {
        byte[] dst = new byte[outputSize(compressBound(src.length), "compressWithRef")];
        LongByReference n = new LongByReference();
        Pointer h = opts == null ? null : opts.handle();
        try {
            BrevisException.check(Native.LIB.brevis_compress_with_ref(src, src.length, reference, reference.length,
                    dst, dst.length, h, n), "compressWithRef");
        } finally {
            Native.LIB.brevis_options_free(h);
        }
        return Arrays.copyOf(dst, (int) n.getValue());
    }

    /**
     * Restores an archive made by {@link #compressWithRef}, given the same reference; a missing or
     * different reference throws a {@link BrevisException} with code {@code INVALID_ARGUMENT}.
     */
    public static byte[] decompressWithRef(byte[] archive, byte[] reference, Options opts) {
        return decompress("decompressWithRef", archive, opts, (dst, h, n) ->
                Native.LIB.brevis_decompress_with_ref_and_options(archive, archive.length, reference,
                        reference.length, dst, dst.length, h, n));
    }

    /** One decompression call into {@code dst}, with the settings handle {@code h}. */
    private interface DecodeCall {
        int call(byte[] dst, Pointer h, LongByReference n);
    }

    /** Sizes the output of {@code archive}, checks it against the memory limit, and decodes into it. */
    private static byte[] decompress(String what, byte[] archive, Options opts, DecodeCall call) {
        long size = decompressedSize(archive);
        if (opts != null && opts.memoryLimit >= 0 && size > opts.memoryLimit) {
            throw new BrevisException(BrevisException.LIMIT, what);
        }
        byte[] dst = new byte[outputSize(size, what)];
        LongByReference n = new LongByReference();
        Pointer h = opts == null ? null : opts.handle();
        try {
            BrevisException.check(call.call(dst, h, n), what);
        } finally {
            Native.LIB.brevis_options_free(h);
        }
        return dst;
    }

    /** {@code size} as the length of a Java array, or a LIMIT error. */
    private static int outputSize(long size, String what) {
        if (size > Integer.MAX_VALUE - 8) {
            throw new BrevisException(BrevisException.LIMIT, what + ": too large for a Java array");
        }
        return (int) size;
    }
}
