package org.brevis;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.NoSuchElementException;
import org.junit.BeforeClass;
import org.junit.Test;

public class BrevisTest {
    static byte[] original;
    static byte[] archive;

    @BeforeClass
    public static void compressFixture() throws Exception {
        String env = System.getenv("BREVIS_FIXTURE");
        Path path = env != null ? Paths.get(env) : Paths.get("..", "..", "tests", "fixtures", "silero_vad_16k.safetensors");
        original = Files.readAllBytes(path);
        archive = Brevis.compress(original, new Brevis.Options().threads(2));
    }

    @Test
    public void version() {
        assertTrue(Brevis.version().matches("\\d+\\.\\d+\\.\\d+"));
    }

    @Test
    public void bytesRoundTrip() {
        for (byte[] data : new byte[][] {new byte[0], "x".getBytes(StandardCharsets.UTF_8),
                 "brevis ".repeat(1000).getBytes(StandardCharsets.UTF_8)}) {
            byte[] packed = Brevis.compress(data);
            assertTrue(packed.length <= Brevis.compressBound(data.length));
            assertEquals(data.length, Brevis.decompressedSize(packed));
            assertArrayEquals(data, Brevis.decompress(packed));
        }
    }

    @Test
    public void checkpointRoundTrip() {
        assertTrue(archive.length < original.length);
        assertArrayEquals(original, Brevis.decompress(archive, new Brevis.Options().threads(1).verify(true)));
        byte[] fast = Brevis.compress(original, new Brevis.Options().level(1));
        byte[] smallest = Brevis.compress(original, new Brevis.Options().level(3));
        assertArrayEquals(original, Brevis.decompress(fast));
        assertTrue(smallest.length <= fast.length);
    }

    @Test
    public void readsOneTensorByName() {
        try (Archive a = new Archive(archive)) {
            assertTrue(a.size() > 1);
            Archive.TensorInfo last = a.tensors().get(a.size() - 1);
            byte[] t = a.tensor(last.name);
            byte[] expected = Arrays.copyOfRange(original, (int) last.offset, (int) (last.offset + last.nbytes));
            assertArrayEquals(expected, t);
            assertNotNull(last.dtype);
            // The safetensors header agrees on where each tensor is.
            long headerLen = ByteBuffer.wrap(original, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
            String header = new String(original, 8, (int) headerLen, StandardCharsets.UTF_8);
            for (Archive.TensorInfo info : a.tensors()) {
                assertTrue(header.contains("\"" + info.name + "\""));
                assertEquals(a.indexOf(info.name), a.tensors().indexOf(info));
                byte[] b = a.tensor(a.indexOf(info.name));
                assertArrayEquals(Arrays.copyOfRange(original, (int) info.offset, (int) (info.offset + info.nbytes)), b);
            }
        }
    }

    @Test
    public void errorsAreExceptions() {
        byte[] truncated = Arrays.copyOf(archive, archive.length / 2);
        BrevisException e = assertThrows(BrevisException.class, () -> Brevis.decompress(truncated));
        assertEquals(BrevisException.CORRUPT, e.code());
        assertEquals(BrevisException.CORRUPT,
                assertThrows(BrevisException.class, () -> new Archive(original)).code());
        assertEquals(BrevisException.INVALID_ARGUMENT, assertThrows(BrevisException.class,
                () -> Brevis.compress(new byte[1], new Brevis.Options().chunkBytes(0))).code());
        assertEquals(BrevisException.LIMIT, assertThrows(BrevisException.class,
                () -> Brevis.decompress(archive, new Brevis.Options().memoryLimit(10))).code());
        try (Archive a = new Archive(archive)) {
            assertEquals(-1, a.indexOf("no such tensor"));
            assertThrows(NoSuchElementException.class, () -> a.tensor("no such tensor"));
            assertThrows(IndexOutOfBoundsException.class, () -> a.tensor(a.size()));
            Archive.TensorInfo t = a.tensors().get(0);
            assertEquals(BrevisException.DST_TOO_SMALL, assertThrows(BrevisException.class,
                    () -> a.decodeInto(0, new byte[(int) t.nbytes - 1])).code());
        }
        Archive closed = new Archive(archive);
        closed.close();
        closed.close();
        assertThrows(IllegalStateException.class, () -> closed.tensor(0));
    }

    /** A fine-tuned copy of a checkpoint: the lowest bit of every 7th byte of its data flipped
     * (tests/support/tools.rs derives it the same way). */
    static byte[] nudged(byte[] checkpoint) {
        byte[] out = checkpoint.clone();
        long start = 8 + ByteBuffer.wrap(checkpoint, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        for (long i = start; i < out.length; i += 7) {
            out[(int) i] ^= 1;
        }
        return out;
    }

    @Test
    public void referenceRoundTrip() {
        byte[] tuned = nudged(original);
        byte[] packed = Brevis.compressWithRef(tuned, original, new Brevis.Options().threads(2));
        assertTrue(packed.length < Brevis.compress(tuned, new Brevis.Options().threads(2)).length);
        assertArrayEquals(tuned, Brevis.decompressWithRef(packed, original, new Brevis.Options().threads(1)));
        assertEquals(BrevisException.INVALID_ARGUMENT,
                assertThrows(BrevisException.class, () -> Brevis.decompress(packed)).code());
        assertEquals(BrevisException.INVALID_ARGUMENT,
                assertThrows(BrevisException.class, () -> Brevis.decompressWithRef(packed, tuned, null)).code());
        assertEquals(BrevisException.LIMIT, assertThrows(BrevisException.class,
                () -> Brevis.decompressWithRef(packed, original, new Brevis.Options().memoryLimit(16))).code());
    }

    @Test
    public void archiveWithOptions() {
        int largest = 0;
        long largestBytes;
        try (Archive a = new Archive(archive, new Brevis.Options().threads(2))) {
            for (int i = 0; i < a.size(); i++) {
                Archive.TensorInfo t = a.tensors().get(i);
                assertArrayEquals(Arrays.copyOfRange(original, (int) t.offset, (int) (t.offset + t.nbytes)), a.tensor(i));
                if (t.nbytes > a.tensors().get(largest).nbytes) {
                    largest = i;
                }
            }
            largestBytes = a.tensors().get(largest).nbytes;
        }
        final int big = largest;
        try (Archive a = new Archive(archive, new Brevis.Options().threads(2).memoryLimit(largestBytes - 1))) {
            assertEquals(BrevisException.LIMIT, assertThrows(BrevisException.class, () -> a.tensor(big)).code());
        }
        assertEquals(BrevisException.LIMIT, assertThrows(BrevisException.class,
                () -> new Archive(archive, new Brevis.Options().memoryLimit(16))).code());
    }
}
