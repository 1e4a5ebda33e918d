package io.github.kpurgatory.vectors;

import com.fasterxml.jackson.databind.JsonNode;

/** A case's init (specs/protocol.md §4). */
public record Params(long tickMs, int wheelSize, long startMs, int purgeInterval) {
    static Params of(JsonNode params) {
        return new Params(params.get("tick_ms").longValue(), params.get("wheel_size").intValue(),
                params.get("start_ms").longValue(), params.path("purge_interval").asInt(1000));
    }
}
