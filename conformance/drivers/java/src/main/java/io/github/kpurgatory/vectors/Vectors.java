package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;

/**
 * Runs the vector tree (KPURGATORY_VECTORS) against a binding: one JUnit dynamic test per case, named by its path,
 * and a failing test "no case ran" when every case was skipped (specs/vectors.md §3).
 */
public final class Vectors {
    /** 64-bit integers stay exact, and every integer is a long, so that equal numbers compare equal. */
    static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.USE_LONG_FOR_INTS);
    static final Set<String> READ_OUTS = Set.of("wheel", "delay_queue", "watcher_keys");

    private Vectors() {}

    /** What a binding declares, read once from the first instance: later instances are the same implementation. */
    record Declared(String name, String level, ObjectNode declarations, Set<String> profiles, Set<String> commands) {
        String release() {
            return declarations.path("kafka_version").asText(null);
        }
    }

    /**
     * The dynamic tests for every case of the tree. {@code bindings} makes the binding: once, and again for the next
     * case whenever a call failed, hung or crashed (the instance is then dropped). Each call runs on a thread of the
     * driver's within KPURGATORY_VECTORS_CALL_TIMEOUT_MS. The last instance is closed and the results file written
     * at the end.
     */
    public static Stream<DynamicTest> tests(Callable<Binding> bindings) throws IOException, InterruptedException {
        Path root = Path.of(setting("KPURGATORY_VECTORS", null, "KPURGATORY_VECTORS is not set: point it at a vector "
                + "tree made by `kpurgatory vectors DIR`"));
        JsonNode index = JSON.readTree(root.resolve("index.json").toFile());
        if (!"kpurgatory-vectors".equals(index.path("format").asText()) || index.path("version").asInt() != 1) {
            throw new IllegalArgumentException(root.resolve("index.json") + " is not a kpurgatory-vectors tree, "
                    + "version 1");
        }
        Path out = Path.of(setting("KPURGATORY_VECTORS_OUT", "target/kpurgatory", null));
        Session session = new Session(bindings,
                Long.parseLong(setting("KPURGATORY_VECTORS_CALL_TIMEOUT_MS", "10000", null)));
        Binding first;
        try {
            first = session.binding();
        } catch (Unanswered e) {
            throw new IllegalStateException("the binding could not be made: " + e.getMessage());
        }
        Declared declared = new Declared(first.name(), first.level(), first.declarations(),
                Set.copyOf(first.profiles()), Set.copyOf(first.commands()));
        Map<String, List<String>> families = new LinkedHashMap<>();  // in the index's order: first match wins
        index.path("families").forEach(family -> families.put(family.get(0).textValue(),
                List.of(JSON.convertValue(family.get(1), String[].class))));
        List<ObjectNode> verdicts = new ArrayList<>();
        List<DynamicTest> tests = new ArrayList<>();
        Map<String, Integer> skips = new TreeMap<>();
        for (JsonNode entry : index.get("cases")) {
            String path = entry.get("path").textValue();
            ObjectNode verdict = JSON.createObjectNode().put("path", path).put("verdict", "skip")
                    .put("reason", "not run").putNull("step").putNull("observed");
            verdicts.add(verdict);
            String skip = skipReason(declared, first, entry);
            if (skip != null) {
                verdict.put("reason", skip);
                skips.merge(skip, 1, Integer::sum);
                tests.add(DynamicTest.dynamicTest(path, root.resolve(path).toUri(), () -> Assumptions.abort(skip)));
            } else {
                Case run = new Case(session, declared, families, entry, root.resolve(path), out, verdict);
                tests.add(DynamicTest.dynamicTest(path, root.resolve(path).toUri(), run::judge));
            }
        }
        if (skips.values().stream().mapToInt(Integer::intValue).sum() == verdicts.size()) {
            String why = noCaseRan(index, declared, skips);
            tests.add(DynamicTest.dynamicTest("no case ran", () -> Assertions.fail(why)));
        }
        return tests.stream().onClose(() -> finish(session, declared, verdicts));
    }

    static String setting(String name, String otherwise, String missing) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            value = System.getProperty(name.toLowerCase().replace('_', '.'), otherwise);
        }
        if (value == null) {
            throw new IllegalStateException(missing);
        }
        return value;
    }

    /** Why the binding cannot run a case, from the index alone (specs/vectors.md §3), or null. */
    private static String skipReason(Declared declared, Binding first, JsonNode entry) {
        String profile = entry.get("profile").textValue();
        if (!declared.profiles().contains(profile)) {
            return "profile " + profile + " is not implemented";
        }
        for (JsonNode name : entry.get("commands")) {
            if (!READ_OUTS.contains(name.textValue()) && !declared.commands().contains(name.textValue())) {
                return "command " + name.textValue() + " is not supported";
            }
        }
        String rejected = first.rejects(Params.of(entry.get("params")));
        if (rejected != null) {
            return rejected;
        }
        String release = entry.path("kafka_version").asText(null);
        return Objects.equals(release, declared.release()) ? null
                : "the case is about Kafka " + (release == null ? "(current)" : release) + "; the binding declares "
                + (declared.release() == null ? "current Kafka" : declared.release());
    }

    private static String noCaseRan(JsonNode index, Declared declared, Map<String, Integer> skips) {
        if (skips.isEmpty()) {
            return "no case ran: the tree has no cases";
        }
        String tree = index.path("kafka_version").asText(null);
        return "no case ran: all " + skips.values().stream().mapToInt(Integer::intValue).sum() + " were skipped ("
                + skips.entrySet().stream().map(skip -> skip.getValue() + ": " + skip.getKey())
                .collect(Collectors.joining("; ")) + ")"
                + (Objects.equals(tree, declared.release()) ? "" : declared.release() == null
                ? "; the tree is Kafka " + tree + "'s, the binding current Kafka's: make a tree for it with "
                + "`kpurgatory vectors DIR`"
                : "; the binding follows Kafka " + declared.release() + ": make a tree for it with "
                + "`kpurgatory vectors DIR --kafka-version " + declared.release() + "`");
    }

    private static void finish(Session session, Declared declared, List<ObjectNode> verdicts) {
        try {
            session.close();
            String file = setting("KPURGATORY_VECTORS_RESULTS", "", null);
            if (file.isEmpty()) {
                return;
            }
            ObjectNode results = JSON.createObjectNode().put("format", "kpurgatory-vector-results").put("version", 1)
                    .put("driver", "java").put("implementation", declared.name()).put("level", declared.level());
            results.set("declarations", declared.declarations());
            verdicts.sort(Comparator.comparing(v -> v.get("path").textValue()));
            results.putArray("cases").addAll(verdicts);
            JSON.writerWithDefaultPrettyPrinter().writeValue(Path.of(file).toFile(), results);
        } catch (Exception e) {
            throw new IllegalStateException("closing " + declared.name() + " or writing the results", e);
        }
    }
}
