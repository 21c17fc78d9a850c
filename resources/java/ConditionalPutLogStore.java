package exactbackfills;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Delta's S3 log store, made safe when a second driver writes to the same table. Delta's own (S3SingleDriverLogStore)
 * checks that a version's log entry does not exist and then writes it, under a lock that only one JVM holds: two
 * drivers committing the same version both succeed and the later entry silently replaces the earlier, losing a
 * commit. Here the entry is created with a conditional PUT (If-None-Match: *, through Hadoop's createFile option):
 * the object store lets one of them create it, and the other gets FileAlreadyExistsException, as on a file system with
 * an atomic rename, so Delta checks the winner's changes for a conflict and retries on the next version. Checkpoints
 * and other writes that may replace a file are written as Delta writes them.
 */
public class ConditionalPutLogStore extends S3SingleDriverLogStore {
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

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
    try (FSDataOutputStream out =
        (FSDataOutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL_CREATE, true).build()) {
      out.write(entry.toByteArray());
    } catch (RemoteFileChangedException | org.apache.hadoop.fs.FileAlreadyExistsException e) {
      // The PUT happens as the stream closes: a 412 from the store means the version exists. It is this write's own
      // when a retried PUT follows one whose answer was lost (the entry is the same, byte for byte: a commit names
      // its transaction and time); otherwise another writer created it first.
      if (holds(fs, path, entry.toByteArray())) {
        return;
      }
      throw new java.nio.file.FileAlreadyExistsException(path.toString());
    }
  }

  static boolean holds(FileSystem fs, Path path, byte[] expected) throws IOException {
    try (InputStream in = fs.open(path)) {
      return Arrays.equals(in.readAllBytes(), expected);
    }
  }
}
