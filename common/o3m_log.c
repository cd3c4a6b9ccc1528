/* o3m_log.c -- see o3m_log.h. The tag and level are process-wide settings
 * made once in main(); they are the only file-scope state in the project's
 * libraries, because a log line has no context object to hang them on. */
#include "o3m_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char log_tag[96] = "o3m";
static o3m_log_level log_min = O3M_LOG_INFO;

void o3m_log_init(const char *tag, o3m_log_level min_level) {
  snprintf(log_tag, sizeof log_tag, "%s", tag ? tag : "o3m");
  log_min = min_level;
}

void o3m_log(o3m_log_level level, const char *fmt, ...) {
  static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  if (level < log_min || level > O3M_LOG_ERROR) return;
  char line[1024];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, log_tag, names[level]);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && n < (int)sizeof line) n += vsnprintf(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof line - 1) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}
