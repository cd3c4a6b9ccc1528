/* test_dir.h -- removal of a test's scratch directory.
 *
 * Tests that write files into a mkdtemp(3) directory remove it, and
 * everything below it, with test_dir_remove() when they are done. */
#ifndef TEST_DIR_H
#define TEST_DIR_H

/* Removes dir and every file and directory below it, depth first, without
 * following symbolic links. A missing dir is not an error. */
void test_dir_remove(const char *dir);

#endif
