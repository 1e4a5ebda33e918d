package kpurgatory.examples.caffeine;

import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.VectorTests;

/** Every vector of KPURGATORY_VECTORS against CaffeineTimer: one JUnit test per case. */
class CaffeineVectorsTest extends VectorTests {
    @Override
    protected Binding binding() {
        return CaffeineTimer.binding();
    }
}
