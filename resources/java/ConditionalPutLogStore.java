package exactbackfills;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Iterator;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.AWSServiceIOException;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Delta's S3 log store, made safe when a second driver writes to the same table. Delta's own (S3SingleDriverLogStore)
 * checks that a version's log entry does not exist and then writes it, under a lock that only one JVM holds: two
 * drivers committing the same version both succeed and the later entry silently replaces the earlier, losing a
 * commit. Here the entry is created with a conditional PUT (If-None-Match: *, through Hadoop's createFile option):
 * the object store lets one of them create it, and the other gets FileAlreadyExistsException, as on a file system with
 * an atomic rename, so Delta checks the winner's changes for a conflict and retries on the next version. Checkpoints
 * and other writes that may replace a file are written as Delta writes them.
 *
 * <p>A 409 (S3's ConditionalRequestConflict: another conditional write of the key was under way) says nothing of
 * whether the entry was made: the PUT is sent again, a few times, and its answer decides. Any other failure, or 409s
 * to the last, leave the outcome unknown: the caller reads the log to learn it (resources/delta_io.py).
 */
public class ConditionalPutLogStore extends S3SingleDriverLogStore {
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";
  static final int CONFLICT = 409;
  static final int ATTEMPTS = 5; // of a PUT answered 409
  static final long FIRST_PAUSE_MS = 100; // doubled after each 409, plus up to as much again at random

  public ConditionalPutLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, overwrite, hadoopConf);
      return;
    }
    ByteArrayOutputStream entry = new ByteArrayOutputStream();
    while (actions.hasNext()) {
      entry.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
    FileSystem fs = path.getFileSystem(hadoopConf);
    for (int attempt = 1; ; attempt++) {
      try {
        put(fs, path, entry.toByteArray());
        return;
      } catch (RemoteFileChangedException | org.apache.hadoop.fs.FileAlreadyExistsException e) {
        // A 412 from the store means the version exists. It is this write's own when this PUT follows one whose
        // answer was lost (the entry is the same, byte for byte: a commit names its transaction and time); otherwise
        // another writer created it first.
        if (holds(fs, path, entry.toByteArray())) {
          return;
        }
        throw new java.nio.file.FileAlreadyExistsException(path.toString());
      } catch (IOException e) {
        if (!conflict(e) || attempt == ATTEMPTS) {
          throw e;
        }
        pause(attempt);
      }
    }
  }

  /** The entry created with a conditional PUT, which happens as the stream closes. */
  static void put(FileSystem fs, Path path, byte[] entry) throws IOException {
    try (FSDataOutputStream out =
        (FSDataOutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL_CREATE, true).build()) {
      out.write(entry);
    }
  }

  /** Whether the store answered 409, which S3A reports as a bad request (AWSBadRequestException), maybe wrapped. */
  static boolean conflict(Throwable e) {
    for (Throwable cause = e; cause != null; cause = cause.getCause()) {
      if (cause instanceof AWSServiceIOException && ((AWSServiceIOException) cause).statusCode() == CONFLICT) {
        return true;
      }
    }
    return false;
  }

  static void pause(int attempt) throws InterruptedIOException {
    long pause = FIRST_PAUSE_MS << (attempt - 1);
    try {
      Thread.sleep(pause + ThreadLocalRandom.current().nextLong(pause + 1));
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted between conditional PUTs answered 409");
    }
  }

  static boolean holds(FileSystem fs, Path path, byte[] expected) throws IOException {
    try (InputStream in = fs.open(path)) {
      return Arrays.equals(in.readAllBytes(), expected);
    }
  }
}
