package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Any implementation behind a subprocess adapter speaking specs/protocol.md, started from KPURGATORY_ADAPTER (a shell
 * command). Its hello gives the name, profiles, read-outs, unsupported commands and declarations; the level is
 * KPURGATORY_LEVEL (default exact). A request waits until it is answered or interrupted: the driver's per-call limit
 * interrupts it, and the adapter is then killed (the driver starts another for the next case). Its stderr is passed
 * on, and its tail tells why it exited.
 */
public final class StdioBinding implements Binding {
    private static final Set<String> TIMER = Set.of("timer_add", "timer_cancel", "advance", "size", "shutdown");
    private static final Set<String> PURGATORY = Set.of("watch", "set_ready", "check", "cancel_key", "force", "try",
            "cancel", "advance", "watched", "delayed", "size", "shutdown");
    private static final String END = new String("end of output");  // identity-compared marker
    private static final int STDERR_TAIL = 2000;

    private final Process process;
    private final Writer stdin;
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private final StringBuilder stderr = new StringBuilder();
    private final String level = Vectors.setting("KPURGATORY_LEVEL", "exact", null);
    private final String name;
    private final ObjectNode declarations;
    private final Set<String> profiles = new HashSet<>();
    private final Set<String> commands = new HashSet<>();
    private long seq;

    /** Starts the adapter (KPURGATORY_ADAPTER) and reads its hello. */
    public StdioBinding() throws IOException {
        String command = Vectors.setting("KPURGATORY_ADAPTER", null, "KPURGATORY_ADAPTER is not set: the stdio binding "
                + "needs an adapter command, e.g. `python -m kpurgatory.conformance.adapters.stdio "
                + "kpurgatory.conformance.adapters.builtin:factory`");
        process = new ProcessBuilder("sh", "-c", command).start();
        stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
        Thread errors = new Thread(() -> {
            try (InputStreamReader err = new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8)) {
                char[] chunk = new char[4096];
                for (int n; (n = err.read(chunk)) >= 0; ) {
                    System.err.print(new String(chunk, 0, n));
                    synchronized (stderr) {
                        stderr.append(chunk, 0, n).delete(0, Math.max(0, stderr.length() - STDERR_TAIL));
                    }
                }
            } catch (IOException ignored) {
                // the process went away
            }
        }, "kpurgatory-adapter-stderr");
        errors.setDaemon(true);
        errors.start();
        Thread reader = new Thread(() -> {
            try (BufferedReader out = new BufferedReader(
                    new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = out.readLine()) != null; ) {
                    lines.add(line);
                }
            } catch (IOException ignored) {
                // the process went away: the marker below reports it
            }
            lines.add(END);
        }, "kpurgatory-adapter-stdout");
        reader.setDaemon(true);
        reader.start();
        JsonNode hello;
        try {
            hello = request("hello", Vectors.JSON.createObjectNode().put("protocol_version", 1));
        } catch (IOException e) {
            kill();
            throw e;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted waiting for the adapter's hello");
        }
        if (hello.has("failure") || !hello.path("result").isObject()) {
            kill();
            throw new IOException("the adapter's hello failed: " + hello);
        }
        JsonNode result = hello.get("result");
        name = result.path("implementation").asText(command);
        declarations = result.path("declarations").isObject() ? (ObjectNode) result.get("declarations")
                : Vectors.JSON.createObjectNode();
        result.get("profiles").forEach(p -> {
            profiles.add(p.textValue());
            commands.addAll(p.textValue().equals("timer") ? TIMER : PURGATORY);
        });
        result.path("unsupported_commands").forEach(c -> commands.remove(c.textValue()));
        result.path("features").forEach(f -> commands.add(f.textValue()));
    }

    public String name() { return name; }
    public String level() { return level; }
    public ObjectNode declarations() { return declarations; }
    public Set<String> profiles() { return profiles; }
    public Set<String> commands() { return commands; }

    public void init(String profile, Params params) throws IOException, InterruptedException {
        ObjectNode args = Vectors.JSON.createObjectNode().put("profile", profile);
        args.putObject("params").put("tick_ms", params.tickMs()).put("wheel_size", params.wheelSize())
                .put("start_ms", params.startMs()).put("purge_interval", params.purgeInterval());
        JsonNode response = request("init", args);
        if (response.has("failure")) {
            throw new IOException("the adapter failed init: " + response.get("failure"));
        }
    }

    public Observed step(String cmd, JsonNode args) throws IOException, InterruptedException {
        JsonNode response = request(cmd, args);
        if (response.has("failure")) {
            return Observed.failure(response.get("failure").asText());
        }
        List<JsonNode> events = new ArrayList<>();
        response.path("events").forEach(events::add);
        return new Observed(response.path("result").isMissingNode() ? Observed.NULL : response.get("result"), events,
                response.hasNonNull("error") ? response.get("error").asText() : null, null);
    }

    /**
     * Sends one request and returns its response (or a failure response); an adapter that exits, answers hung or
     * garbles is an {@link Unanswered}, and an interrupt kills it.
     */
    private JsonNode request(String cmd, JsonNode args) throws IOException, InterruptedException {
        long mine = seq++;
        ObjectNode request = Vectors.JSON.createObjectNode().put("seq", mine).put("cmd", cmd);
        request.set("args", args);
        String line;
        try {
            stdin.write(Vectors.JSON.writeValueAsString(request) + "\n");
            stdin.flush();
            line = lines.take();
        } catch (IOException | InterruptedException e) {
            kill();
            if (e instanceof InterruptedException) {
                throw e;
            }
            line = END;  // its stdin closed: it is exiting
        }
        if (line == END) {
            boolean exited = process.waitFor(1, TimeUnit.SECONDS);
            String tail;
            synchronized (stderr) {
                tail = stderr.toString().strip();
            }
            throw new Unanswered("crashed", "the adapter exited" + (exited ? " (status " + process.exitValue() + ")"
                    : "") + (tail.isEmpty() ? "" : "; its stderr ends: " + tail));
        }
        JsonNode response;
        try {
            response = Vectors.JSON.readTree(line);
        } catch (IOException e) {
            throw new Unanswered("failed", "a response that is not JSON: " + line);
        }
        if (response.path("seq").asLong(-1) != mine) {
            throw new Unanswered("failed", "a response with seq " + response.path("seq") + " to request " + mine);
        }
        if (response.has("hung")) {
            throw new Unanswered("hung", "the adapter stopped " + cmd + ": " + response.get("hung").asText());
        }
        return response;
    }

    /** Kills the adapter and whatever it started (a shell's child would hold the pipes open). */
    private void kill() {
        process.descendants().forEach(ProcessHandle::destroyForcibly);
        process.destroyForcibly();
    }

    @Override
    public void close() throws Exception {
        if (process.isAlive()) {
            try {
                stdin.close();  // the end of its input ends a well-behaved adapter
            } catch (IOException ignored) {
                // it is not reading: killed below
            }
            process.waitFor(5, TimeUnit.SECONDS);
        }
        kill();
    }
}
