/* install_consumer.c -- a program outside the tree, built against the
 * installed library (tests/install_lib.sh compiles it with
 * `pkg-config --cflags --libs o3m`, once dynamically and once statically).
 *
 *   install_consumer CONFIG CLIENT
 *
 * Runs the engine on a problem whose answer is known, then one Recommend
 * and one Reward as CLIENT against the running federation of CONFIG
 * (tests/with-federation.sh), and checks what comes back. Prints one line
 * per check and exits 1 at the first that fails. It includes only
 * <o3m/o3m.h>, as a user's program would. */
#include <o3m/o3m.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                    \
  do {                                      \
    if (cond) {                             \
      printf("ok   ");                      \
    } else {                                \
      printf("FAIL ");                      \
      failures++;                           \
    }                                       \
    printf(__VA_ARGS__);                    \
    printf("\n");                           \
  } while (0)

/* Three candidates, the unit vectors; candidate 1 always pays 1, the others
 * 0. With alpha = 0 LinUCB scores by x . theta alone: equal (0) before any
 * update, so the tie goes to candidate 0; after the updates theta points
 * at e1 and candidate 1 wins. */
static void engine(void) {
  const char *const opts[] = {"algo=linucb", "model=shared", "d=3", "alpha=0", NULL};
  o3m_err e;
  o3m_engine *g = NULL;
  int rc = o3m_engine_create(&g, opts, &e);
  CHECK(rc == 0, "engine create: %s", rc ? o3m_err_message(&e) : "d=3 linucb");
  if (rc) return;
  const double X[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  int chosen = -1;
  double score = NAN;
  rc = o3m_engine_choose(g, 3, X, NULL, &chosen, &score, &e);
  CHECK(rc == 0 && chosen == 0 && score == 0.0, "first decision: candidate %d score %g (want 0, 0)",
        chosen, score);
  for (int t = 0; t < 5; t++) {
    rc = o3m_engine_update(g, 0, X + 3 * (t % 3), t % 3 == 1 ? 1.0 : 0.0, &e);
    if (rc) break;
  }
  CHECK(rc == 0 && o3m_engine_updates(g) == 5, "5 updates: %s",
        rc ? o3m_err_message(&e) : "applied");
  rc = o3m_engine_choose(g, 3, X, NULL, &chosen, &score, &e);
  CHECK(rc == 0 && chosen == 1 && fabs(score - 2.0 / 3.0) < 1e-12,
        "learned decision: candidate %d score %.17g (want 1, 2/3)", chosen, score);
  const double bad[3] = {NAN, 0, 0};
  rc = o3m_engine_update(g, 0, bad, 1.0, &e);
  CHECK(rc == O3M_ENONFINITE && o3m_engine_updates(g) == 5, "NaN context refused: %s: %s",
        o3m_errname(rc), o3m_err_message(&e));
  o3m_engine_destroy(g);
  const char *const wrong[] = {"d=3", "alpah=1", NULL};
  rc = o3m_engine_create(&g, wrong, &e);
  CHECK(rc == O3M_EINVAL && g == NULL && strstr(o3m_err_message(&e), "alpah"),
        "misspelled option refused: %s", o3m_err_message(&e));
}

static void client(const char *config, const char *name) {
  char opt_config[1024], opt_as[256];
  snprintf(opt_config, sizeof opt_config, "config=%s", config);
  snprintf(opt_as, sizeof opt_as, "as=%s", name);
  const char *const opts[] = {opt_config, opt_as, "deadline-ms=10000", NULL};
  o3m_err e;
  o3m_ap_client *c = NULL;
  int rc = o3m_ap_client_open(&c, opts, &e);
  CHECK(rc == 0, "client open: %s", rc ? o3m_err_message(&e) : "as the configured client");
  if (rc) return;
  int serving = 0;
  rc = o3m_ap_client_health(c, &serving, &e);
  CHECK(rc == 0 && serving == 1, "health: %s", rc ? o3m_err_message(&e) : "SERVING");
  /* The federation may have served other programs before: count from here. */
  o3m_stats s0;
  rc = o3m_ap_client_stats(c, &s0, &e);
  CHECK(rc == 0, "stats: %s", rc ? o3m_err_message(&e) : "answered");
  if (rc) s0.updates = 0;
  const char *const items[] = {"i0", "i1", "i2", "i3"};
  o3m_recommendation r;
  memset(&r, 0, sizeof r);
  rc = o3m_ap_client_recommend(c, "u3", 4, items, NULL, NULL, 0, &r, &e);
  CHECK(rc == 0 && r.candidate >= 0 && r.candidate < 4 && isfinite(r.score) && r.mask_id != 0,
        "recommend: %s candidate %d score %g", rc ? o3m_err_message(&e) : "", r.candidate,
        r.score);
  uint64_t updates = 0;
  if (rc == 0) {
    rc = o3m_ap_client_reward(c, r.decision, 1.0, &updates, &e);
    CHECK(rc == 0 && updates == s0.updates + 1, "reward: %s updates %llu (before: %llu)",
          rc ? o3m_err_message(&e) : "", (unsigned long long)updates,
          (unsigned long long)s0.updates);
    rc = o3m_ap_client_reward(c, r.decision, 1.0, &updates, &e);
    CHECK(rc < 0, "second reward of the decision refused: %s", o3m_errname(rc));
  }
  o3m_stats s;
  rc = o3m_ap_client_stats(c, &s, &e);
  CHECK(rc == 0 && s.rounds == s0.rounds + 1 && s.updates == s0.updates + 1 &&
            !strcmp(s.algo, "linucb"),
        "stats: rounds %llu updates %llu algo %s", (unsigned long long)s.rounds,
        (unsigned long long)s.updates, rc ? "?" : s.algo);
  rc = o3m_ap_client_recommend(c, "u3", 0, items, NULL, NULL, 0, &r, &e);
  CHECK(rc == O3M_EINVAL, "no candidates refused: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  /* Refused by the library before anything is sent: an arm of -1 from a
   * signed caller (4294967295), an id one byte too long, a NULL item. */
  const uint32_t bad_arms[] = {0, (uint32_t)-1, 2, 3};
  rc = o3m_ap_client_recommend(c, "u3", 4, items, bad_arms, NULL, 0, &r, &e);
  CHECK(rc == O3M_EINVAL && strstr(o3m_err_message(&e), "arms[1] = 4294967295"),
        "arm -1 refused: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  char long_id[O3M_API_MAX_ID + 2];
  memset(long_id, 'u', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  rc = o3m_ap_client_recommend(c, long_id, 4, items, NULL, NULL, 0, &r, &e);
  CHECK(rc == O3M_EINVAL && strstr(o3m_err_message(&e), "user is longer than"),
        "an id of %d bytes refused: %s: %s", O3M_API_MAX_ID + 1, o3m_errname(rc),
        o3m_err_message(&e));
  const char *const holey[] = {"i0", NULL};
  rc = o3m_ap_client_recommend(c, "u3", 2, holey, NULL, NULL, 0, &r, &e);
  CHECK(rc == O3M_EINVAL && strstr(o3m_err_message(&e), "items[1] is NULL"),
        "a NULL item refused: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  rc = o3m_ap_client_stats(c, &s, &e);
  CHECK(rc == 0 && s.rounds == s0.rounds + 1, "the refused calls made no round: rounds %llu",
        (unsigned long long)s.rounds);
  o3m_ap_client_close(c);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: install_consumer CONFIG CLIENT\n");
    return 2;
  }
  printf("o3m %s (protocol %d)\n", o3m_version(), o3m_protocol_version());
  engine();
  client(argv[1], argv[2]);
  return failures ? 1 : 0;
}
