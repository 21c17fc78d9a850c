package exactbackfills;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksummed, as the stock one) that asks the OS through java.nio instead of child
 * processes. Without Hadoop's native library, which pyspark does not ship, the stock one runs `chmod` for every file
 * and folder it creates, and `readlink` for every file it renames (each Delta commit): about 10 ms each, most of the
 * time of writing a table's 2,406 day folders, and a few hundred processes per small run.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  private static final PosixFilePermission[] BITS = PosixFilePermission.values(); // owner r, w, x ... others x

  public NioLocalFileSystem() {
    super(new Raw());
  }

  /**
   * The same for Hadoop's FileContext API (`fs.AbstractFileSystem.file.impl`), through which Delta writes and renames
   * its commit files, as the stock LocalFs does for RawLocalFileSystem.
   */
  public static class Context extends ChecksumFs {
    public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new DelegateToFileSystem(FsConstants.LOCAL_FS_URI, new Raw(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false) {
        @Override
        public int getUriDefaultPort() {
          return -1;
        }

        @Override
        public boolean isValidName(String src) {
          return true; // any local path, as the stock RawLocalFs
        }
      });
    }
  }

  static class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      short mode = permission.toShort();
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (1 << (BITS.length - 1 - i))) != 0) {
          set.add(BITS[i]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }

    @Override
    public FileStatus getFileLinkStatus(Path p) throws IOException {
      if (Files.isSymbolicLink(pathToFile(p).toPath())) {
        return super.getFileLinkStatus(p); // rare: Hadoop's own handling of links
      }
      return getFileStatus(p); // what the stock one returns for a file that is not a link
    }
  }
}
