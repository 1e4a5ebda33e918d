package kpurgatory.live;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Client load that makes a broker's purgatories work: producers with acks=all (each produce waits in the Produce
 *  purgatory for the in-sync replicas), consumers in one group with a large fetch.min.bytes and a short
 *  fetch.max.wait.ms (fetches park in the Fetch purgatory and mostly expire or complete on new data), the group's
 *  joins and heartbeats (Rebalance and Heartbeat purgatories of the classic coordinator), optionally a consumer that
 *  joins and leaves now and then (rebalances), and a DeleteRecords now and then (the DeleteRecords purgatory). */
final class Load {
    static final String TOPIC = "kpurgatory-load";
    static final String GROUP = "kpurgatory-load-group";

    static final class Options {
        int seconds = 20;
        int producers = 2;
        int consumers = 2;
        /** records per second per producer; 0: as fast as the producer goes */
        int rate = 500;
        int recordBytes = 200;
        int partitions = 4;
        int fetchMaxWaitMs = 300;
        /** above what a consumer's partitions gain in fetchMaxWaitMs at the default rate: fetches park, and some
         *  complete on data while others expire */
        int fetchMinBytes = 32 << 10;
        /** a DeleteRecords request every so many ms; 0: none */
        int deleteEveryMs = 2000;
        /** a short-lived extra consumer joins the group every so many ms (each join rebalances the group, whose
         *  members' joins then wait in the Rebalance purgatory); 0: none */
        int churnEveryMs = 0;
    }

    private final Options o;
    private final String bootstrap;
    private final AtomicLong sent = new AtomicLong(), acked = new AtomicLong(), failed = new AtomicLong(),
            consumed = new AtomicLong(), deletes = new AtomicLong(), churns = new AtomicLong();
    private final AtomicLong clientFailures = new AtomicLong();
    private volatile String firstFailure;
    private volatile boolean running = true;
    /** Each client's metric values, copied just before it closes. */
    private final List<Map<MetricName, Object>> producerMetrics = new ArrayList<>();
    private final List<Map<MetricName, Object>> consumerMetrics = new ArrayList<>();

    Load(Options options, String bootstrap) {
        this.o = options;
        this.bootstrap = bootstrap;
    }

