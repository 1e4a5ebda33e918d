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
 * KPURGATORY_LEVEL (default exact).
 */
public final class StdioBinding implements Binding {
    private static final Set<String> TIMER = Set.of("timer_add", "timer_cancel", "advance", "size", "shutdown");
    private static final Set<String> PURGATORY = Set.of("watch", "set_ready", "check", "cancel_key", "force", "try",
            "cancel", "advance", "watched", "delayed", "size", "shutdown");
    private static final String END = new String("end of output");  // identity-compared marker

    private final Process process;
    private final Writer stdin;
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private final long timeoutMs = Long.parseLong(Vectors.setting("KPURGATORY_TIMEOUT_MS", "10000", null));
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
        process = new ProcessBuilder("sh", "-c", command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
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
        ObjectNode args = Vectors.JSON.createObjectNode().put("protocol_version", 1);
        JsonNode hello = request("hello", args);
        if (hello.has("failure") || !hello.path("result").isObject()) {
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

    public void init(String profile, Params params) throws IOException {
        ObjectNode args = Vectors.JSON.createObjectNode().put("profile", profile);
        args.putObject("params").put("tick_ms", params.tickMs()).put("wheel_size", params.wheelSize())
                .put("start_ms", params.startMs()).put("purge_interval", params.purgeInterval());
        JsonNode response = request("init", args);
        if (response.has("failure")) {
            throw new IOException("the adapter failed init: " + response.get("failure"));
        }
    }

    public Observed step(String cmd, JsonNode args) throws IOException {
        JsonNode response = request(cmd, args);
        if (response.has("failure")) {
            return Observed.failure(response.get("failure").asText());
        }
        List<JsonNode> events = new ArrayList<>();
        response.path("events").forEach(events::add);
        return new Observed(response.path("result").isMissingNode() ? Observed.NULL : response.get("result"), events,
                response.hasNonNull("error") ? response.get("error").asText() : null, null);
    }

    /** Sends one request and returns its response; a dead, silent or mis-sequenced adapter is a failure response. */
    private JsonNode request(String cmd, JsonNode args) throws IOException {
        long mine = seq++;
        ObjectNode request = Vectors.JSON.createObjectNode().put("seq", mine).put("cmd", cmd);
        request.set("args", args);
        try {
            stdin.write(Vectors.JSON.writeValueAsString(request) + "\n");
            stdin.flush();
        } catch (IOException e) {
            return failure("the adapter's stdin is closed (" + e.getMessage() + ")");
        }
        String line;
        try {
            line = lines.poll(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted waiting for the adapter");
        }
        if (line == null || line == END) {
            return failure(line == null ? "no response within " + timeoutMs + " ms" : "the adapter exited");
        }
        JsonNode response;
        try {
            response = Vectors.JSON.readTree(line);
        } catch (IOException e) {
            return failure("a response that is not JSON: " + line);
        }
        if (response.path("seq").asLong(-1) != mine) {
            return failure("a response with seq " + response.path("seq") + " to request " + mine);
        }
        return response;
    }

    private static JsonNode failure(String text) {
        return Vectors.JSON.createObjectNode().put("failure", text);
    }

    @Override
    public void close() throws Exception {
        stdin.close();
        if (!process.waitFor(5, TimeUnit.SECONDS)) {
            process.destroyForcibly();
        }
    }
}
