/* o3m_log.h -- one-line log records on stderr for the daemons.
 *
 * Format: `2026-11-21T10:15:02.123Z o3m-passive[bank] INFO message`. The
 * program tag is set once at start with o3m_log_init(). Records are written
 * with a single write(2) each, so lines from several threads never interleave.
 * Rule for every caller: never log a raw feature value, a masked vector, a
 * mask block or a reward; log ids, counts, codes and durations. */
#ifndef O3M_LOG_H
#define O3M_LOG_H

typedef enum { O3M_LOG_DEBUG = 0, O3M_LOG_INFO = 1, O3M_LOG_WARN = 2, O3M_LOG_ERROR = 3 } o3m_log_level;

/* Sets the program tag ("o3m-passive[bank]") and the lowest level written.
 * Not thread-safe: call it in main() before starting threads. */
void o3m_log_init(const char *tag, o3m_log_level min_level);

void o3m_log(o3m_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define o3m_log_info(...) o3m_log(O3M_LOG_INFO, __VA_ARGS__)
#define o3m_log_warn(...) o3m_log(O3M_LOG_WARN, __VA_ARGS__)
#define o3m_log_error(...) o3m_log(O3M_LOG_ERROR, __VA_ARGS__)
#define o3m_log_debug(...) o3m_log(O3M_LOG_DEBUG, __VA_ARGS__)

#endif
