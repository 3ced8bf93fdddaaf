package org.brevis;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.LongByReference;
import com.sun.jna.ptr.PointerByReference;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.NoSuchElementException;

/**
 * Random access to the tensors of an archive, one at a time. Keeps a native copy of the archive
 * bytes (the library reads them in place); close it to release them. Safe to read from several
 * threads until closed.
 */
public final class Archive implements AutoCloseable {
    /** What the archive's index says about one tensor. */
    public static final class TensorInfo {
        public final String name;
        /** The safetensors dtype: "F32", "BF16", ... */
        public final String dtype;
        public final long[] shape;
        /** Size of the tensor's data, in bytes. */
        public final long nbytes;
        /** Offset of the data in the original file. */
        public final long offset;
        public final long compressedBytes;

        TensorInfo(String name, String dtype, long[] shape, long nbytes, long offset, long compressedBytes) {
            this.name = name;
            this.dtype = dtype;
            this.shape = shape;
            this.nbytes = nbytes;
            this.offset = offset;
            this.compressedBytes = compressedBytes;
        }
    }

    private Memory data;
    private Pointer handle;
    private final List<TensorInfo> tensors;

    /** Opens an archive, checking its header and index. */
    public Archive(byte[] archive) {
        this(archive, null);
    }

    /**
     * Opens an archive with settings that it keeps: {@code memoryLimit} bounds the index and the
     * largest tensor it decodes (a LIMIT error above it); {@code threads} > 0 gives it its own pool of
     * that many threads to decode tensors in (0: one thread per core, shared).
     */
    public Archive(byte[] archive, Brevis.Options opts) {
        data = new Memory(Math.max(archive.length, 1));
        data.write(0, archive, 0, archive.length);
        PointerByReference out = new PointerByReference();
        Pointer h = opts == null ? null : opts.handle();
        int rc;
        try {
            rc = Native.LIB.brevis_archive_open_with_options(data, archive.length, h, out);
        } finally {
            Native.LIB.brevis_options_free(h);
        }
        if (rc != 0) {
            data.close();
            throw new BrevisException(rc, "open archive");
        }
        handle = out.getValue();
        int n = (int) Native.LIB.brevis_archive_tensor_count(handle);
        List<TensorInfo> list = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            Native.TensorInfoStruct t = new Native.TensorInfoStruct();
            BrevisException.check(Native.LIB.brevis_archive_tensor_info(handle, i, t), "tensor info");
            String name = new String(t.name.getByteArray(0, (int) t.name_len), StandardCharsets.UTF_8);
            String dtype = t.dtype.getString(0, StandardCharsets.UTF_8.name());
            long[] shape = t.ndim == 0 ? new long[0] : t.shape.getLongArray(0, (int) t.ndim);
            list.add(new TensorInfo(name, dtype, shape, t.nbytes, t.offset, t.compressed_bytes));
        }
        tensors = Collections.unmodifiableList(list);
    }

    private Pointer live() {
        if (handle == null) {
            throw new IllegalStateException("the archive is closed");
        }
        return handle;
    }

    /** The tensors, in archive order. */
    public List<TensorInfo> tensors() {
        return tensors;
    }

    public int size() {
        return tensors.size();
    }

    /** The index of the first tensor named {@code name}, or -1 if there is none. */
    public int indexOf(String name) {
        byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
        byte[] cstr = new byte[utf8.length + 1];
        System.arraycopy(utf8, 0, cstr, 0, utf8.length);
        LongByReference i = new LongByReference();
        int rc = Native.LIB.brevis_archive_find(live(), cstr, i);
        if (rc == BrevisException.NOT_FOUND) {
            return -1;
        }
        BrevisException.check(rc, "find " + name);
        return (int) i.getValue();
    }

    /** Decodes tensor {@code index} into {@code dst} (at least its size); returns the bytes written. */
    public long decodeInto(int index, byte[] dst) {
        if (index < 0 || index >= tensors.size()) {
            throw new IndexOutOfBoundsException("tensor " + index);
        }
        BrevisException.check(Native.LIB.brevis_archive_decode_tensor(live(), index, dst, dst.length),
                "decode " + tensors.get(index).name);
        return tensors.get(index).nbytes;
    }

    /** The bytes of tensor {@code index}. */
    public byte[] tensor(int index) {
        if (index < 0 || index >= tensors.size()) {
            throw new IndexOutOfBoundsException("tensor " + index);
        }
        byte[] dst = new byte[Math.toIntExact(tensors.get(index).nbytes)];
        decodeInto(index, dst);
        return dst;
    }

    /** The bytes of the tensor named {@code name}; NoSuchElementException if there is none. */
    public byte[] tensor(String name) {
        int i = indexOf(name);
        if (i < 0) {
            throw new NoSuchElementException("no tensor named " + name);
        }
        return tensor(i);
    }

    @Override
    public void close() {
        if (handle != null) {
            Native.LIB.brevis_archive_free(handle);
            handle = null;
            data.close();
            data = null;
        }
    }
}
