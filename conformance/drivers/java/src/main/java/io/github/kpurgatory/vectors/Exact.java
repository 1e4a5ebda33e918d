package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/** The exact level (specs/vectors.md §5.1): same result and error; events equal group by group, any order within. */
final class Exact {
    private Exact() {}

    /** What differs, or null. */
    static String compare(JsonNode step, Observed got) {
        String error = step.hasNonNull("error") ? step.get("error").textValue() : null;
        if (!Objects.equals(error, got.error())) {
            return "error " + got.error() + ", expected " + error;
        }
        String cmd = step.get("cmd").textValue();
        if (!normal(cmd, step.get("result")).equals(normal(cmd, got.result()))) {
            return "result differs";
        }
        List<JsonNode> expected = new ArrayList<>();
        step.get("events").forEach(expected::add);
        if (expected.size() != got.events().size()) {
            return got.events().size() + " events, expected " + expected.size();
        }
        JsonNode groups = step.path("expect").path("groups");
        int start = 0;
        for (JsonNode group : groups.isArray() ? groups : JsonNodeFactory.instance.arrayNode().add(expected.size())) {
            int end = start + group.asInt();
            if (!sorted(expected.subList(start, end)).equals(sorted(got.events().subList(start, end)))) {
                return "events " + (start + 1) + ".." + end + " (one group, any order) differ";
            }
            start = end;
        }
        return null;
    }

    /** Order that is not semantics: shutdown's ids, and the entries of a wheel bucket (specs/protocol.md §8). */
    private static JsonNode normal(String cmd, JsonNode result) {
        if (cmd.equals("shutdown") && result.isArray()) {
            return sortedArray((ArrayNode) result);
        }
        if (cmd.equals("wheel") && result.isObject()) {
            JsonNode copy = result.deepCopy();
            copy.path("levels").forEach(level -> level.path("buckets").forEach(bucket -> {
                if (bucket.path("entries").isArray()) {
                    ((ObjectNode) bucket).set("entries", sortedArray((ArrayNode) bucket.get("entries")));
                }
            }));
            return copy;
        }
        return result;
    }

    private static ArrayNode sortedArray(ArrayNode array) {
        ArrayNode sorted = array.arrayNode();
        List<JsonNode> items = new ArrayList<>();
        array.forEach(items::add);
        items.stream().sorted((a, b) -> a.toString().compareTo(b.toString())).forEach(sorted::add);
        return sorted;
    }

    private static List<String> sorted(List<JsonNode> events) {
        return events.stream().map(JsonNode::toString).sorted().toList();
    }
}
