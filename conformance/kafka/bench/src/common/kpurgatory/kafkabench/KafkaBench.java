package kpurgatory.kafkabench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/**
 * The driver of {@code kpurgatory bench --kafka}: replays the plans the bench wrote through Kafka's own classes. One
 * command a line on stdin, one JSON object a line on stdout:
 *
 * <pre>
 * load PATH   read the plan at PATH (the format is {@link Plan}'s)           {"kind": "timer", "jvm": ".."}
 * run         one timed replay on a fresh timer or purgatory                {"cpu_ns": .., "gc_ns": .., counts..}
 * memory      bytes per pending item, from the heap after full collections  {"max_pending": .., "bytes": .., ..}
 * </pre>
 *
 * A failure answers {"error": "..."} and the driver goes on reading.
 */
public final class KafkaBench {
    private static final com.sun.management.ThreadMXBean THREADS =
        (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    private KafkaBench() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        Plan plan = null;
        for (String line; (line = in.readLine()) != null; ) {
            String[] words = line.strip().split(" ", 2);
            String answer;
            try {
                answer = switch (words[0]) {
                    case "load" -> {
                        plan = Plan.read(Path.of(words[1]));
                        yield "{\"kind\": \"" + plan.kind + "\", \"jvm\": " + quote(jvm()) + "}";
                    }
                    case "run" -> run(required(plan));
                    case "memory" -> memory(required(plan));
                    default -> throw new IllegalArgumentException("unknown command: " + words[0]);
                };
            } catch (Throwable e) {  // Kafka's exceptions and errors (a stack overflow included) are the answer
                answer = "{\"error\": " + quote(e.toString()) + "}";
            }
            out.println(answer);
            out.flush();
        }
    }

    private static Plan required(Plan plan) {
        if (plan == null) throw new IllegalStateException("no plan loaded");
        return plan;
    }

    /**
     * CPU time of this thread, the collector's pauses (the serial collector runs while this thread waits) and the
     * bytes the replay allocated. The heap is collected first, as the Python replays start after gc.collect().
     */
    private static String run(Plan plan) throws Throwable {
        Replay replay = plan.replay();
        collect();
        long gc = gcNanos();
        long allocated = THREADS.getCurrentThreadAllocatedBytes();
        long cpu = THREADS.getCurrentThreadCpuTime();
        replay.play(Integer.MAX_VALUE, null);
        cpu = THREADS.getCurrentThreadCpuTime() - cpu;
        allocated = THREADS.getCurrentThreadAllocatedBytes() - allocated;
        gc = gcNanos() - gc;
        String counts = replay.counts();
        replay.close();
        return "{\"cpu_ns\": " + cpu + ", \"gc_ns\": " + gc + ", \"allocated_bytes\": " + allocated + ", " + counts
            + "}";
    }

    private static String jvm() {
        return System.getProperty("java.vm.name") + " " + System.getProperty("java.runtime.version") + ", "
            + ManagementFactory.getRuntimeMXBean().getInputArguments();
    }

    /**
     * Like the bench's tracemalloc pass: the heap the replay keeps alive when the number of pending items first
     * reaches its peak, over that number. A first replay finds the peak and the ms it is first reached; a second one
     * stops at that ms and compares the heap used then with the heap used just before it started, both after full
     * collections. The caller's task and operation objects are counted, as in the Python pass.
     */
    private static String memory(Plan plan) throws Throwable {
        Replay finder = plan.replay();
        int[] peak = {0, -1, 0};  // pending, the ms it is first reached, the largest watched() while ops arrive
        finder.play(Integer.MAX_VALUE, (t, pending, watched) -> {
            if (pending > peak[0]) {
                peak[0] = pending;
                peak[1] = t;
            }
            if (t <= plan.arrivalMs) peak[2] = Math.max(peak[2], watched.getAsInt());
        });
        finder.close();
        if (peak[1] < 0) return "{\"max_pending\": 0, \"bytes\": 0, \"max_watched\": " + peak[2] + "}";
        Replay measured = plan.replay();
        long[] used = new long[2];
        measured.play(peak[1], new Replay.Probe() {
            @Override
            public void start() {
                used[0] = heapUsedAfterCollection();
            }

            @Override
            public void after(int t, int pending, java.util.function.IntSupplier watched) {
                if (t == peak[1]) used[1] = heapUsedAfterCollection();
            }
        });
        measured.close();
        return "{\"max_pending\": " + peak[0] + ", \"bytes\": " + (used[1] - used[0]) + ", \"max_watched\": " + peak[2]
            + "}";
    }

    private static void collect() {
        System.gc();
        System.gc();
    }

    private static long heapUsedAfterCollection() {
        collect();
        return ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
    }

    private static long gcNanos() {
        long millis = 0;
        for (GarbageCollectorMXBean collector : ManagementFactory.getGarbageCollectorMXBeans())
            millis += Math.max(0, collector.getCollectionTime());
        return millis * 1_000_000;
    }

    static String quote(String text) {
        StringBuilder quoted = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') quoted.append('\\').append(c);
            else if (c < 0x20 || Character.isSurrogate(c)) quoted.append(String.format("\\u%04x", (int) c));
            else quoted.append(c);
        }
        return quoted.append('"').toString();
    }
}
