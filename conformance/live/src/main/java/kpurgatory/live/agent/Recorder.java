package kpurgatory.live.agent;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** The agent's event log: instrumented threads put events on a bounded lock-free queue (a ConcurrentLinkedQueue whose
 *  size is bounded by an atomic counter) and never wait; one writer thread drains it into events-<n>.jsonl files,
 *  starting a new file when one passes the size limit. An event that finds the queue full is counted, and the count
 *  is written as a "dropped" event where it happened in the order, so no loss goes unrecorded. */
public final class Recorder {
    static final int FORMAT_VERSION = 1;

    private static final ConcurrentLinkedQueue<Ev> QUEUE = new ConcurrentLinkedQueue<>();
    private static final AtomicInteger QUEUED = new AtomicInteger();
    private static final AtomicLong DROPPED = new AtomicLong();
    private static volatile boolean stopping;
    /** Events written so far (by the writer thread only): how the shutdown sees that events still arrive. */
    private static volatile long written;

    private static int capacity;
    private static Path dir;
    private static long rotateBytes;
    private static String kafkaVersion;
    private static Thread writer;

    private Recorder() {
    }

    static void start(Path out, long rotateBytesLimit, int queueCapacity, String version) throws IOException {
        Files.createDirectories(out);
        dir = out;
        rotateBytes = rotateBytesLimit;
        capacity = queueCapacity;
        kafkaVersion = version;
        writer = new Thread(Recorder::drain, "kpurgatory-recorder");
        writer.setDaemon(true);
        writer.start();
        Runtime.getRuntime().addShutdownHook(new Thread(Recorder::stop, "kpurgatory-recorder-stop"));
    }

    /** A new event stamped with the time and the calling thread. */
    static Ev ev(byte kind, byte phase) {
        Ev e = new Ev();
        e.tNs = System.nanoTime();
        Thread t = Thread.currentThread();
        e.thread = t.getName();
        e.tid = t.getId();
        e.kind = kind;
        e.phase = phase;
        return e;
    }

    static void put(Ev e) {
        if (QUEUED.incrementAndGet() > capacity) {
            QUEUED.decrementAndGet();
            DROPPED.incrementAndGet();
            return;
        }
        QUEUE.offer(e);
    }

