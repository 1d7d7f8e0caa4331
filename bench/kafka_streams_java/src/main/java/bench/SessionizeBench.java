package bench;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;

/**
 * The topology of bench/sessionize.py in Kafka Streams: session windows (gap 5 min, no
 * grace) counting clicks per user, each new count sent as (user, count) to the output.
 * Same settings as the Python run: one stream thread, commit every 5 s, 10 MiB record
 * cache, at-least-once.
 *
 * <p>Usage: {@code SessionizeBench <bootstrap> <application id> <input> <output> <state dir>}.
 * Runs until SIGTERM, then prints one JSON line: the wall-clock ms of the first poll that
 * returned records and of the last offset commit before the signal (a consumer interceptor
 * sees both, so the window is measured as the Python engine measures its own).
 */
public final class SessionizeBench {
    static final long GAP_MS = 300_000L;
    static volatile long firstRecordsPolledMs = -1;
    static volatile long lastCommittedMs = -1;

    /** Notes when the main consumer first returns records and when it commits. */
    public static final class Timing implements ConsumerInterceptor<byte[], byte[]> {
        @Override
        public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
            if (firstRecordsPolledMs < 0 && !records.isEmpty()) {
                firstRecordsPolledMs = System.currentTimeMillis();
            }
            return records;
        }

        @Override
        public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
            if (!offsets.isEmpty()) {
                lastCommittedMs = System.currentTimeMillis();
            }
        }

        @Override
        public void close() {
        }

        @Override
        public void configure(Map<String, ?> configs) {
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 5) {
            System.err.println("usage: SessionizeBench <bootstrap> <application id> <input> <output> <state dir>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 5_000);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 10L * 1024 * 1024);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG), Timing.class.getName());

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .groupByKey()
            .windowedBy(SessionWindows.ofInactivityGapWithNoGrace(Duration.ofMillis(GAP_MS)))
            .count(Materialized.as("sessions"))
            .toStream()
            .map((windowed, count) -> KeyValue.pair(windowed.key(), count))
            .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            long first = firstRecordsPolledMs;
            long last = lastCommittedMs;
            streams.close(Duration.ofSeconds(60));
            System.out.println("{\"first_records_polled_ms\": " + first + ", \"last_committed_ms\": " + last + "}");
            System.out.flush();
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }
}
