package kpurgatory.live;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Uuid;

/** One single-node KRaft broker (combined broker and controller) of a release, as a child JVM on loopback: free ports
 *  chosen now, log dirs in a temporary directory, storage formatted with the release's own StorageTool, optionally
 *  under the recorder agent. close() always stops it (SIGTERM, a wait, then a kill) and removes its data. */
final class Broker implements AutoCloseable {
    static final long STOP_WAIT_S = 60;

    final String bootstrap;
    private final Path home;
    private final Process process;

    private Broker(String bootstrap, Path home, Process process) {
        this.bootstrap = bootstrap;
        this.home = home;
        this.process = process;
    }

    /** Starts the broker, its output going to log; jvmOptions come first (e.g. -javaagent:...). */
    static Broker start(String kafkaClasspath, List<String> jvmOptions, int purgeInterval, Path log) throws IOException,
            InterruptedException {
        Path home = Files.createTempDirectory("kpurgatory-broker-");
        try {
            int brokerPort = freePort(), controllerPort = freePort();
            Path config = home.resolve("server.properties");
            Properties p = new Properties();
            p.setProperty("process.roles", "broker,controller");
            p.setProperty("node.id", "1");
            p.setProperty("controller.quorum.voters", "1@127.0.0.1:" + controllerPort);
            p.setProperty("listeners", "PLAINTEXT://127.0.0.1:" + brokerPort + ",CONTROLLER://127.0.0.1:"
                    + controllerPort);
            p.setProperty("advertised.listeners", "PLAINTEXT://127.0.0.1:" + brokerPort);
            p.setProperty("controller.listener.names", "CONTROLLER");
            p.setProperty("inter.broker.listener.name", "PLAINTEXT");
            p.setProperty("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
            p.setProperty("log.dirs", home.resolve("data").toString());
            // One node: every internal topic has one replica, and acks=all needs only the leader (so it still waits
            // in the produce purgatory for the in-sync replicas, which are the leader alone).
            p.setProperty("offsets.topic.replication.factor", "1");
            p.setProperty("offsets.topic.num.partitions", "4");
            p.setProperty("transaction.state.log.replication.factor", "1");
            p.setProperty("transaction.state.log.min.isr", "1");
            p.setProperty("min.insync.replicas", "1");
            p.setProperty("group.initial.rebalance.delay.ms", "0");
            p.setProperty("auto.create.topics.enable", "false");
            // How many completed-but-still-watched ops make the reaper purge the watcher lists (Kafka's default is
            // 1000): lower, so that a short recording sees purges.
            p.setProperty("producer.purgatory.purge.interval.requests", Integer.toString(purgeInterval));
            p.setProperty("fetch.purgatory.purge.interval.requests", Integer.toString(purgeInterval));
            p.setProperty("delete.records.purgatory.purge.interval.requests", Integer.toString(purgeInterval));
            try (var out = Files.newBufferedWriter(config, StandardCharsets.UTF_8)) {
                p.store(out, "kpurgatory live broker");
            }
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            List<String> format = List.of(java, "-Xmx256m", "-cp", kafkaClasspath, "kafka.tools.StorageTool",
                    "format", "-t", Uuid.randomUuid().toString(), "-c", config.toString());
            Process formatting = new ProcessBuilder(format).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
            if (!formatting.waitFor(120, TimeUnit.SECONDS)) {
                formatting.destroyForcibly();
                throw new IOException("formatting the broker's storage took over 120 s");
            }
            if (formatting.exitValue() != 0) {
                throw new IOException("formatting the broker's storage failed (exit " + formatting.exitValue()
                        + "); see " + log);
            }
            List<String> command = new ArrayList<>(List.of(java, "-Xmx768m", "-Xms256m"));
            command.addAll(jvmOptions);
            // kafka.Kafka under the Lifeline (this jar's, after Kafka's classes), so that the broker ends with this JVM
            command.addAll(List.of("-cp", kafkaClasspath + File.pathSeparator + ownClasspath(),
                    Lifeline.class.getName(), "kafka.Kafka", config.toString()));
            Process process = new ProcessBuilder(command).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
            return new Broker("127.0.0.1:" + brokerPort, home, process);
        } catch (IOException | InterruptedException | RuntimeException e) {
            delete(home);
            throw e;
        }
    }

    /** Where this class was loaded from: the recorder's jar (or classes folder), which holds the Lifeline. */
    private static String ownClasspath() throws IOException {
        try {
            return Path.of(Broker.class.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
        } catch (URISyntaxException e) {
            throw new IOException("cannot tell where the recorder's own classes are: " + e.getMessage(), e);
        }
    }

    /** Waits until the broker answers an admin request, failing early if it died. */
    void awaitReady(long timeoutS, Path log) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
        Properties p = new Properties();
        p.setProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "2000");
        p.setProperty(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
        try (Admin admin = Admin.create(p)) {
            while (true) {
                if (!process.isAlive()) {
                    throw new IOException("the broker exited (" + process.exitValue() + ") while starting; see " + log);
                }
                try {
                    if (!admin.describeCluster().nodes().get(3, TimeUnit.SECONDS).isEmpty()) {
                        return;
                    }
                } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException notYet) {
                    // not answering yet
                }
                if (System.nanoTime() > deadline) {
                    throw new IOException("the broker did not answer within " + timeoutS + " s; see " + log);
                }
                Thread.sleep(200);
            }
        }
    }

    long pid() {
        return process.pid();
    }

    /** The CPU time the broker's JVM has used so far, in seconds (-1 where the platform does not tell). */
    double cpuSeconds() {
        return process.info().totalCpuDuration().map(d -> d.toNanos() / 1e9).orElse(-1.0);
    }

    /** SIGTERM (the broker's clean shutdown, and the agent's), a wait, then a kill; the data goes. Returns the exit
     *  code, or -1 if it had to be killed. */
    int stop() throws InterruptedException {
        if (process.isAlive()) {
            process.destroy();
            if (!process.waitFor(STOP_WAIT_S, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
                delete(home);
                return -1;
            }
        }
        delete(home);
        return process.exitValue();
    }

    @Override
    public void close() throws InterruptedException {
        stop();
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    private static void delete(Path dir) {
        try (var paths = Files.walk(dir)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
        } catch (IOException ignored) {
            // a leftover temporary directory is harmless
        }
    }
}
