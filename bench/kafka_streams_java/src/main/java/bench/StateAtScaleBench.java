package bench;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.WriteBufferManager;

/**
 * The topology of bench/state_at_scale.py in Kafka Streams: per key an 8-byte count and the
 * last value, aggregated into the persistent key-value store "state" (changelogged), no output
 * topic. At-least-once, commits every 5 s, 10 MiB record cache, like the Python instance.
 * RocksDB memory is bounded as the Python engine bounds it: one LRU block cache of the budget
 * shared by all stores, their memtables charged to it by a write buffer manager of a quarter
 * of the budget (index and filter blocks in the cache too).
 *
 * <p>Usage: {@code StateAtScaleBench process|restore <bootstrap> <application id> <input>
 * <state dir> <rocksdb memory bytes>}. {@code process}: runs until SIGTERM, then prints
 * {"first_records_polled_ms": ...}. {@code restore}: runs until RUNNING (on a wiped state
 * directory its stores are restored from the changelog first), then prints the seconds to
 * RUNNING, the records restored and the restore window (first store's restore start to the
 * last one's end, from a StateRestoreListener), and closes.
 */
public final class StateAtScaleBench {
    static final String STORE = "state";
    static final String MEMORY_CONFIG = "bench.rocksdb.memory.bytes";

    /** One block cache and write buffer manager for every store of the JVM. */
    public static final class BoundedMemory implements RocksDBConfigSetter {
        private static Cache cache;
        private static WriteBufferManager writeBuffers;

        private static synchronized void create(long budget) {
            if (cache == null) {
                cache = new LRUCache(budget, -1, false, 0.1);
                writeBuffers = new WriteBufferManager(budget / 4, cache);
            }
        }

        @Override
        public void setConfig(String storeName, Options options, Map<String, Object> configs) {
            create(Long.parseLong(String.valueOf(configs.get(MEMORY_CONFIG))));
            BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
            table.setBlockCache(cache);
            table.setCacheIndexAndFilterBlocks(true);
            table.setCacheIndexAndFilterBlocksWithHighPriority(true);
            table.setPinTopLevelIndexAndFilter(true);
            options.setWriteBufferManager(writeBuffers);
            options.setTableFormatConfig(table);
        }

        @Override
        public void close(String storeName, Options options) {
            // shared by every store: lives as long as the JVM
        }
    }

    /** Records restored, and the window from the first restore start to the last restore end. */
    static final class RestoreWindow implements StateRestoreListener {
        final AtomicLong restored = new AtomicLong();
        volatile long firstStartNanos = -1;
        volatile long lastEndNanos = -1;

        @Override
        public synchronized void onRestoreStart(TopicPartition partition, String store, long start, long end) {
            if (firstStartNanos < 0) {
                firstStartNanos = System.nanoTime();
            }
        }

        @Override
        public void onBatchRestored(TopicPartition partition, String store, long batchEnd, long numRestored) {
            restored.addAndGet(numRestored);
        }

        @Override
        public void onRestoreEnd(TopicPartition partition, String store, long totalRestored) {
            lastEndNanos = System.nanoTime();
        }

        String seconds() {
            if (firstStartNanos < 0 || lastEndNanos < 0) {
                return "null";
            }
            return String.format("%.2f", (lastEndNanos - firstStartNanos) / 1e9);
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 6 || !(args[0].equals("process") || args[0].equals("restore"))) {
            System.err.println("usage: StateAtScaleBench process|restore <bootstrap> <application id> <input>"
                + " <state dir> <rocksdb memory bytes>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 5_000L);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 10L * 1024 * 1024);
        props.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedMemory.class);
        props.put(MEMORY_CONFIG, args[5]);
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG),
            SessionizeBench.Timing.class.getName());

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[3], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .groupByKey()
            .aggregate(() -> new byte[0], (key, value, aggregate) -> {
                long count = aggregate.length >= 8 ? java.nio.ByteBuffer.wrap(aggregate).getLong() + 1 : 1;
                return java.nio.ByteBuffer.allocate(8 + value.length).putLong(count).put(value).array();
            }, Materialized.<byte[], byte[], KeyValueStore<Bytes, byte[]>>as(STORE)
                .withKeySerde(Serdes.ByteArray()).withValueSerde(Serdes.ByteArray()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        RestoreWindow window = new RestoreWindow();
        streams.setGlobalStateRestoreListener(window);
        CountDownLatch running = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING || now == KafkaStreams.State.ERROR) {
                running.countDown();
            }
        });
        long started = System.nanoTime();
        if (args[0].equals("restore")) {
            streams.start();
            if (!running.await(3600, TimeUnit.SECONDS) || streams.state() != KafkaStreams.State.RUNNING) {
                System.err.println("not RUNNING: " + streams.state());
                streams.close(Duration.ofSeconds(60));
                System.exit(1);
            }
            double toRunning = (System.nanoTime() - started) / 1e9;
            streams.close(Duration.ofSeconds(120));
            System.out.println(String.format("{\"restore_s\": %.2f, \"restored_records\": %d, \"restoring_s\": %s}",
                toRunning, window.restored.get(), window.seconds()));
            return;
        }
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            long first = SessionizeBench.firstRecordsPolledMs;
            // the member stays in the group until its session times out (the bench waits for
            // that before the restore: CloseOptions.leaveGroup did not shorten it, dynamic member)
            streams.close(Duration.ofSeconds(120));
            System.out.println("{\"first_records_polled_ms\": " + first + "}");
            System.out.flush();
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }
}
