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
 * Same settings as the Python run: the guarantee, commit interval and number of stream
 * threads given (bench/vs_kafka_streams.py passes its own), 10 MiB record cache.
 *
 * <p>Usage: {@code SessionizeBench <bootstrap> <application id> <input> <output> <state dir>
 * <guarantee> <commit interval ms> <stream threads>}.
 * Runs until SIGTERM, then prints one JSON line: the wall-clock ms of the first poll that
 * returned records and of the last offset commit before the signal (a consumer interceptor
 * sees both; the commit only at-least-once, exactly-once commits the offsets in the
 * producer's transaction, so bench/vs_kafka_streams.py notes the end of a run itself).
 *
 * <p>With {@code -Dbench.groupInstanceId=ID} the instance is a static member of its group
 * (Kafka Streams' way to restart an instance without waiting for its session to time out),
 * as bench/latency.py's restore asks.
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
        if (args.length != 8 && args.length != 9) {
            System.err.println("usage: SessionizeBench <bootstrap> <application id> <input> <output> <state dir>"
                + " <guarantee> <commit interval ms> <stream threads> [<record cache bytes, default 10 MiB>]");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[7]));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[6]));
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG,
            args.length == 9 ? Long.parseLong(args[8]) : 10L * 1024 * 1024);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG), Timing.class.getName());
        String groupInstanceId = System.getProperty("bench.groupInstanceId");
        if (groupInstanceId != null) {
            props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), groupInstanceId);
        }

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
