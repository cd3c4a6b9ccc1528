/* o3m_rpc_arena.c -- the arena that backs protobuf-c unpacking, and the
 * packing and unpacking of messages over gRPC byte buffers (see
 * o3m_rpc_impl.h). */
#include "o3m_rpc_impl.h"
#include "o3m_alloc.h"

/* ================================================================ arena */

#define ARENA_ALIGN _Alignof(max_align_t)
#define CHUNK_HDR ((sizeof(arena_chunk) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN)

static arena_chunk *chunk_new(size_t cap) {
  arena_chunk *ch = o3m_malloc(CHUNK_HDR + cap);
  if (!ch) return NULL;
  ch->next = NULL;
  ch->cap = cap;
  ch->used = 0;
  return ch;
}

int o3m_rpc__arena_init(arena *a, size_t initial, size_t cap) {
  a->head = chunk_new(initial);
  if (!a->head) return O3M_ENOMEM;
  a->total = initial;
  a->initial = initial;
  a->cap = cap;
  a->exhausted = 0;
  return 0;
}

void o3m_rpc__arena_release(arena *a) {
  arena_chunk *ch = a->head;
  while (ch) {
    arena_chunk *next = ch->next;
    o3m_free(ch);
    ch = next;
  }
  a->head = NULL;
  a->total = 0;
}

/* Makes the whole capacity free again. Every pointer handed out before is
 * dead after this. The arena is then sized for what the cycle that just
 * ended used (at least its initial size): chunks added by a growth are
 * folded into one block of that size, so that steady traffic of that size
 * allocates nothing, and capacity beyond twice the need goes back to
 * malloc (one oversized message therefore costs its memory until the
 * second reset after it, not for good). If the new block cannot be
 * allocated the chunks are kept as they are (only the head is used until
 * the next reset), so a reset never fails. */
void o3m_rpc__arena_reset(arena *a) {
  size_t used = 0;
  for (arena_chunk *ch = a->head; ch; ch = ch->next) used += ch->used;
  size_t need = used > a->initial ? used : a->initial;
  if (a->head && (a->head->next || a->total / 2 > need)) {
    arena_chunk *one = chunk_new(need);
    if (one) {
      o3m_rpc__arena_release(a);
      a->head = one;
      a->total = one->cap;
    }
  }
  for (arena_chunk *ch = a->head; ch; ch = ch->next) ch->used = 0;
  a->exhausted = 0;
}

void *o3m_rpc__arena_alloc(arena *a, size_t n) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX / 2) {
    a->exhausted = 1;
    return NULL;
  }
  n = (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  arena_chunk *ch = a->head;
  if (!ch || ch->cap - ch->used < n) {
    size_t want = a->total > n ? a->total : n;
    if (a->total >= a->cap || want > a->cap - a->total) {
      want = a->total < a->cap ? a->cap - a->total : 0;
      if (want < n) {
        a->exhausted = 1;
        return NULL;
      }
    }
    ch = chunk_new(want);
    if (!ch) {
      a->exhausted = 1;
      return NULL;
    }
    ch->next = a->head;
    a->head = ch;
    a->total += want;
  }
  void *p = (unsigned char *)ch + CHUNK_HDR + ch->used;
  ch->used += n;
  return p;
}

/* protobuf-c's allocator interface over an arena; free is a no-op because
 * the arena is reset as a whole. */
static void *pb_arena_alloc(void *data, size_t n) { return o3m_rpc__arena_alloc(data, n); }

static void pb_arena_free(void *data, void *p) {
  (void)data;
  (void)p;
}

/* ================================================================ messages */

/* Packs m into a new byte buffer (owned by the caller, released with
 * grpc_byte_buffer_destroy). The packed bytes are written straight into the
 * slice that gRPC sends, so there is no extra copy. O3M_ERANGE if the packed
 * size exceeds max. */
