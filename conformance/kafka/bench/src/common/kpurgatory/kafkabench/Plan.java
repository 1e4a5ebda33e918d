package kpurgatory.kafkabench;

import java.io.IOException;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.IntBuffer;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A workload's plan as the bench writes it: little-endian 32-bit integers, a kind (1 timer, 2 purgatory), the fields
 * of every kind (tickMs, wheelSize, arrivalMs, perMs, endMs), then the kind's own in the order its constructor reads
 * them. A list per ms is an offsets array of {@code endMs + 1} entries (ms {@code t}'s items are
 * {@code items[offsets[t] .. offsets[t + 1])}) followed by the items.
 */
abstract class Plan {
    final String kind;
    /** The wheel's tick and size; perMs arrivals in each ms of [0, arrivalMs); the replay runs ms [0, endMs). */
    final int tickMs, wheelSize, arrivalMs, perMs, endMs;

    Plan(String kind, IntBuffer in) {
        this.kind = kind;
        tickMs = in.get();
        wheelSize = in.get();
        arrivalMs = in.get();
        perMs = in.get();
        endMs = in.get();
    }

    static Plan read(Path path) throws IOException {
        IntBuffer in = ByteBuffer.wrap(Files.readAllBytes(path)).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer();
        Plan plan = switch (in.get()) {
            case 1 -> new TimerPlan(in);
            case 2 -> new PurgatoryPlan(in);
            default -> throw new IllegalArgumentException(path + " is not a plan of a known kind");
        };
        if (in.hasRemaining()) throw new IllegalArgumentException(path + " has " + in.remaining() + " ints too many");
        return plan;
    }

    /** A method Kafka keeps private (or public in some releases), callable fast from the replay loop. */
    static MethodHandle privateMethod(Class<?> owner, String name) {
        try {
            Method method = owner.getDeclaredMethod(name, long.class);
            method.setAccessible(true);
            return MethodHandles.lookup().unreflect(method);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("this Kafka build's " + owner.getName() + " has no " + name + "(long)", e);
        }
    }

    static int[] ints(IntBuffer in, int count) {
        int[] values = new int[count];
        in.get(values);
        return values;
    }

    abstract Replay replay();
}
