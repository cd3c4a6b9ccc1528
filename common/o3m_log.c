/* o3m_log.c -- see o3m_log.h. The tag, level and format are process-wide
 * settings made once in main(); they are the only file-scope state in the
 * project's libraries, because a log line has no context object to hang
 * them on. */
#include "o3m_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char log_tag[96] = "o3m";
static o3m_log_level log_min = O3M_LOG_INFO;
static o3m_log_format log_format = O3M_LOG_TEXT;

static const char *level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char *level_json[] = {"debug", "info", "warn", "error"};

void o3m_log_init(const char *tag, o3m_log_level min_level) {
  snprintf(log_tag, sizeof log_tag, "%s", tag ? tag : "o3m");
  log_min = min_level;
}

void o3m_log_configure(o3m_log_level min_level, o3m_log_format format) {
  log_min = min_level;
  log_format = format;
}

int o3m_log_level_parse(const char *s, o3m_log_level *out) {
  for (int i = O3M_LOG_DEBUG; i <= O3M_LOG_ERROR; i++)
    if (s && strcasecmp(s, level_json[i]) == 0) {
      *out = (o3m_log_level)i;
      return 0;
    }
  return -1;
}

int o3m_log_format_parse(const char *s, o3m_log_format *out) {
  if (s && strcmp(s, "text") == 0) *out = O3M_LOG_TEXT;
  else if (s && strcmp(s, "json") == 0) *out = O3M_LOG_JSON;
  else return -1;
  return 0;
}

/* Appends s to out[*n..cap) as the inside of a JSON string; stops before an
 * escape that would not fit, so the result is always valid JSON. */
static void json_escape(char *out, size_t cap, int *n, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    const char *piece = esc;
    size_t len;
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      len = 2;
    } else if (*p == '\n') {
      piece = "\\n";
      len = 2;
    } else if (*p < 0x20 || *p == 0x7f) {
      len = (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p);
    } else {
      esc[0] = (char)*p;
      len = 1;
    }
    if ((size_t)*n + len >= cap) return;
    memcpy(out + *n, piece, len);
    *n += (int)len;
  }
}

void o3m_log(o3m_log_level level, const char *fmt, ...) {
  if (level < log_min || level > O3M_LOG_ERROR) return;
  char msg[O3M_LOG_LINE_MAX / 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char when[80];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
  char line[O3M_LOG_LINE_MAX];
  int n;
  if (log_format == O3M_LOG_JSON) {
    /* The tail '"}' and the newline always fit: the escapes stop 4 short. */
    n = snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"prog\":\"", when,
                 level_json[level]);
    json_escape(line, sizeof line - 4, &n, log_tag);
    const char *mid = "\",\"msg\":\"";
    if ((size_t)n + strlen(mid) < sizeof line - 4) {
      memcpy(line + n, mid, strlen(mid));
      n += (int)strlen(mid);
      json_escape(line, sizeof line - 4, &n, msg);
    }
    line[n++] = '"';
    line[n++] = '}';
  } else {
    n = snprintf(line, sizeof line, "%s %s %s %s", when, log_tag, level_names[level], msg);
    if (n >= (int)sizeof line - 1) n = (int)sizeof line - 2;
  }
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}
