/* fuzz_segment.h -- writes a piece of fuzz input as a journal segment
 * (active_participant/ap_journal.h, format 2), for fuzz_journal and
 * fuzz_checkpoint.
 *
 * With `fix`, the piece is first repaired where mutation cannot reach by
 * itself: the header CRC, the CRC of every slot whose start and end markers
 * are both non-zero (a complete-looking record; torn and unwritten slots
 * are left as they are, so that fixing never turns them into damage), and
 * the file length, padded with zeros or cut to the 64 + N L bytes the
 * header declares (when N is at most FUZZ_SEG_MAX_SLOTS). Without it the
 * piece is written as it is. The file is named after the first seq in its
 * header (seq 1 when the piece is shorter than that). Needs fuzz_util.h. */
#ifndef FUZZ_SEGMENT_H
#define FUZZ_SEGMENT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ap_journal.h"
#include "o3m_bytes.h"

#define FUZZ_SEG_MAX_SLOTS 4096

static inline void fuzz_segment_write(const uint8_t *piece, size_t n, int d, int fix) {
  const size_t H = AP_JOURNAL_SEGMENT_HEADER, L = AP_JOURNAL_RECORD_BYTES(d);
  size_t len = n;
  if (fix && n >= H) {
    uint64_t slots = fuzz_le64(piece + 32);
    if (slots <= FUZZ_SEG_MAX_SLOTS) len = H + (size_t)slots * L;
  }
  uint8_t *seg = calloc(1, len ? len : 1);
  if (!seg) fuzz_die("calloc");
  memcpy(seg, piece, n < len ? n : len);
  if (fix && len >= H) {
    fuzz_put_le32(seg + 60, o3m_crc32c(0, seg, 60));
    for (size_t off = H; off + L <= len; off += L)
      if (o3m_get_le32(seg + off) && o3m_get_le32(seg + off + L - 4))
        fuzz_put_le32(seg + off + L - 8, o3m_crc32c(0, seg + off, L - 8));
  }
  uint64_t first = len >= 24 ? fuzz_le64(seg + 16) : 1;
  char name[64];
  snprintf(name, sizeof name, "ap-journal-%016llx.wal", (unsigned long long)first);
  fuzz_dir_write(name, seg, len);
  free(seg);
}

#endif
