package exactbackfills;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.Base64;

/**
 * HTTP basic authentication for the web UIs of a standalone Spark master and worker (spark.ui.filters): Spark has no
 * authentication of its own for them, and a worker's UI serves its executors' logs. The expected "user:password" is
 * read once from the file named by the filter's parameter `credentialsFile` (readable by the operator alone), so the
 * password is on no command line.
 */
public class PasswordFilter implements Filter {
  private byte[] expected;

  @Override
  public void init(FilterConfig config) throws ServletException {
    String file = config.getInitParameter("credentialsFile");
    if (file == null) {
      throw new ServletException("PasswordFilter needs its credentialsFile parameter");
    }
    try {
      expected = Files.readString(Paths.get(file)).strip().getBytes(StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new ServletException("PasswordFilter cannot read " + file, e);
    }
  }

  @Override
  public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
      throws IOException, ServletException {
    String header = ((HttpServletRequest) request).getHeader("Authorization");
    byte[] given = new byte[0];
    if (header != null && header.startsWith("Basic ")) {
      try {
        given = Base64.getDecoder().decode(header.substring(6).trim());
      } catch (IllegalArgumentException e) {
        given = new byte[0];
      }
    }
    if (MessageDigest.isEqual(given, expected)) {
      chain.doFilter(request, response);
      return;
    }
    HttpServletResponse answer = (HttpServletResponse) response;
    answer.setHeader("WWW-Authenticate", "Basic realm=\"exact-backfills\", charset=\"UTF-8\"");
    answer.sendError(HttpServletResponse.SC_UNAUTHORIZED);
  }

  @Override
  public void destroy() {}
}
