import io.delta.storage.LogStore;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * One log entry written through a log store as Delta calls it, in a JVM of its own (tests/test_object_store.py).
 * Prints what the call said, "committed", "refused" (FileAlreadyExistsException) or "failed CLASS", then what the
 * entry holds: "holds this entry" or "holds another".
 *
 * <p>Arguments: STORE_CLASS PATH LINE... [-- HADOOP_KEY=VALUE...]
 */
public class PutLogEntry {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    int end = List.of(args).indexOf("--");
    List<String> lines = List.of(args).subList(2, end < 0 ? args.length : end);
    for (int i = end + 1; i > 0 && i < args.length; i++) {
      String[] setting = args[i].split("=", 2);
      conf.set(setting[0], setting[1]);
    }
    LogStore store = (LogStore) Class.forName(args[0]).getConstructor(Configuration.class).newInstance(conf);
    Path path = new Path(args[1]);
    try {
      store.write(path, lines.iterator(), false, conf);
      System.out.println("committed");
    } catch (FileAlreadyExistsException refused) {
      System.out.println("refused");
    } catch (Exception failed) {
      System.out.println("failed " + failed.getClass().getName());
    }
    try (InputStream in = path.getFileSystem(conf).open(path)) {
      String held = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      System.out.println(held.equals(String.join("\n", lines) + "\n") ? "holds this entry" : "holds another");
    }
  }
}
