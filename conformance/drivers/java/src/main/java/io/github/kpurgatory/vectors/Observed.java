package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/** What an implementation answered to one command (a trace's {@code system} field, specs/protocol.md §9). */
public record Observed(JsonNode result, List<JsonNode> events, String error, String failure) {
    /** An answer: its result and the events it caused, with no error. */
    public static Observed of(JsonNode result, List<JsonNode> events) {
        return new Observed(result, events, null, null);
    }

    /** No answer at all (the protocol's failure), with what went wrong. */
    public static Observed failure(String text) {
        return new Observed(NULL, List.of(), null, text);
    }

    static final JsonNode NULL = JsonNodeFactory.instance.nullNode();

    ObjectNode toJson() {
        ObjectNode system = JsonNodeFactory.instance.objectNode();
        if (failure != null) {
            return system.put("failure", failure);
        }
        system.set("result", result);
        system.putArray("events").addAll(events);
        if (error != null) {
            system.put("error", error);
        }
        return system;
    }
}
