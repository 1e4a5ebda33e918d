package kpurgatory.live.agent;

import static net.bytebuddy.matcher.ElementMatchers.hasSuperType;
import static net.bytebuddy.matcher.ElementMatchers.isAbstract;
import static net.bytebuddy.matcher.ElementMatchers.isConstructor;
import static net.bytebuddy.matcher.ElementMatchers.nameStartsWith;
import static net.bytebuddy.matcher.ElementMatchers.named;
import static net.bytebuddy.matcher.ElementMatchers.namedOneOf;
import static net.bytebuddy.matcher.ElementMatchers.not;
import static net.bytebuddy.matcher.ElementMatchers.takesArgument;
import static net.bytebuddy.matcher.ElementMatchers.takesArguments;

import java.io.InputStream;
import java.lang.instrument.Instrumentation;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import net.bytebuddy.agent.builder.AgentBuilder;
import net.bytebuddy.asm.Advice;
import net.bytebuddy.description.method.MethodDescription;
import net.bytebuddy.description.modifier.Visibility;
import net.bytebuddy.description.type.TypeDescription;
import net.bytebuddy.dynamic.DynamicType;
import net.bytebuddy.implementation.FieldAccessor;
import net.bytebuddy.matcher.ElementMatcher;

/** The recorder agent: -javaagent:kpurgatory-live.jar=out=DIR[,rotate_mb=64][,queue=1000000][,kafka_version=V]
 *  [,fault=NAME][,fault_every=N][,fault_purgatory=P]. It finds Kafka's classes by name, so one agent serves the
 *  Scala purgatory of 3.6-3.9 (kafka.server) and the Java one of 4.x (org.apache.kafka.server.purgatory), both on
 *  the Java timer (org.apache.kafka.server.util.timer). */
public final class Agent {
    static final String PURGATORY_3 = "kafka.server.DelayedOperationPurgatory";
    static final String PURGATORY_4 = "org.apache.kafka.server.purgatory.DelayedOperationPurgatory";
    static final String OP_3 = "kafka.server.DelayedOperation";
    static final String OP_4 = "org.apache.kafka.server.purgatory.DelayedOperation";
    static final String TIMER = "org.apache.kafka.server.util.timer.SystemTimer";
    static final String TASK = "org.apache.kafka.server.util.timer.TimerTask";

    private static final Set<String> KNOWN = Set.of("out", "rotate_mb", "queue", "kafka_version", "fault",
            "fault_every", "fault_purgatory");

    private Agent() {
    }

    public static void premain(String args, Instrumentation inst) throws Exception {
        Map<String, String> options = parse(args);
        if (!options.containsKey("out")) {
            throw new IllegalArgumentException("kpurgatory agent: out=DIR is required");
        }
        Faults.configure(options.getOrDefault("fault", Faults.NONE),
                Long.parseLong(options.getOrDefault("fault_every", "10")), options.get("fault_purgatory"));
        Recorder.start(Path.of(options.get("out")),
                Long.parseLong(options.getOrDefault("rotate_mb", "64")) << 20,
                Integer.parseInt(options.getOrDefault("queue", "1000000")),
                options.getOrDefault("kafka_version", kafkaVersion()));
        install(inst);
    }

    /** Checks agent options (all but out=) before a broker is started with them; throws IllegalArgumentException. */
    public static void validate(String args) {
        Map<String, String> options = parse(args);
        try {
            Long.parseLong(options.getOrDefault("rotate_mb", "64"));
            Integer.parseInt(options.getOrDefault("queue", "1000000"));
            Long.parseLong(options.getOrDefault("fault_every", "10"));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("kpurgatory agent: a number option is not a number: " + args);
        }
        Faults.check(options.getOrDefault("fault", Faults.NONE), Long.parseLong(options.getOrDefault("fault_every",
                "10")));
    }

    static Map<String, String> parse(String args) {
        Map<String, String> options = new HashMap<>();
        if (args == null || args.isEmpty()) {
            return options;
        }
        for (String part : args.split(",")) {
            int eq = part.indexOf('=');
            String key = eq < 0 ? part : part.substring(0, eq);
            if (eq < 0 || !KNOWN.contains(key)) {
                throw new IllegalArgumentException("kpurgatory agent: bad option '" + part + "' (known: " + KNOWN
                        + ")");
            }
            options.put(key, part.substring(eq + 1));
        }
        return options;
    }

