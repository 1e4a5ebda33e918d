package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;

/** Runs the vector tree (KPURGATORY_VECTORS) against a binding: one JUnit dynamic test per case, named by its path. */
public final class Vectors {
    /** 64-bit integers stay exact, and every integer is a long, so that equal numbers compare equal. */
    static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.USE_LONG_FOR_INTS);
    /** A hung in-process timer fails its case instead of the whole run. */
    private static final java.time.Duration CASE_TIMEOUT = java.time.Duration.ofSeconds(60);
    private static final Set<String> READ_OUTS = Set.of("wheel", "delay_queue", "watcher_keys");

    private Vectors() {}

    /** The dynamic tests for every case of the tree; the binding is closed and the results file written at the end. */
    public static Stream<DynamicTest> tests(Binding binding) throws IOException {
        Path root = Path.of(setting("KPURGATORY_VECTORS", null, "KPURGATORY_VECTORS is not set: point it at a vector "
                + "tree made by `kpurgatory vectors DIR`"));
        JsonNode index = JSON.readTree(root.resolve("index.json").toFile());
        if (!"kpurgatory-vectors".equals(index.path("format").asText()) || index.path("version").asInt() != 1) {
            throw new IllegalArgumentException(root.resolve("index.json") + " is not a kpurgatory-vectors tree, "
                    + "version 1");
        }
        Path out = Path.of(setting("KPURGATORY_VECTORS_OUT", "target/kpurgatory", null));
        List<ObjectNode> verdicts = new ArrayList<>();
        List<DynamicTest> tests = new ArrayList<>();
        for (JsonNode entry : index.get("cases")) {
            String path = entry.get("path").textValue();
            ObjectNode verdict = JSON.createObjectNode().put("path", path).put("verdict", "skip")
                    .put("reason", "not run").putNull("step").putNull("observed");
            verdicts.add(verdict);
            Run run = new Run(binding, entry, root.resolve(path), out, verdict);
            tests.add(DynamicTest.dynamicTest(path, root.resolve(path).toUri(),
                    () -> Assertions.assertTimeoutPreemptively(CASE_TIMEOUT, run::judge,
                            () -> path + ": not finished in " + CASE_TIMEOUT.toSeconds() + " s")));
        }
        return tests.stream().onClose(() -> finish(binding, verdicts));
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

    private static void finish(Binding binding, List<ObjectNode> verdicts) {
        try (binding) {
            String file = setting("KPURGATORY_VECTORS_RESULTS", "", null);
            if (file.isEmpty()) {
                return;
            }
            ObjectNode results = JSON.createObjectNode().put("format", "kpurgatory-vector-results").put("version", 1)
                    .put("driver", "java").put("implementation", binding.name()).put("level", binding.level());
            results.set("declarations", binding.declarations());
            verdicts.sort(Comparator.comparing(v -> v.get("path").textValue()));
            results.putArray("cases").addAll(verdicts);
            JSON.writerWithDefaultPrettyPrinter().writeValue(Path.of(file).toFile(), results);
        } catch (Exception e) {
            throw new IllegalStateException("closing " + binding.name() + " or writing the results", e);
        }
    }

    /** One case: selection, then each step judged at the binding's level. */
    private static final class Run {
        private final Binding binding;
        private final JsonNode entry;
        private final Path file;
        private final Path out;
        private final ObjectNode verdict;
        private final List<JsonNode> observed = new ArrayList<>();

        Run(Binding binding, JsonNode entry, Path file, Path out, ObjectNode verdict) {
            this.binding = binding;
            this.entry = entry;
            this.file = file;
            this.out = out;
            this.verdict = verdict.put("verdict", "fail").put("reason", "the run broke off (see the test's error)");
        }

        void judge() throws Exception {
            List<JsonNode> lines = new ArrayList<>();
            try (Stream<String> text = Files.lines(file)) {
                text.forEach(line -> {
                    try { lines.add(JSON.readTree(line)); } catch (IOException e) { throw new UncheckedIOException(e); }
                });
            }
            ObjectNode header = (ObjectNode) lines.get(0).get("header");
            String profile = header.get("profile").textValue();
            Params params = Params.of(header.get("params"));
            boolean contract = binding.level().equals("contract");
            String skip = skipReason(profile, params, contract);
            if (skip != null) {
                verdict.put("verdict", "skip").put("reason", skip);
                Assumptions.abort(skip);
            }
            ObjectNode trace = header.deepCopy().put("implementation", binding.name());
            trace.set("declarations", binding.declarations());
            observed.add(((ObjectNode) lines.get(0).deepCopy()).set("header", trace));
            TimerContract tracker = contract ? new TimerContract(binding.declarations(), params) : null;
            binding.init(profile, params);
            for (JsonNode step : lines.subList(1, lines.size())) {
                String cmd = step.get("cmd").textValue();
                if (contract && READ_OUTS.contains(cmd) && !binding.commands().contains(cmd)) {
                    continue;  // read-outs are not judged at the contract level
                }
                Observed got = binding.step(cmd, step.get("args"));
                observed.add(((ObjectNode) step.deepCopy()).set("system", got.toJson()));
                String problem = got.failure() != null ? "the implementation failed: " + got.failure()
                        : contract ? tracker.observe(step, got) : Exact.compare(step, got);
                if (problem != null) {
                    fail(step, got, problem);
                }
                if (contract && !tracker.judging()) {
                    break;  // an input the declarations leave undefined: nothing after it is judged
                }
            }
            verdict.put("verdict", "pass").putNull("reason");
        }

        private String skipReason(String profile, Params params, boolean contract) {
            if (!binding.profiles().contains(profile)) {
                return "profile " + profile + " is not implemented";
            }
            if (contract && profile.equals("purgatory")) {
                return "purgatory cases at the contract level are judged by `kpurgatory check/replay --level "
                        + "contract` through the stdio adapter";
            }
            for (JsonNode name : entry.get("commands")) {
                boolean readOut = READ_OUTS.contains(name.textValue());
                if (!binding.commands().contains(name.textValue()) && !(contract && readOut)) {
                    return (readOut ? "read-out " : "command ") + name.textValue() + " is not supported";
                }
            }
            JsonNode release = entry.path("kafka_version");
            if (!release.isNull() && !release.isMissingNode()
                    && !release.textValue().equals(binding.declarations().path("kafka_version").asText(null))) {
                return "about Kafka " + release.textValue() + ", which this implementation does not declare";
            }
            return binding.rejects(params);
        }

        private void fail(JsonNode step, Observed got, String problem) throws IOException {
            Files.createDirectories(out);
            // a case id is file-name safe (specs/vectors.md)
            Path trace = out.resolve(entry.get("id").textValue() + ".observed.jsonl").toAbsolutePath();
            StringBuilder text = new StringBuilder();
            for (JsonNode line : observed) {
                text.append(JSON.writeValueAsString(line)).append('\n');
            }
            Files.writeString(trace, text);
            long seq = step.get("seq").longValue();
            verdict.put("verdict", "fail").put("reason", problem).put("step", seq).put("observed", trace.toString());
            Map<String, Object> expected = new java.util.LinkedHashMap<>();
            expected.put("result", step.get("result"));
            expected.put("events", step.get("events"));
            expected.put("error", step.path("error").isMissingNode() ? null : step.get("error"));
            Assertions.fail(entry.get("path").textValue() + ": step " + seq + " " + step.get("cmd").textValue() + " "
                    + step.get("args") + ": " + problem
                    + "\n  expected (model): " + JSON.writeValueAsString(expected)
                    + "\n  observed:         " + JSON.writeValueAsString(got.toJson())
                    + "\n  observed trace:   " + trace
                    + "\n  replay:           kpurgatory replay " + trace + " --level " + binding.level());
        }
    }
}
