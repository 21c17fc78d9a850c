import io.delta.storage.LogStore;
import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * One of two writers committing to the same Delta logs at once, each in a JVM of its own (tests/test_log_stores.py
 * starts two), through a log store as Delta calls it. Each round, as two drivers that read the same snapshot: both
 * list the log, meet at a barrier, and commit the version after the newest they listed; on FileAlreadyExistsException
 * the next one, as Delta retries. A round starts once both have ended the one before. Prints "committed LOG ROUND VERSION" or "refused LOG ROUND VERSION" per attempt.
 *
 * <p>A log store that renames a file into place (Delta's HDFSLogStore, through Hadoop's FileContext) checks that the
 * entry does not exist first: two writers pass that check together only when neither has renamed yet. The FileContext
 * given here (`fs.AbstractFileSystem.file.impl=LogStoreRace$BarrierContext`) has both meet once more just before the
 * first attempt's rename of a log entry, after every check, and then writer 1 rename only once writer 0's write has
 * returned: the interleaving a descheduled thread or a GC pause gives, made certain. A log store that renames nothing
 * never meets there.
 *
 * <p>The barrier is a file both map into memory: a counter each (WRITER 0 or 1) of the barriers it reached, and the
 * number of rounds whose first attempt writer 0 has ended.
 *
 * <p>Arguments: WRITER ROUNDS BARRIER_FILE STORE_CLASS=LOG_DIR... [-- HADOOP_KEY=VALUE...]
 */
public class LogStoreRace {
  private static final Pattern ENTRY = Pattern.compile("\\d{20}\\.json");
  private static final VarHandle COUNTER = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.nativeOrder());
  private static final long TIMEOUT_NS = 60_000_000_000L;
  private static MappedByteBuffer barrier;
  private static int writer;
  private static long met;
  private static boolean firstAttempt; // of this round's commit: its rename of the entry meets the other's
  private static long rounds; // begun, over every log
  private static final int FIRST_WRITER_DONE = 16; // the barrier file's offset of writer 0's rounds ended

  public static void main(String[] args) throws Exception {
    writer = Integer.parseInt(args[0]);
    int rounds = Integer.parseInt(args[1]);
    try (FileChannel file = FileChannel.open(Paths.get(args[2]), StandardOpenOption.READ, StandardOpenOption.WRITE)) {
      barrier = file.map(FileChannel.MapMode.READ_WRITE, 0, 24);
    }
    Configuration conf = new Configuration();
    int end = List.of(args).indexOf("--");
    for (int i = end + 1; end >= 0 && i < args.length; i++) {
      String[] setting = args[i].split("=", 2);
      conf.set(setting[0], setting[1]);
    }
    for (int i = 3; i < (end < 0 ? args.length : end); i++) {
      String[] store = args[i].split("=", 2);
      LogStore logStore = (LogStore) Class.forName(store[0]).getConstructor(Configuration.class).newInstance(conf);
      for (int round = 0; round < rounds; round++) {
        commit(logStore, conf, store[1], round);
      }
    }
  }

  /** Wait until the other writer has reached as many barriers as this one. */
  static void meet() {
    met++;
    COUNTER.setVolatile(barrier, 8 * writer, met);
    await(8 * (1 - writer), met);
  }

  static void await(int offset, long count) {
    long deadline = System.nanoTime() + TIMEOUT_NS;
    while ((long) COUNTER.getVolatile(barrier, offset) < count) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the other writer never reached " + count + " at offset " + offset);
      }
      Thread.onSpinWait();
    }
  }

  static void commit(LogStore store, Configuration conf, String log, int round) throws Exception {
    meet(); // both done with the round before
    long version = newest(log) + 1;
    meet(); // both listed the same versions
    rounds++;
    firstAttempt = true;
    String entry = "{\"commitInfo\":{\"userMetadata\":\"writer-" + writer + ":" + round + "\"}}";
    while (true) {
      Path path = new Path("file:" + log + "/" + String.format("%020d.json", version));
      try {
        store.write(path, List.of(entry).iterator(), false, conf);
        System.out.println("committed " + log + " " + round + " " + version);
        return;
      } catch (FileAlreadyExistsException taken) {
        System.out.println("refused " + log + " " + round + " " + version);
        version++;
      } finally {
        firstAttempt = false; // a retry meets nobody
        if (writer == 0) {
          COUNTER.setVolatile(barrier, FIRST_WRITER_DONE, rounds);
        }
      }
    }
  }

  static long newest(String log) throws IOException {
    Files.createDirectories(Paths.get(log));
    try (Stream<java.nio.file.Path> entries = Files.list(Paths.get(log))) {
      return entries
          .map(p -> p.getFileName().toString())
          .filter(n -> ENTRY.matcher(n).matches())
          .mapToLong(n -> Long.parseLong(n.substring(0, 20)))
          .max()
          .orElse(-1);
    }
  }

  /** Hadoop's local FileContext (checksummed, as the stock LocalFs), whose rename of a log entry meets first. */
  public static class BarrierContext extends ChecksumFs {
    public BarrierContext(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new DelegateToFileSystem(FsConstants.LOCAL_FS_URI, new BarrierRaw(), conf, "file", false) {
        @Override
        public int getUriDefaultPort() {
          return -1;
        }
      });
    }
  }

  static class BarrierRaw extends RawLocalFileSystem {
    @Override
    public boolean rename(Path src, Path dst) throws IOException {
      if (firstAttempt && ENTRY.matcher(dst.getName()).matches()) {
        meet(); // both past every check that the entry does not exist
        if (writer == 1) {
          await(FIRST_WRITER_DONE, rounds); // writer 0's entry is made: this rename replaces it
        }
      }
      return super.rename(src, dst);
    }
  }
}
