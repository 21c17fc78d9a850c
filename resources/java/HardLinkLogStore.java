package exactbackfills;

import io.delta.storage.HDFSLogStore;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.EnumSet;
import java.util.Iterator;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Delta's log store for a lake on a local file system, safe when several JVMs commit to the same table (an
 * in-process command or a notebook beside the warm engine). Delta's own (HDFSLogStore) checks that a version's entry
 * does not exist, then renames a temporary file to it: a local rename replaces, so when another process creates the
 * entry in between, one of the two commits is silently lost. Delta's lock covers one JVM only. Here the entry is written
 * whole to a temporary file in the log's folder, synced, then given its name by a hard link, which the OS creates only
 * if the name is free, atomically: of two commits of a version exactly one gets it, the other
 * FileAlreadyExistsException, on which Delta checks the winner's changes for a conflict and retries on the next
 * version. Writes that may replace a file (overwrite) are Delta's own.
 */
public class HardLinkLogStore extends HDFSLogStore {
  private static final PosixFilePermission[] BITS = PosixFilePermission.values(); // owner r, w, x ... others x

  public HardLinkLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, overwrite, hadoopConf);
      return;
    }
    java.nio.file.Path entry = Paths.get(path.toUri().getPath());
    java.nio.file.Path folder = entry.getParent();
    Files.createDirectories(folder);
    Set<PosixFilePermission> mode = mode(hadoopConf);
    java.nio.file.Path partial =
        Files.createTempFile(folder, "." + entry.getFileName() + ".", ".tmp", PosixFilePermissions.asFileAttribute(mode));
    try {
      Files.setPosixFilePermissions(partial, mode); // as Hadoop sets them: whatever the process's umask
      try (FileChannel out = FileChannel.open(partial, StandardOpenOption.WRITE)) {
        while (actions.hasNext()) {
          ByteBuffer line = ByteBuffer.wrap((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
          while (line.hasRemaining()) {
            out.write(line);
          }
        }
        out.force(true); // its content on disk before its name: a crash never leaves a named, partial entry
      }
      try {
        Files.createLink(entry, partial);
      } catch (FileAlreadyExistsException taken) {
        throw new FileAlreadyExistsException(path.toString());
      }
    } finally {
      Files.deleteIfExists(partial);
    }
    try (FileChannel dir = FileChannel.open(folder, StandardOpenOption.READ)) {
      dir.force(true); // the new name on disk before the commit is reported made
    }
  }

  /** The entry's permissions, as Hadoop gives a file it creates: its default less the configured umask. */
  static Set<PosixFilePermission> mode(Configuration hadoopConf) {
    short bits = FsPermission.getFileDefault().applyUMask(FsPermission.getUMask(hadoopConf)).toShort();
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((bits & (1 << (BITS.length - 1 - i))) != 0) {
        set.add(BITS[i]);
      }
    }
    return set;
  }
}
