package org.brevis;

/** An error of the Brevis library: {@link #code()} is its BREVIS_ERROR_* value (see brevis.h). */
public class BrevisException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public static final int NULL_POINTER = -1;
    public static final int INVALID_ARGUMENT = -2;
    public static final int DST_TOO_SMALL = -3;
    public static final int CORRUPT = -4;
    public static final int UNSUPPORTED = -5;
    public static final int CHECKSUM = -6;
    public static final int LIMIT = -7;
    public static final int IO = -8;
    public static final int NOT_FOUND = -9;
    /** The library panicked; the panic was caught before it could crash the JVM. */
    public static final int PANIC = -10;

    private final int code;

    BrevisException(int code, String what) {
        super(what + ": " + Native.LIB.brevis_error_string(code));
        this.code = code;
    }

    public int code() {
        return code;
    }

    static void check(int code, String what) {
        if (code != 0) {
            throw new BrevisException(code, what);
        }
    }
}