    /** The release on the classpath, from kafka-clients' own version file. */
    private static String kafkaVersion() {
        try (InputStream in = ClassLoader.getSystemResourceAsStream("kafka/kafka-version.properties")) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                return p.getProperty("version", "unknown");
            }
        } catch (java.io.IOException ignored) {
            // fall through: the version is then unknown
        }
        return "unknown";
    }

    private static final ElementMatcher<TypeDescription> IS_OP = hasSuperType(namedOneOf(OP_3, OP_4));
    private static final ElementMatcher<TypeDescription> IS_TASK = hasSuperType(named(TASK));

    private static void install(Instrumentation inst) {
        // Deciding whether a class is a timer task walks its supertypes, class files read from the classpath: only
        // the broker's own packages are looked at (never the clients' and the protocol's thousands of classes, where
        // no timer task lives), and what was read once is kept for the next class.
        new AgentBuilder.Default()
                .with(new AgentBuilder.PoolStrategy.WithTypePoolCache.Simple(new ConcurrentHashMap<>()))
                .ignore(not(nameStartsWith("kafka.").or(nameStartsWith("org.apache.kafka.")))
                        .or(nameStartsWith("org.apache.kafka.common.")).or(nameStartsWith("org.apache.kafka.clients."))
                        .or(nameStartsWith("org.apache.kafka.shaded.")))
                .with(AgentBuilder.Listener.StreamWriting.toSystemError().withErrorsOnly())
                .type(namedOneOf(PURGATORY_3, PURGATORY_4, PURGATORY_3 + "$Watchers", PURGATORY_4 + "$Watchers",
                        TIMER, TASK).or(IS_TASK))
                .transform((builder, type, loader, module, domain) -> transform(builder, type))
                .installOn(inst);
    }

    private static DynamicType.Builder<?> transform(DynamicType.Builder<?> builder, TypeDescription type) {
        String name = type.getName();
        if (name.equals(PURGATORY_3) || name.equals(PURGATORY_4)) {
            return builder
                    .visit(Advice.to(Advices.Watch.class).on(named("tryCompleteElseWatch").and(takesArguments(2))))
                    .visit(Advice.to(Advices.Check.class).on(named("checkAndComplete").and(takesArguments(1))))
                    .visit(Advice.to(Advices.Advance.class)
                            .on(named("advanceClock").and(takesArguments(long.class))));
        }
        if (name.endsWith("$Watchers")) {
            return builder
                    .visit(Advice.to(Advices.Purge.class).on(named("purgeCompleted").and(takesArguments(0))))
                    .visit(Advice.to(Advices.Sweep.class).on(named("tryCompleteWatched").and(takesArguments(0))));
        }
        if (name.equals(TIMER)) {
            return builder
                    .visit(Advice.to(Advices.TimerBuilt.class)
                            .on(isConstructor().and(takesArguments(4)).and(takesArgument(0, String.class))))
                    .visit(Advice.to(Advices.TimerAdd.class).on(named("add").and(takesArguments(1))))
                    .visit(Advice.to(Advices.TimerAdvance.class)
                            .on(named("advanceClock").and(takesArguments(long.class))));
        }
        if (name.equals(TASK)) {
            return builder
                    .defineField("kpurgatoryOp", String.class, Visibility.PRIVATE)
                    .defineField("kpurgatoryPurgatory", String.class, Visibility.PRIVATE)
                    .defineField("kpurgatoryTimer", String.class, Visibility.PRIVATE)
                    .defineField("kpurgatoryDelay", long.class, Visibility.PRIVATE)
                    .implement(Tagged.class).intercept(FieldAccessor.ofBeanProperty())
                    .visit(Advice.to(Advices.TaskBuilt.class).on(isConstructor().and(takesArguments(long.class))));
        }
        // A timer task (every DelayedOperation is one): its run(), and for ops their tries, completions, expirations.
        builder = builder.visit(Advice.to(Advices.TaskRun.class).on(concrete("run")));
        if (IS_OP.matches(type)) {
            builder = builder
                    .visit(Advice.to(Advices.Try.class).on(concrete("tryComplete")))
                    .visit(Advice.to(Advices.Complete.class).on(concrete("onComplete")))
                    .visit(Advice.to(Advices.Expire.class).on(concrete("onExpiration")));
            if (name.equals(OP_3) || name.equals(OP_4)) {
                builder = builder.visit(Advice.to(Advices.Force.class).on(concrete("forceComplete")));
            }
        }
        return builder;
    }

    private static ElementMatcher<MethodDescription> concrete(String method) {
        return named(method).and(takesArguments(0)).and(not(isAbstract()));
    }
}
