package kpurgatory.kafka;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * kpurgatory's adapter over Kafka's own purgatory and timing wheel: the JSON Lines protocol of specs/protocol.md on
 * stdin/stdout. {@code run.sh [--era ERA] [--kafka-version V] CLASSPATH} compiles it, with the sources of the era
 * of Kafka's classes the classpath holds ({@link Era}), against them and starts it.
 *
 * <p>hello, init and shutdown run on the reading thread once every earlier request was answered. Every other command
 * runs on a thread of its own and is answered, echoing its seq, when it is done (the {@code concurrent} feature); a
 * sequential harness waits for each answer, so its commands still run one at a time. A request that names a start
 * barrier waits until all of that barrier's parties have arrived, then they all start at once ({@code barrier}). A
 * request that names a gate stops at it inside a tryComplete until the harness opens it ({@code gates}; the control
 * requests await_gate and open_gate are answered at once, beside the others). The answer to every command of a run
 * carries {@code exec_ns}: this JVM's monotonic clock just before and just after the call into Kafka.
 *
 * <p>A {@code batch} (a whole run, or several, in one request) runs alone too, on the reading thread, its requests one
 * after the other exactly as if each came alone, and is answered with one answer per request ({@code batch}). A call
 * the adapter's timer stopped because it would not end ({@link Hang}), or that overflowed the stack, is answered
 * {@code hung}.
 */
public final class KafkaAdapter {
    private static final Set<String> ALONE = Set.of("hello", "init", "shutdown", "batch");
    /** What a batch may not hold: requests that are not a run's commands. */
    private static final Set<String> NOT_IN_BATCH = Set.of("hello", "batch", "await_gate", "open_gate");
    private static final Era ERA = new KafkaEra();
    /** The release the classpath holds, when run.sh was told (hello declares it: the model follows that release). */
    private static final String VERSION = System.getProperty("kpurgatory.kafka.version", "");

