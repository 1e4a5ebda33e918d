package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;

/** One case (specs/vectors.md §4): each step sent to the binding and judged at its level, Kafka's findings known. */
final class Case {
    private final Session session;
    private final Vectors.Declared declared;
    private final Map<String, List<String>> families;
    private final JsonNode entry;
    private final Path file;
    private final Path out;
    private final ObjectNode verdict;
    private final List<JsonNode> observed = new ArrayList<>();

    Case(Session session, Vectors.Declared declared, Map<String, List<String>> families, JsonNode entry, Path file,
         Path out, ObjectNode verdict) {
        this.session = session;
        this.declared = declared;
        this.families = families;
        this.entry = entry;
        this.file = file;
        this.out = out;
        this.verdict = verdict.put("verdict", "fail").put("reason", "the run broke off (see the test's error)");
    }

    void judge() throws IOException {
        List<JsonNode> lines = new ArrayList<>();
        try (Stream<String> text = Files.lines(file)) {
            text.forEach(line -> {
                try {
                    lines.add(Vectors.JSON.readTree(line));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        }
        ObjectNode header = (ObjectNode) lines.get(0).get("header");
        String profile = header.get("profile").textValue();
        Params params = Params.of(header.get("params"));
        ObjectNode trace = header.deepCopy().put("implementation", declared.name());
        trace.set("declarations", declared.declarations());
        observed.add(((ObjectNode) lines.get(0).deepCopy()).set("header", trace));
        Contract contract = declared.level().equals("contract")
                ? new Contract(profile, declared.declarations(), params) : null;
        Binding binding;
        try {
            binding = session.binding();
            session.call("init", () -> {
                binding.init(profile, params);
                return null;
            });
        } catch (Unanswered e) {
            verdict.put("reason", "init " + e.getMessage());
            Assertions.fail(entry.get("path").textValue() + ": init " + e.getMessage());
            return;
        }
        for (JsonNode step : lines.subList(1, lines.size())) {
            String cmd = step.get("cmd").textValue();
            if (Vectors.READ_OUTS.contains(cmd) && !declared.commands().contains(cmd)) {
                observed.add(step);  // never sent, as `kpurgatory check` never sends an unsupported read-out
                continue;
            }
            if (contract != null && cmd.equals("watch") && !step.get("args").path("keys").isEmpty()
                    && !step.path("expect").has("deadline_ms")) {
                String why = "a watch without expect.deadline_ms (a tree older than its contract aids): the contract "
                        + "level cannot judge it; make the tree again with `kpurgatory vectors DIR`";
                verdict.put("verdict", "skip").put("reason", why);
                Assumptions.abort(why);
            }
            Observed got;
            String outcome = "answered";
            try {
                got = session.call(cmd, () -> binding.step(cmd, step.get("args")));
                if (got.failure() != null) {
                    got = Observed.failure("failed: " + got.failure());
                    outcome = "failed";
                    session.drop();
                }
            } catch (Unanswered e) {
                got = Observed.failure(e.getMessage());
                outcome = e.outcome;
            }
            observed.add(((ObjectNode) step.deepCopy()).set("system", got.toJson()));
            String problem = got.failure() != null ? got.failure()
                    : contract != null ? contract.observe(step, got) : Exact.compare(step, got);
            if (problem != null) {
                String finding = step.path("expect").has("kafka")
                        ? asKafka(step.get("expect").get("kafka"), outcome, got) : null;
                String reason = finding == null ? problem : "as Kafka does: " + finding + " (" + problem + ")";
                if (finding != null && declared.release() != null) {
                    verdict.put("verdict", "pass").put("reason", reason).put("finding", finding)
                            .put("step", step.get("seq").longValue()).put("observed", write().toString());
                    System.out.println(entry.get("path").textValue() + ": step " + step.get("seq") + " " + cmd + ": "
                            + reason + ": passes, the binding follows Kafka " + declared.release());
                    return;
                }
                fail(step, got, reason, finding);
            }
            if (contract != null && !contract.judging()) {
                break;  // an input the declarations leave undefined: nothing after it is judged
            }
        }
        verdict.put("verdict", "pass").putNull("reason");
    }

    /** The Kafka finding whose outcome this is (specs/vectors.md §5.4), or null. */
    private String asKafka(JsonNode kafka, String outcome, Observed got) {
        boolean answered = outcome.equals("answered");
        Set<String> runs = new HashSet<>();
        kafka.path("runs").forEach(id -> runs.add(id.asText()));
        boolean ranOne = answered && got.events().stream().anyMatch(event -> switch (event.path("event").asText()) {
            case "run" -> runs.contains(event.path("task").asText());
            case "expire" -> runs.contains(event.path("op").asText());
            default -> false;
        });
        String family = null;
        if (outcome.equals("failed")) {
            String text = got.failure().toLowerCase();
            // a hot JVM may drop the message of ArithmeticException: / by zero
            family = families.entrySet().stream().filter(f -> f.getValue().stream().anyMatch(text::contains))
                    .map(Map.Entry::getKey).findFirst().orElse(text.contains("arithmeticexception")
                            && !text.contains("overflow") ? "divide-by-zero" : null);
        }
        boolean fails = false;
        for (JsonNode name : kafka.path("fails")) {
            fails |= name.asText().equals(family);
        }
        boolean kafkaDoes = kafka.path("anything").asBoolean(false)
                || answered && got.error() == null && kafka.path("answers").asBoolean(false)
                || ranOne || fails
                || outcome.equals("hung") && kafka.path("hangs").asBoolean(false)
                || outcome.equals("crashed") && kafka.path("crashes").asBoolean(false);
        return kafkaDoes ? kafka.path("finding").asText() : null;
    }

    /** The observed trace (specs/vectors.md §6): the case up to this step, with what the binding answered. */
    private Path write() throws IOException {
        Files.createDirectories(out);
        // a case id is file-name safe (specs/vectors.md)
        Path trace = out.resolve(entry.get("id").textValue() + ".observed.jsonl").toAbsolutePath();
        StringBuilder text = new StringBuilder();
        for (JsonNode line : observed) {
            text.append(Vectors.JSON.writeValueAsString(line)).append('\n');
        }
        Files.writeString(trace, text);
        return trace;
    }

    private void fail(JsonNode step, Observed got, String problem, String finding) throws IOException {
        Path trace = write();
        long seq = step.get("seq").longValue();
        verdict.put("verdict", "fail").put("reason", problem).put("step", seq).put("observed", trace.toString());
        if (finding != null) {
            verdict.put("finding", finding);
        }
        Map<String, Object> expected = new LinkedHashMap<>();
        expected.put("result", step.get("result"));
        expected.put("events", step.get("events"));
        expected.put("error", step.path("error").isMissingNode() ? null : step.get("error"));
        Assertions.fail(entry.get("path").textValue() + ": step " + seq + " " + step.get("cmd").textValue() + " "
                + step.get("args") + ": " + problem
                + "\n  expected (model): " + Vectors.JSON.writeValueAsString(expected)
                + "\n  observed:         " + Vectors.JSON.writeValueAsString(got.toJson())
                + "\n  observed trace:   " + trace
                + "\n  replay:           kpurgatory replay " + trace + " --level " + declared.level());
    }
}
