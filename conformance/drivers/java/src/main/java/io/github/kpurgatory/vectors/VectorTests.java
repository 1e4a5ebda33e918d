package io.github.kpurgatory.vectors;

import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The JUnit 5 entry point: extend it in your test sources and return your binding. Every case of the vector tree
 * ({@code KPURGATORY_VECTORS}) becomes one dynamic test named by the case's path.
 *
 * <pre>{@code
 * class MyTimerVectorsTest extends VectorTests {
 *     protected Binding binding() {
 *         return TimerUnderTest.binding("my-timer 1.0", "contract", declarations, true, params -> null, MyTimer::new);
 *     }
 * }
 * }</pre>
 *
 * <p>Anything behind a stdio adapter ({@code KPURGATORY_ADAPTER}) is {@code return new StdioBinding();}. To keep
 * the tests in a class that extends something else, return {@link Vectors#tests} from a {@code @TestFactory} method,
 * given how to make the binding ({@code MyBinding::new}).
 */
public abstract class VectorTests {
    /**
     * A new instance of the implementation under test: made when the run starts, and again for the next case
     * whenever a call to the one before failed, hung or crashed (that one is dropped: closed in the background, its
     * thread abandoned). The last one is closed when the run ends.
     */
    protected abstract Binding binding() throws Exception;

    /** One dynamic test per case of the tree, in the index's order. */
    @TestFactory
    public final Stream<DynamicTest> vectors() throws Exception {
        return Vectors.tests(this::binding);
    }
}