    private final PrintStream out;
    private final ExecutorService pool = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "kpurgatory-request");
        thread.setDaemon(true);
        return thread;
    });
    private final List<Future<?>> inFlight = new ArrayList<>();
    /** Start barriers some of whose parties have not arrived yet, by id (touched by the reading thread only). */
    private final Map<Object, StartBarrier> barriers = new HashMap<>();
    /** This run's gates by id, created by whichever of the gated request, await_gate and open_gate comes first. */
    private final Map<Object, Gate> gates = new ConcurrentHashMap<>();
    private volatile KafkaSystem system;

    private static final class StartBarrier {
        final int parties;
        final CyclicBarrier latch;
        int arrived;

        StartBarrier(int parties) {
            this.parties = parties;
            latch = new CyclicBarrier(parties);
        }
    }

    private KafkaAdapter(PrintStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        PrintStream protocol = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);  // stdout carries protocol lines only, whatever else prints
        new KafkaAdapter(protocol).serve(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
        System.exit(0);
    }

    private void serve(BufferedReader in) throws Exception {
        Turns.out = this::answer;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) continue;
            Map<String, Object> request;
            try {
                Object parsed = Json.parse(line);
                if (parsed instanceof Map<?, ?> note && note.get("go") instanceof Long seq) {  // a scheduler's go
                    Turns.go(seq, Boolean.TRUE.equals(note.get("deadlock")));
                    continue;
                }
                request = request(parsed);
            } catch (RuntimeException e) {
                answer(failure(0L, e));
                continue;
            }
            Object cmd = request.get("cmd");
            if (ALONE.contains(cmd)) {
                settle();
                answer(handle(request));
            } else if ("await_gate".equals(cmd) || "open_gate".equals(cmd)) {
                control(request);
            } else {
                dispatch(request);
            }
        }
        settle();
        if (system != null) system.close();
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> request(Object parsed) {
        if (!(parsed instanceof Map)) throw new IllegalArgumentException("a request must be a JSON object");
        Map<String, Object> request = (Map<String, Object>) parsed;
        if (!(request.get("seq") instanceof Long)) throw new IllegalArgumentException("a request needs an integer seq");
        if (!(request.get("args") instanceof Map))
            throw new IllegalArgumentException("a request needs args (an object)");
        return request;
    }

    /** Runs the request on a thread of its own, behind its start barrier if it names one. */
    private void dispatch(Map<String, Object> request) {
        inFlight.removeIf(Future::isDone);
        Long seq = (Long) request.get("seq");
        StartBarrier barrier;
        try {
            barrier = request.get("barrier") == null ? null : arrive(request.get("barrier"));
            if (request.get("gate") != null) gate(request.get("gate"), "id");
        } catch (RuntimeException e) {
            answer(failure(seq, e));
            return;
        }
        boolean scheduled = Boolean.TRUE.equals(request.get("scheduled"));
        if (scheduled && system != null) system.schedule();
        inFlight.add(pool.submit(() -> {
            if (barrier != null) {
                try {
                    barrier.latch.await();
                } catch (InterruptedException | BrokenBarrierException e) {
                    answer(failure(seq, new IllegalStateException("its start barrier broke: not every party arrived "
                        + "before a request that must run alone")));
                    return;
                }
            }
            if (scheduled) {
                Turns.begin(seq);
                try {
                    answer(handle(request));
                } finally {
                    Turns.end();
                }
            } else {
                answer(handle(request));
            }
        }));
    }

    private StartBarrier arrive(Object barrier) {
        Map<?, ?> fields = object(barrier, "barrier");
        Object id = fields.get("id");
        if (id == null || !(fields.get("parties") instanceof Long) || (Long) fields.get("parties") < 1)
            throw new IllegalArgumentException("barrier: an id and a positive number of parties are required");
        int parties = Math.toIntExact((Long) fields.get("parties"));
        StartBarrier started = barriers.computeIfAbsent(id, unused -> new StartBarrier(parties));
        if (started.parties != parties)
            throw new IllegalArgumentException(
                "barrier " + id + " has " + started.parties + " parties, not " + parties);
        if (++started.arrived == parties) barriers.remove(id);
        return started;
    }

    private Gate gate(Object holder, String idField) {
        Object id = object(holder, "gate").get(idField);
        if (id == null) throw new IllegalArgumentException("gate: an id is required");
        return gates.computeIfAbsent(id, unused -> new Gate());
    }

    /** await_gate answers when the gated call waits at the gate (or finished without); open_gate at once. */
    private void control(Map<String, Object> request) {
        Long seq = (Long) request.get("seq");
        Gate gate;
        try {
            gate = gate(request.get("args"), "gate");
        } catch (RuntimeException e) {
            answer(failure(seq, e));
            return;
        }
        if ("open_gate".equals(request.get("cmd"))) {
            gate.open();
            answer(KafkaSystem.object("seq", seq, "result", null, "events", List.of()));
        } else {
            gate.reached().thenAccept(
                waiting -> answer(KafkaSystem.object("seq", seq, "result", waiting, "events", List.of())));
        }
    }

    /**
     * Waits until every request so far is answered, before one that runs alone. A start barrier that has not filled
     * by then never will (its missing parties would come after), so it is broken and its requests fail, not hang.
     */
    private void settle() throws Exception {
        for (StartBarrier barrier : barriers.values()) barrier.latch.reset();
        barriers.clear();
        for (Future<?> future : inFlight) future.get();
        inFlight.clear();
    }

    private Map<String, Object> handle(Map<String, Object> request) {
        Long seq = (Long) request.get("seq");
        @SuppressWarnings("unchecked")
        Map<String, Object> args = (Map<String, Object>) request.get("args");
        Map<String, Object> response = KafkaSystem.object("seq", seq);
        if ("batch".equals(request.get("cmd"))) {
            try {
                response.put("result", batch(args));
                response.put("events", List.of());
            } catch (RuntimeException e) {
                return failure(seq, e);
            }
        } else {
            response.putAll(execute(seq, request.get("cmd"), args, request.get("gate"), true));
        }
        return response;
    }

    /** The batch's answers: each request's, until a failure or hang, then "skipped" up to the next init. */
    private List<Object> batch(Map<String, Object> args) {
        Object requests = args.get("requests");
        if (!(requests instanceof List)) throw new IllegalArgumentException("requests: an array is required");
        List<Object> answers = new ArrayList<>();
        boolean skipping = false;
        for (Object item : (List<?>) requests) {
            Map<?, ?> request = object(item, "a batch's request");
            Object cmd = request.get("cmd");
            if (skipping && !"init".equals(cmd)) {
                answers.add(KafkaSystem.object("skipped", true));
                continue;
            }
            Map<String, Object> answer;
            if (NOT_IN_BATCH.contains(cmd) || request.containsKey("barrier") || request.containsKey("gate")) {
                answer = failure(null, new IllegalArgumentException(
                    "a batch holds a run's commands only, without barrier or gate: not " + Json.write(request)));
            } else if (!(request.get("args") instanceof Map)) {
                answer = failure(null, new IllegalArgumentException("a batch's request needs args (an object)"));
            } else {
                @SuppressWarnings("unchecked")
                Map<String, Object> commandArgs = (Map<String, Object>) request.get("args");
                answer = execute(null, cmd, commandArgs, null, false);
            }
            skipping = answer.containsKey("failure") || answer.containsKey("hung");
            answers.add(answer);
        }
        return answers;
    }

    /**
     * One command's answer without its seq: {@code result} and {@code events} (and {@code error}, and when
     * {@code timed} {@code exec_ns}), or {@code failure}, or {@code hung}. {@code seq} (null in a batch) names it in
     * the diagnostics on stderr.
     */
    private Map<String, Object> execute(Long seq, Object cmd, Map<String, Object> args, Object gateHolder,
                                        boolean timed) {
        Gate gate = null;
        try {
            if ("hello".equals(cmd)) return KafkaSystem.object("result", hello(), "events", List.of());
            if ("init".equals(cmd)) {
                if (system != null) system.close();
                system = null;
                gates.clear();
                system =
                    new KafkaSystem(ERA, KafkaSystem.string(args, "profile"), object(args.get("params"), "params"));
                return KafkaSystem.object("result", null, "events", List.of());
            }
            if (!(cmd instanceof String)) throw new IllegalArgumentException("cmd: a string is required");
            if (system == null) throw new IllegalStateException(cmd + " before init");
            long gateTry = 0;
            if (gateHolder != null) {
                gate = gate(gateHolder, "id");
                gateTry = KafkaSystem.integer(object(gateHolder, "gate"), "try");
            }
            Call call = Call.begin(gate, gateTry);
            long start = System.nanoTime();
            KafkaSystem.Outcome outcome = system.execute((String) cmd, args);
            long end = System.nanoTime();
            Map<String, Object> answer = KafkaSystem.object("result", outcome.result(), "events", call.events);
            if (outcome.error() != null) answer.put("error", outcome.error());
            if (timed) answer.put("exec_ns", List.of(start, end));
            return answer;
        } catch (Throwable e) {  // Kafka's own exceptions and errors are reported, not fatal
            Throwable hang = hangIn(e);
            return hang != null ? hung(seq, hang) : failure(seq, e);
        } finally {
            if (gate != null) gate.passedBy();
        }
    }

    private static Map<String, Object> hello() {
        List<String> profiles = new ArrayList<>(List.of("timer"));
        if (ERA.canAdvancePurgatory()) profiles.add("purgatory");
        List<String> features = new ArrayList<>(List.of("concurrent", "barrier", "gates", "delay_queue", "batch"));
        if (Turns.canControl()) features.add("scheduler");
        if (Timers.canReadWheel()) features.add("wheel");
        if (KafkaSystem.canReadWatcherKeys(ERA.purgatoryClass())) features.add("watcher_keys");
        Map<String, Object> hello = KafkaSystem.object("protocol_version", 1L, "implementation", implementation(),
            "profiles", profiles, "features", features);
        Map<String, Object> declarations = KafkaSystem.object("watcher_shards",
            KafkaSystem.watcherShards(ERA.purgatoryClass()));
        if (!VERSION.isEmpty()) declarations.put("kafka_version", VERSION);
        hello.put("declarations", declarations);
        if (!ERA.hasCancelForKey()) hello.put("unsupported_commands", List.of("cancel_key"));
        return hello;
    }

    /** "Apache Kafka 2.8.2 (kafka_2.13)" for a release's jar; otherwise where the purgatory's classes came from. */
    private static String implementation() {
        Object origin = ERA.purgatoryClass().getProtectionDomain().getCodeSource().getLocation();
        String jar = origin.toString().substring(origin.toString().lastIndexOf('/') + 1);
        if (!VERSION.isEmpty() && jar.endsWith("-" + VERSION + ".jar"))
            return "Apache Kafka " + VERSION + " (" + jar.substring(0, jar.length() - VERSION.length() - 5) + ")";
        return "Kafka's DelayedOperationPurgatory and TimingWheel from " + origin
            + " on kpurgatory's virtual-clock timer";
    }

    private static Map<?, ?> object(Object value, String name) {
        if (!(value instanceof Map)) throw new IllegalArgumentException(name + ": an object is required");
        return (Map<?, ?>) value;
    }

    /** A failure response, or a batch's failure answer when {@code seq} is null. */
    private static Map<String, Object> failure(Long seq, Throwable error) {
        StringBuilder text = new StringBuilder(error.getClass().getName());
        if (error.getMessage() != null) text.append(": ").append(error.getMessage());
        StackTraceElement[] frames = error.getStackTrace();
        if (frames.length > 0) text.append(" (at ").append(frames[0]).append(')');
        System.err.println("request " + (seq == null ? "in a batch" : seq) + ": " + text);
        for (int i = 0; i < Math.min(frames.length, 12); i++) System.err.println("\tat " + frames[i]);
        return withSeq(seq, "failure", text.toString());
    }

    /** What stopped a call that would not have ended: the timer's {@link Hang}, or a stack overflow; else null. */
    private static Throwable hangIn(Throwable error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause())
            if (cause instanceof Hang || cause instanceof StackOverflowError) return cause;
        return null;
    }

    private static Map<String, Object> hung(Long seq, Throwable hang) {
        StackTraceElement[] frames = hang.getStackTrace();
        String text = hang instanceof Hang ? hang.getMessage() : "the call recursed until the stack overflowed"
            + (frames.length > 0 ? " (StackOverflowError at " + frames[0] + ")" : "");
        System.err.println("request " + (seq == null ? "in a batch" : seq) + " stopped: " + text);
        return withSeq(seq, "hung", text);
    }

    private static Map<String, Object> withSeq(Long seq, String kind, String text) {
        return seq == null ? KafkaSystem.object(kind, text) : KafkaSystem.object("seq", seq, kind, text);
    }

    private void answer(Map<String, Object> response) {
        String line = Json.write(response);
        synchronized (out) {
            out.print(line);
            out.print('\n');
            out.flush();
        }
    }
}
