/* o3m_block_store.h -- a party's own mask block, kept in its state_dir.
 *
 * The mask generator (PMG) forgets Q once every party has confirmed its
 * block, so a party that restarts cannot fetch its block Q^j again. Each
 * active and passive party therefore keeps its block in its state_dir
 * (the `state_dir` key of its [party] section) and, at the next start, loads
 * it from there instead of asking the PMG. A passive party also keeps its
 * dummy-row secret (o3m_features.h) in the same file, so that the dummy rows
 * of unknown ids stay the same across its restarts.
 *
 * File: <state_dir>/O3M_BLOCK_STORE_FILE, mode 0600 (the directory is
 * created with mode 0700 if missing). It is secret: with Q^j and the masked
 * vectors this party sends, its features could be unmasked. It is written
 * as <file>.tmp (O_EXCL after removing a leftover, 0600), fsynced, renamed
 * over the old file and the directory fsynced, so it is either the old
 * complete file or the new complete one, never a mix. Format, little-endian:
 *    0   8  magic "O3MBLK\0\0"
 *    8   4  version (1)
 *   12   4  header length (64)
 *   16   8  mask id
 *   24   4  d (rows of the block)
 *   28   4  d_j (columns of the block)
 *   32   4  party index j (slot in column order)
 *   36   4  first column of the party in x (col0)
 *   40   4  secret length S (0..O3M_BLOCK_STORE_SECRET_MAX)
 *   44  16  zero
 *   60   4  CRC32C of bytes 0..59
 *   64 8dd_j  the block, d x d_j row-major, binary64 bit patterns
 *   ..   S  the secret
 *   ..   4  CRC32C of the block and the secret
 *   ..   4  zero
 *   ..   8  magic "O3MBKEND"
 * A file is valid when its length is exactly 80 + 8 d d_j + S, both magics,
 * the version, the header length and both CRCs match, the trailer's zero
 * field is zero, and every block value is finite. CRC32C is the Castagnoli CRC of ap_journal.h (same
 * polynomial and check value).
 *
 * Nothing here is thread-safe or concurrent-process-safe: a daemon loads
 * and saves once, at start, before it serves (the AP's state_dir lock,
 * ap_checkpoint.h, is taken afterwards; two processes of one party on one
 * state_dir are an operator error that the AP then refuses). */
#ifndef O3M_BLOCK_STORE_H
#define O3M_BLOCK_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"
#include "o3m_mask.h"

/* File name inside state_dir. */
#define O3M_BLOCK_STORE_FILE "mask-block.o3m"
/* Largest secret kept beside the block. */
#define O3M_BLOCK_STORE_SECRET_MAX 64

/* Which block a party expects: its index j, first column, d and d_j (from
 * the federation config). A stored block for anything else is refused. */
typedef struct o3m_block_store_id {
  int party;
  int col0;
  int d;
  int dj;
} o3m_block_store_id;

/* Writes block b (d x d_j must equal id->d x id->dj) and secret (len
 * 0..O3M_BLOCK_STORE_SECRET_MAX bytes; NULL when 0) to state_dir as
 * described above, creating state_dir (one level, mode 0700) if missing.
 * The serialization buffer is wiped before it is freed. Errors: O3M_EINVAL
 * (arguments), O3M_ENOMEM, O3M_EIO (the message names the file and the
 * failing call; the old file, if any, is untouched and the .tmp removed). */
int o3m_block_store_save(const char *state_dir, const o3m_block_store_id *id,
                         const o3m_block *b, const void *secret, size_t secret_len, o3m_err *e);

/* Reads the stored block. On success *out is a new block (the caller
 * destroys it), the secret is copied to secret (secret_cap bytes available;
 * may be NULL when secret_cap is 0) and *secret_len (may be NULL) receives
 * its length. Errors:
 *   O3M_EPERM      the file is not this user's or group or others may read
 *                  it (o3m_secret_file_check: the message says chmod 600),
 *                  or the state_dir is looser than 0700 (o3m_state_dir_open);
 *   O3M_ENOTFOUND  no stored block (state_dir or the file is missing): the
 *                  caller fetches one from the PMG;
 *   O3M_ECORRUPT   the file is damaged (truncated, a CRC, a magic, a
 *                  non-finite value); the message names the file, the
 *                  finding, and how to recover;
 *   O3M_EDIM       a valid file for another party, col0, d or d_j, or with a
 *                  secret longer than secret_cap (the config changed, or
 *                  the state_dir belongs to another party);
 *   O3M_EIO, O3M_ENOMEM.
 * On failure *out is NULL and secret is unspecified (wiped if touched). */
int o3m_block_store_load(const char *state_dir, const o3m_block_store_id *id, o3m_block **out,
                         void *secret, size_t secret_cap, size_t *secret_len, o3m_err *e);

/* Path of the stored block (for messages): state_dir/O3M_BLOCK_STORE_FILE
 * into buf (truncated to len). Returns buf. */
const char *o3m_block_store_path(const char *state_dir, char *buf, size_t len);



#endif
