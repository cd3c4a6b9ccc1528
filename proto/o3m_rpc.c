/* o3m_rpc.c -- unary RPC over the gRPC C core (see o3m_rpc.h): the mapping
 * between O3M's error codes and gRPC status codes, and gRPC's own log lines
 * routed through o3m_log. The rest of the layer is in the files that
 * o3m_rpc_impl.h lists, one per concern. */
#include "o3m_rpc_impl.h"

/* ================================================================ status */

grpc_status_code o3m_rpc_status_from_error(int code) {
  switch (code) {
  case O3M_OK: return GRPC_STATUS_OK;
  case O3M_ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case O3M_EINVAL: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_EDIM: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ENONFINITE: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ENOTPD: return GRPC_STATUS_INTERNAL;
  case O3M_EIO: return GRPC_STATUS_INTERNAL;
  case O3M_EPARSE: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ERANDOM: return GRPC_STATUS_INTERNAL;
  case O3M_ENOTFOUND: return GRPC_STATUS_NOT_FOUND;
  case O3M_EEXISTS: return GRPC_STATUS_ALREADY_EXISTS;
  case O3M_EFULL: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  /* An expired round, a mask from another draw and a call in the wrong
   * state all say: the request is fine, the server's state does not allow
   * it (gRPC's FAILED_PRECONDITION). */
  case O3M_EEXPIRED: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_EMASK: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_ESTATE: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_EUNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
  case O3M_EDEADLINE: return GRPC_STATUS_DEADLINE_EXCEEDED;
  case O3M_EPERM: return GRPC_STATUS_PERMISSION_DENIED;
  case O3M_ERANGE: return GRPC_STATUS_OUT_OF_RANGE;
  /* A handler that failed to reach its own peer over TLS reports the peer
   * as unavailable. */
  case O3M_ETLS: return GRPC_STATUS_UNAVAILABLE;
  case O3M_ERPC: return GRPC_STATUS_UNKNOWN;
  case O3M_ECORRUPT: return GRPC_STATUS_DATA_LOSS;
  default: return GRPC_STATUS_UNKNOWN;
  }
}

int o3m_rpc_error_from_status(grpc_status_code status) {
  switch (status) {
  case GRPC_STATUS_OK: return O3M_OK;
  case GRPC_STATUS_INVALID_ARGUMENT: return O3M_EINVAL;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return O3M_EDEADLINE;
  case GRPC_STATUS_NOT_FOUND: return O3M_ENOTFOUND;
  case GRPC_STATUS_ALREADY_EXISTS: return O3M_EEXISTS;
  case GRPC_STATUS_PERMISSION_DENIED: return O3M_EPERM;
  case GRPC_STATUS_UNAUTHENTICATED: return O3M_EPERM;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return O3M_EFULL;
  case GRPC_STATUS_FAILED_PRECONDITION: return O3M_ESTATE;
  case GRPC_STATUS_OUT_OF_RANGE: return O3M_ERANGE;
  case GRPC_STATUS_UNAVAILABLE: return O3M_EUNAVAILABLE;
  case GRPC_STATUS_DATA_LOSS: return O3M_ECORRUPT;
  /* CANCELLED, UNKNOWN, ABORTED, UNIMPLEMENTED, INTERNAL: the call failed
   * for a reason the O3M table has no closer name for. */
  default: return O3M_ERPC;
  }
}

int o3m_rpc_error_from_name(const char *name) {
  if (!name) return 0;
  for (int code = O3M__ERR_FIRST + 1; code < O3M__ERR_LAST; code++)
    if (strcmp(o3m_errname(code), name) == 0) return code;
  return 0;
}

/* gRPC core's own log lines, through o3m_log (see o3m_rpc.h). */
static void grpc_log_to_o3m(gpr_log_func_args *args) {
  o3m_log_level level = args->severity == GPR_LOG_SEVERITY_ERROR  ? O3M_LOG_ERROR
                        : args->severity == GPR_LOG_SEVERITY_INFO ? O3M_LOG_INFO
                                                                  : O3M_LOG_DEBUG;
  const char *file = args->file ? strrchr(args->file, '/') : NULL;
  file = file ? file + 1 : (args->file ? args->file : "?");
  const char *msg = args->message ? args->message : "";
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) n--;
  /* A failed bind: gRPC logs its whole error tree (some 600 characters)
   * before o3m_rpc_server_create reports the same failure as "listen ADDR:
   * address in use (...)". The operator needs only the latter; the tree
   * stays available at debug level. */
  if (level == O3M_LOG_ERROR && strstr(msg, "No address added out of total"))
    level = O3M_LOG_DEBUG;
  o3m_log(level, "grpc %s:%d: %.*s", file, args->line, (int)n, msg);
}

static void route_grpc_log_once(void) { gpr_set_log_function(grpc_log_to_o3m); }

void o3m_rpc_route_grpc_log(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, route_grpc_log_once);
}