int o3m_rpc__pack_message(const ProtobufCMessage *m, size_t max, grpc_byte_buffer **out,
                          o3m_err *e) {
  size_t n = protobuf_c_message_get_packed_size(m);
  if (n > max)
    return o3m_err_set(e, O3M_ERANGE, "%s of %zu bytes exceeds the message limit of %zu",
                       m->descriptor->name, n, max);
  grpc_slice s = grpc_slice_malloc(n);
  size_t w = protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  if (w != n) {
    grpc_slice_unref(s);
    return o3m_err_set(e, O3M_ECORRUPT, "%s packed to %zu bytes, expected %zu",
                       m->descriptor->name, w, n);
  }
  *out = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return 0;
}

/* Unpacks the bytes of bb as desc, with the arena as protobuf-c's
 * allocator; the message lives until the arena is reset (protobuf-c copies
 * every field it keeps, so the message never points into bb). A payload in
 * one slice (small messages) is unpacked where the reader holds it; one in
 * several slices (large ones, split as they arrived) is first copied into
 * one piece of the arena, which is taken in both cases. The slices are peeked at, not referenced: bb is
 * owned by the caller and stays unchanged for the whole call, and the
 * reader that holds the peeked slice (its own decompressed copy, if the
 * payload was compressed) is destroyed only after the unpack. O3M_EFULL
 * when the arena cap is reached, O3M_EPARSE when the bytes do not decode. */
int o3m_rpc__unpack_message(arena *a, grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                            ProtobufCMessage **out, o3m_err *e) {
  grpc_byte_buffer_reader r, r2;
  grpc_slice *s;
  size_t len = 0, pieces = 0;
  const uint8_t *buf = NULL;
  int rc = 0;

  *out = NULL;
  /* The first pass finds the length (the reader decompresses, so
   * grpc_byte_buffer_length is not it in general). */
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return o3m_err_set(e, O3M_EPARSE, "%s: cannot read the payload", desc->name);
  while (grpc_byte_buffer_reader_peek(&r, &s)) {
    len += GRPC_SLICE_LENGTH(*s);
    buf = GRPC_SLICE_START_PTR(*s);
    pieces++;
  }
  /* The copy's room is taken even when there is nothing to copy, so that
   * how gRPC happened to slice a payload does not change how much of the
   * arena a message takes (o3m_rpc__arena_reset sizes the arena by that). */
  uint8_t *copy = o3m_rpc__arena_alloc(a, len);
  if (!copy) {
    rc = o3m_err_set(e, O3M_EFULL, "%s of %zu bytes does not fit the arena", desc->name, len);
    goto done;
  }
  if (pieces != 1) {
    /* The second pass copies the pieces into one. */
    if (!grpc_byte_buffer_reader_init(&r2, bb)) {
      rc = o3m_err_set(e, O3M_EPARSE, "%s: cannot read the payload", desc->name);
      goto done;
    }
    size_t off = 0;
    while (grpc_byte_buffer_reader_peek(&r2, &s)) {
      size_t n = GRPC_SLICE_LENGTH(*s);
      if (n <= len - off) memcpy(copy + off, GRPC_SLICE_START_PTR(*s), n);
      off += n;
    }
    grpc_byte_buffer_reader_destroy(&r2);
    if (off != len) {
      rc = o3m_err_set(e, O3M_ECORRUPT, "%s: payload changed length while read", desc->name);
      goto done;
    }
    buf = copy;
  }

  ProtobufCAllocator al = {pb_arena_alloc, pb_arena_free, a};
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, &al, len, buf);
  if (!m) {
    if (a->exhausted)
      rc = o3m_err_set(e, O3M_EFULL, "%s of %zu bytes needs more memory than the arena allows",
                       desc->name, len);
    else
      rc = o3m_err_set(e, O3M_EPARSE, "%s: %zu bytes do not decode", desc->name, len);
    goto done;
  }
  *out = m;
done:
  grpc_byte_buffer_reader_destroy(&r);
  return rc;
}

int o3m_rpc__descriptor_ok(const ProtobufCMessageDescriptor *d) {
  return d && d->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC;
}

