package kpurgatory.examples.agrona;

import io.github.kpurgatory.vectors.Binding;
import io.github.kpurgatory.vectors.VectorTests;

/** Every vector of KPURGATORY_VECTORS against AgronaTimer: one JUnit test per case. */
class AgronaVectorsTest extends VectorTests {
    @Override
    protected Binding binding() {
        return AgronaTimer.binding();
    }
}
