/* o3m_log.h -- one-line log records on stderr for the daemons.
 *
 * Format: `2026-11-21T10:15:02.123Z o3m-passive[bank] INFO message`, or
 * with O3M_LOG_JSON one JSON object per line,
 * `{"time":"2026-11-21T10:15:02.123Z","level":"info","prog":"o3m-passive[bank]","msg":"message"}`
 * (the message escaped as JSON strings require), for log collectors. The
 * program tag is set once at start with o3m_log_init(), the level and the
 * format with o3m_log_configure() (the daemons' --log-level and
 * --log-format). Records are written with a single write(2) each, so lines
 * from several threads never interleave; a record longer than
 * O3M_LOG_LINE_MAX is cut (a JSON record stays a whole object).
 * Rule for every caller: never log a raw feature value, a masked vector, a
 * mask block or a reward; log ids, counts, codes and durations. */
#ifndef O3M_LOG_H
#define O3M_LOG_H

typedef enum { O3M_LOG_DEBUG = 0, O3M_LOG_INFO = 1, O3M_LOG_WARN = 2, O3M_LOG_ERROR = 3 } o3m_log_level;

#define O3M_LOG_LINE_MAX 2048

typedef enum { O3M_LOG_TEXT = 0, O3M_LOG_JSON = 1 } o3m_log_format;

/* Sets the program tag ("o3m-passive[bank]") and the lowest level written.
 * Not thread-safe: call it in main() before starting threads. */
void o3m_log_init(const char *tag, o3m_log_level min_level);

/* Sets the lowest level written and the line format. Not thread-safe, like
 * o3m_log_init. */
void o3m_log_configure(o3m_log_level min_level, o3m_log_format format);

/* Parses "debug", "info", "warn" or "error" into *out: 0, or -1 (nothing
 * stored). */
int o3m_log_level_parse(const char *s, o3m_log_level *out);

/* Parses "text" or "json" into *out: 0, or -1 (nothing stored). */
int o3m_log_format_parse(const char *s, o3m_log_format *out);

void o3m_log(o3m_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define o3m_log_info(...) o3m_log(O3M_LOG_INFO, __VA_ARGS__)
#define o3m_log_warn(...) o3m_log(O3M_LOG_WARN, __VA_ARGS__)
#define o3m_log_error(...) o3m_log(O3M_LOG_ERROR, __VA_ARGS__)
#define o3m_log_debug(...) o3m_log(O3M_LOG_DEBUG, __VA_ARGS__)

#endif
