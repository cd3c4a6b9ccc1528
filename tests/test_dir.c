/* test_dir.c -- removal of a test's scratch directory (test_dir.h). */
#include "test_dir.h"

#include <ftw.h>
#include <stdio.h>

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void test_dir_remove(const char *dir) { nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }
