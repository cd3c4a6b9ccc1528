/* test_pem.c -- the one PEM file reader (crypto/o3m_pem.h): a file is read
 * whole and NUL-terminated; a missing, empty or too large file, and a key
 * that others may read, are refused with the file named; the cap is the
 * same O3M_MAX_PEM_FILE for every reader (the start-up check reads through it
 * too: a file one byte over the cap is refused there, naming it). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "o3m_cert.h"
#include "o3m_pem.h"

static char dir[] = "/tmp/o3m_test_pem_XXXXXX";
static char path[600];

static void setup(void) { cr_assert_not_null(mkdtemp(dir)); }
static void teardown(void) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}
TestSuite(pem, .init = setup, .fini = teardown);

/* Writes n bytes of c (or text when not NULL) to dir/name with mode. */
static const char *put(const char *name, const char *text, size_t n, int c, mode_t mode) {
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  if (text)
    fputs(text, f);
  else
    for (size_t i = 0; i < n; i++) fputc(c, f);
  fclose(f);
  cr_assert_eq(chmod(path, mode), 0);
  return path;
}

Test(pem, reads_a_file_whole_and_refuses_what_it_must) {
  o3m_err e;
  char *t = NULL;
  size_t len = 0;
  const char *p = put("a.pem", "-----BEGIN X-----\nAA==\n-----END X-----\n", 0, 0, 0644);
  cr_assert_eq(o3m_pem_read("ca", p, 0, &t, &len, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(len, strlen("-----BEGIN X-----\nAA==\n-----END X-----\n"));
  cr_assert_str_eq(t, "-----BEGIN X-----\nAA==\n-----END X-----\n");
  o3m_pem_free(t, len);

  /* Exactly the cap is read; one byte more is refused, naming the file. */
  p = put("max.pem", NULL, O3M_MAX_PEM_FILE, 'A', 0644);
  cr_assert_eq(o3m_pem_read("ca", p, 0, &t, &len, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(len, (size_t)O3M_MAX_PEM_FILE);
  o3m_pem_free(t, len);
  p = put("big.pem", NULL, (size_t)O3M_MAX_PEM_FILE + 1, 'A', 0644);
  cr_assert_eq(o3m_pem_read("ca", p, 0, &t, &len, &e), O3M_ETLS);
  cr_assert_null(t);
  cr_assert_not_null(strstr(e.msg, "big.pem"), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, "larger than 1048576 bytes"), "%s", e.msg);
  /* The start-up check reads through the same reader and cap. */
  cr_assert_eq(o3m_cert_check_files(p, NULL, NULL, &e), O3M_ETLS);
  cr_assert_not_null(strstr(e.msg, "larger than 1048576 bytes"), "%s", e.msg);

  p = put("empty.pem", "", 0, 0, 0644);
  cr_assert_eq(o3m_pem_read("tls.cert_file", p, 0, &t, &len, &e), O3M_ETLS);
  cr_assert_not_null(strstr(e.msg, "tls.cert_file"), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, "empty file"), "%s", e.msg);

  snprintf(path, sizeof path, "%s/missing.pem", dir);
  cr_assert_eq(o3m_pem_read("key", path, 1, &t, &len, &e), O3M_ETLS);
  cr_assert_not_null(strstr(e.msg, "missing.pem: cannot read"), "%s", e.msg);

  /* A key others may read is refused; the same file is fine as a
   * certificate, and as a key once it is 0600. */
  p = put("k.pem", "secret\n", 0, 0, 0644);
  cr_assert_eq(o3m_pem_read("key", p, 1, &t, &len, &e), O3M_EPERM);
  cr_assert_null(t);
  cr_assert_not_null(strstr(e.msg, "chmod 600"), "%s", e.msg);
  cr_assert_eq(o3m_pem_read("certificate", p, 0, &t, &len, &e), O3M_OK, "%s", e.msg);
  o3m_pem_free(t, len);
  cr_assert_eq(chmod(p, 0600), 0);
  cr_assert_eq(o3m_pem_read("key", p, 1, &t, NULL, &e), O3M_OK, "%s", e.msg);
  cr_assert_str_eq(t, "secret\n");
  o3m_pem_free(t, strlen(t));
  o3m_pem_free(NULL, 0);
}
