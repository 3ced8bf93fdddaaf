package org.brevis;

import com.sun.jna.Library;
import com.sun.jna.Pointer;
import com.sun.jna.Structure;
import com.sun.jna.ptr.LongByReference;
import com.sun.jna.ptr.PointerByReference;

/** The C API (brevis.h) as a JNA interface. size_t is a Java long: 64-bit platforms only. */
interface Native extends Library {
    Native LIB = load();

    private static Native load() {
        if (com.sun.jna.Native.SIZE_T_SIZE != 8) {
            throw new UnsupportedOperationException("the Brevis Java binding needs a 64-bit platform");
        }
        return com.sun.jna.Native.load("brevis", Native.class);
    }

    /** brevis_tensor_info. */
    @Structure.FieldOrder({"name", "name_len", "dtype", "ndim", "shape", "nbytes", "offset", "compressed_bytes"})
    class TensorInfoStruct extends Structure {
        public Pointer name;
        public long name_len;
        public Pointer dtype;
        public long ndim;
        public Pointer shape;
        public long nbytes;
        public long offset;
        public long compressed_bytes;
    }

    String brevis_error_string(int code);

    String brevis_version();

    long brevis_compress_bound(long srcSize);

    int brevis_compress(byte[] src, long srcSize, byte[] dst, long dstCapacity, Pointer opts, LongByReference dstSize);

    int brevis_decompressed_size(byte[] src, long srcSize, LongByReference outSize);

    int brevis_decompress_with_options(byte[] src, long srcSize, byte[] dst, long dstCapacity, Pointer opts,
            LongByReference dstSize);

    int brevis_compress_with_ref(byte[] src, long srcSize, byte[] reference, long referenceSize, byte[] dst,
            long dstCapacity, Pointer opts, LongByReference dstSize);

    int brevis_decompress_with_ref_and_options(byte[] src, long srcSize, byte[] reference, long referenceSize,
            byte[] dst, long dstCapacity, Pointer opts, LongByReference dstSize);

    Pointer brevis_options_new();

    int brevis_options_set(Pointer o, int key, long value);

    void brevis_options_free(Pointer o);

    int brevis_archive_open_with_options(Pointer src, long srcSize, Pointer opts, PointerByReference out);

    long brevis_archive_tensor_count(Pointer a);

    int brevis_archive_tensor_info(Pointer a, long index, TensorInfoStruct out);

    int brevis_archive_find(Pointer a, byte[] name, LongByReference index);

    int brevis_archive_decode_tensor(Pointer a, long index, byte[] dst, long dstCapacity);

    void brevis_archive_free(Pointer a);
}