    /** Runs the load for the configured time and returns its summary as a JSON object. */
    String run() throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(TOPIC, o.partitions, (short) 1)
                    .configs(Map.of("min.insync.replicas", "1")))).all().get(60, TimeUnit.SECONDS);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < o.producers; i++) {
                threads.add(new Thread(this::produce, "load-producer-" + i));
            }
            for (int i = 0; i < o.consumers; i++) {
                threads.add(new Thread(this::consume, "load-consumer-" + i));
            }
            if (o.churnEveryMs > 0) {
                threads.add(new Thread(this::churn, "load-churn"));
            }
            long start = System.nanoTime();
            threads.forEach(Thread::start);
            long end = start + TimeUnit.SECONDS.toNanos(o.seconds);
            while (System.nanoTime() < end) {
                long nap = Math.min(end - System.nanoTime(), TimeUnit.MILLISECONDS.toNanos(
                        o.deleteEveryMs > 0 ? o.deleteEveryMs : 1000));
                TimeUnit.NANOSECONDS.sleep(Math.max(nap, 0));
                if (o.deleteEveryMs > 0 && System.nanoTime() < end) {
                    deleteSome(admin);
                }
            }
            running = false;
            for (Thread t : threads) {
                t.join(60_000);
            }
            double elapsed = (System.nanoTime() - start) / 1e9;
            return summary(elapsed);
        }
    }

    private void produce() {
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        byte[] value = new byte[o.recordBytes];
        try (KafkaProducer<byte[], byte[]> producer =
                     new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            long periodNs = o.rate > 0 ? 1_000_000_000L / o.rate : 0, next = System.nanoTime();
            try {
                while (running) {
                    producer.send(new ProducerRecord<>(TOPIC, value), (meta, error) -> {
                        (error == null ? acked : failed).incrementAndGet();
                    });
                    sent.incrementAndGet();
                    if (periodNs > 0) {
                        next += periodNs;
                        long wait = next - System.nanoTime();
                        if (wait > 0) {
                            TimeUnit.NANOSECONDS.sleep(wait);
                        }
                    }
                }
                producer.flush();
            } catch (RuntimeException e) {
                clientFailed(e);
            } finally {
                snapshot(producer.metrics(), producerMetrics);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** A client that failed (a broken broker can make it: see the agent's faults) stops; the load goes on without
     *  it, and the summary counts it and keeps the first failure. */
    private void clientFailed(RuntimeException e) {
        if (clientFailures.getAndIncrement() == 0) {
            firstFailure = e.toString();
        }
    }

    private void consume() {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer()) {
            try {
                consumer.subscribe(List.of(TOPIC));
                while (running) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    consumed.addAndGet(records.count());
                }
            } catch (RuntimeException e) {
                clientFailed(e);
            } finally {
                snapshot(consumer.metrics(), consumerMetrics);
            }
        }
    }

    /** Every churnEveryMs: a consumer joins the group, takes part until it has an assignment (at most 5 s), leaves. */
    private void churn() {
        try {
            while (running) {
                TimeUnit.MILLISECONDS.sleep(o.churnEveryMs);
                try (KafkaConsumer<byte[], byte[]> consumer = consumer()) {
                    consumer.subscribe(List.of(TOPIC));
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                    while (running && consumer.assignment().isEmpty() && System.nanoTime() < until) {
                        consumed.addAndGet(consumer.poll(Duration.ofMillis(100)).count());
                    }
                    churns.incrementAndGet();
                } catch (RuntimeException e) {
                    clientFailed(e);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private KafkaConsumer<byte[], byte[]> consumer() {
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
        p.setProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.setProperty(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, Integer.toString(o.fetchMinBytes));
        p.setProperty(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, Integer.toString(o.fetchMaxWaitMs));
        p.setProperty(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.setProperty(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** Deletes the records below half of each partition's end, so the request waits for the low watermark. */
    private void deleteSome(Admin admin) {
        try {
            Map<TopicPartition, RecordsToDelete> below = new java.util.HashMap<>();
            var ends = admin.listOffsets(partitions(org.apache.kafka.clients.admin.OffsetSpec.latest()))
                    .all().get(5, TimeUnit.SECONDS);
            ends.forEach((tp, info) -> below.put(tp, RecordsToDelete.beforeOffset(info.offset() / 2)));
            admin.deleteRecords(below).all().get(5, TimeUnit.SECONDS);
            deletes.incrementAndGet();
        } catch (Exception e) {
            failed.incrementAndGet();
        }
    }

    private <T> Map<TopicPartition, T> partitions(T spec) {
        Map<TopicPartition, T> m = new java.util.HashMap<>();
        for (int i = 0; i < o.partitions; i++) {
            m.put(new TopicPartition(TOPIC, i), spec);
        }
        return m;
    }

    private static void snapshot(Map<MetricName, ? extends Metric> live, List<Map<MetricName, Object>> all) {
        Map<MetricName, Object> copy = new java.util.HashMap<>();
        live.forEach((name, metric) -> copy.put(name, metric.metricValue()));
        synchronized (all) {
            all.add(copy);
        }
    }

    /** The sum over clients of a metric (by name and group, client-level only: no topic or node tags). */
    private static double total(List<Map<MetricName, Object>> all, String group, String name) {
        double sum = 0;
        synchronized (all) {
            for (Map<MetricName, Object> metrics : all) {
                for (var entry : metrics.entrySet()) {
                    MetricName n = entry.getKey();
                    if (n.group().equals(group) && n.name().equals(name) && n.tags().keySet().equals(
                            java.util.Set.of("client-id")) && entry.getValue() instanceof Number v) {
                        sum += v.doubleValue();
                    }
                }
            }
        }
        return sum;
    }

    private String summary(double elapsed) {
        long produceRequests = (long) total(producerMetrics, "producer-metrics", "request-total");
        long fetchRequests = (long) total(consumerMetrics, "consumer-fetch-manager-metrics", "fetch-total");
        return String.format(java.util.Locale.ROOT,
                "{\"seconds\":%.3f,\"producers\":%d,\"consumers\":%d,\"rate_per_producer\":%d,\"record_bytes\":%d,"
                        + "\"records_sent\":%d,\"records_acked\":%d,\"records_consumed\":%d,\"errors\":%d,"
                        + "\"delete_records_requests\":%d,\"producer_requests\":%d,\"fetch_requests\":%d,"
                        + "\"acked_per_s\":%.1f,\"consumed_per_s\":%.1f,\"client_failures\":%d,\"first_failure\":%s,"
                        + "\"churn_joins\":%d}",
                elapsed, o.producers, o.consumers, o.rate, o.recordBytes, sent.get(), acked.get(), consumed.get(),
                failed.get(), deletes.get(), produceRequests, fetchRequests, acked.get() / elapsed,
                consumed.get() / elapsed, clientFailures.get(),
                firstFailure == null ? "null" : Record.json(firstFailure), churns.get());
    }
}
