package kpurgatory.live;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicReference;

/** The recorder's one entry: starts a single-node broker of a release (under the agent, or without it for an overhead
 *  baseline), runs the client load, stops everything, and leaves in DIR: events-<n>.jsonl (the agent's), broker.log,
 *  load.json (the load's throughput) and record.json (what ran, the broker's exit, the event files), the last also on
 *  stdout. Exit 0 done, 2 bad usage, 3 the broker or the tooling broke.
 *
 *  java -cp kpurgatory-live.jar:KAFKA_CP kpurgatory.live.Record --kafka-classpath KAFKA_CP --out DIR
 *       [--agent kpurgatory-live.jar] [--agent-options fault=double_complete,fault_every=5] [--seconds 20]
 *       [--producers 2] [--consumers 2] [--rate 500] [--record-bytes 200] [--partitions 4]
 *       [--fetch-max-wait-ms 300] [--fetch-min-bytes 32768] [--delete-every-ms 2000] [--churn-every-ms 0]
 *       [--purge-interval 100] [--until-stdin-closes]
 *  With --until-stdin-closes it stops (and stops its broker) when its standard input ends: its caller's lifeline. */
public final class Record {
    private Record() {
    }

    static final String USAGE = "usage: Record --kafka-classpath CP --out DIR [--agent JAR] [--agent-options K=V,...] "
            + "[--seconds S] [--producers N] [--consumers N] [--rate R] [--record-bytes B] [--partitions P] "
            + "[--fetch-max-wait-ms MS] [--fetch-min-bytes B] [--delete-every-ms MS] [--churn-every-ms MS] "
            + "[--purge-interval N] [--until-stdin-closes]";

