/* main.c -- o3m-audit: what the active participant could learn from a
 * department's feature table, run by the department before it joins (see
 * eval_audit.h). `o3m-eval audit` runs the same code. BLAS runs
 * single-threaded, as in o3m-eval, since the audit's matrices are small and
 * OpenBLAS's own threads only spin on a loaded machine. */
#include "eval_audit.h"
#include "o3m_blas.h"

int main(int argc, char **argv) {
  o3m_blas_threads(1);
  return eval_audit_tool_main(argc, argv);
}
