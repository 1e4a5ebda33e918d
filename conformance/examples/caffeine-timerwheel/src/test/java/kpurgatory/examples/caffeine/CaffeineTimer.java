package kpurgatory.examples.caffeine;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import com.github.benmanes.caffeine.cache.Expiry;
import com.github.benmanes.caffeine.cache.RemovalCause;
import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.Params;
import io.github.kpurgatory.vectors.TimerUnderTest;
import java.time.Duration;
import java.util.List;
import java.util.function.Consumer;

/**
 * Caffeine's hierarchical TimerWheel, reached through its public API: a cache with variable expiration
 * ({@code expireAfter(Expiry)}), a fake {@code Ticker} and a same-thread executor. A task is a key whose value is its
 * duration; an expiry eviction is a run. One vector millisecond is 2^30 ns, the width of the wheel's finest bucket
 * (README: why).
 */
public final class CaffeineTimer implements TimerUnderTest {
    /** Nanoseconds per vector millisecond: TimerWheel.SPANS[0], its finest bucket (1.07 s). */
    private static final int SCALE_SHIFT = 30;
    /**
     * The latest deadline judged: a duration is capped at MAXIMUM_EXPIRY (Long.MAX_VALUE >> 1 ns, just under 2^32 ms here), so a
     * deadline above it, from a clock at or after 0, could be cut short; beyond it the vectors stop judging.
     */
    static final long MAX_DEADLINE_MS = (Long.MAX_VALUE >> 1) >> SCALE_SHIFT;

    private Cache<String, Long> cache;
    private long now;

    /** At the contract level, under the declarations its documentation and source support (README). */
    static Binding binding() {
        ObjectNode declarations = JsonNodeFactory.instance.objectNode()
                .put("firing", "never_early_up_to_tick_late")
                .put("lazy_size", false)
                .put("max_deadline_ms", MAX_DEADLINE_MS)
                .put("beyond_max_deadline", "undefined")
                .put("negative_delays", "run_at_once");
        return TimerUnderTest.binding("caffeine TimerWheel " + Caffeine.class.getPackage().getImplementationVersion(),
                "contract", declarations, true, params -> null, CaffeineTimer::new);
    }

    @Override
    public void init(Params params, Consumer<String> run) {
        now = params.startMs();
        cache = Caffeine.newBuilder()
                // past 2^33 ms it wraps, as System.nanoTime may; that is past MAX_DEADLINE_MS, where nothing is judged
                .ticker(() -> now << SCALE_SHIFT)
                .executor(Runnable::run)           // maintenance (expiry, listener calls) inside the call that needs it
                .expireAfter(Expiry.<String, Long>writing((task, nanos) -> Duration.ofNanos(nanos)))
                // without a maximum size or weak/soft references, expiry is the only eviction
                .evictionListener((String task, Long nanos, RemovalCause cause) -> run.accept(task))
                .build();
    }

    /** A put: on a pending key it replaces the value and restarts the duration from now (a move). */
    @Override
    public void add(String task, long delayMs) {
        // saturated as Caffeine saturates a Duration: it clamps a negative one to 0, and caps a long one at
        // MAXIMUM_EXPIRY (which the declarations leave undefined)
        cache.put(task, delayMs > MAX_DEADLINE_MS ? Long.MAX_VALUE
                : delayMs < -MAX_DEADLINE_MS ? Long.MIN_VALUE : delayMs << SCALE_SHIFT);
    }

    @Override
    public void cancel(String task) {
        cache.invalidate(task);
    }

    /**
     * Moves the ticker and runs the maintenance. A jump past MAX_DEADLINE_MS stops there first: every deadline judged
     * is by then due, and what follows is a difference of more than 2^63 ns, which a Ticker (System.nanoTime) need not
     * make sense of.
     */
    @Override
    public void advance(long toMs) {
        if (now < MAX_DEADLINE_MS && toMs > MAX_DEADLINE_MS) {
            now = MAX_DEADLINE_MS;
            cache.cleanUp();
        }
        now = toMs;
        cache.cleanUp();
    }

    @Override
    public long size() {
        return cache.estimatedSize();
    }

    /** A cache has no shutdown: the keys it still holds, then invalidateAll(). */
    @Override
    public List<String> shutdown() {
        List<String> pending = List.copyOf(cache.asMap().keySet());
        cache.invalidateAll();
        return pending;
    }
}