    public static void main(String[] args) {
        String classpath = null, agent = null, agentOptions = null;
        Path out = null;
        Load.Options load = new Load.Options();
        int purgeInterval = 100;
        boolean untilStdinCloses = false;
        // The clients log through the release's slf4j binding: only their errors, on stderr (they warn while the
        // broker starts).
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "error");
        try {
            for (int i = 0; i < args.length; i++) {
                String flag = args[i];
                if (flag.equals("--until-stdin-closes")) {
                    untilStdinCloses = true;
                    continue;
                }
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(flag + " needs a value");
                }
                String v = args[++i];
                switch (flag) {
                    case "--kafka-classpath" -> classpath = v;
                    case "--agent" -> agent = v;
                    case "--agent-options" -> agentOptions = v;
                    case "--out" -> out = Path.of(v);
                    case "--seconds" -> load.seconds = positive(flag, v);
                    case "--producers" -> load.producers = count(flag, v);
                    case "--consumers" -> load.consumers = count(flag, v);
                    case "--rate" -> load.rate = count(flag, v);
                    case "--record-bytes" -> load.recordBytes = positive(flag, v);
                    case "--partitions" -> load.partitions = positive(flag, v);
                    case "--fetch-max-wait-ms" -> load.fetchMaxWaitMs = positive(flag, v);
                    case "--delete-every-ms" -> load.deleteEveryMs = count(flag, v);
                    case "--fetch-min-bytes" -> load.fetchMinBytes = positive(flag, v);
                    case "--churn-every-ms" -> load.churnEveryMs = count(flag, v);
                    case "--purge-interval" -> purgeInterval = positive(flag, v);
                    default -> throw new IllegalArgumentException("unknown option " + flag);
                }
            }
            if (classpath == null || out == null) {
                throw new IllegalArgumentException("--kafka-classpath and --out are required");
            }
            if (agent != null && !Files.isRegularFile(Path.of(agent))) {
                throw new IllegalArgumentException("no agent jar at " + agent);
            }
            if (agent == null && agentOptions != null) {
                throw new IllegalArgumentException("--agent-options without --agent");
            }
            if (agentOptions != null && (agentOptions.contains("out=") || agentOptions.isBlank())) {
                throw new IllegalArgumentException("--agent-options takes the agent's options but out= (it is --out)");
            }
            if (agentOptions != null) {
                kpurgatory.live.agent.Agent.validate(agentOptions);
            }
            Files.createDirectories(out);
            try (var old = Files.list(out)) {
                if (old.anyMatch(p -> p.getFileName().toString().matches("events-\\d+\\.jsonl"))) {
                    throw new IllegalArgumentException(out + " already holds a recording; give an empty directory");
                }
            }
            if (out.toString().contains(",")) {
                throw new IllegalArgumentException("the output directory's path must not contain a comma");
            }
        } catch (IllegalArgumentException | IOException e) {
            System.err.println("Record: " + e.getMessage() + "\n" + USAGE);
            System.exit(2);
            return;
        }
        if (untilStdinCloses) {
            Lifeline.exitWhenStdinCloses(3);  // its caller is gone: stop the broker (the shutdown hook) and go
        }
        try {
            System.out.println(record(classpath, agent, agentOptions, purgeInterval, out.toAbsolutePath(), load));
            System.exit(0);
        } catch (Exception e) {
            System.err.println("Record: " + e);
            System.exit(3);
        }
    }

    /** A JSON string: quotes, backslashes and control characters escaped. */
    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static int count(String flag, String v) {
        int n;
        try {
            n = Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " takes a whole number, not '" + v + "'");
        }
        if (n < 0) {
            throw new IllegalArgumentException(flag + " must not be negative");
        }
        return n;
    }

    private static int positive(String flag, String v) {
        int n = count(flag, v);
        if (n == 0) {
            throw new IllegalArgumentException(flag + " must be positive");
        }
        return n;
    }

    static String record(String classpath, String agent, String agentOptions, int purgeInterval, Path out,
                         Load.Options options)
            throws Exception {
        Path log = out.resolve("broker.log");
        List<String> jvm = new ArrayList<>();
        if (agent != null) {
            jvm.add("-javaagent:" + Path.of(agent).toAbsolutePath() + "=out=" + out
                    + (agentOptions == null ? "" : "," + agentOptions));
        }
        AtomicReference<Broker> running = new AtomicReference<>();
        // Stop the broker even if this JVM is interrupted (SIGTERM, Ctrl-C) while the load runs.
        Thread guard = new Thread(() -> {
            Broker b = running.getAndSet(null);
            if (b != null) {
                try {
                    b.stop();
                } catch (InterruptedException ignored) {
                    // going down anyway
                }
            }
        }, "stop-broker");
        Runtime.getRuntime().addShutdownHook(guard);
        long t0 = System.nanoTime();
        Broker broker = Broker.start(classpath, jvm, purgeInterval, log);
        running.set(broker);
        // Which process is the broker, for whoever watches it (its Lifeline ends it should this JVM be killed
        // outright).
        Files.writeString(out.resolve("broker.pid"), broker.pid() + "\n", StandardCharsets.UTF_8);
        String loadJson;
        double startS, stopS, cpuS = -1;
        int exit;
        try {
            broker.awaitReady(120, log);
            startS = (System.nanoTime() - t0) / 1e9;
            double cpuBefore = broker.cpuSeconds();
            loadJson = new Load(options, broker.bootstrap).run();
            cpuS = broker.cpuSeconds() - cpuBefore;
            Files.writeString(out.resolve("load.json"), loadJson + "\n", StandardCharsets.UTF_8);
        } finally {
            long t1 = System.nanoTime();
            running.set(null);
            exit = broker.stop();
            stopS = (System.nanoTime() - t1) / 1e9;
        }
        Runtime.getRuntime().removeShutdownHook(guard);
        StringBuilder files = new StringBuilder("[");
        long total = 0;
        try (var list = Files.list(out)) {
            List<Path> events = list.filter(p -> p.getFileName().toString().matches("events-\\d+\\.jsonl"))
                    .sorted().toList();
            for (Path p : events) {
                long size = Files.size(p);
                total += size;
                files.append(files.length() > 1 ? "," : "").append("{\"file\":\"").append(p.getFileName())
                        .append("\",\"bytes\":").append(size).append('}');
            }
        }
        files.append(']');
        String summary = String.format(Locale.ROOT,
                "{\"agent\":%s,\"agent_options\":%s,\"purge_interval\":%d,\"broker_start_s\":%.3f,"
                        + "\"broker_stop_s\":%.3f,\"broker_exit\":%d,"
                        + "\"broker_cpu_s_during_load\":%.3f,\"event_files\":%s,\"event_bytes\":%d,\"load\":%s}",
                agent != null, agentOptions == null ? "null" : json(agentOptions),
                purgeInterval, startS, stopS, exit, cpuS, files, total, loadJson);
        Files.writeString(out.resolve("record.json"), summary + "\n", StandardCharsets.UTF_8);
        if (exit == -1) {
            throw new IOException("the broker did not stop within " + Broker.STOP_WAIT_S + " s and was killed");
        }
        return summary;
    }
}