    /** Kafka's shutdown hook runs beside this one and its purgatories keep working while the broker stops, so the
     *  recording ends once the events have been quiet for a moment (or after a bound), then writes "end". */
    private static void stop() {
        long quietNs = 500_000_000L, boundNs = 20_000_000_000L;
        long start = System.nanoTime();
        long lastSeen = start;
        long seen = written;
        while (System.nanoTime() - start < boundNs) {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                break;
            }
            long now = written;
            if (now != seen || QUEUED.get() > 0) {
                seen = now;
                lastSeen = System.nanoTime();
            } else if (System.nanoTime() - lastSeen > quietNs) {
                break;
            }
        }
        stopping = true;
        try {
            writer.join(5000);
        } catch (InterruptedException ignored) {
            // the JVM is going down: what was written stays written
        }
    }

    private static void drain() {
        int fileNo = 0;
        Out out = null;
        StringBuilder line = new StringBuilder(256);
        try {
            out = Out.open(dir, fileNo);
            writeBegin(out, fileNo, line);
            long lastFlush = System.nanoTime();
            while (true) {
                Ev e = QUEUE.poll();
                if (e == null) {
                    long dropped = DROPPED.getAndSet(0);
                    if (dropped > 0) {
                        writeDropped(out, dropped, line);
                    }
                    if (stopping && QUEUE.isEmpty()) {
                        break;
                    }
                    if (System.nanoTime() - lastFlush > 100_000_000L) {
                        out.w.flush();
                        lastFlush = System.nanoTime();
                    }
                    Thread.sleep(2);
                    continue;
                }
                QUEUED.decrementAndGet();
                long dropped = DROPPED.getAndSet(0);
                if (dropped > 0) {
                    writeDropped(out, dropped, line);
                }
                line.setLength(0);
                format(e, line);
                out.write(line);
                written++;  // only this thread writes it
                if (out.bytes >= rotateBytes) {
                    out.close();
                    out = Out.open(dir, ++fileNo);
                    writeBegin(out, fileNo, line);
                }
            }
            line.setLength(0);
            line.append("{\"ev\":\"end\",\"t_ns\":").append(System.nanoTime()).append('}');
            out.write(line);
            out.close();
        } catch (IOException | InterruptedException | UncheckedIOException failure) {
            System.err.println("kpurgatory agent: recording stopped: " + failure);
        }
    }

    private static void writeBegin(Out out, int fileNo, StringBuilder line) throws IOException {
        line.setLength(0);
        line.append("{\"ev\":\"begin\",\"format\":\"kpurgatory-live\",\"version\":").append(FORMAT_VERSION)
                .append(",\"kafka_version\":");
        str(line, kafkaVersion);
        line.append(",\"pid\":").append(ProcessHandle.current().pid()).append(",\"file\":").append(fileNo)
                .append(",\"t_ns\":").append(System.nanoTime()).append(",\"faults\":");
        str(line, Faults.describe());
        line.append('}');
        out.write(line);
    }

    private static void writeDropped(Out out, long count, StringBuilder line) throws IOException {
        line.setLength(0);
        line.append("{\"ev\":\"dropped\",\"t_ns\":").append(System.nanoTime()).append(",\"count\":").append(count)
                .append('}');
        out.write(line);
    }

    private static final String[] KINDS = {"watch", "check", "try", "force", "complete", "expire", "advance", "purge",
        "timer_add", "timer_advance", "timer_run"};

    static void format(Ev e, StringBuilder b) {
        b.append("{\"t_ns\":").append(e.tNs).append(",\"thread\":");
        str(b, e.thread);
        b.append(",\"tid\":").append(e.tid).append(",\"ev\":\"").append(KINDS[e.kind]).append('"');
        if (e.phase != Ev.NONE) {
            b.append(",\"phase\":\"").append(e.phase == Ev.CALL ? "call" : "return").append('"');
        }
        boolean timer = e.kind >= Ev.TIMER_ADD;
        b.append(timer ? ",\"timer\":" : ",\"purgatory\":");
        str(b, e.where);
        switch (e.kind) {
            case Ev.CHECK -> field(b, "key", e.what);
            case Ev.ADVANCE, Ev.PURGE -> { }
            case Ev.TIMER_ADD, Ev.TIMER_RUN -> field(b, "task", e.what);
            case Ev.TIMER_ADVANCE -> { }
            default -> field(b, "op", e.what);
        }
        if (e.kind == Ev.WATCH && e.phase == Ev.CALL) {
            field(b, "opclass", e.extra);
            b.append(",\"keys\":[");
            for (int i = 0; i < e.keys.length; i++) {
                if (i > 0) {
                    b.append(',');
                }
                str(b, e.keys[i]);
            }
            b.append(']');
        }
        if (e.kind == Ev.TIMER_ADD) {
            field(b, "op", e.extra);
        }
        if (e.ms != Ev.ABSENT) {
            b.append(e.kind == Ev.ADVANCE || e.kind == Ev.TIMER_ADVANCE ? ",\"timeout_ms\":" : ",\"delay_ms\":")
                    .append(e.ms);
        }
        if (e.delayed != Ev.ABSENT) {
            b.append(",\"delayed\":").append(e.delayed);
        }
        if (e.watched != Ev.ABSENT) {
            b.append(",\"watched\":").append(e.watched);
        }
        if (e.purged != Ev.ABSENT) {
            b.append(e.kind == Ev.PURGE ? ",\"removed\":" : ",\"purged\":").append(e.purged);
        }
        if (e.thrown != null) {
            field(b, "thrown", e.thrown);
        } else if (e.result != Ev.ABSENT) {
            b.append(",\"result\":");
            if (e.kind == Ev.CHECK) {
                b.append(e.result);
            } else {
                b.append(e.result != 0);
            }
        }
        b.append('}');
    }

    private static void field(StringBuilder b, String name, String value) {
        b.append(",\"").append(name).append("\":");
        str(b, value);
    }

    /** A JSON string (or null); control characters, quotes and backslashes escaped. */
    static void str(StringBuilder b, String s) {
        if (s == null) {
            b.append("null");
            return;
        }
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c == 0x7f || Character.isSurrogate(c)) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        b.append('"');
    }

    /** One open events file and how many bytes went into it. */
    private static final class Out {
        final BufferedWriter w;
        long bytes;

        private Out(BufferedWriter w) {
            this.w = w;
        }

        static Out open(Path dir, int n) throws IOException {
            return new Out(new BufferedWriter(new OutputStreamWriter(
                    Files.newOutputStream(dir.resolve("events-" + n + ".jsonl")), StandardCharsets.UTF_8), 1 << 16));
        }

        void write(CharSequence line) throws IOException {
            w.append(line).append('\n');
            bytes += line.length() + 1;  // ASCII but for thread names and keys: close enough for a rotation limit
        }

        void close() throws IOException {
            w.close();
        }
    }
}
