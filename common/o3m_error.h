/* o3m_error.h -- the project's one table of error codes.
 *
 * Every function that can fail returns int: 0 (O3M_OK) on success, or one of
 * the negative codes below. The codes, their names and their default messages
 * live in the single X-macro O3M_ERRNO_MAP, in the manner of libuv's
 * UV_ERRNO_MAP; nothing else in the tree defines error numbers. The mapping to
 * gRPC status codes is done in exactly one place, o3m_rpc_status_from_error()
 * in proto/o3m_rpc.c.
 *
 * Functions that can say more than a code (a parser that knows the line, a
 * validator that knows the field) take an optional o3m_err pointer and fill it
 * with o3m_err_set(); callers that do not care pass NULL. */
#ifndef O3M_ERROR_H
#define O3M_ERROR_H

#include <stddef.h>

#define O3M_ERRNO_MAP(X)                                              \
  X(NOMEM, "out of memory")                                           \
  X(INVAL, "invalid argument")                                        \
  X(DIM, "dimension mismatch")                                        \
  X(NONFINITE, "non-finite number")                                   \
  X(NOTPD, "matrix is not positive definite")                         \
  X(IO, "input/output error")                                         \
  X(PARSE, "malformed input")                                         \
  X(RANDOM, "random source failed")                                   \
  X(NOTFOUND, "not found")                                            \
  X(EXISTS, "already exists")                                         \
  X(FULL, "capacity exhausted")                                       \
  X(EXPIRED, "expired")                                               \
  X(MASK, "mask id mismatch")                                         \
  X(UNAVAILABLE, "peer unavailable")                                  \
  X(DEADLINE, "deadline exceeded")                                    \
  X(PERM, "permission denied")                                        \
  X(RANGE, "value out of range")                                      \
  X(TLS, "TLS setup failed")                                          \
  X(RPC, "remote call failed")                                        \
  X(CORRUPT, "corrupt data")                                          \
  X(STATE, "operation not valid in the current state")

enum {
  O3M_OK = 0,
  O3M__ERR_FIRST = -1000,
#define O3M__ERR_ENUM(name, msg) O3M_E##name,
  O3M_ERRNO_MAP(O3M__ERR_ENUM)
#undef O3M__ERR_ENUM
  O3M__ERR_LAST
};

/* The part between O3M_CDEF_BEGIN and O3M_CDEF_END is read as it is by the
 * Python package (python/o3m, through cffi), like the one in o3m.h, so it
 * holds only plain declarations. This header is installed with o3m.h. */
/* O3M_CDEF_BEGIN */

/* Size of the detailed message buffer in o3m_err. */
#define O3M_ERRMSG_MAX 256

/* A code plus a sentence that names the problem ("line 12: expected 103
 * fields, got 99"). Plain value type; callers allocate it (usually on the
 * stack) and may pass NULL wherever one is accepted. */
typedef struct o3m_err {
  int code;
  char msg[O3M_ERRMSG_MAX];
} o3m_err;

/* The default message for a code ("out of memory"); "unknown error" for a
 * value that is not in the table. Never NULL. */
const char *o3m_strerror(int code);

/* The symbolic name of a code without the prefix ("NOMEM"). Never NULL. */
const char *o3m_errname(int code);

/* Clears e to O3M_OK with an empty message. NULL is accepted. */
void o3m_err_clear(o3m_err *e);

/* The detailed message if one was set, else the code's default message. */
const char *o3m_err_message(const o3m_err *e);

/* O3M_CDEF_END */

/* Records code and a printf-style message in e (if e is not NULL) and returns
 * code, so that a failing path can read `return o3m_err_set(e, ...)`. */
int o3m_err_set(o3m_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* o3m_err_set for a problem found in a file: the message is prefixed with
 * "name:line: " ("name: " when line is 0 or less), the form every O3M
 * parser reports in. */
int o3m_err_set_at(o3m_err *e, int code, const char *name, long line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
