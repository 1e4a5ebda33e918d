package kpurgatory.vectors;

import java.util.ServiceLoader;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * Every case of the tree as one test, against the binding named by -Dkpurgatory.binding (or KPURGATORY_BINDING):
 * {@code stdio} (default), or the name of a {@code Binding.Provider} on the test classpath (a binding's profile in
 * the pom puts it there).
 */
class VectorsTest {
    @TestFactory
    Stream<DynamicTest> vectors() throws Exception {
        String name = Vectors.setting("KPURGATORY_BINDING", "stdio", null);
        if (name.equals("stdio")) {
            return Vectors.tests(new StdioBinding());
        }
        for (Binding.Provider provider : ServiceLoader.load(Binding.Provider.class)) {
            if (provider.name().equals(name)) {
                return Vectors.tests(provider.get());
            }
        }
        throw new IllegalArgumentException("no binding named " + name + " on the classpath: run "
                + "`mvn test -Dkpurgatory.binding=" + name + "` so that its profile adds it");
    }
}
