/* o3m_error.c -- messages and names for the codes of O3M_ERRNO_MAP. */
#include "o3m_error.h"

#include <stdarg.h>
#include <stdio.h>

const char *o3m_strerror(int code) {
  switch (code) {
  case O3M_OK: return "success";
#define O3M__ERR_MSG(name, msg) case O3M_E##name: return msg;
  O3M_ERRNO_MAP(O3M__ERR_MSG)
#undef O3M__ERR_MSG
  default: return "unknown error";
  }
}

const char *o3m_errname(int code) {
  switch (code) {
  case O3M_OK: return "OK";
#define O3M__ERR_NAME(name, msg) case O3M_E##name: return #name;
  O3M_ERRNO_MAP(O3M__ERR_NAME)
#undef O3M__ERR_NAME
  default: return "UNKNOWN";
  }
}

int o3m_err_set(o3m_err *e, int code, const char *fmt, ...) {
  if (e) {
    va_list ap;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int o3m_err_set_at(o3m_err *e, int code, const char *name, long line, const char *fmt, ...) {
  char buf[O3M_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (line > 0) return o3m_err_set(e, code, "%s:%ld: %s", name, line, buf);
  return o3m_err_set(e, code, "%s: %s", name, buf);
}

void o3m_err_clear(o3m_err *e) {
  if (e) {
    e->code = O3M_OK;
    e->msg[0] = '\0';
  }
}

const char *o3m_err_message(const o3m_err *e) {
  if (!e) return "no error information";
  if (e->msg[0]) return e->msg;
  return o3m_strerror(e->code);
}
